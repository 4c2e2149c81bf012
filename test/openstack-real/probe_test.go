package openstackreal

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/machinist-io/machinist/providers/kit/fakekit"

	"github.com/gophercloud/gophercloud/v2"
	gopenstack "github.com/gophercloud/gophercloud/v2/openstack"

	"github.com/machinist-io/machinist/providers/openstack/fakeopenstack"
)

// endpoint is one cloud as the probes see it: a token, the service URLs, and the IDs the probes
// put in paths and bodies.
type endpoint struct {
	name    string
	clients map[string]*gophercloud.ServiceClient // compute, network, volume, image
	ids     map[string]string                     // network, subnet, image, flavor
}

func connectEndpoint(t *testing.T, name, authURL, domain, project, user, password, region string, ids map[string]string) *endpoint {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pc, err := gopenstack.AuthenticatedClient(ctx, gophercloud.AuthOptions{IdentityEndpoint: authURL, Username: user, Password: password, DomainName: domain, TenantName: project, AllowReauth: true})
	if err != nil {
		t.Fatalf("%s: authenticate: %v", name, err)
	}
	eo := gophercloud.EndpointOpts{Region: region}
	e := &endpoint{name: name, clients: map[string]*gophercloud.ServiceClient{}, ids: ids}
	for svc, mk := range map[string]func(*gophercloud.ProviderClient, gophercloud.EndpointOpts) (*gophercloud.ServiceClient, error){
		"compute": gopenstack.NewComputeV2, "network": gopenstack.NewNetworkV2, "volume": gopenstack.NewBlockStorageV3, "image": gopenstack.NewImageV2,
	} {
		sc, err := mk(pc, eo)
		if err != nil {
			t.Fatalf("%s: %s endpoint: %v", name, svc, err)
		}
		e.clients[svc] = sc
	}
	return e
}

// outcome is what a probe compares: the status and the error's kind (Nova's and Cinder's
// top-level key, Neutron's NeutronError type, Keystone's error title), or for a success the
// top-level keys of the body.
type outcome struct {
	Status int
	Kind   string
	Body   string
}

func (o outcome) String() string { return fmt.Sprintf("HTTP %d %s", o.Status, o.Kind) }

