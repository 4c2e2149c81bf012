// Package bridgetest puts a driver behind the gRPC bridge inside a test, the way it runs in
// production, so a provider's own tests can run the conformance kit through both directions:
//
//	bridgetest.Run(t, "openstack", newTarget) // the kit as subtests dial-out and dial-in
//
// DialOut and DialIn return the bridged driver for tests of their own.
//
// Both directions use loopback TCP with mutual TLS from a throw-away CA (mtlstest), the
// transport a controller and a provider in different pods use.
package bridgetest

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/drivertest"
	"github.com/machinist-io/machinist/grpcbridge"
	"github.com/machinist-io/machinist/grpcbridge/dialin"
	"github.com/machinist-io/machinist/grpcbridge/mtls"
	"github.com/machinist-io/machinist/grpcbridge/mtls/mtlstest"
)

// DialOut serves d as a driver server for provider (as `machinist serve` does) and returns the
// client side: the driver the controller would use. Everything stops when t ends.
func DialOut(t testing.TB, provider string, d driver.Driver) driver.Driver {
	t.Helper()
	ca := mtlstest.NewCA(t, "bridgetest dial-out CA")
	serverTLS, err := mtls.ServerConfig(ca.IssueFiles(t, mtlstest.Leaf{CommonName: provider + "-driver"}, nil))
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
	grpcbridge.NewServer(d, grpcbridge.WithProviders(provider)).Register(srv)
	go func() { _ = srv.Serve(lis) }()
	conn, err := grpcbridge.Dial(lis.Addr().String(), grpcbridge.Transport{TLS: clientTLS})
	if err != nil {
		srv.Stop()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		srv.Stop()
	})
	return grpcbridge.NewClient(conn, grpcbridge.WithProvider(provider))
}

// DialIn serves d the other way round: a controller-side dial-in server listens, a provider
// process dials in with a certificate authorizing provider and registers it, and the
// controller's driver for provider is returned. Everything stops when t ends.
func DialIn(t testing.TB, provider string, d driver.Driver) driver.Driver {
	t.Helper()
	ca := mtlstest.NewCA(t, "bridgetest dial-in CA")
	serverTLS, err := mtls.ServerConfig(ca.IssueFiles(t, mtlstest.Leaf{CommonName: "controller"}, nil))
	if err != nil {
		t.Fatal(err)
	}
	providerTLS, err := mtls.ClientConfig(ca.IssueFiles(t, mtlstest.Leaf{
		CommonName: provider + "-provider",
		URIs:       []string{mtls.ProviderURI(provider).String()},
	}, nil), "localhost")
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
	go func() { _ = srv.Serve(lis) }()
	p, err := dialin.NewConnector(dialin.ConnectorOptions{
		Controller: lis.Addr().String(),
		Transport:  grpcbridge.Transport{TLS: providerTLS},
		Drivers:    map[string]driver.Driver{provider: d},
		Instance:   provider + "-bridgetest",
		Backoff:    wait.Backoff{Duration: 20 * time.Millisecond, Cap: 200 * time.Millisecond},
	})
	if err != nil {
		ctrl.Close()
		srv.Stop()
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
	wait, cancelWait := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancelWait()
	if err := ctrl.WaitFor(wait, provider, 1); err != nil {
		t.Fatalf("bridgetest: %s provider did not dial in: %v", provider, err)
	}
	remote, ok := ctrl.Driver(provider)
	if !ok {
		t.Fatalf("bridgetest: the %s provider dialled in but the controller has no driver for it", provider)
	}
	return remote
}

// Run runs the conformance kit against the targets of newTarget through both directions, as the
// subtests dial-out and dial-in, with the kit's options.
func Run(t *testing.T, provider string, newTarget func(t testing.TB) drivertest.Target, opts ...drivertest.Option) {
	for _, way := range []struct {
		name string
		wrap func(testing.TB, string, driver.Driver) driver.Driver
	}{{"dial-out", DialOut}, {"dial-in", DialIn}} {
		t.Run(way.name, func(t *testing.T) {
			drivertest.Run(t, func(t testing.TB) drivertest.Target {
				target := newTarget(t)
				target.Driver = way.wrap(t, provider, target.Driver)
				return target
			}, opts...)
		})
	}
}
