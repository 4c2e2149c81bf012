package run

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/manager"
	"github.com/machinist-io/machinist/internal/eventually"
	"github.com/machinist-io/machinist/internal/gardenerseed"
	"github.com/machinist-io/machinist/internal/syncbuf"
	"github.com/machinist-io/machinist/test/internal/machinistbin"
)

// halves runs machinist's two halves as separate processes, as the two containers of MCM's pod
// in a Gardener seed: the programs `make build` writes (bin/machine-controller-manager, a link
// to the full binary, and bin/machine-controller-local, the provider half built for the local
// provider), started with Gardener's command lines.
//
// Each process sees the pod's files where the pod has them: it runs in a mount namespace of its
// own (unshare(1), a user namespace too, so it needs no privilege) with a tmpfs over /run (/var/run)
// holding the service account's directory (/var/run/secrets/kubernetes.io/serviceaccount: token
// and ca.crt, which rest.InClusterConfig reads, with KUBERNETES_SERVICE_HOST and _PORT naming
// the API server) and Gardener's generic kubeconfig directory
// (/var/run/secrets/gardener.cloud/shoot/generic-kubeconfig), bind-mounted from directories of
// the test. So --control-kubeconfig=inClusterConfig and --target-kubeconfig=<Gardener's path> are
// used as they are; only --port differs (see onHost).
type halves struct {
	*e2e
	bin            string // directory of the programs
	home           string // HOME of the processes: the provider half's state dir is under it
	ns             string
	serviceAccount string // the pod's /var/run/secrets/kubernetes.io/serviceaccount
	generic        string // the pod's /var/run/secrets/gardener.cloud/shoot/generic-kubeconfig
	apiHost        string // KUBERNETES_SERVICE_HOST and _PORT
	apiPort        string
	processes      []*halfProcess
}

// halfProcess is one running half.
type halfProcess struct {
	name   string
	cmd    *exec.Cmd
	port   int
	log    *syncbuf.Buffer
	exited chan struct{}
}

func newHalves(t *testing.T) *halves {
	t.Helper()
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Fatal("unshare is not installed: install util-linux; the halves run in mount namespaces holding the pod's files")
	}
	h := &halves{e2e: newE2E(t), bin: t.TempDir(), home: t.TempDir(), ns: "shoot--local--halves"}
	h.buildPrograms()
	ctx := context.Background()
	if err := h.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: h.ns}}); err != nil {
		t.Fatal(err)
	}
	server, err := url.Parse(h.env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	h.apiHost, h.apiPort = server.Hostname(), server.Port()

	// The pod's service account in the seed (the control cluster), as the kubelet mounts it.
	h.serviceAccount = t.TempDir()
	writePodFile(t, filepath.Join(h.serviceAccount, "token"), h.serviceAccountToken("machine-controller-manager"))
	writePodFile(t, filepath.Join(h.serviceAccount, "ca.crt"), string(h.env.Config.CAData))
	writePodFile(t, filepath.Join(h.serviceAccount, "namespace"), h.ns)
	// The shoot's (the target cluster's, here the same API server) generic token kubeconfig,
	// reading its token from the path Gardener mounts it at.
	h.generic = t.TempDir()
	if err := gardenerseed.WriteGenericKubeconfig(h.generic, h.env.Config.Host, h.env.Config.CAData,
		h.serviceAccountToken("shoot-access"), gardenerseed.ShootToken); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, p := range h.processes {
			p.kill()
			if t.Failed() {
				out := p.log.String()
				if len(out) > 30000 {
					out = "…" + out[len(out)-30000:]
				}
				t.Logf("log of %s:\n%s", p.name, out)
			}
		}
	})
	return h
}

// writePodFile writes a file of the pod's mounts, readable as the kubelet mounts them.
func writePodFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// buildPrograms writes what `make build` writes for the halves (without its release tags; with
// -race when the tests are): bin/machine-controller-manager, a link to the package's machinist,
// and bin/machine-controller-local, the provider half built for the local provider.
func (h *halves) buildPrograms() {
	h.t.Helper()
	if err := os.Link(machinistBin, filepath.Join(h.bin, "machine-controller-manager")); err != nil {
		h.t.Fatal(err)
	}
	dir := h.t.TempDir()
	built, err := machinistbin.Build(dir, "slim", "machinecontroller", "provider_local")
	if err != nil {
		h.t.Fatal(err)
	}
	if err := os.Rename(built, filepath.Join(h.bin, "machine-controller-local")); err != nil {
		h.t.Fatal(err)
	}
}

