package fallback_test

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	testclock "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmanager "sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/fallback"
	"github.com/machinist-io/machinist/core/controller/machineset"
	"github.com/machinist-io/machinist/core/controller/machineset/machinesettest"
	"github.com/machinist-io/machinist/harness/ctrltest"
	"github.com/machinist-io/machinist/internal/eventually"
)

// TestRebalanceWaitsForAReadyProbe: the MachineSet controller alone, machine phases played by
// machinesettest. Once the primary's mark expires a surge machine is created on it; while that
// machine does not become ready, no machine on the fallback class is touched and no second surge
// machine appears.
func TestRebalanceWaitsForAReadyProbe(t *testing.T) {
	w := newWorld(t)
	for _, n := range []string{"a", "b"} {
		w.create(&v1alpha1.MachineClass{ObjectMeta: metav1.ObjectMeta{Name: n}, Provider: "local", ProviderSpec: runtime.RawExtension{Raw: []byte(`{}`)}})
	}
	life := machinesettest.Start(t, w.c, w.ns, 0, 0)
	life.Stuck("a") // the primary's machines never boot
	labels := map[string]string{"pool": "p"}
	w.create(&v1alpha1.MachineSet{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Annotations: map[string]string{fallback.AnnotationClasses: "b", fallback.AnnotationRebalance: "true"}},
		Spec: v1alpha1.MachineSetSpec{
			Replicas: 2,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: v1alpha1.MachineTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       v1alpha1.MachineSpec{Class: v1alpha1.ClassSpec{Kind: "MachineClass", Name: "a"}},
			},
		},
	})
	clk := testclock.NewFakeClock(time.Now())
	marks := fallback.NewCache(3 * time.Minute).WithClock(clk)
	marks.Mark(w.ns, "a", "stock-out")
	ctrltest.RunManager(t, w.cfg, w.ns, func(mgr crmanager.Manager) error {
		return machineset.Setup(mgr, machineset.Options{Fallback: marks, Clock: clk})
	})

	w.waitRunningOn("b", 2, 30*time.Second)
	fallbackMachines := map[string]bool{}
	for _, m := range w.machines() {
		fallbackMachines[m.Name] = true
		if m.Spec.Class.Name == "a" {
			t.Fatalf("machine %s made on the primary while it is marked", m.Name)
		}
	}
	clk.Step(4 * time.Minute) // the primary's mark expires
	touchSet(t, w, "p")
	var probe string
	eventually.True(t, 30*time.Second, "a Pending surge machine on a", func() bool {
		for _, m := range w.machines() {
			if fallback.IsSurge(&m) && m.Spec.Class.Name == "a" && m.Status.CurrentStatus.Phase == v1alpha1.MachinePending {
				probe = m.Name
				return true
			}
		}
		return false
	})
	// The set reconciles on the probe's events: its status counts the probe.
	eventually.True(t, 30*time.Second, "the set's status counting the probe", func() bool {
		ms := &v1alpha1.MachineSet{}
		return w.c.Get(w.ctx, w.key("p"), ms) == nil && ms.Status.Replicas == 3
	})
	live := 0
	for _, m := range w.machines() {
		switch {
		case m.DeletionTimestamp != nil:
			t.Errorf("machine %s is being deleted while the probe %s is not ready", m.Name, probe)
		case m.Name != probe && !fallbackMachines[m.Name]:
			t.Errorf("a second extra machine %s while the probe %s is not ready", m.Name, probe)
		}
		live++
	}
	if live != 3 {
		t.Errorf("%d machines, want the 2 on b and the probe", live)
	}
}

// touchSet changes an annotation of a MachineSet, so its controller reconciles it now (after a
// test stepped the controller's clock).
func touchSet(t *testing.T, w *world, name string) {
	t.Helper()
	ms := &v1alpha1.MachineSet{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: name}}
	patch := []byte(`{"metadata":{"annotations":{"test.machinist.io/touch":"` + time.Now().String() + `"}}}`)
	if err := w.c.Patch(w.ctx, ms, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
}
