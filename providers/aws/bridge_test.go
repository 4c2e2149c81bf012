package aws

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/drivertest"
	"github.com/machinist-io/machinist/grpcbridge/bridgetest"
)

func TestConformanceThroughTheGRPCBridge(t *testing.T) {
	bridgetest.Run(t, ProviderName, conformanceTarget, drivertest.WithTimeout(60*time.Second))
}

// TestAWSErrorsCrossTheBridge checks that a capacity failure keeps its code, EC2's error code
// and the request ID through the bridge, and that the failed create left nothing.
func TestAWSErrorsCrossTheBridge(t *testing.T) {
	e := newTestEnv(t)
	remote := bridgetest.DialOut(t, ProviderName, e.drv)
	e.cloud.Capacity.SetZoneCapacity(testZoneA, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := remote.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine("m-1"), MachineClass: e.class, Secret: e.secret})
	if driver.CodeOf(err) != driver.ResourceExhausted {
		t.Fatalf("err = %v, want ResourceExhausted", err)
	}
	reqs := e.cloud.Requests.For("RunInstances")
	if len(reqs) != 1 {
		t.Fatalf("%d RunInstances requests, want 1 (capacity errors are not retried at once)", len(reqs))
	}
	if msg := driver.MessageOf(err); !strings.Contains(msg, "InsufficientInstanceCapacity") || !strings.Contains(msg, reqs[0].RequestID) {
		t.Errorf("message %q lost EC2's code or request ID %s", msg, reqs[0].RequestID)
	}
	if left := e.cloud.Live(); len(left) != 0 {
		t.Errorf("live instances after the failed create: %+v", left)
	}
}