// serviceAccountToken returns a token of a new service account of the namespace bound to
// cluster-admin.
func (h *halves) serviceAccountToken(name string) string {
	h.t.Helper()
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: name}}
	if err := h.c.Create(ctx, sa); err != nil {
		h.t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: h.ns + ":" + name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: h.ns, Name: name}},
	}
	if err := h.c.Create(ctx, binding); err != nil {
		h.t.Fatal(err)
	}
	tr, err := h.env.Clientset().CoreV1().ServiceAccounts(h.ns).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	return tr.Status.Token
}

// onHost turns one of Gardener's command lines into one for a process of this machine: a free
// port instead of the pod's own (two instances of a half and other tests share this machine's
// network). Every other argument is Gardener's, the in-cluster config and the generic
// kubeconfig's path included.
func (h *halves) onHost(args []string) ([]string, int) {
	h.t.Helper()
	port := freeTCPPort(h.t)
	out := slices.Clone(args)
	replaced := 0
	for i, a := range out {
		if strings.HasPrefix(a, "--port=") {
			out[i] = "--port=" + strconv.Itoa(port)
			replaced++
		}
	}
	if replaced != 1 {
		h.t.Fatalf("Gardener's command line %q: replaced %d ports, want 1", args, replaced)
	}
	for _, want := range []string{"--control-kubeconfig=inClusterConfig", "--target-kubeconfig=" + gardenerseed.GenericKubeconfig} {
		if !slices.Contains(out, want) {
			h.t.Fatalf("Gardener's command line %q lacks %s", args, want)
		}
	}
	return out, port
}

// inPod is the shell script that runs its arguments in the pod's file layout: a tmpfs over
// /run (what /var/run resolves to) with the service account's and the generic kubeconfig's
// directories bind-mounted at the pod's paths ($1 and $2).
const inPod = `set -e
run=$(readlink -f /var/run)
mount -t tmpfs tmpfs "$run"
mkdir -p "$run/secrets/kubernetes.io/serviceaccount" "$run/secrets/gardener.cloud/shoot/generic-kubeconfig"
mount --bind "$1" "$run/secrets/kubernetes.io/serviceaccount"
mount --bind "$2" "$run/secrets/gardener.cloud/shoot/generic-kubeconfig"
shift 2
exec "$@"`

// startCore starts the core half with gardenlet's command: ./machine-controller-manager in the
// programs' directory, as in MCM's image (working directory /).
func (h *halves) startCore(name string) *halfProcess {
	h.t.Helper()
	argv, port := h.onHost(gardenerseed.CoreCommand(h.ns))
	return h.start(name, argv[0], argv[1:], port)
}

// startProvider starts the provider half with the sidecar's arguments: the provider image's
// entrypoint is the local provider's machine-controller.
func (h *halves) startProvider(name string) *halfProcess {
	h.t.Helper()
	args, port := h.onHost(gardenerseed.ProviderSidecarArgs(h.ns))
	return h.start(name, filepath.Join(h.bin, "machine-controller-local"), args, port)
}

