package openstack

import (
	"strings"
	"testing"
	"time"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/drivertest"
	"github.com/machinist-io/machinist/grpcbridge/bridgetest"
	"github.com/machinist-io/machinist/providers/openstack/fakeopenstack"
)

func TestConformanceThroughBridge(t *testing.T) {
	bridgetest.Run(t, ProviderName, func(t testing.TB) drivertest.Target {
		target, _ := conformanceTarget(t)
		return target
	}, drivertest.WithTimeout(20*time.Second), drivertest.WithPromptBound(2*time.Second))
}

// TestCloudErrorsCrossTheBridge checks that Nova's fault, the request ID and the code reach the
// controller side intact, and that nothing leaks.
func TestCloudErrorsCrossTheBridge(t *testing.T) {
	cloud := startCloud(t, fakeopenstack.Options{})
	d, _ := testDriver(t)
	remote := bridgetest.DialOut(t, ProviderName, d)
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
