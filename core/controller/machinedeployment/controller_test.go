package machinedeployment_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/machineset/machinesettest"
	"github.com/machinist-io/machinist/harness/machinetest"
	"github.com/machinist-io/machinist/internal/eventually"
)

func isConflict(err error) bool { return apierrors.IsConflict(err) }

// TestRollingUpdateStaysWithinBounds changes the class of a running deployment and watches every
// machine event: there are never more than replicas+maxSurge machines (terminating ones count:
// their VMs still exist) and never fewer than replicas-maxUnavailable Running machines.
func TestRollingUpdateStaysWithinBounds(t *testing.T) {
	e := newEnv(t)
	machinesettest.Start(t, e.c, e.ns, 150*time.Millisecond, 300*time.Millisecond)
	e.startControllers()
	const replicas, surge, unavailable = 5, 2, 1
	d := e.deployment("roll", replicas, "class-a", surge, unavailable)
	e.create(d)
	eventually.Explained(e.t, 30*time.Second, "5 Running machines of class-a", func() (bool, string) {
		all, run := running(e.machines(), "class-a")
		return all == replicas && run == replicas, fmt.Sprintf("%d machines, %d Running", all, run)
	})

	w := machinetest.WatchMachines(t, e.c, e.ns, func(ms map[string]*v1alpha1.Machine) string {
		c := machinetest.Count(ms)
		switch {
		case c.All > replicas+surge:
			return fmt.Sprintf("%d machines > replicas+maxSurge %d", c.All, replicas+surge)
		case c.Running < replicas-unavailable:
			return fmt.Sprintf("%d Running < replicas-maxUnavailable %d", c.Running, replicas-unavailable)
		}
		return ""
	})
	w.Arm()
	update(e, d, func(d *v1alpha1.MachineDeployment) { d.Spec.Template.Spec.Class.Name = "class-b" })

	eventually.Explained(e.t, 60*time.Second, "every machine replaced by a Running class-b machine", func() (bool, string) {
		ms := e.machines()
		allA, _ := running(ms, "class-a")
		allB, runB := running(ms, "class-b")
		return allA == 0 && allB == replicas && runB == replicas, fmt.Sprintf("class-a %d, class-b %d (%d Running)", allA, allB, runB)
	})
	r := w.Stop()
	if len(r.Violations) > 0 {
		t.Fatalf("bounds violated %d times, first: %s", len(r.Violations), r.Violations[0])
	}
	t.Logf("during the rollout: at most %d machines (limit %d), at least %d Running (limit %d)", r.MaxAll, replicas+surge, r.MinRunning, replicas-unavailable)
	if r.MaxAll <= replicas {
		t.Errorf("the rollout never surged (max %d machines): the watch saw nothing of it", r.MaxAll)
	}

	eventually.Explained(e.t, 20*time.Second, "a complete status", func() (bool, string) {
		got := &v1alpha1.MachineDeployment{}
		if err := e.c.Get(context.Background(), client.ObjectKeyFromObject(d), got); err != nil {
			return false, err.Error()
		}
		st := got.Status
		prog := condition(got, v1alpha1.MachineDeploymentProgressing)
		avail := condition(got, v1alpha1.MachineDeploymentAvailable)
		ok := st.UpdatedReplicas == replicas && st.AvailableReplicas == replicas && st.Replicas == replicas &&
			prog != nil && prog.Reason == "NewMachineSetAvailable" && avail != nil && avail.Status == v1alpha1.ConditionTrue
		return ok, fmt.Sprintf("status %+v", st)
	})
	sets := e.sets()
	if len(sets) != 2 {
		t.Fatalf("want the new and one old machine set, got %d", len(sets))
	}
	for _, ms := range sets {
		rev := ms.Annotations[v1alpha1.AnnotationRevision]
		switch ms.Spec.Template.Spec.Class.Name {
		case "class-a":
			if ms.Spec.Replicas != 0 || rev != "1" {
				t.Errorf("old set %s: replicas %d revision %s", ms.Name, ms.Spec.Replicas, rev)
			}
		case "class-b":
			if ms.Spec.Replicas != replicas || rev != "2" {
				t.Errorf("new set %s: replicas %d revision %s", ms.Name, ms.Spec.Replicas, rev)
			}
		}
		// As MCM writes a set: template labels = the deployment's + the hash, no spec.machineClass.
		if _, ok := ms.Spec.Template.Labels[v1alpha1.LabelMachineDeploymentName]; ok || len(ms.Spec.Template.Labels) != 2 || ms.Spec.Template.Labels["pool"] != "roll" {
			t.Errorf("set %s template labels %v: want the deployment's and the hash only", ms.Name, ms.Spec.Template.Labels)
		}
		if ms.Spec.MachineClass != (v1alpha1.ClassSpec{}) {
			t.Errorf("set %s has spec.machineClass %+v: MCM writes none", ms.Name, ms.Spec.MachineClass)
		}
	}
}

