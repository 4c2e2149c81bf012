package machine_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/drivertest/memdriver"
	"github.com/machinist-io/machinist/harness/ctrltest"
	"github.com/machinist-io/machinist/internal/eventually"
)

// requestIDDriver fails every CreateMachine with Unavailable and a message carrying a new
// request ID each time, like real clouds do.
type requestIDDriver struct {
	driver.Driver
	n atomic.Int32
}

func (d *requestIDDriver) CreateMachine(context.Context, *driver.CreateMachineRequest) (*driver.CreateMachineResponse, error) {
	n := d.n.Add(1)
	return nil, driver.Errorf(driver.Unavailable, "compute API busy, try again (request req-%08x-%04d, trace %016x)", n*7919, n, uint64(n)*0x9e3779b97f4a7c15)
}

// TestStatusWritesDeduplicated: retries that fail the same way (with changing request IDs) do
// not rewrite the machine's status.
func TestStatusWritesDeduplicated(t *testing.T) {
	e := ctrltest.NewEnv(t)
	cloud := memdriver.NewCloud()
	drv := &requestIDDriver{Driver: memdriver.New(cloud)}
	e.Drivers.Set(memdriver.ProviderName, drv)
	e.Class("mem", "mem", memSpec(e), "")
	e.StartControllers(ctrltest.FastOptions(), false, nil)

	name := e.Name("busy")
	e.Machine(name, "mem")
	m := e.WaitPhase(name, v1alpha1.MachineCrashLoopBackOff, 30*time.Second)

	// Four more attempts: the three before the last have ended, status writes included (a
	// machine's reconciles never overlap). Each of them would have changed the machine.
	before := drv.n.Load()
	eventually.True(t, 30*time.Second, "three more failed attempts", func() bool { return drv.n.Load() >= before+4 })
	if got := e.Get(name); got.ResourceVersion != m.ResourceVersion {
		t.Fatalf("the status was written again for identical failures (differing only in request IDs): %s", ctrltest.Describe(got))
	}
}

// TestMetrics: driver calls are counted by provider, method and code, and machines by phase.
func TestMetrics(t *testing.T) {
	e := ctrltest.NewEnv(t)
	cloud := memdriver.NewCloud()
	e.Drivers.Set(memdriver.ProviderName, memdriver.New(cloud))
	e.Class("mem", "mem", memSpec(e), "")
	e.StartControllers(ctrltest.FastOptions(), false, nil)
	cloud.Inject(memdriver.MethodCreate, memdriver.Fault{Code: driver.ResourceExhausted, Times: 1})
	name := e.Name("m")
	e.Machine(name, "mem")
	e.WaitPhase(name, v1alpha1.MachineAvailable, 30*time.Second)

	eventually.True(t, 10*time.Second, "metrics", func() bool {
		fams, err := metrics.Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		calls := value(fams, "machinist_driver_calls_total", map[string]string{"provider": "mem", "method": "CreateMachine", "code": "OK"})
		exhausted := value(fams, "machinist_driver_calls_total", map[string]string{"provider": "mem", "method": "CreateMachine", "code": "ResourceExhausted"})
		latency := value(fams, "machinist_driver_call_duration_seconds", map[string]string{"provider": "mem", "method": "GetMachineStatus"})
		available := value(fams, "machinist_machines", map[string]string{"namespace": e.NS, "phase": "Available"})
		return calls >= 1 && exhausted >= 1 && latency >= 2 && available == 1
	})
}

// value sums the samples (counter, gauge, or histogram count) of a metric whose labels include
// want.
func value(fams []*dto.MetricFamily, name string, want map[string]string) float64 {
	sum := 0.0
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	metric:
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue metric
				}
			}
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			case m.Histogram != nil:
				sum += float64(m.Histogram.GetSampleCount())
			default:
				panic(fmt.Sprintf("metric %s of unexpected type", name))
			}
		}
	}
	return sum
}
