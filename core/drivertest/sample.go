package drivertest

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// SampleObjects reads a provider's sample manifest, split into YAML documents (a README's code
// block, a file of kubernetes/samples/): its MachineClass, strictly decoded, and its Secrets'
// stringData merged into one Secret's data, as a driver receives it. A MachineDeployment in the
// sample must use that class. A sample without a class or a Secret fails the test.
func SampleObjects(t testing.TB, docs [][]byte) (*v1alpha1.MachineClass, *corev1.Secret) {
	t.Helper()
	var class *v1alpha1.MachineClass
	merged := &corev1.Secret{Data: map[string][]byte{}}
	secrets := 0
	for _, doc := range docs {
		var meta struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			t.Fatalf("sample is not YAML: %v\n%s", err, doc)
		}
		switch meta.Kind {
		case "MachineClass":
			class = &v1alpha1.MachineClass{}
			if err := yaml.UnmarshalStrict(doc, class); err != nil {
				t.Fatalf("MachineClass: %v", err)
			}
		case "Secret":
			var s corev1.Secret
			if err := yaml.UnmarshalStrict(doc, &s); err != nil {
				t.Fatalf("Secret: %v", err)
			}
			secrets++
			for k, v := range s.StringData {
				merged.Data[k] = []byte(v)
			}
		case "MachineDeployment":
			var md v1alpha1.MachineDeployment
			if err := yaml.UnmarshalStrict(doc, &md); err != nil {
				t.Fatalf("MachineDeployment: %v", err)
			}
			if class != nil && md.Spec.Template.Spec.Class.Name != class.Name {
				t.Errorf("MachineDeployment uses class %q, the sample class is %q", md.Spec.Template.Spec.Class.Name, class.Name)
			}
		}
	}
	if class == nil || secrets == 0 {
		t.Fatalf("sample lacks a MachineClass or a Secret")
	}
	return class, merged
}