func condition(d *v1alpha1.MachineDeployment, t v1alpha1.MachineDeploymentConditionType) *v1alpha1.MachineDeploymentCondition {
	for i := range d.Status.Conditions {
		if d.Status.Conditions[i].Type == t {
			return &d.Status.Conditions[i]
		}
	}
	return nil
}

// TestScaleHonoursPriority scales 3 → 5 → 1: the survivor is the machine with the highest
// priority number, and machines with priority 1 go first.
func TestScaleHonoursPriority(t *testing.T) {
	e := newEnv(t)
	machinesettest.Start(t, e.c, e.ns, 50*time.Millisecond, 100*time.Millisecond)
	e.startControllers()
	d := e.deployment("scale", 3, "c", 1, 0)
	e.create(d)
	wantRunning := func(n int) {
		eventually.Explained(e.t, 30*time.Second, fmt.Sprintf("%d Running machines", n), func() (bool, string) {
			all, run := running(e.machines(), "")
			return all == n && run == n, fmt.Sprintf("%d machines, %d Running", all, run)
		})
	}
	wantRunning(3)
	update(e, d, func(d *v1alpha1.MachineDeployment) { d.Spec.Replicas = 5 })
	wantRunning(5)

	ms := e.machines()
	sort.Slice(ms, func(i, j int) bool {
		return ms[i].CreationTimestamp.Before(&ms[j].CreationTimestamp) || ms[i].Name < ms[j].Name
	})
	keep := ms[0].Name // the oldest: by age alone it would be deleted first
	first := ms[4].Name
	for _, m := range ms {
		if m.Annotations[v1alpha1.AnnotationMachinePriority] != v1alpha1.DefaultMachinePriority {
			t.Fatalf("machine %s created without the default priority: %v", m.Name, m.Annotations)
		}
		if _, ok := m.Labels[v1alpha1.LabelMachineDeploymentName]; ok {
			t.Fatalf("machine %s has label name, which its template lacks: %v", m.Name, m.Labels)
		}
	}
	setPriority := func(name, p string) {
		update(e, &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns}}, func(m *v1alpha1.Machine) {
			m.Annotations[v1alpha1.AnnotationMachinePriority] = p
		})
	}
	setPriority(keep, "5")
	setPriority(first, "1")

	// 5 → 4: exactly the priority-1 machine goes, although it is the newest.
	w := machinetest.WatchMachines(t, e.c, e.ns, func(ms map[string]*v1alpha1.Machine) string {
		for name, m := range ms {
			if m.DeletionTimestamp != nil && name != first {
				return fmt.Sprintf("%s deleted instead of the priority-1 machine %s", name, first)
			}
		}
		return ""
	})
	w.Arm()
	update(e, d, func(d *v1alpha1.MachineDeployment) { d.Spec.Replicas = 4 })
	wantRunning(4)
	if v := w.Stop().Violations; len(v) > 0 {
		t.Fatal(v[0])
	}
	for _, m := range e.machines() {
		if m.Name == first {
			t.Fatalf("the priority-1 machine %s survived", first)
		}
	}
	// 4 → 1: the priority-5 machine survives, although it is the oldest.
	update(e, d, func(d *v1alpha1.MachineDeployment) { d.Spec.Replicas = 1 })
	wantRunning(1)
	if got := e.machines()[0].Name; got != keep {
		t.Fatalf("survivor %s, want %s (priority 5)", got, keep)
	}
}

// TestTriggerDeletionDeletesExactlyTheNamedMachines plays the Cluster Autoscaler: one update of
// the deployment names two machines in the trigger-deletion annotation and lowers replicas by
// two. Exactly those two machines go, no other machine is touched, none is created, and the
// annotation is pruned once they are gone.
func TestTriggerDeletionDeletesExactlyTheNamedMachines(t *testing.T) {
	e := newEnv(t)
	d, ms := runningDeployment(e, "ca", 5)
	// Pick the two youngest-looking by name order: nothing about them makes them first by default.
	victims := map[string]bool{ms[1].Name: true, ms[3].Name: true}
	before := map[string]bool{}
	for _, m := range ms {
		before[m.Name] = true
	}

	w := machinetest.WatchMachines(t, e.c, e.ns, func(cur map[string]*v1alpha1.Machine) string {
		for name, m := range cur {
			if !before[name] {
				return "machine " + name + " was created"
			}
			if m.DeletionTimestamp != nil && !victims[name] {
				return "machine " + name + " was deleted but not named"
			}
		}
		return ""
	})
	w.Arm()
	now := time.Now().UTC().Format(time.RFC3339)
	update(e, d, func(d *v1alpha1.MachineDeployment) {
		if d.Annotations == nil {
			d.Annotations = map[string]string{}
		}
		d.Annotations[v1alpha1.AnnotationTriggerDeletionByMCM] = ms[1].Name + "~" + now + "," + ms[3].Name + "~" + now
		d.Spec.Replicas = 3
	})
	eventually.Explained(e.t, 30*time.Second, "the named machines gone", func() (bool, string) {
		cur := e.machines()
		var names []string
		for _, m := range cur {
			names = append(names, m.Name)
			if victims[m.Name] {
				return false, "still there: " + strings.Join(names, ",")
			}
		}
		return len(cur) == 3, "machines: " + strings.Join(names, ",")
	})
	eventually.Explained(e.t, 10*time.Second, "the annotation pruned", func() (bool, string) {
		got := &v1alpha1.MachineDeployment{}
		if err := e.c.Get(context.Background(), client.ObjectKeyFromObject(d), got); err != nil {
			return false, err.Error()
		}
		v, ok := got.Annotations[v1alpha1.AnnotationTriggerDeletionByMCM]
		return !ok, "annotation: " + v
	})
	time.Sleep(500 * time.Millisecond) // anything wrong would show now
	if v := w.Stop().Violations; len(v) > 0 {
		t.Fatal(v[0])
	}
}

