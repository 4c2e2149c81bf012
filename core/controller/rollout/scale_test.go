package rollout

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// scaledSet is a set last sized by the controller for a deployment of the given replicas.
func scaledSet(name string, replicas int32, age time.Duration, d *v1alpha1.MachineDeployment) *v1alpha1.MachineSet {
	ms := set(name, replicas, age)
	setReplicaAnnotations(ms, d.Spec.Replicas, d.Spec.Replicas+limitsOf(d, nil, nil).annotationSurge(d))
	return ms
}

// applyWrites does what scale's writes do to the first n sets: size and annotate them.
func applyWrites(d *v1alpha1.MachineDeployment, order []*v1alpha1.MachineSet, sizes map[types.UID]int32, n int) {
	for _, ms := range order[:n] {
		ms.Spec.Replicas = sizes[ms.UID]
		setReplicaAnnotations(ms, d.Spec.Replicas, d.Spec.Replicas+limitsOf(d, nil, nil).annotationSurge(d))
	}
}

// TestProportionalScaleDownFinishesAPartialPass is the flake of
// TestPauseRevisionHistoryAndProportionalScaling made deterministic: 8 → 4 replicas (maxSurge
// 2, maxUnavailable 0) while the new set never becomes available. The single pass gives new 4
// and old 2; when only the old set's write lands (the new set's conflicts with its MachineSet
// controller's status write), the next pass must shrink only the new set, not the old one again.
func TestProportionalScaleDownFinishesAPartialPass(t *testing.T) {
	before := deployment(8, ptr.To(intstr.FromInt32(2)), ptr.To(intstr.FromInt32(0)))
	d := before.DeepCopy()
	d.Spec.Replicas = 4
	oldMS := scaledSet("b", 4, 2*time.Hour, before)
	newMS := scaledSet("stuck", 6, time.Hour, before)
	ro := scaling{newPlanner(Input{Deployment: d})}

	order, sizes := ro.proportionalSizes(newMS, []*v1alpha1.MachineSet{oldMS})
	if len(order) != 2 || order[0] != oldMS || order[1] != newMS {
		t.Fatalf("write order %v, want the old set first", order)
	}
	if sizes[oldMS.UID] != 2 || sizes[newMS.UID] != 4 {
		t.Fatalf("single pass: old %d new %d, want 2 and 4", sizes[oldMS.UID], sizes[newMS.UID])
	}

	applyWrites(d, order, sizes, 1) // the new set's write failed
	_, sizes = ro.proportionalSizes(newMS, []*v1alpha1.MachineSet{oldMS})
	if sizes[oldMS.UID] != 2 || sizes[newMS.UID] != 4 {
		t.Fatalf("after a partial pass: old %d new %d, want 2 and 4 (the old set shrunk twice)", sizes[oldMS.UID], sizes[newMS.UID])
	}
}

// TestProportionalScaleDownTakesMarkedMachinesOnce: a scaler lowered replicas 8 → 4 (maxSurge 2)
// and marked one machine of the old set for deletion. The old set gives its marked machine and
// then its share of the rest. Once the old set's write landed, its marked machine (still there
// until the MachineSet controller deletes it) must not be taken a second time.
func TestProportionalScaleDownTakesMarkedMachinesOnce(t *testing.T) {
	before := deployment(8, ptr.To(intstr.FromInt32(2)), ptr.To(intstr.FromInt32(0)))
	d := before.DeepCopy()
	d.Spec.Replicas = 4
	oldMS := scaledSet("old", 4, 2*time.Hour, before)
	newMS := scaledSet("new", 6, time.Hour, before)
	marked := &v1alpha1.Machine{}
	marked.Annotations = map[string]string{v1alpha1.AnnotationMachinePriority: v1alpha1.DeletionCandidateMachinePriority}
	ro := scaling{newPlanner(Input{Deployment: d, Machines: map[types.UID][]*v1alpha1.Machine{oldMS.UID: {marked, {}, {}, {}}}})}

	order, sizes := ro.proportionalSizes(newMS, []*v1alpha1.MachineSet{oldMS})
	if sizes[oldMS.UID] != 2 || sizes[newMS.UID] != 4 {
		t.Fatalf("single pass: old %d new %d, want 2 and 4", sizes[oldMS.UID], sizes[newMS.UID])
	}
	applyWrites(d, order, sizes, 1)
	_, sizes = ro.proportionalSizes(newMS, []*v1alpha1.MachineSet{oldMS})
	if sizes[oldMS.UID] != 2 || sizes[newMS.UID] != 4 {
		t.Fatalf("after a partial pass: old %d new %d, want 2 and 4", sizes[oldMS.UID], sizes[newMS.UID])
	}
}

