package openstackreal

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	gopenstack "github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/blockstorage/v3/volumes"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/machinist-io/machinist/harness/localcontrolplane"
	"github.com/machinist-io/machinist/internal/syncbuf"
	"github.com/machinist-io/machinist/providers/kit"
	"github.com/machinist-io/machinist/providers/openstack"
)

// EnvVar names the file openstack.sh writes with what it brought up; without it every test skips.
const EnvVar = "OPENSTACK_REAL_ENV"

// cloud holds what openstack.sh seeded (the OSR_* variables of its environment file).
var cloud map[string]string

// machinistBin is bin/machinist built once by TestMain for the tests that run `machinist run`.
var machinistBin string

func TestMain(m *testing.M) {
	path := os.Getenv(EnvVar)
	if path == "" {
		fmt.Printf("openstack-real: skipped: %s is not set; `make test-openstack-real` brings up a real OpenStack and runs these tests against it\n", EnvVar)
		os.Exit(m.Run())
	}
	vars, err := readEnvFile(path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "openstack-real: %s: %v\n", EnvVar, err)
		os.Exit(1)
	}
	cloud = vars
	fmt.Printf("openstack-real: running against %s\n", vars["OSR_VERSIONS"])
	dir, err := os.MkdirTemp("", "machinist-openstack-real-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := func() int {
		defer os.RemoveAll(dir)
		root, err := localcontrolplane.RepoRoot()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		machinistBin = filepath.Join(dir, "machinist")
		build := exec.Command("go", "build", "-tags", "provider_openstack", "-o", machinistBin, "./cmd/machinist")
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "openstack-real: build machinist: %v\n%s", err, out)
			return 1
		}
		return m.Run()
	}()
	os.Exit(code)
}

// readEnvFile reads KEY=VALUE lines (values may be double-quoted).
func readEnvFile(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if !ok {
			continue
		}
		if u, err := strconv.Unquote(v); err == nil {
			v = u
		}
		out[k] = v
	}
	return out, sc.Err()
}

// need skips the test when no real OpenStack is configured.
func need(t testing.TB) {
	t.Helper()
	if cloud == nil {
		t.Skipf("no real OpenStack: %s is not set (run `make test-openstack-real`)", EnvVar)
	}
}

func osr(t testing.TB, key string) string {
	t.Helper()
	v, ok := cloud["OSR_"+key]
	if !ok || v == "" {
		t.Fatalf("the environment file has no OSR_%s", key)
	}
	return v
}

func authURL(t testing.TB) string {
	t.Helper()
	v := cloud["OS_AUTH_URL"]
	if v == "" {
		t.Fatal("the environment file has no OS_AUTH_URL")
	}
	return v
}

// passwordSecret is the class secret a user writes for password authentication in project.
func passwordSecret(t testing.TB, project string) *corev1.Secret {
	t.Helper()
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "openstack-real", Namespace: "default"},
		Data: map[string][]byte{
			openstack.KeyAuthURL:    []byte(authURL(t)),
			openstack.KeyDomainName: []byte(osr(t, "DOMAIN")),
			openstack.KeyTenantName: []byte(project),
			openstack.KeyUsername:   []byte(osr(t, "USER")),
			openstack.KeyPassword:   []byte(osr(t, "PASSWORD")),
			openstack.KeyUserData:   []byte("#cloud-config\nhostname: machinist-real\n"),
		},
	}
}

// appCredSecret authenticates with the application credential of the main project.
func appCredSecret(t testing.TB) *corev1.Secret {
	t.Helper()
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "openstack-real-appcred", Namespace: "default"},
		Data: map[string][]byte{
			openstack.KeyAuthURL:                     []byte(authURL(t)),
			openstack.KeyDomainName:                  []byte(osr(t, "DOMAIN")),
			openstack.KeyTenantName:                  []byte(osr(t, "PROJECT")),
			openstack.KeyApplicationCredentialID:     []byte(osr(t, "APPCRED_ID")),
			openstack.KeyApplicationCredentialSecret: []byte(osr(t, "APPCRED_SECRET")),
			openstack.KeyUserData:                    []byte("#cloud-config\nhostname: machinist-real\n"),
		},
	}
}

// newDriver returns the provider with polls suited to a real cloud, logging into the test.
func newDriver(t testing.TB) (*openstack.Driver, *syncbuf.Buffer) {
	t.Helper()
	logs := &syncbuf.Buffer{}
	d := openstack.New(openstack.Options{
		Options: kit.Options{
			Log:          slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
			PollInterval: 500 * time.Millisecond,
		},
		// Nova's API, one worker on two shared cores, can take more than the default minute to
		// accept a boot while other services are busy.
		HTTPTimeout: 5 * time.Minute,
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("driver log:\n%s", logs.String())
		}
	})
	return d, logs
}

// clients are gophercloud clients of the test user in one project, to check what the driver did
// without going through it.
type clients struct {
	compute, network, volume *gophercloud.ServiceClient
}

func userClients(t testing.TB, project string) *clients {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pc, err := gopenstack.AuthenticatedClient(ctx, gophercloud.AuthOptions{
		IdentityEndpoint: authURL(t), Username: osr(t, "USER"), Password: osr(t, "PASSWORD"),
		DomainName: osr(t, "DOMAIN"), TenantName: project, AllowReauth: true,
	})
	if err != nil {
		t.Fatalf("authenticate as %s in %s: %v", osr(t, "USER"), project, err)
	}
	eo := gophercloud.EndpointOpts{Region: osr(t, "REGION")}
	c := &clients{}
	if c.compute, err = gopenstack.NewComputeV2(pc, eo); err != nil {
		t.Fatal(err)
	}
	if c.network, err = gopenstack.NewNetworkV2(pc, eo); err != nil {
		t.Fatal(err)
	}
	if c.volume, err = gopenstack.NewBlockStorageV3(pc, eo); err != nil {
		t.Fatal(err)
	}
	return c
}