// runningDeployment starts the controllers (with machinesettest's stand-in machine set
// controller) and a deployment of n, and returns it with its machines once all are Running,
// sorted by name.
func runningDeployment(e *env, name string, n int) (*v1alpha1.MachineDeployment, []v1alpha1.Machine) {
	e.t.Helper()
	machinesettest.Start(e.t, e.c, e.ns, 50*time.Millisecond, 200*time.Millisecond)
	e.startControllers()
	d := e.deployment(name, int32(n), "c", 1, 0)
	e.create(d)
	eventually.Explained(e.t, 30*time.Second, fmt.Sprintf("%d Running machines", n), func() (bool, string) {
		all, run := running(e.machines(), "")
		return all == n && run == n, fmt.Sprintf("%d machines, %d Running", all, run)
	})
	ms := e.machines()
	sort.Slice(ms, func(i, j int) bool { return ms[i].Name < ms[j].Name })
	return d, ms
}

// TestMarkedMachineGoesWhileReplicasStay: a scaler names a machine in the trigger-deletion
// annotation but its lower replicas never come (or were undone, as Gardener's worker reconcile
// does): MCM keeps such a machine for ever (gardener/machine-controller-manager#1078). Here it is
// deleted, its set replaces it, and no other machine is touched.
func TestMarkedMachineGoesWhileReplicasStay(t *testing.T) {
	e := newEnv(t)
	d, ms := runningDeployment(e, "kept", 3)
	victim := ms[1].Name
	before := map[string]bool{}
	for _, m := range ms {
		before[m.Name] = true
	}
	w := machinetest.WatchMachines(t, e.c, e.ns, func(cur map[string]*v1alpha1.Machine) string {
		created := 0
		for name, m := range cur {
			if !before[name] {
				created++
			}
			if m.DeletionTimestamp != nil && name != victim {
				return "machine " + name + " was deleted but not named"
			}
		}
		if created > 1 {
			return fmt.Sprintf("%d machines created for one deletion", created)
		}
		return ""
	})
	w.Arm()
	update(e, d, func(d *v1alpha1.MachineDeployment) {
		if d.Annotations == nil {
			d.Annotations = map[string]string{}
		}
		d.Annotations[v1alpha1.AnnotationTriggerDeletionByMCM] = victim + "~" + time.Now().UTC().Format(time.RFC3339)
	})
	eventually.Explained(e.t, 30*time.Second, "the named machine replaced", func() (bool, string) {
		cur := e.machines()
		var names []string
		fresh := 0
		for _, m := range cur {
			names = append(names, m.Name)
			if m.Name == victim {
				return false, "still there: " + strings.Join(names, ",")
			}
			if !before[m.Name] && m.Status.CurrentStatus.Phase == v1alpha1.MachineRunning {
				fresh++
			}
		}
		return len(cur) == 3 && fresh == 1, "machines: " + strings.Join(names, ",")
	})
	eventually.Explained(e.t, 10*time.Second, "the annotation pruned", func() (bool, string) {
		got := &v1alpha1.MachineDeployment{}
		if err := e.c.Get(context.Background(), client.ObjectKeyFromObject(d), got); err != nil {
			return false, err.Error()
		}
		v, ok := got.Annotations[v1alpha1.AnnotationTriggerDeletionByMCM]
		return !ok && got.Spec.Replicas == 3, fmt.Sprintf("annotation %q, replicas %d", v, got.Spec.Replicas)
	})
	if v := w.Stop().Violations; len(v) > 0 {
		t.Fatal(v[0])
	}
}