func (h *halves) start(name, program string, args []string, port int) *halfProcess {
	h.t.Helper()
	// unshare execs sh, which execs the program: one process, which kill signals.
	cmd := exec.Command("unshare", append([]string{"--user", "--map-root-user", "--mount", "--propagation", "private",
		"sh", "-c", inPod, "sh", h.serviceAccount, h.generic, program}, args...)...)
	cmd.Dir = h.bin // "./machine-controller-manager" is relative to it
	cmd.Env = []string{"HOME=" + h.home, "PATH=" + os.Getenv("PATH"),
		"KUBERNETES_SERVICE_HOST=" + h.apiHost, "KUBERNETES_SERVICE_PORT=" + h.apiPort}
	p := &halfProcess{name: name, cmd: cmd, port: port, log: &syncbuf.Buffer{}, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.log, p.log
	if err := cmd.Start(); err != nil {
		h.t.Fatalf("start %s: %v", name, err)
	}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	h.processes = append(h.processes, p)
	return p
}

// kill ends the process at once (SIGKILL, as a node failure or an OOM kill would): it releases
// nothing, so its Lease must expire before another instance takes it.
func (p *halfProcess) kill() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

func (p *halfProcess) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

func (p *halfProcess) get(t *testing.T, path string) (int, string) {
	return httpGet(t, fmt.Sprintf("http://127.0.0.1:%d%s", p.port, path))
}

// lease returns the holder and renew time of a Lease of the namespace ("" when none).
func (h *halves) lease(name string) (string, time.Time) {
	l := &coordinationv1.Lease{}
	if err := h.c.Get(context.Background(), client.ObjectKey{Namespace: h.ns, Name: name}, l); err != nil || l.Spec.HolderIdentity == nil {
		return "", time.Time{}
	}
	var renewed time.Time
	if l.Spec.RenewTime != nil {
		renewed = l.Spec.RenewTime.Time
	}
	return *l.Spec.HolderIdentity, renewed
}

// waitLeading waits until p answers /healthz and the Lease name has a holder other than not.
func (h *halves) waitLeading(p *halfProcess, lease, not string, timeout time.Duration) string {
	h.t.Helper()
	var holder string
	eventually.Explained(h.t, timeout, p.name+" holding Lease "+lease, func() (bool, string) {
		if !p.running() {
			h.t.Fatalf("%s exited:\n%s", p.name, p.log.String())
		}
		if code, body := p.get(h.t, "/healthz"); code != http.StatusOK {
			return false, fmt.Sprintf("/healthz: %d %s", code, body)
		}
		holder, _ = h.lease(lease)
		return holder != "" && holder != not, "holder " + holder
	})
	return holder
}

func (h *halves) nodes() []string {
	h.t.Helper()
	var list corev1.NodeList
	if err := h.c.List(context.Background(), &list); err != nil {
		h.t.Fatal(err)
	}
	var names []string
	for _, n := range list.Items {
		names = append(names, n.Name)
	}
	return names
}

// TestHalvesWithGardenersCommandLines runs machinist's core half and the local provider's half
// as separate processes started with the command lines Gardener gives MCM's two containers
// (internal/gardenerseed, from gardener/gardener at gardenerseed.Commit), each in the pod's
// file layout with an in-cluster config (see halves; only the port is this machine's, see
// onHost): a MachineDeployment of 3 reaches Running across them, scales to 5 and rolls out to
// another class. Each half takes its MCM Lease and serves its own MCM metrics on its port.
// Killed, the core half leaves the provider half running (a deleted machine is still taken
// down, and not replaced until a second core instance takes the Lease and its MachineSet
// replaces it); a standby provider half takes the provider Lease when the first is killed and
// scales the deployment down.
func TestHalvesWithGardenersCommandLines(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two programs and runs them against a control plane")
	}
	h := newHalves(t)
	core := h.startCore("core-1")
	provider := h.startProvider("provider-1")
	coreHolder := h.waitLeading(core, manager.DefaultLeaderElectionID, "", 2*time.Minute)
	providerHolder := h.waitLeading(provider, manager.ProviderLeaderElectionID, "", 2*time.Minute)

	h.localClass(h.ns, "local-a", "halves")
	h.newDeployment(h.ns, "pool", "local-a", 3, 1, 0)
	h.waitRunning(h.ns, 3, 3*time.Minute, nil)

	// Each half serves the MCM families of its MCM program.
	_, coreMetrics := core.get(t, "/metrics")
	_, providerMetrics := provider.get(t, "/metrics")
	for _, c := range []struct {
		metrics, name string
		want          bool
	}{
		{coreMetrics, "mcm_machine_deployment_items_total 1", true},
		{coreMetrics, "mcm_machine_set_items_total 1", true},
		{coreMetrics, "mcm_machine_items_total", false},
		{providerMetrics, "mcm_machine_items_total 3", true},
		{providerMetrics, "mcm_machine_controller_frozen 0", true},
		{providerMetrics, "mcm_machine_deployment_items_total", false},
	} {
		if got := strings.Contains(c.metrics, c.name); got != c.want {
			t.Errorf("%q in the metrics of the %s half: %v, want %v", c.name, map[bool]string{true: "core", false: "provider"}[c.metrics == coreMetrics], got, c.want)
		}
	}
	for _, p := range []*halfProcess{core, provider} {
		if !strings.Contains(p.log.String(), "level=DEBUG") {
			t.Errorf("%s logs no debug lines with Gardener's --v=3", p.name)
		}
	}

	h.updateDeployment(h.ns, "pool", func(d *v1alpha1.MachineDeployment) { d.Spec.Replicas = 5 })
	h.waitRunning(h.ns, 5, 3*time.Minute, nil)

	h.localClass(h.ns, "local-b", "halves")
	h.updateDeployment(h.ns, "pool", func(d *v1alpha1.MachineDeployment) { d.Spec.Template.Spec.Class.Name = "local-b" })
	h.waitRunning(h.ns, 5, 4*time.Minute, func(m *v1alpha1.Machine) bool { return m.Spec.Class.Name == "local-b" })
	eventually.Explained(h.t, time.Minute, "the rollout complete", func() (bool, string) {
		ph, _ := h.phases(h.ns, func(m *v1alpha1.Machine) bool { return m.Spec.Class.Name == "local-a" })
		return len(ph) == 0, fmt.Sprintf("machines of local-a: %v", ph)
	})

	// The core half dies: the provider half goes on. A machine deleted now is still drained and
	// its VM and node removed, but nothing replaces it.
	core.kill()
	victim := h.machines(h.ns)[0]
	if err := h.c.Delete(context.Background(), &victim); err != nil {
		t.Fatal(err)
	}
	eventually.Explained(h.t, 2*time.Minute, "machine "+victim.Name+" deleted by the provider half alone", func() (bool, string) {
		ms := h.machines(h.ns)
		return len(ms) == 4 && !slices.Contains(h.nodes(), victim.Name), fmt.Sprintf("%d machines, nodes %v", len(ms), h.nodes())
	})
	if !provider.running() {
		t.Fatalf("the provider half exited with the core half:\n%s", provider.log.String())
	}
	if holder, renewed := h.lease(manager.ProviderLeaderElectionID); holder != providerHolder || time.Since(renewed) > 20*time.Second {
		t.Errorf("Lease %s: holder %q renewed %s ago, want %q renewing", manager.ProviderLeaderElectionID, holder, time.Since(renewed), providerHolder)
	}
	if n := len(h.machines(h.ns)); n != 4 {
		t.Errorf("%d machines without a core half, want 4: something replaced the deleted machine", n)
	}

	// A second core instance takes the Lease once the killed one's expires and replaces it.
	core2 := h.startCore("core-2")
	h.waitLeading(core2, manager.DefaultLeaderElectionID, coreHolder, 2*time.Minute)
	h.waitRunning(h.ns, 5, 3*time.Minute, nil)

	// A standby provider half waits while the first leads, and takes over when it is killed.
	provider2 := h.startProvider("provider-2")
	eventually.Explained(h.t, time.Minute, "the standby provider half serving", func() (bool, string) {
		code, body := provider2.get(t, "/healthz")
		return code == http.StatusOK, fmt.Sprintf("%d %s", code, body)
	})
	if holder, _ := h.lease(manager.ProviderLeaderElectionID); holder != providerHolder {
		t.Fatalf("Lease %s moved to %q while %q was running", manager.ProviderLeaderElectionID, holder, providerHolder)
	}
	provider.kill()
	h.waitLeading(provider2, manager.ProviderLeaderElectionID, providerHolder, 2*time.Minute)
	h.updateDeployment(h.ns, "pool", func(d *v1alpha1.MachineDeployment) { d.Spec.Replicas = 3 })
	h.waitRunning(h.ns, 3, 3*time.Minute, nil)
	eventually.Explained(h.t, time.Minute, "the nodes of the removed machines gone", func() (bool, string) {
		nodes := h.nodes()
		return len(nodes) == 3, fmt.Sprintf("nodes %v", nodes)
	})
	if !core2.running() {
		t.Errorf("the core half exited:\n%s", core2.log.String())
	}
}