func (e *endpoint) do(t *testing.T, ctx context.Context, service, method, path, body string) outcome {
	t.Helper()
	for k, v := range e.ids {
		path = strings.ReplaceAll(path, "{"+k+"}", v)
		body = strings.ReplaceAll(body, "{"+k+"}", v)
	}
	opts := &gophercloud.RequestOpts{KeepResponseBody: true, OkCodes: okCodes, MoreHeaders: map[string]string{"Accept": "application/json"}}
	if body != "" {
		opts.RawBody = bytes.NewBufferString(body)
		opts.MoreHeaders["Content-Type"] = "application/json"
	}
	// Paths are relative to the service's versioned root (gophercloud's ResourceBaseURL). A 401
	// is not OK, so gophercloud authenticates again and retries: tokens expire during the run.
	sc := e.clients[service]
	resp, err := sc.Request(ctx, method, sc.ResourceBaseURL()+strings.TrimPrefix(path, "/"), opts)
	var unexpected gophercloud.ErrUnexpectedResponseCode
	switch {
	case errors.As(err, &unexpected):
		return classify(unexpected.Actual, unexpected.Body)
	case err != nil:
		t.Fatalf("%s: %s %s: %v", e.name, method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return classify(resp.StatusCode, raw)
}

// okCodes are every status but 401.
var okCodes = func() []int {
	var out []int
	for c := 200; c < 600; c++ {
		if c != http.StatusUnauthorized {
			out = append(out, c)
		}
	}
	return out
}()

func classify(status int, raw []byte) outcome {
	o := outcome{Status: status, Body: string(raw)}
	var top map[string]json.RawMessage
	if json.Unmarshal(raw, &top) == nil {
		keys := make([]string, 0, len(top))
		for k := range top {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		o.Kind = strings.Join(keys, ",")
		if ne, ok := top["NeutronError"]; ok {
			var inner struct{ Type string }
			_ = json.Unmarshal(ne, &inner)
			o.Kind = "NeutronError:" + inner.Type
		}
		if ke, ok := top["error"]; ok {
			var inner struct{ Title string }
			_ = json.Unmarshal(ke, &inner)
			o.Kind = "error:" + inner.Title
		}
	} else if status >= 400 {
		o.Kind = "text"
	}
	return o
}

// probe is one request whose answer the fake must give as the real cloud does.
type probe struct {
	name, service, method, path, body string
}

// probes are the requests the driver makes, or the errors it maps, that a fake can get wrong.
var probes = []probe{
	{"server not found", "compute", "GET", "servers/00000000-0000-4000-8000-000000000001", ""},
	{"delete server not found", "compute", "DELETE", "servers/00000000-0000-4000-8000-000000000001", ""},
	{"servers by name regex", "compute", "GET", "servers/detail?name=%5Enothing-named-so%24", ""},
	{"flavors", "compute", "GET", "flavors/detail", ""},
	{"server with unknown flavor", "compute", "POST", "servers",
		`{"server":{"name":"probe","flavorRef":"no-such-flavor","imageRef":"{image}","networks":[{"uuid":"{network}"}]}}`},
	{"server with unknown key pair", "compute", "POST", "servers",
		`{"server":{"name":"probe","flavorRef":"{flavor}","imageRef":"{image}","key_name":"no-such-key","networks":[{"uuid":"{network}"}]}}`},
	{"server with unknown image", "compute", "POST", "servers",
		`{"server":{"name":"probe","flavorRef":"{flavor}","imageRef":"00000000-0000-4000-8000-000000000002","networks":[{"uuid":"{network}"}]}}`},
	{"server in unknown zone", "compute", "POST", "servers",
		`{"server":{"name":"probe","flavorRef":"{flavor}","imageRef":"{image}","availability_zone":"no-such-zone","networks":[{"uuid":"{network}"}]}}`},
	{"server on unknown network", "compute", "POST", "servers",
		`{"server":{"name":"probe","flavorRef":"{flavor}","imageRef":"{image}","networks":[{"uuid":"00000000-0000-4000-8000-000000000003"}]}}`},
	{"server with unknown security group", "compute", "POST", "servers",
		`{"server":{"name":"probe","flavorRef":"{flavor}","imageRef":"{image}","security_groups":[{"name":"no-such-group"}],"networks":[{"uuid":"{network}"}]}}`},
	{"port not found", "network", "GET", "ports/00000000-0000-4000-8000-000000000004", ""},
	{"delete port not found", "network", "DELETE", "ports/00000000-0000-4000-8000-000000000004", ""},
	{"ports by tags", "network", "GET", "ports?tags=kubernetes.io-cluster-nothing,kubernetes.io-role-node", ""},
	{"port on unknown subnet", "network", "POST", "ports",
		`{"port":{"name":"probe","network_id":"{network}","fixed_ips":[{"subnet_id":"00000000-0000-4000-8000-000000000005"}]}}`},
	{"tags of unknown port", "network", "PUT", "ports/00000000-0000-4000-8000-000000000004/tags", `{"tags":["a"]}`},
	{"security groups by name", "network", "GET", "security-groups?name=no-such-group", ""},
	{"network not found", "network", "GET", "networks/00000000-0000-4000-8000-000000000003", ""},
	{"volume not found", "volume", "GET", "volumes/00000000-0000-4000-8000-000000000006", ""},
	{"delete volume not found", "volume", "DELETE", "volumes/00000000-0000-4000-8000-000000000006", ""},
	{"volume of unknown type", "volume", "POST", "volumes", `{"volume":{"name":"probe","size":1,"volume_type":"no-such-type"}}`},
	{"volumes by metadata", "volume", "GET", `volumes/detail?metadata=%7B%22kubernetes.io-cluster-nothing%22%3A%221%22%7D`, ""},
	{"images by name", "image", "GET", "images?name=no-such-image&status=active", ""},
	{"image not found", "image", "GET", "images/00000000-0000-4000-8000-000000000002", ""},
}

// TestFakeAnswersAsReal sends each probe to the real cloud and to fakeopenstack and compares
// status and error kind. docs/openstack-real.md lists what differed and how the fake was fixed.
func TestFakeAnswersAsReal(t *testing.T) {
	need(t)
	t.Parallel()
	realCloud := connectEndpoint(t, "real", authURL(t), osr(t, "DOMAIN"), osr(t, "PROJECT"), osr(t, "USER"), osr(t, "PASSWORD"), osr(t, "REGION"),
		map[string]string{"network": osr(t, "NETWORK_ID"), "subnet": osr(t, "SUBNET_ID"), "image": osr(t, "IMAGE_ID"), "flavor": flavorID(t, osr(t, "FLAVOR_SMALL"))})
	fc := startCloud(t, fakeopenstack.Options{})
	fake := connectEndpoint(t, "fake", fc.AuthURL(), fakeopenstack.DomainName, fakeopenstack.ProjectName, fakeopenstack.UserName, fakeopenstack.Password, fc.Region(),
		map[string]string{"network": fakeopenstack.NetworkID, "subnet": fakeopenstack.SubnetID, "image": fakeopenstack.ImageID, "flavor": fakeopenstack.FlavorSmallID()})
	for _, p := range probes {
		// Each probe has its own bound: on a busy machine nova-api takes minutes for a boot it
		// refuses, and one bound for all of them ran out half-way (2026-11-27).
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		r := realCloud.do(t, ctx, p.service, p.method, p.path, p.body)
		f := fake.do(t, ctx, p.service, p.method, p.path, p.body)
		cancel()
		t.Logf("%-36s real %-50s fake %s", p.name, r, f)
		if r.Status != f.Status || r.Kind != f.Kind {
			t.Errorf("%s: %s %s: real cloud answers %s, fake %s\nreal body: %.400s\nfake body: %.400s", p.name, p.method, p.path, r, f, r.Body, f.Body)
		}
	}
}

// flavorID looks a flavor's ID up by name in the real cloud.
func flavorID(t *testing.T, name string) string {
	t.Helper()
	c := userClients(t, osr(t, "PROJECT"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var body struct {
		Flavors []struct{ ID, Name string }
	}
	if _, err := c.compute.Get(ctx, c.compute.ServiceURL("flavors"), &body, nil); err != nil {
		t.Fatal(err)
	}
	for _, f := range body.Flavors {
		if f.Name == name {
			return f.ID
		}
	}
	t.Fatalf("no flavor %s", name)
	return ""
}

// faultOf boots a server that cannot be scheduled and returns its fault as the project's member
// reads it (status ERROR), deleting the server afterwards.
func (e *endpoint) faultOf(t *testing.T, ctx context.Context, flavor string) map[string]any {
	t.Helper()
	o := e.do(t, ctx, "compute", "POST", "servers",
		`{"server":{"name":"probe-fault","flavorRef":"`+flavor+`","imageRef":"{image}","networks":[{"uuid":"{network}"}]}}`)
	if o.Status != http.StatusAccepted {
		t.Fatalf("%s: boot: HTTP %d %s", e.name, o.Status, o.Body)
	}
	var created struct{ Server struct{ ID string } }
	_ = json.Unmarshal([]byte(o.Body), &created)
	defer e.do(t, context.WithoutCancel(ctx), "compute", "DELETE", "servers/"+created.Server.ID, "")
	var fault map[string]any
	eventually(t, 10*time.Minute, e.name+": the server goes to ERROR", func(ctx context.Context) (bool, string) {
		o := e.do(t, ctx, "compute", "GET", "servers/"+created.Server.ID, "")
		var s struct {
			Server struct {
				Status string
				Fault  map[string]any
			}
		}
		_ = json.Unmarshal([]byte(o.Body), &s)
		fault = s.Server.Fault
		return s.Server.Status == "ERROR", s.Server.Status
	})
	return fault
}

// TestFakeFaultAsReal compares the fault of a server no host can take, as a project member reads
// it: its keys, code and message.
func TestFakeFaultAsReal(t *testing.T) {
	need(t)
	t.Parallel()
	realCloud := connectEndpoint(t, "real", authURL(t), osr(t, "DOMAIN"), osr(t, "PROJECT"), osr(t, "USER"), osr(t, "PASSWORD"), osr(t, "REGION"),
		map[string]string{"network": osr(t, "NETWORK_ID"), "image": osr(t, "IMAGE_ID")})
	fc := startCloud(t, fakeopenstack.Options{})
	fc.NoValidHost(1)
	fake := connectEndpoint(t, "fake", fc.AuthURL(), fakeopenstack.DomainName, fakeopenstack.ProjectName, fakeopenstack.UserName, fakeopenstack.Password, fc.Region(),
		map[string]string{"network": fakeopenstack.NetworkID, "image": fakeopenstack.ImageID})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	r := realCloud.faultOf(t, ctx, flavorID(t, osr(t, "FLAVOR_NOHOST")))
	f := fake.faultOf(t, ctx, fakeopenstack.FlavorSmallID())
	t.Logf("real fault: %v", r)
	t.Logf("fake fault: %v", f)
	keys := func(m map[string]any) string {
		var ks []string
		for k := range m {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		return strings.Join(ks, ",")
	}
	if keys(r) != keys(f) || fmt.Sprint(r["code"]) != fmt.Sprint(f["code"]) || r["message"] != f["message"] {
		t.Errorf("the fault differs: real %v, fake %v", r, f)
	}
}

// startCloud serves a fake OpenStack on loopback until the test ends.
func startCloud(t testing.TB, o fakeopenstack.Options) *fakeopenstack.Cloud {
	t.Helper()
	c := fakeopenstack.New(o)
	fakekit.Start(t, c)
	return c
}