// TestRecreateDeletesAllOldMachinesFirst: with Recreate, no machine of the new template exists
// while any old machine does.
func TestRecreateDeletesAllOldMachinesFirst(t *testing.T) {
	e := newEnv(t)
	machinesettest.Start(t, e.c, e.ns, 50*time.Millisecond, 300*time.Millisecond)
	e.startControllers()
	d := e.deployment("re", 3, "a", 0, 0)
	d.Spec.Strategy = v1alpha1.MachineDeploymentStrategy{Type: v1alpha1.RecreateMachineDeploymentStrategyType}
	e.create(d)
	eventually.Explained(e.t, 30*time.Second, "3 Running", func() (bool, string) {
		all, run := running(e.machines(), "a")
		return all == 3 && run == 3, fmt.Sprintf("%d/%d", all, run)
	})
	w := machinetest.WatchMachines(t, e.c, e.ns, func(ms map[string]*v1alpha1.Machine) string {
		var a, b int
		for _, m := range ms {
			if m.Spec.Class.Name == "a" {
				a++
			} else {
				b++
			}
		}
		if a > 0 && b > 0 {
			return fmt.Sprintf("%d old and %d new machines at once", a, b)
		}
		return ""
	})
	w.Arm()
	update(e, d, func(d *v1alpha1.MachineDeployment) { d.Spec.Template.Spec.Class.Name = "b" })
	eventually.Explained(e.t, 30*time.Second, "3 Running of class b", func() (bool, string) {
		ms := e.machines()
		allA, _ := running(ms, "a")
		allB, runB := running(ms, "b")
		return allA == 0 && allB == 3 && runB == 3, fmt.Sprintf("a %d, b %d/%d", allA, allB, runB)
	})
	if v := w.Stop().Violations; len(v) > 0 {
		t.Fatal(v[0])
	}
}

// TestPauseRevisionHistoryAndProportionalScaling pauses a deployment (a template change rolls
// nothing out), resumes it into a rollout that cannot finish (its machines never boot), scales
// it up (the additions go to the new set only) and down (proportionally), and checks that the
// revision history limit prunes old sets.
func TestPauseRevisionHistoryAndProportionalScaling(t *testing.T) {
	e := newEnv(t)
	life := machinesettest.Start(t, e.c, e.ns, 50*time.Millisecond, 50*time.Millisecond)
	life.Stuck("stuck")
	e.startControllers()
	d := e.deployment("p", 4, "a", 2, 0)
	d.Spec.RevisionHistoryLimit = ptr.To(int32(1))
	e.create(d)
	eventually.Explained(e.t, 30*time.Second, "4 Running", func() (bool, string) {
		all, run := running(e.machines(), "a")
		return all == 4 && run == 4, fmt.Sprintf("%d/%d", all, run)
	})

	update(e, d, func(d *v1alpha1.MachineDeployment) { d.Spec.Paused = true; d.Spec.Template.Spec.Class.Name = "b" })
	eventually.Explained(e.t, 10*time.Second, "Progressing=Unknown DeploymentPaused", func() (bool, string) {
		got := &v1alpha1.MachineDeployment{}
		_ = e.c.Get(context.Background(), client.ObjectKeyFromObject(d), got)
		c := condition(got, v1alpha1.MachineDeploymentProgressing)
		return c != nil && c.Reason == "DeploymentPaused", fmt.Sprintf("%+v", c)
	})
	// The reconcile that wrote the condition is the one that would have created the new set.
	if n := len(e.sets()); n != 1 {
		t.Fatalf("a paused deployment rolled out: %d sets", n)
	}

	// b then stuck: two rollouts, the first completes, the second cannot.
	update(e, d, func(d *v1alpha1.MachineDeployment) { d.Spec.Paused = false })
	eventually.Explained(e.t, 30*time.Second, "4 Running of class b", func() (bool, string) {
		all, run := running(e.machines(), "b")
		allA, _ := running(e.machines(), "a")
		return all == 4 && run == 4 && allA == 0, fmt.Sprintf("b %d/%d, a %d", all, run, allA)
	})
	update(e, d, func(d *v1alpha1.MachineDeployment) { d.Spec.Template.Spec.Class.Name = "stuck" })
	setOf := func(class string) *v1alpha1.MachineSet {
		for _, ms := range e.sets() {
			if ms.Spec.Template.Spec.Class.Name == class {
				return &ms
			}
		}
		return nil
	}
	eventually.Explained(e.t, 20*time.Second, "the stuck set at maxSurge", func() (bool, string) {
		s := setOf("stuck")
		return s != nil && s.Spec.Replicas == 2, fmt.Sprintf("%v", s != nil)
	})
	eventually.Explained(e.t, 20*time.Second, "the class-a set pruned by revisionHistoryLimit 1", func() (bool, string) {
		return setOf("a") == nil, fmt.Sprintf("%d sets", len(e.sets()))
	})

	// Scale up during the rollout: the new (stuck) set takes all additions.
	update(e, d, func(d *v1alpha1.MachineDeployment) { d.Spec.Replicas = 8 })
	eventually.Explained(e.t, 20*time.Second, "stuck set 6, b set 4", func() (bool, string) {
		s, b := setOf("stuck"), setOf("b")
		return s != nil && b != nil && s.Spec.Replicas == 6 && b.Spec.Replicas == 4, fmt.Sprintf("stuck %d, b %d", s.Spec.Replicas, b.Spec.Replicas)
	})
	// Scale down: proportional over both sets, to replicas+maxSurge = 4+2 in total.
	update(e, d, func(d *v1alpha1.MachineDeployment) { d.Spec.Replicas = 4 })
	eventually.Explained(e.t, 20*time.Second, "sets shrunk proportionally", func() (bool, string) {
		s, b := setOf("stuck"), setOf("b")
		ok := s.Spec.Replicas+b.Spec.Replicas == 6 && s.Spec.Replicas >= 3 && b.Spec.Replicas >= 2
		return ok, fmt.Sprintf("stuck %d, b %d", s.Spec.Replicas, b.Spec.Replicas)
	})
	// Availability held: the b machines that are not needed are gone only down to replicas - 0.
	_, runB := running(e.machines(), "b")
	if runB < 2 {
		t.Fatalf("only %d Running machines left", runB)
	}
}

