package machine_test

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/harness/ctrltest"
)

// ownedBy creates a MachineDeployment and a MachineSet it controls, as MCM writes them (no
// label "name" anywhere), and returns a mutation making a machine the set's. No MachineSet or
// MachineDeployment controller runs: the objects only carry the owner chain.
func ownedBy(t *testing.T, e *ctrltest.Env, deployment string, replicas int32) func(*v1alpha1.Machine) {
	t.Helper()
	labels := map[string]string{"pool": deployment}
	tmpl := v1alpha1.MachineTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec:       v1alpha1.MachineSpec{Class: v1alpha1.ClassSpec{Kind: "MachineClass", Name: "local"}},
	}
	d := &v1alpha1.MachineDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: deployment},
		Spec:       v1alpha1.MachineDeploymentSpec{Replicas: replicas, Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: tmpl},
	}
	e.Create(d)
	ms := &v1alpha1.MachineSet{
		ObjectMeta: metav1.ObjectMeta{Name: deployment + "-abcde", Labels: labels, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "MachineDeployment", Name: d.Name, UID: d.UID, Controller: ptr.To(true),
		}}},
		Spec: v1alpha1.MachineSetSpec{Replicas: replicas, Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: tmpl},
	}
	e.Create(ms)
	return func(m *v1alpha1.Machine) {
		m.Labels = labels
		m.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "MachineSet", Name: ms.Name, UID: ms.UID, Controller: ptr.To(true),
		}}
	}
}

// TestReplacementLimitFindsDeploymentThroughOwners: the meltdown protection groups machines by
// their MachineDeployment found through their MachineSet, without MCM's label "name" (machinist
// does not add it to templates). Two machines of deployment a and one of b lose their heartbeat:
// one of a is replaced, the other waits; b's is replaced at the same time (another deployment).
func TestReplacementLimitFindsDeploymentThroughOwners(t *testing.T) {
	e := ctrltest.NewEnv(t)
	drv := localProvider(t, e)
	clk := testclock.NewFakeClock(time.Now())
	opts := ctrltest.FastOptions()
	opts.HealthTimeout = 10 * time.Minute
	opts.Clock = clk
	e.StartControllers(opts, true, nil)

	ofA, ofB := ownedBy(t, e, e.Name("a"), 2), ownedBy(t, e, e.Name("b"), 1)
	a := []string{e.Name("a-1"), e.Name("a-2")}
	b := e.Name("b-1")
	for _, n := range a {
		e.Machine(n, "local", ofA)
	}
	e.Machine(b, "local", ofB)
	for _, n := range append(a, b) {
		e.WaitPhase(n, v1alpha1.MachineRunning, 60*time.Second)
		if _, ok := e.Get(n).Labels[v1alpha1.LabelMachineDeploymentName]; ok {
			t.Fatalf("machine %s has label name", n)
		}
	}
	for _, n := range append(a, b) {
		if err := drv.SetHeartbeat(t.Context(), n, false); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range append(a, b) {
		e.WaitPhase(n, v1alpha1.MachineUnknown, 30*time.Second)
	}
	clk.Step(11 * time.Minute) // past the health timeout of all three
	for _, n := range append(a, b) {
		e.Touch(n)
	}
	e.WaitPhase(b, v1alpha1.MachineFailed, 30*time.Second)
	first := waitOneFailed(t, e, a, 30*time.Second)
	for _, n := range a {
		if n != first {
			waitHeldBack(t, e, first, []string{n})
		}
	}
}
