package poolpolicy_test

import (
	"fmt"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	machinistv1alpha1 "github.com/machinist-io/machinist/core/apis/machinist/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/fallback"
	"github.com/machinist-io/machinist/core/controller/pool"
	"github.com/machinist-io/machinist/harness/machinetest"
	"github.com/machinist-io/machinist/internal/eventually"
)

// TestFullZoneSendsItsSurgeToAFallbackClass: a pool of three zonal deployments of 2 (maxSurge
// 1, maxUnavailable 0) moves to new classes, and the new class of zone-3 is out of capacity
// (every create fails ResourceExhausted, the local provider's createError). Zone-3 lists a
// fallback class, so its new machines go there and the pool completes: at every watch event at
// most 7 machines (the pool's one surge) and at least 6 Running, zone-3's two machines on the
// fallback class, counted in its status.fallbackReplicas. Without the fallback list the
// machine on the full class fails on and holds the pool's only surge machine: the rollout
// stalls (as it would have before capacity fallback).
func TestFullZoneSendsItsSurgeToAFallbackClass(t *testing.T) {
	e := newProduct(t)
	e.localClass("old", nil)
	e.localClass("new", nil)
	e.localClass("new-full", map[string]any{"createError": map[string]any{"code": "ResourceExhausted", "message": "zone-3 is out of capacity"}})
	e.localClass("new-spare", nil)
	e.policy(nil)
	zones := map[string]string{"zone-1": "new", "zone-2": "new", "zone-3": "new-full"}
	members := map[string]*v1alpha1.MachineDeployment{}
	for z := range zones {
		members[z] = e.member(z, "old", 2, func(d *v1alpha1.MachineDeployment) {
			if z == "zone-3" {
				d.Annotations = map[string]string{fallback.AnnotationClasses: "new-spare"}
			}
		})
	}
	e.run(nil)
	eventually.Explained(t, 3*time.Minute, "6 Running machines", func() (bool, string) {
		run := 0
		for _, m := range e.machines() {
			if m.Status.CurrentStatus.Phase == v1alpha1.MachineRunning {
				run++
			}
		}
		return run == 6, fmt.Sprintf("%d Running", run)
	})

	w := machinetest.WatchMachines(t, e.c, e.env.NS, func(ms map[string]*v1alpha1.Machine) string {
		if c := machinetest.Count(ms); c.All > 7 || c.Running < 6 {
			return fmt.Sprintf("%d machines (want at most 7), %d Running (want at least 6)", c.All, c.Running)
		}
		return ""
	})
	w.Arm()
	for z, class := range zones {
		e.setClass(members[z], class)
	}
	want := map[string]string{"zone-1": "new", "zone-2": "new", "zone-3": "new-spare"}
	eventually.Explained(t, 3*time.Minute, "every zone on its new class, zone-3 on its fallback", func() (bool, string) {
		done, states := 0, ""
		for _, m := range e.machines() {
			zone := m.Labels["pool"]
			states += fmt.Sprintf(" %s=%s:%s", m.Name, m.Spec.Class.Name, m.Status.CurrentStatus.Phase)
			if m.DeletionTimestamp == nil && m.Status.CurrentStatus.Phase == v1alpha1.MachineRunning && m.Spec.Class.Name == want[zone] {
				done++
			}
		}
		return done == 6 && len(e.machines()) == 6, fmt.Sprintf("%d of 6 done:%s", done, states)
	})
	if v := w.Stop().Violations; len(v) > 0 {
		t.Fatalf("%d violations, the first: %s", len(v), v[0])
	}
	eventually.Explained(t, time.Minute, "zone-3's status.fallbackReplicas 2 and the pool complete", func() (bool, string) {
		d := &v1alpha1.MachineDeployment{}
		if err := e.c.Get(e.ctx, client.ObjectKeyFromObject(members["zone-3"]), d); err != nil {
			return false, err.Error()
		}
		p := &machinistv1alpha1.PoolPolicy{}
		if err := e.c.Get(e.ctx, client.ObjectKey{Namespace: e.env.NS, Name: "workers"}, p); err != nil {
			return false, err.Error()
		}
		var progressing string
		for _, c := range p.Status.Conditions {
			if c.Type == machinistv1alpha1.PoolProgressing {
				progressing = c.Reason
			}
		}
		return d.Status.FallbackReplicas == 2 && progressing == pool.ReasonComplete,
			fmt.Sprintf("fallbackReplicas %d, Progressing %s", d.Status.FallbackReplicas, progressing)
	})
}
