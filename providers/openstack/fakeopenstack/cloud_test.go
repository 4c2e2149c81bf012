package fakeopenstack_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/machinist-io/machinist/providers/kit/fakekit"

	"github.com/gophercloud/gophercloud/v2"
	gopenstack "github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/blockstorage/v3/volumes"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/identity/v3/tokens"
	"github.com/gophercloud/gophercloud/v2/openstack/image/v2/images"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"

	"github.com/machinist-io/machinist/internal/eventually"
	"github.com/machinist-io/machinist/providers/openstack/fakeopenstack"
)

type clients struct {
	provider                        *gophercloud.ProviderClient
	compute, network, volume, image *gophercloud.ServiceClient
}

func connect(t *testing.T, c *fakeopenstack.Cloud, opts gophercloud.AuthOptions) clients {
	t.Helper()
	ctx := context.Background()
	opts.IdentityEndpoint = c.AuthURL()
	// AuthenticatedClient discovers the identity version at the root, as real clients do.
	pc, err := gopenstack.AuthenticatedClient(ctx, opts)
	if err != nil {
		t.Fatalf("authenticate: %v", err)
	}
	eo := gophercloud.EndpointOpts{Region: c.Region()}
	var cl clients
	cl.provider = pc
	for name, f := range map[string]func() (*gophercloud.ServiceClient, error){
		"compute": func() (*gophercloud.ServiceClient, error) { return gopenstack.NewComputeV2(pc, eo) },
		"network": func() (*gophercloud.ServiceClient, error) { return gopenstack.NewNetworkV2(pc, eo) },
		"volume":  func() (*gophercloud.ServiceClient, error) { return gopenstack.NewBlockStorageV3(pc, eo) },
		"image":   func() (*gophercloud.ServiceClient, error) { return gopenstack.NewImageV2(pc, eo) },
	} {
		sc, err := f()
		if err != nil {
			t.Fatalf("%s client: %v", name, err)
		}
		switch name {
		case "compute":
			cl.compute = sc
		case "network":
			cl.network = sc
		case "volume":
			cl.volume = sc
		case "image":
			cl.image = sc
		}
	}
	return cl
}

func passwordOpts() gophercloud.AuthOptions {
	return gophercloud.AuthOptions{Username: fakeopenstack.UserName, Password: fakeopenstack.Password, DomainName: fakeopenstack.DomainName,
		TenantName: fakeopenstack.ProjectName, AllowReauth: true}
}

func TestKeystone(t *testing.T) {
	c := startCloud(t, fakeopenstack.Options{TokenTTL: time.Hour})
	cl := connect(t, c, passwordOpts())
	res, ok := cl.provider.GetAuthResult().(tokens.CreateResult)
	if !ok {
		t.Fatalf("auth result %T", cl.provider.GetAuthResult())
	}
	tok, err := res.ExtractToken()
	if err != nil || time.Until(tok.ExpiresAt) < 59*time.Minute || time.Until(tok.ExpiresAt) > time.Hour {
		t.Fatalf("token %+v, %v; want one expiring in an hour", tok, err)
	}
	if p, err := res.ExtractProject(); err != nil || p.ID != fakeopenstack.ProjectID {
		t.Fatalf("project %+v, %v", p, err)
	}

	appByID := gophercloud.AuthOptions{ApplicationCredentialID: fakeopenstack.AppCredentialID, ApplicationCredentialSecret: fakeopenstack.AppCredentialSecret}
	connect(t, c, appByID)
	appByName := gophercloud.AuthOptions{ApplicationCredentialName: fakeopenstack.AppCredentialName, ApplicationCredentialSecret: fakeopenstack.AppCredentialSecret,
		Username: fakeopenstack.UserName, DomainName: fakeopenstack.DomainName}
	connect(t, c, appByName)
	if n := c.TokenRequests(); n != 3 {
		t.Errorf("%d token requests, want 3", n)
	}

	wrong := passwordOpts()
	wrong.Password = "nope"
	wrong.IdentityEndpoint = c.AuthURL()
	_, err = gopenstack.AuthenticatedClient(context.Background(), wrong)
	if !gophercloud.ResponseCodeIs(err, http.StatusUnauthorized) {
		t.Errorf("wrong password: %v; want 401", err)
	}

	// An expired token is rejected with 401 and gophercloud renews it.
	c.ExpireAllTokens()
	before := c.TokenRequests()
	if _, err := servers.List(cl.compute, nil).AllPages(context.Background()); err != nil {
		t.Fatalf("list after expiry: %v", err)
	}
	if c.Rejected() != 1 || c.TokenRequests() != before+1 {
		t.Errorf("rejected %d, token requests %d -> %d; want one 401 and one new token", c.Rejected(), before, c.TokenRequests())
	}
}

