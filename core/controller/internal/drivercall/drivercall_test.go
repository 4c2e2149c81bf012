package drivercall_test

import (
	"context"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/machinist-io/machinist/core/controller/internal/drivercall"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/drivertest/memdriver"
)

type plain struct{ driver.UnimplementedDriver }

// Wrapping neither adds nor hides the power capability, and stops and starts are measured
// (as increments: the registry is the process's, so -count=N runs see earlier runs' counts).
func TestWrapperForwardsThePowerCapability(t *testing.T) {
	ctx := context.Background()
	stops, starts := calls(t, "plain", "StopMachine", "Unimplemented"), calls(t, "memcall", "StartMachine", "InvalidArgument")
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
	if got := calls(t, "plain", "StopMachine", "Unimplemented") - stops; got != 1 {
		t.Errorf("StopMachine of plain counted %v times, want 1", got)
	}
	if got := calls(t, "memcall", "StartMachine", "InvalidArgument") - starts; got != 1 {
		t.Errorf("StartMachine of memcall counted %v times, want 1", got)
	}
}

// calls reads machinist_driver_calls_total for one provider, method and code (0 when absent).
func calls(t *testing.T, provider, method, code string) float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"provider": provider, "method": method, "code": code}
	for _, f := range families {
		if f.GetName() != "machinist_driver_calls_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			match := 0
			for _, l := range m.GetLabel() {
				if want[l.GetName()] == l.GetValue() {
					match++
				}
			}
			if match == len(want) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