// serversNamed counts the project's servers named name.
func (c *clients) serversNamed(ctx context.Context, name string) (int, error) {
	pages, err := servers.List(c.compute, servers.ListOpts{Name: "^" + regexp.QuoteMeta(name) + "$"}).AllPages(ctx)
	if err != nil {
		return 0, err
	}
	ss, err := servers.ExtractServers(pages)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, s := range ss {
		if s.Name == name {
			n++
		}
	}
	return n, nil
}

// leftovers describes every server, port and volume of the project that belongs to a cluster
// whose tag key starts with one of prefixes (server and volume metadata, port tags), and every
// port Nova made for a server (device owner compute:*) whose server is gone. Tests run side by
// side in the same projects, so each names only its own clusters.
func (c *clients) leftovers(ctx context.Context, prefixes ...string) ([]string, error) {
	tagged := func(keys []string) bool {
		for _, k := range keys {
			for _, p := range prefixes {
				if strings.HasPrefix(k, p) {
					return true
				}
			}
		}
		return false
	}
	var out []string
	pages, err := servers.List(c.compute, servers.ListOpts{}).AllPages(ctx)
	if err != nil {
		return nil, err
	}
	ss, err := servers.ExtractServers(pages)
	if err != nil {
		return nil, err
	}
	live := map[string]bool{}
	for _, s := range ss {
		live[s.ID] = true
		if tagged(slices.Collect(maps.Keys(s.Metadata))) {
			out = append(out, fmt.Sprintf("server %s %s (%s)", s.Name, s.ID, s.Status))
		}
	}
	pages, err = ports.List(c.network, ports.ListOpts{}).AllPages(ctx)
	if err != nil {
		return nil, err
	}
	ps, err := ports.ExtractPorts(pages)
	if err != nil {
		return nil, err
	}
	for _, p := range ps {
		if tagged(p.Tags) {
			out = append(out, fmt.Sprintf("port %q %s (device %s)", p.Name, p.ID, p.DeviceID))
			continue
		}
		if !strings.HasPrefix(p.DeviceOwner, "compute:") || live[p.DeviceID] {
			continue
		}
		// Servers and ports are two listings: a server another test creates after the first can
		// have its port by the second, and a server being deleted loses its port before Nova
		// forgets it. The port is an orphan only if it is still there and its server is not.
		orphan, err := c.orphanPort(ctx, p.ID, p.DeviceID)
		if err != nil {
			return nil, err
		}
		if orphan {
			out = append(out, fmt.Sprintf("port %q %s (device %s, a server that is gone)", p.Name, p.ID, p.DeviceID))
		}
	}
	pages, err = volumes.List(c.volume, volumes.ListOpts{}).AllPages(ctx)
	if err != nil {
		return nil, err
	}
	vs, err := volumes.ExtractVolumes(pages)
	if err != nil {
		return nil, err
	}
	for _, v := range vs {
		if tagged(slices.Collect(maps.Keys(v.Metadata))) {
			out = append(out, fmt.Sprintf("volume %s %s (%s)", v.Name, v.ID, v.Status))
		}
	}
	return out, nil
}

// orphanPort reports whether port still exists while Nova no longer knows server.
func (c *clients) orphanPort(ctx context.Context, port, server string) (bool, error) {
	_, err := servers.Get(ctx, c.compute, server).Extract()
	switch {
	case err == nil:
		return false, nil
	case !gophercloud.ResponseCodeIs(err, http.StatusNotFound):
		return false, err
	}
	_, err = ports.Get(ctx, c.network, port).Extract()
	switch {
	case err == nil:
		return true, nil
	case gophercloud.ResponseCodeIs(err, http.StatusNotFound):
		return false, nil
	}
	return false, err
}

// adminNetwork is a Neutron client of the cloud's admin: a port's binding (binding:host_id,
// binding:vif_type) is shown to admins only (Neutron's policy get_port:binding:*).
func adminNetwork(t testing.TB) *gophercloud.ServiceClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pc, err := gopenstack.AuthenticatedClient(ctx, gophercloud.AuthOptions{
		IdentityEndpoint: authURL(t), Username: "admin", Password: osr(t, "ADMIN_PASSWORD"),
		DomainName: osr(t, "DOMAIN"), TenantName: "admin", AllowReauth: true,
	})
	if err != nil {
		t.Fatalf("authenticate as admin: %v", err)
	}
	nc, err := gopenstack.NewNetworkV2(pc, gophercloud.EndpointOpts{Region: osr(t, "REGION")})
	if err != nil {
		t.Fatal(err)
	}
	return nc
}

// eventually polls cond every second until it holds or timeout passes.
func eventually(t testing.TB, timeout time.Duration, what string, cond func(ctx context.Context) (bool, string)) {
	t.Helper()
	last := ""
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		ok, state := cond(ctx)
		if ctx.Err() == nil { // a read the deadline cut short says nothing about the state
			last = state
		}
		return ok, nil
	})
	if err != nil {
		t.Fatalf("after %s: %s; last state: %s", timeout, what, last)
	}
}