func TestRequestIDsAndCounters(t *testing.T) {
	c := startCloud(t, fakeopenstack.Options{})
	cl := connect(t, c, passwordOpts())
	r := servers.Get(context.Background(), cl.compute, "does-not-exist")
	var e gophercloud.ErrUnexpectedResponseCode
	if _, err := r.Extract(); !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		t.Fatalf("get missing server: %v", err)
	} else if !errors.As(err, &e) || !strings.HasPrefix(e.ResponseHeader.Get("X-Openstack-Request-Id"), "req-") ||
		e.ResponseHeader.Get("X-Compute-Request-Id") != e.ResponseHeader.Get("X-Openstack-Request-Id") ||
		!strings.Contains(string(e.Body), `"itemNotFound"`) {
		t.Fatalf("404 of Nova: headers %v body %s", e.ResponseHeader, e.Body)
	}
	if n := len(c.Requests.For("compute GET /servers/{id}")); n != 1 {
		t.Errorf("counter compute GET /servers/{id} = %d, want 1 (counts: %v)", n, c.Requests.All())
	}
}

func TestServerLifecycleKeepsStateLikeNova(t *testing.T) {
	// Build and delete take a second: long enough to see BUILD and deleting on a loaded machine;
	// the transitions after them are polled for, never slept on.
	c := startCloud(t, fakeopenstack.Options{BuildTime: time.Second, DeleteTime: time.Second})
	cl := connect(t, c, passwordOpts())
	ctx := context.Background()

	port, err := ports.Create(ctx, cl.network, ports.CreateOpts{Name: "m1", NetworkID: fakeopenstack.NetworkID}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	vol, err := volumes.Create(ctx, cl.volume, volumes.CreateOpts{Name: "m1", Size: 20, ImageID: fakeopenstack.ImageID, Metadata: map[string]string{"k": "v"}}, nil).Extract()
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := volumes.Get(ctx, cl.volume, vol.ID).Extract(); got.Status != "available" {
		t.Fatalf("volume status %s, want available", got.Status)
	}
	srv, err := servers.Create(ctx, cl.compute, servers.CreateOpts{
		Name: "m1", FlavorRef: fakeopenstack.FlavorSmallID(),
		Networks:    []servers.Network{{Port: port.ID}, {UUID: fakeopenstack.PodNetworkID}},
		BlockDevice: []servers.BlockDevice{{SourceType: servers.SourceVolume, UUID: vol.ID, DestinationType: servers.DestinationVolume}},
	}, nil).Extract()
	if err != nil {
		t.Fatal(err)
	}
	got, err := servers.Get(ctx, cl.compute, srv.ID).Extract()
	if err != nil || got.Status != "BUILD" {
		t.Fatalf("new server %v, %v; want BUILD", got, err)
	}
	eventually.True(t, 10*time.Second, "the server out of BUILD", func() bool {
		s, err := servers.Get(ctx, cl.compute, srv.ID).Extract()
		got = s
		return err == nil && s.Status != "BUILD"
	})
	if got.Status != "ACTIVE" || len(got.Addresses) != 2 {
		t.Fatalf("server status %s addresses %v; want ACTIVE on two networks", got.Status, got.Addresses)
	}
	// A port in use cannot boot a second server.
	_, err = servers.Create(ctx, cl.compute, servers.CreateOpts{Name: "m2", FlavorRef: "1", ImageRef: fakeopenstack.ImageID, Networks: []servers.Network{{Port: port.ID}}}, nil).Extract()
	if !gophercloud.ResponseCodeIs(err, http.StatusConflict) {
		t.Fatalf("boot on a used port: %v; want 409", err)
	}

	if err := servers.Delete(ctx, cl.compute, srv.ID).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	if got, err = servers.Get(ctx, cl.compute, srv.ID).Extract(); err != nil || got.TaskState != "deleting" {
		t.Fatalf("deleting server %v, %v; want task_state deleting", got, err)
	}
	eventually.True(t, 10*time.Second, "the server gone", func() bool {
		_, err := servers.Get(ctx, cl.compute, srv.ID).Extract()
		return gophercloud.ResponseCodeIs(err, http.StatusNotFound)
	})
	// The given port is unbound but stays; the port Nova made is gone; the volume survives.
	ps := c.Ports()
	if len(ps) != 1 || ps[0].ID != port.ID || ps[0].DeviceID != "" {
		t.Fatalf("ports after delete %+v; want only the pre-created one, unbound", ps)
	}
	if v, err := volumes.Get(ctx, cl.volume, vol.ID).Extract(); err != nil || v.Status != "available" || len(v.Attachments) != 0 {
		t.Fatalf("volume after delete %+v, %v; want available and detached", v, err)
	}
	// Filters: Cinder metadata, Neutron tags.
	pages, err := volumes.List(cl.volume, volumes.ListOpts{Metadata: map[string]string{"k": "v"}}).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if vs, _ := volumes.ExtractVolumes(pages); len(vs) != 1 {
		t.Fatalf("metadata filter found %d volumes, want 1", len(vs))
	}
	c.CreatePort("tagged", fakeopenstack.NetworkID, []string{"a", "b"})
	pages, err = ports.List(cl.network, ports.ListOpts{Tags: "a,b"}).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if tagged, _ := ports.ExtractPorts(pages); len(tagged) != 1 || tagged[0].Name != "tagged" {
		t.Fatalf("tag filter found %+v", tagged)
	}
}

func TestListsPaginate(t *testing.T) {
	c := startCloud(t, fakeopenstack.Options{})
	cl := connect(t, c, passwordOpts())
	ctx := context.Background()
	for i := range 5 {
		c.CreateServer(fmt.Sprintf("s%d", i), nil)
		c.AddImage("img", time.Now().Add(time.Duration(i)*time.Minute))
	}
	pages, err := servers.List(cl.compute, servers.ListOpts{Limit: 2}).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	all, _ := servers.ExtractServers(pages)
	if len(all) != 5 || len(c.Requests.For("compute GET /servers/detail")) != 3 {
		t.Fatalf("%d servers in %d pages; want 5 in 3", len(all), len(c.Requests.For("compute GET /servers/detail")))
	}
	pages, err = images.List(cl.image, images.ListOpts{Name: "img", Limit: 2}).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	imgs, _ := images.ExtractImages(pages)
	if len(imgs) != 5 || !imgs[0].CreatedAt.After(imgs[4].CreatedAt) {
		t.Fatalf("%d images; want 5, newest first", len(imgs))
	}
}

func TestFaults(t *testing.T) {
	c := startCloud(t, fakeopenstack.Options{})
	cl := connect(t, c, passwordOpts())
	ctx := context.Background()
	c.Faults.Inject(fakeopenstack.ServerErrors("compute GET /flavors", http.StatusServiceUnavailable, 2))
	for range 2 {
		if _, err := servers.Get(ctx, cl.compute, "x").Extract(); gophercloud.ResponseCodeIs(err, http.StatusServiceUnavailable) {
			t.Fatalf("a fault on /flavors hit /servers")
		}
	}
	c.Faults.Inject(fakeopenstack.Throttle("network", 1, 7))
	_, err := ports.List(cl.network, nil).AllPages(ctx)
	var e gophercloud.ErrUnexpectedResponseCode
	if !errors.As(err, &e) || e.Actual != http.StatusTooManyRequests || e.ResponseHeader.Get("Retry-After") != "7" {
		t.Fatalf("throttle: %v", err)
	}
	if _, err := ports.List(cl.network, nil).AllPages(ctx); err != nil {
		t.Fatalf("the throttle should be used up: %v", err)
	}
	c.NoValidHost(1)
	srv, err := servers.Create(ctx, cl.compute, servers.CreateOpts{Name: "nv", FlavorRef: "1", ImageRef: fakeopenstack.ImageID, Networks: []servers.Network{{UUID: fakeopenstack.NetworkID}}}, nil).Extract()
	if err != nil {
		t.Fatal(err)
	}
	got, err := servers.Get(ctx, cl.compute, srv.ID).Extract()
	if err != nil || got.Status != "ERROR" || !strings.Contains(got.Fault.Message, "No valid host was found") {
		t.Fatalf("server %+v, %v; want ERROR with NoValidHost", got, err)
	}
	if len(c.Ports()) != 0 {
		t.Fatalf("a server that was never scheduled got ports: %+v", c.Ports())
	}
}

// The control endpoint dumps the state without user data and switches faults over HTTP.
func TestControlEndpoint(t *testing.T) {
	c := fakeopenstack.New(fakeopenstack.Options{})
	srv := fakekit.Start(t, c)
	c.CreateServer("demo-1", map[string]string{"k": "v"})
	get := func() fakeopenstack.State {
		t.Helper()
		resp, err := http.Get(srv.URL + fakekit.ControlPrefix + "state")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var s fakeopenstack.State
		if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	if s := get(); len(s.Servers) != 1 || s.Servers[0].Name != "demo-1" || s.Servers[0].UserData != nil {
		t.Fatalf("state %+v", s)
	}
	resp, err := http.Post(srv.URL+fakekit.ControlPrefix+"faults", "application/json",
		strings.NewReader(`{"op":"compute GET /servers","status":503,"times":1}`))
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("inject: %v %v", resp, err)
	}
	resp.Body.Close()
	resp, err = http.Get(srv.URL + "/compute/v2.1/servers")
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("faulted request: %v %v", resp, err)
	}
	resp.Body.Close()
	resp, err = http.Post(srv.URL+fakekit.ControlPrefix+"faults", "application/json", strings.NewReader(`{"Bogus":1}`))
	if err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a bad fault: %v %v", resp, err)
	}
	resp.Body.Close()
	req, _ := http.NewRequest(http.MethodDelete, srv.URL+fakekit.ControlPrefix+"faults", nil)
	resp, err = http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("clear: %v %v", resp, err)
	}
	resp.Body.Close()
}

// startCloud serves a fake OpenStack on loopback until the test ends.
func startCloud(t testing.TB, o fakeopenstack.Options) *fakeopenstack.Cloud {
	t.Helper()
	c := fakeopenstack.New(o)
	fakekit.Start(t, c)
	return c
}