// TestScalingAPausedRolloutGrowsTheActiveSets pauses a rollout whose new set has no replicas
// while two old sets hold machines: a rollback to the emptied first template, paused in the same
// update, while a rollout to a template that never boots is stuck at maxSurge. Scaling 4 → 8
// (maxSurge 2) then adds machines to the two active sets in proportion to their sizes (4 and 2
// become 7 and 3: replicas + maxSurge in total) and none of the paused new template. Resumed,
// the rollback completes, never above replicas + maxSurge machines.
func TestScalingAPausedRolloutGrowsTheActiveSets(t *testing.T) {
	e := newEnv(t)
	life := machinesettest.Start(t, e.c, e.ns, 50*time.Millisecond, 50*time.Millisecond)
	life.Stuck("stuck")
	e.startControllers()
	const surge = 2
	d := e.deployment("ps", 4, "a", surge, 0)
	e.create(d)
	eventually.Explained(e.t, 30*time.Second, "4 Running of class a", func() (bool, string) {
		all, run := running(e.machines(), "a")
		return all == 4 && run == 4, fmt.Sprintf("%d/%d", all, run)
	})
	update(e, d, func(d *v1alpha1.MachineDeployment) { d.Spec.Template.Spec.Class.Name = "b" })
	eventually.Explained(e.t, 30*time.Second, "4 Running of class b, none of a", func() (bool, string) {
		ms := e.machines()
		allA, _ := running(ms, "a")
		allB, runB := running(ms, "b")
		return allA == 0 && allB == 4 && runB == 4, fmt.Sprintf("a %d, b %d/%d", allA, allB, runB)
	})
	replicasOf := func() map[string]int32 {
		out := map[string]int32{}
		for _, ms := range e.sets() {
			out[ms.Spec.Template.Spec.Class.Name] = ms.Spec.Replicas
		}
		return out
	}
	update(e, d, func(d *v1alpha1.MachineDeployment) { d.Spec.Template.Spec.Class.Name = "stuck" })
	eventually.Explained(e.t, 20*time.Second, "the stuck rollout at maxSurge: stuck 2 (machines created), b 4, a 0", func() (bool, string) {
		r := replicasOf()
		all, _ := running(e.machines(), "stuck")
		return len(r) == 3 && r["stuck"] == 2 && r["b"] == 4 && r["a"] == 0 && all == 2, fmt.Sprintf("sets %v, %d stuck machines", r, all)
	})

	// No more machines than replicas + maxSurge from here on, and none of class a while paused.
	var limit atomic.Int32
	limit.Store(4 + surge)
	var paused atomic.Bool
	w := machinetest.WatchMachines(t, e.c, e.ns, func(ms map[string]*v1alpha1.Machine) string {
		if n := int32(len(ms)); n > limit.Load() {
			return fmt.Sprintf("%d machines > replicas+maxSurge %d", n, limit.Load())
		}
		for name, m := range ms {
			if paused.Load() && m.Spec.Class.Name == "a" {
				return "machine " + name + " of the paused new template was created"
			}
		}
		return ""
	})
	w.Arm()
	paused.Store(true)
	update(e, d, func(d *v1alpha1.MachineDeployment) { d.Spec.Paused = true; d.Spec.Template.Spec.Class.Name = "a" })
	eventually.Explained(e.t, 10*time.Second, "Progressing=Unknown DeploymentPaused", func() (bool, string) {
		got := &v1alpha1.MachineDeployment{}
		if err := e.c.Get(context.Background(), client.ObjectKeyFromObject(d), got); err != nil {
			return false, err.Error()
		}
		c := condition(got, v1alpha1.MachineDeploymentProgressing)
		return got.Status.ObservedGeneration == got.Generation && c != nil && c.Reason == "DeploymentPaused", fmt.Sprintf("%+v", c)
	})
	if r := replicasOf(); r["a"] != 0 || r["b"] != 4 || r["stuck"] != 2 {
		t.Fatalf("pausing resized the sets: %v", r)
	}

	limit.Store(8 + surge)
	update(e, d, func(d *v1alpha1.MachineDeployment) { d.Spec.Replicas = 8 })
	eventually.Explained(e.t, 20*time.Second, "b 7 and stuck 3 with their machines, a 0", func() (bool, string) {
		r := replicasOf()
		ms := e.machines()
		allB, runB := running(ms, "b")
		allStuck, _ := running(ms, "stuck")
		ok := r["a"] == 0 && r["b"] == 7 && r["stuck"] == 3 && allB == 7 && runB == 7 && allStuck == 3
		return ok, fmt.Sprintf("sets %v, b machines %d (%d Running), stuck machines %d", r, allB, runB, allStuck)
	})
	for _, ms := range e.sets() {
		if ms.Spec.Replicas == 0 {
			continue
		}
		if got := ms.Annotations[v1alpha1.AnnotationDesiredReplicas]; got != "8" {
			t.Errorf("set %s: desired-replicas %q, want 8", ms.Name, got)
		}
		if got := ms.Annotations[v1alpha1.AnnotationMaxReplicas]; got != "10" {
			t.Errorf("set %s: max-replicas %q, want 10", ms.Name, got)
		}
	}
	time.Sleep(500 * time.Millisecond) // a second resize, or a machine of class a, would show now
	if r := replicasOf(); r["a"] != 0 || r["b"] != 7 || r["stuck"] != 3 {
		t.Fatalf("the paused sets moved after the scale-up: %v", r)
	}

	paused.Store(false)
	update(e, d, func(d *v1alpha1.MachineDeployment) { d.Spec.Paused = false })
	eventually.Explained(e.t, 60*time.Second, "the rollback complete: 8 Running of class a, nothing else", func() (bool, string) {
		ms := e.machines()
		allA, runA := running(ms, "a")
		allB, _ := running(ms, "b")
		allStuck, _ := running(ms, "stuck")
		r := replicasOf()
		ok := allA == 8 && runA == 8 && allB == 0 && allStuck == 0 && r["a"] == 8 && r["b"] == 0 && r["stuck"] == 0
		return ok, fmt.Sprintf("a %d/%d, b %d, stuck %d, sets %v", allA, runA, allB, allStuck, r)
	})
	r := w.Stop()
	if len(r.Violations) > 0 {
		t.Fatalf("%d violations, first: %s", len(r.Violations), r.Violations[0])
	}
	t.Logf("at most %d machines", r.MaxAll)
}

