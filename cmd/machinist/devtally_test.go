package main

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/standby"
)

// machinist dev's progress counts standby machines apart: they are not replicas, so a deployment
// with a pool still reaches "all machines Running".
func TestTallyCountsStandbyApart(t *testing.T) {
	now := metav1.Now()
	m := func(name string, phase v1alpha1.MachinePhase, ann map[string]string, deleting bool) v1alpha1.Machine {
		x := v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann, Labels: map[string]string{v1alpha1.LabelNode: name}}}
		x.Status.CurrentStatus.Phase = phase
		if deleting {
			x.DeletionTimestamp = &now
		}
		return x
	}
	phases, nodes, standbyN := tally([]v1alpha1.Machine{
		m("a", v1alpha1.MachineRunning, nil, false),
		m("b", "", nil, false),
		m("c", v1alpha1.MachineRunning, nil, true),
		m("s1", v1alpha1.MachineRunning, map[string]string{standby.Annotation: "web", standby.AnnotationState: "Stopped"}, false),
		m("s2", v1alpha1.MachineRunning, map[string]string{standby.Annotation: "web", standby.AnnotationState: "Booting"}, false),
	})
	want := map[string]int{"Running": 1, "Creating": 1, "Terminating": 1, "Standby Stopped": 1, "Standby Booting": 1}
	if len(phases) != len(want) {
		t.Fatalf("phases %v; want %v", phases, want)
	}
	for k, v := range want {
		if phases[k] != v {
			t.Errorf("phases %v; want %v", phases, want)
		}
	}
	if !slices.Equal(nodes, []string{"a"}) || standbyN != 2 {
		t.Errorf("nodes %v, standby %d; want [a] and 2", nodes, standbyN)
	}
	if got := summarize(phases); got != "Creating 1, Running 1, Standby Booting 1, Standby Stopped 1, Terminating 1" {
		t.Errorf("summary %q", got)
	}
}