// TestProportionalScalingConvergesAfterAnyPartialPass stops the first pass after every possible
// number of writes (and, with three active sets, the second pass too), then lets the next pass
// finish. The result always sums to replicas + maxSurge, moves every set only in the scaling
// direction (growth goes to the new set only; when a pause keeps the new set at 0, to the active
// old sets, the new set staying at 0), and is at most one machine per set away from what a
// single pass gives; with two active sets, exactly that.
func TestProportionalScalingConvergesAfterAnyPartialPass(t *testing.T) {
	type scenario struct {
		sizes    []int32 // oldest first; the last is the new set
		from, to int32
		surge    int32
		paused   bool
	}
	var scenarios []scenario
	for _, sizes := range [][]int32{{4, 6}, {1, 9}, {5, 5}, {7, 2}, {3, 3, 4}, {6, 3, 1}, {1, 1, 8}, {2, 5, 3},
		{4, 2, 0}, {3, 3, 0}, {1, 6, 0}, {2, 5, 3, 0}, {1, 1, 1, 0}} {
		var total int32
		for _, s := range sizes {
			total += s
		}
		// An inactive new set is grown by the rolling pass, not here (TestRollingScaleUpLeavesOldSetsAlone):
		// only a paused deployment sizes the sets to replicas + maxSurge in this pass.
		pauses := []bool{false, true}
		if sizes[len(sizes)-1] == 0 {
			pauses = []bool{true}
		}
		for _, surge := range []int32{0, 1, 2} {
			from := total - surge
			if from <= 0 {
				continue
			}
			for _, to := range []int32{1, from / 2, from - 1, from + 1, from*2 + 3} {
				if to <= 0 || to == from {
					continue
				}
				for _, paused := range pauses {
					scenarios = append(scenarios, scenario{sizes: sizes, from: from, to: to, surge: surge, paused: paused})
				}
			}
		}
	}
	build := func(sc scenario) (*v1alpha1.MachineDeployment, scaling, []*v1alpha1.MachineSet, *v1alpha1.MachineSet) {
		before := deployment(sc.from, ptr.To(intstr.FromInt32(sc.surge)), ptr.To(intstr.FromInt32(0)))
		before.Spec.Paused = sc.paused
		d := before.DeepCopy()
		d.Spec.Replicas = sc.to
		var sets []*v1alpha1.MachineSet
		for i, s := range sc.sizes {
			sets = append(sets, scaledSet(fmt.Sprintf("s%d", i), s, time.Duration(len(sc.sizes)-i)*time.Hour, before))
		}
		return d, scaling{newPlanner(Input{Deployment: d})}, sets[:len(sets)-1], sets[len(sets)-1]
	}
	for _, sc := range scenarios {
		_, ro, old, newMS := build(sc)
		_, single := ro.proportionalSizes(newMS, old)
		allowed := sc.to + sc.surge
		n := len(activeSets(append(append([]*v1alpha1.MachineSet{}, old...), newMS))) // writes per pass
		newInactive := newMS.Spec.Replicas == 0
		// Every failure point of the first pass, and of the second when there is one left.
		for k1 := range n {
			for k2 := range n {
				name := fmt.Sprintf("sizes %v, %d → %d, surge %d, paused %v, pass 1 stops after %d writes, pass 2 after %d", sc.sizes, sc.from, sc.to, sc.surge, sc.paused, k1, k2)
				d, ro, old, newMS := build(sc)
				all := append(append([]*v1alpha1.MachineSet{}, old...), newMS)
				order, sizes := ro.proportionalSizes(newMS, old)
				applyWrites(d, order, sizes, k1)
				order, sizes = ro.proportionalSizes(newMS, old)
				applyWrites(d, order, sizes, min(k2, len(order)))
				order, sizes = ro.proportionalSizes(newMS, old)
				applyWrites(d, order, sizes, len(order))

				var total int32
				for i, ms := range all {
					got, orig, want := ms.Spec.Replicas, sc.sizes[i], single[ms.UID]
					total += got
					if sc.to < sc.from && got > orig {
						t.Errorf("%s: set %d grew %d → %d in a scale-down", name, i, orig, got)
					}
					if sc.to > sc.from && got < orig {
						t.Errorf("%s: set %d shrank %d → %d in a scale-up", name, i, orig, got)
					}
					if sc.to > sc.from && !newInactive && ms != newMS && got != orig {
						t.Errorf("%s: old set %d resized %d → %d in a scale-up", name, i, orig, got)
					}
					if newInactive && ms == newMS && got != 0 {
						t.Errorf("%s: the paused deployment's inactive new set grew to %d", name, got)
					}
					if diff := got - want; diff > 1 || diff < -1 || (n == 2 && diff != 0) {
						t.Errorf("%s: set %d got %d, a single pass gives %d", name, i, got, want)
					}
				}
				if total != allowed {
					t.Errorf("%s: %d replicas in total, want %d", name, total, allowed)
				}
			}
		}
	}
}

