package mcmcompat_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/standby"
	"github.com/machinist-io/machinist/internal/eventually"
)

// TestHandoverWithStandbyMachines plays an MCM period between two machinist runs of a deployment
// with standby machines, on both CRD sets (docs/migrating-from-mcm.md, "What MCM sees of standby
// machines").
func TestHandoverWithStandbyMachines(t *testing.T) {
	t.Run("machinist-crds", func(t *testing.T) { standbyHandover(t, machinistCRDs(t)) })
	t.Run("mcm-shaped-crds", func(t *testing.T) { standbyHandover(t, mcmShapedCRDs(t)) })
}

// standbyHandover:
//
//  1. machinist keeps standby 2 for a deployment of 0 until both machines are Stopped: 2 creates,
//     2 stops, no start.
//  2. machinist stops. MCM's period, as the doc says MCM behaves: the stopped machines' nodes are
//     gone, so its health check marks them Unknown and (disableHealthTimeout) leaves them; a
//     scale-up to 1 makes it create a machine in the deployment's set, claiming nothing.
//     One pool machine was claimed by the set when machinist stopped, not started yet: MCM gives
//     it no StartMachine, its health timeout applies again (the claim gave it the template's),
//     it fails and MCM's set deletes it and creates a replacement.
//  3. machinist takes back over: MCM's two machines become Running replicas; the pool keeps the
//     unclaimed machine, Stopped, neither started, failed nor deleted, and refills with one new
//     machine; the claimed one's deletion is finished. Driver calls: the creates of MCM's two
//     machines and of the refill, the refill's stop, the claimed one's delete; no start.
func standbyHandover(t *testing.T, w *world) {
	w.class("a", nil)
	d := w.deployment("pool", "a", 0, map[string]string{"name": "pool"})
	d.Annotations = map[string]string{standby.Annotation: "2"}
	w.create(d)

	// 1. The pool.
	w.start()
	pool := waitPool(w, d.Name, 2, 2*time.Minute)
	if c, s, st := w.drv.total(w.drv.creates), w.drv.total(w.drv.stops), w.drv.total(w.drv.starts); c != 2 || st != 0 {
		t.Fatalf("making the pool: %d creates, %d stops, %d starts; want 2 creates, no start", c, s, st)
	}
	sets := w.sets()
	if len(sets) != 1 || sets[0].Spec.Replicas != 0 {
		t.Fatalf("machine sets %v: want the deployment's one set at 0", len(sets))
	}
	set := sets[0]

	// 2. MCM's period.
	w.stopManager()
	creates0, stops0 := w.drv.total(w.drv.creates), w.drv.total(w.drv.stops)
	for _, name := range pool {
		m := &v1alpha1.Machine{}
		if err := w.c.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: name}, m); err != nil {
			t.Fatal(err)
		}
		if m.Spec.MachineConfiguration == nil || m.Spec.MachineConfiguration.DisableHealthTimeout == nil || !*m.Spec.MachineConfiguration.DisableHealthTimeout {
			t.Fatalf("standby machine %s without spec.disableHealthTimeout: MCM would fail it", name)
		}
		if n := w.node(m.Labels[v1alpha1.LabelNode]); n != nil {
			t.Fatalf("stopped standby machine %s still has node %s", name, n.Name)
		}
		m.Status.CurrentStatus = v1alpha1.CurrentStatus{Phase: v1alpha1.MachineUnknown, LastUpdateTime: m.Status.CurrentStatus.LastUpdateTime}
		m.Status.LastOperation.Description = "Machine " + name + " is unhealthy - changing MachineState to Unknown. Node conditions: []"
		if err := w.c.Status().Update(w.ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	update(w, d, func(d *v1alpha1.MachineDeployment) { d.Spec.Replicas = 2 })
	update(w, &set, func(s *v1alpha1.MachineSet) { s.Spec.Replicas = 2 })
	claimed, kept := pool[0], pool[1:]
	m := &v1alpha1.Machine{}
	if err := w.c.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: claimed}, m); err != nil {
		t.Fatal(err)
	}
	c := standby.Claim(m, &set)
	if err := w.c.Update(w.ctx, c); err != nil {
		t.Fatal(err)
	}
	c.Status.CurrentStatus.Phase = v1alpha1.MachineFailed
	c.Status.LastOperation.Description = "Machine " + claimed + " health checks failed for the health timeout"
	if err := w.c.Status().Update(w.ctx, c); err != nil {
		t.Fatal(err)
	}
	if err := w.c.Delete(w.ctx, c); err != nil { // MCM's set deletes its Failed machine; the finalizer holds it
		t.Fatal(err)
	}
	const mcms, replacement = "pool-by-mcm-00001", "pool-by-mcm-00002"
	w.mcmMachine(&set, mcms, v1alpha1.MachinePending, "")
	w.mcmMachine(&set, replacement, v1alpha1.MachinePending, "")

	// 3. machinist takes back over.
	w.start()
	eventually.Explained(w.t, 2*time.Minute, "MCM's machines Running with a node, the claimed one gone", func() (bool, string) {
		running := 0
		var desc []string
		for _, m := range w.machines() {
			desc = append(desc, m.Name+"="+string(m.Status.CurrentStatus.Phase))
			if (m.Name == mcms || m.Name == replacement) && m.Status.CurrentStatus.Phase == v1alpha1.MachineRunning && w.node(m.Labels[v1alpha1.LabelNode]) != nil {
				running++
			}
			if m.Name == claimed {
				return false, strings.Join(desc, " ")
			}
		}
		return running == 2, strings.Join(desc, " ")
	})
	got := waitPool(w, d.Name, 2, 2*time.Minute)
	if !slices.Contains(got, kept[0]) {
		t.Fatalf("pool %v after the handover: %s, not claimed, must stay in it", got, kept[0])
	}
	refill := slices.DeleteFunc(slices.Clone(got), func(n string) bool { return n == kept[0] })
	var all []string
	for _, m := range w.machines() {
		all = append(all, m.Name)
		if m.DeletionTimestamp != nil || m.Status.CurrentStatus.Phase == v1alpha1.MachineFailed {
			t.Errorf("machine %s deleted or failed: %s", m.Name, m.Status.CurrentStatus.Phase)
		}
	}
	if want := []string{kept[0], refill[0], mcms, replacement}; !sameSet(all, want) {
		t.Fatalf("machines %v, want %v", all, want)
	}
	creates, stops := w.drv.total(w.drv.creates)-creates0, w.drv.total(w.drv.stops)-stops0
	if creates != 3 || w.drv.createsOf(mcms) != 1 || w.drv.createsOf(replacement) != 1 || w.drv.createsOf(refill[0]) != 1 ||
		stops != 1 || w.drv.total(w.drv.starts) != 0 || w.drv.total(w.drv.deletes) != 1 || w.drv.count0(w.drv.deletes, claimed) != 1 {
		t.Fatalf("after the handover: %d creates, %d stops, %d starts, deletes %v; want a create each of %s, %s and the refill %s, "+
			"its stop, no start, one delete of %s", creates, stops, w.drv.total(w.drv.starts), w.drv.snapshot(w.drv.deletes), mcms, replacement, refill[0], claimed)
	}
}

// waitPool waits until deployment's pool is n machines, all Stopped, and returns their names.
func waitPool(w *world, deployment string, n int, timeout time.Duration) []string {
	w.t.Helper()
	var pool []string
	eventually.Explained(w.t, timeout, fmt.Sprintf("%d stopped standby machines", n), func() (bool, string) {
		pool = nil
		var desc []string
		ok := true
		for _, m := range w.machines() {
			mem, is := standby.MemberOf(&m, deployment)
			if !is {
				continue
			}
			pool = append(pool, m.Name)
			desc = append(desc, m.Name+"="+string(mem.State))
			ok = ok && mem.State == standby.Stopped && !mem.Deleting
		}
		return ok && len(pool) == n, strings.Join(desc, " ")
	})
	return pool
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
