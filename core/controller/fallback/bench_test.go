package fallback_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/machinist-io/machinist/core/controller/fallback"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/registry"
	"github.com/machinist-io/machinist/harness/ctrltest"
	"github.com/machinist-io/machinist/internal/eventually"
	"github.com/machinist-io/machinist/providers/local"
)

// firstExhausted wraps the local driver and notes when a create first failed with
// ResourceExhausted.
type firstExhausted struct {
	driver.Driver
	mu sync.Mutex
	at time.Time
}

func (d *firstExhausted) CreateMachine(ctx context.Context, req *driver.CreateMachineRequest) (*driver.CreateMachineResponse, error) {
	resp, err := d.Driver.CreateMachine(ctx, req)
	if driver.IsCode(err, driver.ResourceExhausted) {
		d.mu.Lock()
		if d.at.IsZero() {
			d.at = time.Now()
		}
		d.mu.Unlock()
	}
	return resp, err
}

func (d *firstExhausted) first() time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.at
}

// BenchmarkTimeToRunning measures the time from the first ResourceExhausted to all replicas of
// a deployment of 5 Running, on the real API server with the local provider and the default
// ResourceExhausted retry (10 minutes):
//
//   - with-fallback: the primary zone stays out of capacity; the deployment falls back to a second
//     class.
//   - no-fallback: the same deployment without fallback classes, in a zone that refuses each
//     machine's first create only (capacity is back by the retry, and nothing else changes, as
//     in a cloud): the machines wait for their retry. This one takes 8 to 12 minutes.
//
// Run: make tools && KUBEBUILDER_ASSETS=$PWD/bin go test -run '^$' -bench TimeToRunning -benchtime 1x ./core/controller/fallback/
// Results are in docs/performance.md.
func BenchmarkTimeToRunning(b *testing.B) {
	for _, mode := range []string{"with-fallback", "no-fallback"} {
		b.Run(mode, func(b *testing.B) {
			for range b.N {
				b.ReportMetric(timeToRunning(b, mode == "with-fallback").Seconds(), "s/first-exhausted-to-running")
			}
		})
	}
}

func timeToRunning(b *testing.B, withFallback bool) time.Duration {
	b.StopTimer()
	w := newWorldIn(b, fmt.Sprintf("bench-%d", benchSeq.Add(1)))
	d, err := local.New(registry.Env{Target: w.cfg, StateDir: b.TempDir(), Log: ctrltest.Logger()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = d.Close() })
	fe := &firstExhausted{Driver: d}
	drivers := &ctrltest.Drivers{}
	drivers.Set(local.ProviderName, fe)
	if withFallback {
		w.class("zone-1", "local-1", true)
	} else {
		w.classFailing("zone-1", "local-1", 1)
	}
	w.class("zone-2", "local-2", false)
	ann := map[string]string{}
	if withFallback {
		ann[fallback.AnnotationClasses] = "zone-2"
	}
	w.deployment("pool", "zone-1", 5, ann)
	b.StartTimer()
	w.startWith(fallback.DefaultTTL, drivers)

	var first time.Time
	eventually.True(b, time.Minute, "the first create", func() bool {
		first = fe.first()
		return !first.IsZero()
	})
	class := "zone-1"
	if withFallback {
		class = "zone-2"
	}
	eventually.Explained(b, 5*time.Minute, "5 machines Running on "+class, func() (bool, string) {
		on, live, desc := w.running(class)
		return on == 5 && live == 5, desc
	})
	return time.Since(first)
}