// TestPausedScaleUpGrowsTheActiveSets: a deployment paused mid-rollout whose new set has no
// replicas (here a rollback to the template of an emptied set) and two old sets holding
// machines is scaled 4 → 8 (maxSurge 2). Nothing rolls out while paused, so the new set stays
// at 0 and the active sets share the 4 added replicas in proportion to their sizes: 4 and 2
// become 7 and 3 (10 = replicas + maxSurge in total; the larger set takes the rounding unit).
// A pass that stops after the first write is finished by the next one.
func TestPausedScaleUpGrowsTheActiveSets(t *testing.T) {
	before := deployment(4, ptr.To(intstr.FromInt32(2)), ptr.To(intstr.FromInt32(0)))
	before.Spec.Paused = true
	d := before.DeepCopy()
	d.Spec.Replicas = 8
	newMS := scaledSet("a", 0, 3*time.Hour, before)
	b := scaledSet("b", 4, 2*time.Hour, before)
	stuck := scaledSet("stuck", 2, time.Hour, before)
	ro := scaling{newPlanner(Input{Deployment: d})}

	order, sizes := ro.proportionalSizes(newMS, []*v1alpha1.MachineSet{b, stuck})
	if len(order) != 2 || order[0] != b || order[1] != stuck {
		t.Fatalf("write order %v, want the two active old sets, oldest first", order)
	}
	if sizes[b.UID] != 7 || sizes[stuck.UID] != 3 {
		t.Fatalf("b %d stuck %d, want 7 and 3", sizes[b.UID], sizes[stuck.UID])
	}

	applyWrites(d, order, sizes, 1) // the stuck set's write failed
	order, sizes = ro.proportionalSizes(newMS, []*v1alpha1.MachineSet{b, stuck})
	applyWrites(d, order, sizes, len(order))
	if b.Spec.Replicas != 7 || stuck.Spec.Replicas != 3 || newMS.Spec.Replicas != 0 {
		t.Fatalf("after a partial pass: b %d stuck %d new %d, want 7, 3 and 0", b.Spec.Replicas, stuck.Spec.Replicas, newMS.Spec.Replicas)
	}
	// Settled: another pass changes nothing.
	_, sizes = ro.proportionalSizes(newMS, []*v1alpha1.MachineSet{b, stuck})
	if sizes[b.UID] != 7 || sizes[stuck.UID] != 3 {
		t.Fatalf("a settled pass resized: b %d stuck %d", sizes[b.UID], sizes[stuck.UID])
	}
}

// TestRollingScaleUpLeavesOldSetsAlone: the same sets without the pause. The rolling pass grows
// the new set within maxSurge even from 0, so the additions are left to it and the old templates
// do not grow (MCM #754): the scaling pass only records the new replicas on the old sets.
func TestRollingScaleUpLeavesOldSetsAlone(t *testing.T) {
	before := deployment(4, ptr.To(intstr.FromInt32(2)), ptr.To(intstr.FromInt32(0)))
	d := before.DeepCopy()
	d.Spec.Replicas = 8
	newMS := scaledSet("a", 0, 3*time.Hour, before)
	b := scaledSet("b", 4, 2*time.Hour, before)
	stuck := scaledSet("stuck", 2, time.Hour, before)
	ro := scaling{newPlanner(Input{Deployment: d})}

	order, sizes := ro.proportionalSizes(newMS, []*v1alpha1.MachineSet{b, stuck})
	if len(order) != 2 || sizes[b.UID] != 4 || sizes[stuck.UID] != 2 {
		t.Fatalf("old sets resized: %d writes, b %d stuck %d, want b 4 and stuck 2", len(order), sizes[b.UID], sizes[stuck.UID])
	}
	applyWrites(d, order, sizes, len(order))
	if got := ro.newSetReplicas([]*v1alpha1.MachineSet{b, stuck, newMS}, newMS); got != 4 {
		t.Fatalf("the rolling pass grows the new set to %d, want 4", got)
	}
}

// TestPoolScaleDownPrefersOutdatedMachines: a scaler lowers a rolling deployment 6 → 4 (maxSurge
// 1) with old 4 and new 3. On its own the deployment shrinks both sets in proportion (old 3,
// new 2); governed by a pool it takes the outdated machines first (old 2, new 3), so what the
// scaler removed is not replaced by the rollout later.
func TestPoolScaleDownPrefersOutdatedMachines(t *testing.T) {
	before := deployment(6, ptr.To(intstr.FromInt32(1)), ptr.To(intstr.FromInt32(0)))
	d := before.DeepCopy()
	d.Spec.Replicas = 4
	for _, c := range []struct {
		name     string
		pool     *PoolGates
		old, cur int32
	}{
		{"own budget: proportional", nil, 3, 2},
		{"pool: outdated first", &PoolGates{From: "PoolPolicy ns/pool"}, 2, 3},
	} {
		oldMS := scaledSet("old", 4, 2*time.Hour, before)
		newMS := scaledSet("new", 3, time.Hour, before)
		ro := scaling{newPlanner(Input{Deployment: d, Pool: c.pool})}
		_, sizes := ro.proportionalSizes(newMS, []*v1alpha1.MachineSet{oldMS})
		if sizes[oldMS.UID] != c.old || sizes[newMS.UID] != c.cur {
			t.Errorf("%s: old %d new %d, want %d and %d", c.name, sizes[oldMS.UID], sizes[newMS.UID], c.old, c.cur)
		}
	}
}