// TestFrozenSetCreatesNothingAndFailedMachinesAreReplaced uses a bare MachineSet.
func TestFrozenSetCreatesNothingAndFailedMachinesAreReplaced(t *testing.T) {
	e := newEnv(t)
	machinesettest.Start(t, e.c, e.ns, 50*time.Millisecond, 50*time.Millisecond)
	e.startControllers()
	ms := &v1alpha1.MachineSet{
		ObjectMeta: metav1.ObjectMeta{Name: "frozen", Namespace: e.ns, Labels: map[string]string{v1alpha1.LabelFreeze: "True"}},
		Spec: v1alpha1.MachineSetSpec{
			Replicas:     3,
			Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{"set": "frozen"}},
			MachineClass: v1alpha1.ClassSpec{Kind: "MachineClass", Name: "c"},
			Template:     v1alpha1.MachineTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"set": "frozen"}}},
		},
	}
	e.create(ms)
	eventually.Explained(e.t, 20*time.Second, "the frozen set reconciled", func() (bool, string) {
		cur := &v1alpha1.MachineSet{}
		if err := e.c.Get(context.Background(), client.ObjectKeyFromObject(ms), cur); err != nil {
			return false, err.Error()
		}
		return cur.Status.ObservedGeneration == cur.Generation, fmt.Sprintf("observed generation %d of %d", cur.Status.ObservedGeneration, cur.Generation)
	})
	if n := len(e.machines()); n != 0 {
		t.Fatalf("a frozen set created %d machines", n)
	}
	update(e, ms, func(ms *v1alpha1.MachineSet) { delete(ms.Labels, v1alpha1.LabelFreeze) })
	eventually.Explained(e.t, 20*time.Second, "3 Running", func() (bool, string) {
		all, run := running(e.machines(), "")
		return all == 3 && run == 3, fmt.Sprintf("%d/%d", all, run)
	})
	for _, m := range e.machines() {
		if m.Spec.Class.Name != "c" {
			t.Fatalf("machine %s has class %q, want the set's machineClass c", m.Name, m.Spec.Class.Name)
		}
		ref := metav1.GetControllerOf(&m)
		if ref == nil || ref.Name != "frozen" || ref.BlockOwnerDeletion == nil || !*ref.BlockOwnerDeletion {
			t.Fatalf("machine %s owner reference %+v", m.Name, ref)
		}
	}
	failed := e.machines()[0]
	failed.Status.CurrentStatus = v1alpha1.CurrentStatus{Phase: v1alpha1.MachineFailed, LastUpdateTime: metav1.Now()}
	failed.Status.LastOperation = v1alpha1.LastOperation{Type: v1alpha1.MachineOperationHealthCheck, State: v1alpha1.MachineStateFailed, Description: "health timeout"}
	if err := e.c.Status().Update(context.Background(), &failed); err != nil {
		t.Fatal(err)
	}
	eventually.Explained(e.t, 20*time.Second, "the failed machine replaced", func() (bool, string) {
		ms := e.machines()
		for _, m := range ms {
			if m.Name == failed.Name {
				return false, "failed machine still there"
			}
		}
		_, run := running(ms, "")
		return len(ms) == 3 && run == 3, fmt.Sprintf("%d machines, %d Running", len(ms), run)
	})

	// Deleting the set deletes its machines, then the set itself goes.
	if err := e.c.Delete(context.Background(), ms); err != nil {
		t.Fatal(err)
	}
	eventually.Explained(e.t, 20*time.Second, "set and machines gone", func() (bool, string) {
		err := e.c.Get(context.Background(), client.ObjectKeyFromObject(ms), &v1alpha1.MachineSet{})
		return apierrors.IsNotFound(err) && len(e.machines()) == 0, fmt.Sprintf("%d machines, get: %v", len(e.machines()), err)
	})
}

