package azure

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/drivertest"
	"github.com/machinist-io/machinist/grpcbridge"
	"github.com/machinist-io/machinist/grpcbridge/dialin"
	"github.com/machinist-io/machinist/grpcbridge/mtls"
	"github.com/machinist-io/machinist/grpcbridge/mtls/mtlstest"
	"github.com/machinist-io/machinist/providers/azure/fakeazure"
)

// serveOverBridge serves d with the dial-out gRPC bridge on loopback TCP with mutual TLS and
// returns the client side, which the controller would use.
func serveOverBridge(t testing.TB, d driver.Driver) driver.Driver {
	t.Helper()
	ca := mtlstest.NewCA(t, "azure-bridge-test-ca")
	serverTLS, err := mtls.ServerConfig(ca.IssueFiles(t, mtlstest.Leaf{CommonName: "azure-driver"}, nil))
	if err != nil {
		t.Fatal(err)
	}
	clientTLS, err := mtls.ClientConfig(ca.IssueFiles(t, mtlstest.Leaf{CommonName: "controller"}, nil), "localhost")
	if err != nil {
		t.Fatal(err)
	}
	lis, err := grpcbridge.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := grpcbridge.NewGRPCServer(grpcbridge.Transport{TLS: serverTLS})
	if err != nil {
		t.Fatal(err)
	}
	grpcbridge.NewServer(d).Register(srv)
	go srv.Serve(lis)
	conn, err := grpcbridge.Dial(lis.Addr().String(), grpcbridge.Transport{TLS: clientTLS})
	if err != nil {
		srv.Stop()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
	})
	return grpcbridge.NewClient(conn, grpcbridge.WithProvider(Name))
}

// dialIn serves d the other way round: the controller listens (loopback TCP, mutual TLS) and a
// provider process dials in and registers "azure"; the controller's remote driver is returned.
func dialIn(t testing.TB, d driver.Driver) driver.Driver {
	t.Helper()
	ca := mtlstest.NewCA(t, "azure-dialin-test-ca")
	serverTLS, err := mtls.ServerConfig(ca.IssueFiles(t, mtlstest.Leaf{CommonName: "controller"}, nil))
	if err != nil {
		t.Fatal(err)
	}
	providerTLS, err := mtls.ClientConfig(ca.IssueFiles(t, mtlstest.Leaf{CommonName: "azure-provider", URIs: []string{mtls.ProviderURI(Name).String()}}, nil), "localhost")
	if err != nil {
		t.Fatal(err)
	}
	lis, err := grpcbridge.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := grpcbridge.NewGRPCServer(grpcbridge.Transport{TLS: serverTLS})
	if err != nil {
		t.Fatal(err)
	}
	ctrl := dialin.NewServer(dialin.Options{})
	ctrl.RegisterService(srv)
	go srv.Serve(lis)
	p, err := dialin.NewProvider(dialin.ProviderOptions{
		Controller: lis.Addr().String(), Transport: grpcbridge.Transport{TLS: providerTLS},
		Drivers: map[string]driver.Driver{Name: d}, Instance: "azure-test",
		Backoff: dialin.Backoff{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = p.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		p.Close()
		ctrl.Close()
		srv.Stop()
	})
	wait, cancelWait := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelWait()
	if err := ctrl.WaitFor(wait, Name, 1); err != nil {
		t.Fatal(err)
	}
	remote, ok := ctrl.Driver(Name)
	if !ok {
		t.Fatal("the azure provider dialled in but the controller has no driver for it")
	}
	return remote
}

func TestConformanceThroughTheGRPCBridge(t *testing.T) {
	for _, way := range []struct {
		name string
		wrap func(testing.TB, driver.Driver) driver.Driver
	}{{"dial-out", serveOverBridge}, {"dial-in", dialIn}} {
		t.Run(way.name, func(t *testing.T) {
			drivertest.Run(t, func(t testing.TB) drivertest.Target {
				target := conformanceTarget(t)
				target.Driver = way.wrap(t, target.Driver)
				return target
			}, drivertest.WithTimeout(60*time.Second))
		})
	}
}

// TestAzureErrorsCrossTheBridge checks that a capacity failure keeps its code and its ARM details
// through the bridge, and that the failed create still cleaned up.
func TestAzureErrorsCrossTheBridge(t *testing.T) {
	e := newTestEnv(t)
	remote := serveOverBridge(t, e.drv)
	e.cloud.FailNextAllocation("ZonalAllocationFailed")
	_, err := remote.CreateMachine(context.Background(), &driver.CreateMachineRequest{Machine: machine("m-1"), MachineClass: e.class, Secret: e.secret})
	if driver.CodeOf(err) != driver.ResourceExhausted {
		t.Fatalf("err = %v, want ResourceExhausted", err)
	}
	if msg := driver.MessageOf(err); !containsAll(msg, "ZonalAllocationFailed", "x-ms-request-id") {
		t.Errorf("message %q lost the ARM code or request id", msg)
	}
	if left := e.resourcesOf("m-1"); len(left) != 0 {
		t.Errorf("leftovers: %+v", left)
	}
	if n := len(e.cloud.RequestsFor(fakeazure.OpDeleteVM)); n == 0 {
		t.Error("the failed VM was not deleted")
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
