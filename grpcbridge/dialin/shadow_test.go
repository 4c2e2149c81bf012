package dialin_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/grpcbridge/dialin"
	"github.com/machinist-io/machinist/grpcbridge/dialin/infragrpctest"
	"github.com/machinist-io/machinist/grpcbridge/internal/fixture"
	"github.com/machinist-io/machinist/internal/syncbuf"
)

// TestShadowedRegistrationIsReported: a provider that dials in under a name the controller
// serves from elsewhere (its compiled-in driver) is accepted, but a warning names what serves
// it, the resolution order and the flag that changes it, and Shadowed reports it while it is
// connected; a name nothing else serves is not reported. Both protocols.
func TestShadowedRegistrationIsReported(t *testing.T) {
	logs := &syncbuf.Buffer{}
	certs := fixture.NewCerts(t)
	ctrl := fixture.ServeController(t, dialin.Options{
		Log: slog.New(slog.NewTextHandler(logs, nil)),
		ShadowedBy: func(provider string) string {
			if provider == "local" || provider == "openstack" {
				return "compiled-in driver"
			}
			return ""
		},
	}, fixture.ServerTransport(t, certs))
	providerLogs := &syncbuf.Buffer{}
	p := fixture.ConnectProvider(t, ctrl.Addr, fixture.ProviderCerts(t, certs, "local", "mem"), map[string]driver.Driver{"local": okDriver(), "mem": okDriver()},
		func(o *dialin.ConnectorOptions) { o.Log = slog.New(slog.NewTextHandler(providerLogs, nil)) })
	waitFor(t, ctrl.Server, "local", 1)
	infragrpcClient(t, ctrl.Addr, fixture.ProviderCerts(t, certs, "openstack"), "OpenStackMachineClass", &infragrpctest.AWS{}, 0)
	waitFor(t, ctrl.Server, "openstack", 1)

	got := ctrl.Server.Shadowed()
	if len(got) != 2 || got["local"] != "compiled-in driver" || got["openstack"] != "compiled-in driver" {
		t.Fatalf("Shadowed() = %v", got)
	}
	out := logs.String()
	for _, name := range []string{"local", "openstack"} {
		if !strings.Contains(out, "provider "+name+" registered but gets no operations: the compiled-in driver of that name serves them") ||
			!strings.Contains(out, "--prefer-dialin="+name) || !strings.Contains(out, "resolution order: --driver-endpoint/--driver-exec, then compiled-in, then dialled-in") {
			t.Errorf("no warning for %s naming the order and the flag:\n%s", name, out)
		}
	}
	if strings.Contains(out, "provider mem registered but") {
		t.Errorf("mem, which nothing else serves, was reported as shadowed:\n%s", out)
	}
	// The provider process is told too (Welcome.shadowed_by), so `machinist connect` says it.
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(providerLogs.String(), "this replica gets no operations for provider local: the controller serves it with its compiled-in driver") {
		if time.Now().After(deadline) {
			t.Fatalf("the provider logged no warning:\n%s", providerLogs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if pl := providerLogs.String(); !strings.Contains(pl, "--prefer-dialin=local") || strings.Contains(pl, "provider mem:") {
		t.Errorf("provider warning:\n%s", pl)
	}
	p.Stop()
	for ctrl.Server.Providers()["local"] != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the stopped provider stayed registered")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := ctrl.Server.Shadowed(); len(got) != 1 || got["openstack"] == "" {
		t.Fatalf("after the provider left, Shadowed() = %v", got)
	}
}
