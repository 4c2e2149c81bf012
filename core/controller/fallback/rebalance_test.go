package fallback_test

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	crmanager "sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/fallback"
	"github.com/machinist-io/machinist/core/controller/machineset"
	"github.com/machinist-io/machinist/core/controller/machineset/machinesettest"
	"github.com/machinist-io/machinist/internal/ctrltest"
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
	marks := fallback.NewCache(3 * time.Second)
	marks.Mark(w.ns, "a", "stock-out")
	ctrltest.RunManager(t, w.cfg, w.ns, func(mgr crmanager.Manager) error {
		return machineset.Setup(mgr, machineset.Options{Fallback: marks})
	})

	w.waitRunningOn("b", 2, 30*time.Second)
	fallbackMachines := map[string]bool{}
	for _, m := range w.machines() {
		fallbackMachines[m.Name] = true
	}
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
	time.Sleep(time.Second) // the set reconciles on the probe's events
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
