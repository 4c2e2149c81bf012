package azure

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/drivertest"
	"github.com/machinist-io/machinist/grpcbridge/bridgetest"
	"github.com/machinist-io/machinist/providers/azure/fakeazure"
)

func TestConformanceThroughTheGRPCBridge(t *testing.T) {
	bridgetest.Run(t, ProviderName, conformanceTarget, drivertest.WithTimeout(60*time.Second))
}

// TestAzureErrorsCrossTheBridge checks that a capacity failure keeps its code and its ARM details
// through the bridge, and that the failed create still cleaned up.
func TestAzureErrorsCrossTheBridge(t *testing.T) {
	e := newTestEnv(t)
	remote := bridgetest.DialOut(t, ProviderName, e.drv)
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
	if n := len(e.cloud.Requests.For(fakeazure.OpDeleteVM)); n == 0 {
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