// TestRestartMidRolloutCreatesNoDuplicates stops the controllers in the middle of a rollout and
// starts new ones: the rollout finishes with exactly replicas machines and never more than
// replicas+maxSurge at any time.
func TestRestartMidRolloutCreatesNoDuplicates(t *testing.T) {
	e := newEnv(t)
	machinesettest.Start(t, e.c, e.ns, 300*time.Millisecond, 200*time.Millisecond)
	stop := e.startControllers()
	const replicas, surge = 6, 2
	d := e.deployment("restart", replicas, "a", surge, 0)
	e.create(d)
	eventually.Explained(e.t, 30*time.Second, "6 Running", func() (bool, string) {
		all, run := running(e.machines(), "a")
		return all == replicas && run == replicas, fmt.Sprintf("%d/%d", all, run)
	})
	w := machinetest.WatchMachines(t, e.c, e.ns, func(ms map[string]*v1alpha1.Machine) string {
		if len(ms) > replicas+surge {
			return fmt.Sprintf("%d machines", len(ms))
		}
		return ""
	})
	w.Arm()
	update(e, d, func(d *v1alpha1.MachineDeployment) { d.Spec.Template.Spec.Class.Name = "b" })
	eventually.Explained(e.t, 20*time.Second, "rollout under way", func() (bool, string) {
		allB, _ := running(e.machines(), "b")
		return allB >= 1, fmt.Sprintf("%d b machines", allB)
	})
	stop()
	e.startControllers()
	eventually.Explained(e.t, 60*time.Second, "rollout finished", func() (bool, string) {
		ms := e.machines()
		allA, _ := running(ms, "a")
		allB, runB := running(ms, "b")
		return allA == 0 && allB == replicas && runB == replicas, fmt.Sprintf("a %d, b %d/%d", allA, allB, runB)
	})
	if v := w.Stop().Violations; len(v) > 0 {
		t.Fatal(v[0])
	}
}

