package poolpolicy_test

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	machinistv1alpha1 "github.com/machinist-io/machinist/core/apis/machinist/v1alpha1"
	"github.com/machinist-io/machinist/internal/eventually"
)

// TestHealthGateHoldsTheNextReplacement: with healthGate.readySeconds 3 and the pool's one surge
// machine, each new machine is created only once the one before it has been Running for 3 s.
// The machines' own timestamps (whole seconds) say when: creation of the next ≥ Running of the
// previous + 2 s (3 s less the truncation); without the gate the next follows within a second.
func TestHealthGateHoldsTheNextReplacement(t *testing.T) {
	const readySeconds = 3
	e := newEnv(t)
	p := e.pool(func(p *machinistv1alpha1.PoolPolicy) { p.Spec.Rollout.HealthGate.ReadySeconds = readySeconds })
	e.changeClass("class-b")
	eventually.Explained(t, 180*time.Second, "every machine replaced by a Running class-b machine", func() (bool, string) {
		allA, _ := e.count("class-a")
		allB, runB := e.count("class-b")
		return allA == 0 && allB == 6 && runB == 6, fmt.Sprintf("class-a %d, class-b %d (%d Running); %s", allA, allB, runB, e.progress(p))
	})
	var fresh []v1alpha1.Machine
	for _, m := range e.machines() {
		if m.Spec.Class.Name == "class-b" {
			fresh = append(fresh, m)
		}
	}
	sort.Slice(fresh, func(i, j int) bool { return fresh[i].CreationTimestamp.Before(&fresh[j].CreationTimestamp) })
	for i := 1; i < len(fresh); i++ {
		prev, next := fresh[i-1], fresh[i]
		ready := prev.Status.CurrentStatus.LastUpdateTime.Time // when it became Running (the stand-in writes nothing after)
		if gap := next.CreationTimestamp.Sub(ready); gap < (readySeconds-1)*time.Second {
			t.Errorf("%s created %s after %s became Running: want at least %ds (healthGate.readySeconds %d, less 1 s of truncation)",
				next.Name, gap, prev.Name, readySeconds-1, readySeconds)
		}
	}
}
