package machine

import (
	"encoding/json"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// TestAppliedRecordIsMCMs: the last-applied record is written as MCM writes it (the JSON of the
// machine's nodeTemplate) and read in both MCM's and machinist's old format, so a handover or an
// upgrade still removes what the template dropped.
func TestAppliedRecordIsMCMs(t *testing.T) {
	taint := corev1.Taint{Key: "k", Value: "v", Effect: corev1.TaintEffectNoSchedule}
	m := &v1alpha1.Machine{Spec: v1alpha1.MachineSpec{NodeTemplateSpec: v1alpha1.NodeTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"l": "1"}, Annotations: map[string]string{"a": "2"}},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{taint}},
	}}}
	want := appliedTemplate{Labels: map[string]string{"l": "1"}, Annotations: map[string]string{"a": "2"}, Taints: []corev1.Taint{taint}}

	rec := appliedRecord(m)
	mcm, _ := json.Marshal(m.Spec.NodeTemplateSpec) // MCM: json.Marshal(machine.Spec.NodeTemplateSpec)
	if rec != string(mcm) {
		t.Fatalf("record %s, MCM writes %s", rec, mcm)
	}
	if got := readApplied(rec); !reflect.DeepEqual(got, want) {
		t.Fatalf("MCM's format read as %+v", got)
	}
	old := `{"labels":{"l":"1"},"annotations":{"a":"2"},"taints":[{"key":"k","value":"v","effect":"NoSchedule"}]}`
	if got := readApplied(old); !reflect.DeepEqual(got, want) {
		t.Fatalf("machinist's old format read as %+v", got)
	}
	if got := readApplied("not json"); !reflect.DeepEqual(got, appliedTemplate{}) {
		t.Fatalf("a corrupt record must read as nothing applied: %+v", got)
	}
	if appliedRecord(&v1alpha1.Machine{}) != "" {
		t.Fatal("an empty nodeTemplate needs no record")
	}
}