// TestConditions: a rollout that cannot finish reports ProgressDeadlineExceeded once
// progressDeadlineSeconds have passed on the controller's clock (not before), a frozen set makes
// the deployment Frozen, and an invalid spec is reported as ReplicaFailure=InvalidSpec naming
// the field, with nothing created.
func TestConditions(t *testing.T) {
	e := newEnv(t)
	life := machinesettest.Start(t, e.c, e.ns, 50*time.Millisecond, 50*time.Millisecond)
	life.Stuck("stuck")
	clk := testclock.NewFakeClock(time.Now())
	e.clock = clk
	e.startControllers()
	get := func(name string) *v1alpha1.MachineDeployment {
		d := &v1alpha1.MachineDeployment{}
		if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: name}, d); err != nil {
			t.Fatal(err)
		}
		return d
	}

	d := e.deployment("deadline", 2, "stuck", 1, 0)
	d.Spec.ProgressDeadlineSeconds = ptr.To(int32(600))
	e.create(d)
	// The rollout settles: both machines made and counted, nothing left to progress.
	var since time.Time
	eventually.Explained(e.t, 30*time.Second, "Progressing, with both machines that never boot counted", func() (bool, string) {
		got := get("deadline")
		c := condition(got, v1alpha1.MachineDeploymentProgressing)
		if c != nil {
			since = c.LastUpdateTime.Time
		}
		return c != nil && c.Status == v1alpha1.ConditionTrue && got.Status.Replicas == 2 && got.Status.UpdatedReplicas == 2 &&
			got.Status.ObservedGeneration == got.Generation, fmt.Sprintf("%+v, status %+v", c, got.Status)
	})
	// A spec change that changes nothing of the rollout reconciles the deployment, and its
	// observedGeneration shows that the reconcile has written its status.
	touch := func() {
		update(e, d, func(d *v1alpha1.MachineDeployment) {
			d.Spec.RevisionHistoryLimit = ptr.To(ptr.Deref(d.Spec.RevisionHistoryLimit, 100) + 1)
		})
		eventually.Explained(e.t, 30*time.Second, "the touch reconciled", func() (bool, string) {
			got := get("deadline")
			return got.Status.ObservedGeneration == got.Generation, fmt.Sprintf("observed generation %d of %d", got.Status.ObservedGeneration, got.Generation)
		})
	}
	clk.SetTime(since.Add(9 * time.Minute))
	touch()
	c := condition(get("deadline"), v1alpha1.MachineDeploymentProgressing)
	if c == nil || c.Status != v1alpha1.ConditionTrue {
		t.Fatalf("Progressing after 9 of the 10 minutes: %+v", c)
	}
	clk.SetTime(c.LastUpdateTime.Add(11 * time.Minute))
	touch()
	eventually.Explained(e.t, 30*time.Second, "ProgressDeadlineExceeded", func() (bool, string) {
		c := condition(get("deadline"), v1alpha1.MachineDeploymentProgressing)
		return c != nil && c.Status == v1alpha1.ConditionFalse && c.Reason == "ProgressDeadlineExceeded", fmt.Sprintf("%+v", c)
	})
	if c := condition(get("deadline"), v1alpha1.MachineDeploymentAvailable); c == nil || c.Status != v1alpha1.ConditionFalse {
		t.Fatalf("Available with no machine Running: %+v", c)
	}

	var set v1alpha1.MachineSet
	for _, ms := range e.sets() {
		set = ms
	}
	// Freeze the set as the safety controller does, through the status subresource (retrying
	// until the write wins over the MachineSet controller's own status writes).
	eventually.Explained(e.t, 10*time.Second, "set frozen", func() (bool, string) {
		cur := &v1alpha1.MachineSet{}
		if err := e.c.Get(context.Background(), client.ObjectKeyFromObject(&set), cur); err != nil {
			return false, err.Error()
		}
		for _, c := range cur.Status.Conditions {
			if c.Type == v1alpha1.MachineSetFrozen && c.Status == v1alpha1.ConditionTrue {
				return true, ""
			}
		}
		cur.Status.Conditions = append(cur.Status.Conditions, v1alpha1.MachineSetCondition{
			Type: v1alpha1.MachineSetFrozen, Status: v1alpha1.ConditionTrue, Reason: "OverShootingReplicaCount", Message: "too many machines",
			LastTransitionTime: metav1.Now(),
		})
		err := e.c.Status().Update(context.Background(), cur)
		return false, fmt.Sprintf("status update: %v", err)
	})
	eventually.Explained(e.t, 10*time.Second, "deployment Frozen", func() (bool, string) {
		c := condition(get("deadline"), v1alpha1.MachineDeploymentFrozen)
		return c != nil && c.Status == v1alpha1.ConditionTrue && c.Reason == "OverShootingReplicaCount", fmt.Sprintf("%+v", c)
	})

	bad := e.deployment("bad", 2, "c", 1, 0)
	bad.Spec.Template.Labels = map[string]string{"pool": "other"}
	e.create(bad)
	eventually.Explained(e.t, 10*time.Second, "InvalidSpec", func() (bool, string) {
		c := condition(get("bad"), v1alpha1.MachineDeploymentReplicaFailure)
		return c != nil && c.Reason == "InvalidSpec" && strings.Contains(c.Message, "spec.template.metadata.labels"), fmt.Sprintf("%+v", c)
	})
	for _, ms := range e.sets() {
		if strings.HasPrefix(ms.Name, "bad-") {
			t.Fatalf("an invalid deployment created set %s", ms.Name)
		}
	}
}

// TestAdoptionAndRelease: a machine nobody controls that matches a set's selector is adopted
// and counts towards the set's replicas; a machine whose labels stop matching is released and
// replaced.
func TestAdoptionAndRelease(t *testing.T) {
	e := newEnv(t)
	machinesettest.Start(t, e.c, e.ns, 50*time.Millisecond, 50*time.Millisecond)
	orphan := &v1alpha1.Machine{
		ObjectMeta: metav1.ObjectMeta{Name: "orphan", Namespace: e.ns, Labels: map[string]string{"set": "s"}},
		Spec:       v1alpha1.MachineSpec{Class: v1alpha1.ClassSpec{Kind: "MachineClass", Name: "c"}},
	}
	e.create(orphan)
	e.startControllers()
	ms := &v1alpha1.MachineSet{
		ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: e.ns},
		Spec: v1alpha1.MachineSetSpec{
			Replicas: 2,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"set": "s"}},
			Template: v1alpha1.MachineTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"set": "s"}},
				Spec:       v1alpha1.MachineSpec{Class: v1alpha1.ClassSpec{Kind: "MachineClass", Name: "c"}},
			},
		},
	}
	e.create(ms)
	eventually.Explained(e.t, 20*time.Second, "the orphan adopted and one machine added", func() (bool, string) {
		all := e.machines()
		owned := 0
		for _, m := range all {
			if ref := metav1.GetControllerOf(&m); ref != nil && ref.Name == "s" {
				owned++
			}
		}
		return len(all) == 2 && owned == 2, fmt.Sprintf("%d machines, %d owned", len(all), owned)
	})
	update(e, orphan, func(m *v1alpha1.Machine) { m.Labels["set"] = "elsewhere" })
	eventually.Explained(e.t, 20*time.Second, "the relabelled machine released and replaced", func() (bool, string) {
		all := e.machines()
		owned := 0
		var released bool
		for _, m := range all {
			ref := metav1.GetControllerOf(&m)
			if ref != nil && ref.Name == "s" {
				owned++
			}
			if m.Name == "orphan" && ref == nil {
				released = true
			}
		}
		return len(all) == 3 && owned == 2 && released, fmt.Sprintf("%d machines, %d owned, orphan released %v", len(all), owned, released)
	})
}
