package gcp

import (
	"context"
	"testing"
	"time"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/drivertest"
	"github.com/machinist-io/machinist/grpcbridge/bridgetest"
	"github.com/machinist-io/machinist/providers/gcp/fakegcp"
)

func TestConformanceThroughTheGRPCBridge(t *testing.T) {
	bridgetest.Run(t, ProviderName, conformanceTarget, drivertest.WithTimeout(60*time.Second))
}

// TestGCPErrorsCrossTheBridge checks that a stockout keeps its code and the operation's error
// details through the bridge, and that the failed create left nothing.
func TestGCPErrorsCrossTheBridge(t *testing.T) {
	e := newTestEnv(t)
	remote := bridgetest.DialOut(t, ProviderName, e.drv)
	e.cloud.Faults.Inject(fakegcp.StockoutNext(1))
	_, err := remote.CreateMachine(context.Background(), &driver.CreateMachineRequest{Machine: machine("m-1"), MachineClass: e.class, Secret: e.secret})
	if driver.CodeOf(err) != driver.ResourceExhausted {
		t.Fatalf("err = %v, want ResourceExhausted", err)
	}
	if msg := driver.MessageOf(err); !containsAll(msg, "ZONE_RESOURCE_POOL_EXHAUSTED", "europe-west1-b", "resource_availability", "HTTP 503") {
		t.Errorf("message %q lost the operation's error details", msg)
	}
	if left := e.leftovers("m-1"); len(left) != 0 {
		t.Errorf("leftovers: %v", left)
	}
}
