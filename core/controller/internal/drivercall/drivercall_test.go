package drivercall_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/machinist-io/machinist/core/controller/internal/drivercall"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/drivertest/memdriver"
)

type plain struct{ driver.UnimplementedDriver }

// Wrapping neither adds nor hides the power capability, and stops and starts are measured.
func TestWrapperForwardsThePowerCapability(t *testing.T) {
	ctx := context.Background()
	if caps, err := driver.CapabilitiesOf(ctx, drivercall.Instrument("plain", plain{})); err != nil || caps.Power {
		t.Fatalf("a wrapped driver without power reports %+v, %v", caps, err)
	}
	if _, err := drivercall.Instrument("plain", plain{}).StopMachine(ctx, &driver.StopMachineRequest{}); !driver.IsCode(err, driver.Unimplemented) {
		t.Fatalf("StopMachine of a wrapped driver without power = %v; want Unimplemented", err)
	}
	d := drivercall.Instrument("memcall", memdriver.New(nil))
	p, err := driver.PowerOf(ctx, "memcall", d)
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.StartMachine(ctx, &driver.StartMachineRequest{})
	if !driver.IsCode(err, driver.InvalidArgument) {
		t.Fatalf("StartMachine without a machine = %v; want the driver's InvalidArgument", err)
	}
	body := `
# HELP machinist_driver_calls_total Driver calls by provider, method and result code (OK on success).
# TYPE machinist_driver_calls_total counter
machinist_driver_calls_total{code="InvalidArgument",method="StartMachine",provider="memcall"} 1
machinist_driver_calls_total{code="Unimplemented",method="StopMachine",provider="plain"} 1
`
	if err := testutil.GatherAndCompare(metrics.Registry, strings.NewReader(body), "machinist_driver_calls_total"); err != nil {
		t.Fatal(err)
	}
}
