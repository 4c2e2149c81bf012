package machineset

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// TestPendingReplacements: failed machines deleted now and terminating machines still Failed are
// replaced, each once; one a live machine already names is not; the reason is the failure's
// lastOperation, "" once the deletion has overwritten it.
func TestPendingReplacements(t *testing.T) {
	now := metav1.Now()
	mk := func(name string, phase v1alpha1.MachinePhase, deleting bool, op v1alpha1.LastOperation, ann map[string]string) *v1alpha1.Machine {
		m := &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann}}
		m.Status.CurrentStatus.Phase = phase
		m.Status.LastOperation = op
		if deleting {
			m.DeletionTimestamp = &now
		}
		return m
	}
	health := v1alpha1.LastOperation{Type: v1alpha1.MachineOperationHealthCheck, State: v1alpha1.MachineStateFailed,
		Description: "Machine a health checks failing for 12s (timeout 10s). Changing status to Failed. Node conditions: KernelDeadlock=True (DockerHung)."}
	join := v1alpha1.LastOperation{Type: v1alpha1.MachineOperationCreate, State: v1alpha1.MachineStateFailed, Description: "Machine b failed to join the cluster in 20m0s"}
	deleting := v1alpha1.LastOperation{Type: v1alpha1.MachineOperationDelete, State: v1alpha1.MachineStateProcessing, Description: "Initiate node drain"}

	a := mk("a", v1alpha1.MachineFailed, false, health, nil)
	b := mk("b", v1alpha1.MachineFailed, true, join, nil)
	c := mk("c", v1alpha1.MachineFailed, true, deleting, nil)
	d := mk("d", v1alpha1.MachineFailed, true, health, nil)
	named := mk("e", v1alpha1.MachineRunning, false, v1alpha1.LastOperation{}, map[string]string{AnnotationReplaces: "d"})
	gone := mk("f", v1alpha1.MachineTerminating, true, deleting, nil) // not Failed as far as the cache shows
	ok := mk("g", v1alpha1.MachineRunning, false, v1alpha1.LastOperation{}, nil)
	got := pendingReplacements([]*v1alpha1.Machine{a, b, c, d, named, gone, ok}, []*v1alpha1.Machine{a})
	var names []string
	for _, p := range got {
		names = append(names, p.old.Name)
	}
	if strings.Join(names, ",") != "a,b,c" {
		t.Fatalf("replaced %v; want a,b,c", names)
	}
	if !strings.HasPrefix(got[0].reason, "failed its health check: Machine a health checks failing for 12s") ||
		!strings.HasPrefix(got[1].reason, "failed to be created or to join: Machine b failed to join") || got[2].reason != "" {
		t.Fatalf("reasons %q, %q, %q", got[0].reason, got[1].reason, got[2].reason)
	}

	m := newMachine(&v1alpha1.MachineSet{ObjectMeta: metav1.ObjectMeta{Name: "s"}, Spec: v1alpha1.MachineSetSpec{Template: v1alpha1.MachineTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationReplaces: "copied", AnnotationReplacesReason: "copied"}}}}})
	if _, ok := m.Annotations[AnnotationReplaces]; ok {
		t.Fatalf("a template's pairing reached a new machine: %v", m.Annotations)
	}
	markReplacement(m, got[2])
	if m.Annotations[AnnotationReplaces] != "c" || m.Annotations[AnnotationReplacesReason] != "" {
		t.Fatalf("annotations %v", m.Annotations)
	}
}
