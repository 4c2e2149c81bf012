package openstack

import (
	"strings"
	"testing"
	"time"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/drivertest"
	"github.com/machinist-io/machinist/grpcbridge"
	"github.com/machinist-io/machinist/grpcbridge/mtls"
	"github.com/machinist-io/machinist/grpcbridge/mtls/mtlstest"
	"github.com/machinist-io/machinist/providers/openstack/fakeopenstack"
)

// throughBridge serves d as a driver server on loopback TCP with mutual TLS, as `machinist serve`
// does, and returns the client side the controller would use.
func throughBridge(t testing.TB, d driver.Driver) driver.Driver {
	t.Helper()
	ca := mtlstest.NewCA(t, "openstack-bridge-test")
	serverTLS, err := mtls.ServerConfig(ca.IssueFiles(t, mtlstest.Leaf{CommonName: "openstack-driver"}, nil))
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
	grpcbridge.NewServer(d, grpcbridge.WithProviders(ProviderName)).Register(srv)
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
	return grpcbridge.NewClient(conn, grpcbridge.WithProvider(ProviderName))
}

func TestConformanceThroughBridge(t *testing.T) {
	drivertest.Run(t, func(t testing.TB) drivertest.Target {
		target, _ := conformanceTarget(t)
		target.Driver = throughBridge(t, target.Driver)
		return target
	}, drivertest.WithTimeout(20*time.Second), drivertest.WithPromptBound(2*time.Second))
}

// TestCloudErrorsCrossTheBridge checks that Nova's fault, the request ID and the code reach the
// controller side intact, and that nothing leaks.
func TestCloudErrorsCrossTheBridge(t *testing.T) {
	cloud := fakeopenstack.Start(t)
	d, _ := testDriver(t)
	remote := throughBridge(t, d)
	class, secret := testClass(t, fullSpec), passwordSecret(cloud)
	cloud.NoValidHost(1)
	_, err := remote.CreateMachine(ctxT(t), &driver.CreateMachineRequest{Machine: machine("worker-remote"), MachineClass: class, Secret: secret})
	if !driver.IsCode(err, driver.ResourceExhausted) {
		t.Fatalf("CreateMachine through the bridge = %v; want ResourceExhausted", err)
	}
	for _, want := range []string{"No valid host was found", "req-"} {
		if !strings.Contains(driver.MessageOf(err), want) {
			t.Errorf("message %q lost %q on the way", driver.MessageOf(err), want)
		}
	}
	if s, p, v := allResources(cloud); s+p+v != 0 {
		t.Errorf("%d servers, %d ports, %d volumes left", s, p, v)
	}
	resp, err := remote.CreateMachine(ctxT(t), &driver.CreateMachineRequest{Machine: machine("worker-remote"), MachineClass: class, Secret: secret})
	if err != nil || !strings.HasPrefix(resp.ProviderID, "openstack:///"+fakeopenstack.DefaultRegion+"/") || len(resp.Addresses) == 0 {
		t.Fatalf("CreateMachine through the bridge = %+v, %v", resp, err)
	}
	if n := cloud.TokenRequests(); n != 1 {
		t.Errorf("%d token requests through the bridge, want 1", n)
	}
}
