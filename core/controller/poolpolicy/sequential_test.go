package poolpolicy_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	machinistv1alpha1 "github.com/machinist-io/machinist/core/apis/machinist/v1alpha1"
	"github.com/machinist-io/machinist/harness/machinetest"
	"github.com/machinist-io/machinist/internal/eventually"
)

// TestSequentialPoolRollsOneDeploymentAtATime: a Sequential pool (ordered by name) changes class:
// at no watch event do two zonal deployments have machines of both classes (terminating ones
// included), the zones start in name order, and all end on the new class.
func TestSequentialPoolRollsOneDeploymentAtATime(t *testing.T) {
	e := newEnv(t)
	p := e.pool(func(p *machinistv1alpha1.PoolPolicy) { p.Spec.Rollout.Order = machinistv1alpha1.OrderSequential })
	var started []string // zones in the order their first class-b machine appeared
	w := machinetest.WatchMachines(t, e.c, e.ns, func(ms map[string]*v1alpha1.Machine) string {
		classes := map[string]map[string]bool{} // zone → classes present
		for _, m := range ms {
			z := m.Labels["pool"]
			if classes[z] == nil {
				classes[z] = map[string]bool{}
			}
			classes[z][m.Spec.Class.Name] = true
		}
		var mixed []string
		for _, z := range zones {
			if classes[z]["class-b"] && !slices.Contains(started, z) {
				started = append(started, z)
			}
			if classes[z]["class-a"] && classes[z]["class-b"] {
				mixed = append(mixed, z)
			}
		}
		if len(mixed) > 1 {
			return fmt.Sprintf("deployments %v roll out at once: %s", mixed, machinetest.Describe(ms))
		}
		return ""
	})
	w.Arm()
	e.changeClass("class-b")
	eventually.Explained(t, 180*time.Second, "every machine replaced by a Running class-b machine", func() (bool, string) {
		allA, _ := e.count("class-a")
		allB, runB := e.count("class-b")
		return allA == 0 && allB == 6 && runB == 6, fmt.Sprintf("class-a %d, class-b %d (%d Running); %s", allA, allB, runB, e.progress(p))
	})
	r := w.Stop()
	if len(r.Violations) > 0 {
		t.Fatalf("Sequential was broken %d times, first: %s", len(r.Violations), r.Violations[0])
	}
	if !slices.Equal(started, zones) {
		t.Errorf("zones started in the order %v, want %v (by name)", started, zones)
	}
	if r.MaxAll > 7 {
		t.Errorf("at most %d machines: want the pool's 6 + maxSurge 1", r.MaxAll)
	}
}
