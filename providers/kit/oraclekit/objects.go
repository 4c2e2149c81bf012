package oraclekit

import (
	"encoding/json"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// Objects make the objects of a scenario's calls, as the controllers send them: the class
// oracle-<scenario> of Provider in Namespace, its secret SecretName and its machines.
type Objects struct {
	Provider, Namespace, SecretName, Scenario string
}

// Machine is a call's machine: its name, the provider ID the controllers know, the annotations
// of its node template.
type Machine struct {
	Name, ProviderID string
	Annotations      map[string]string
}

// Call is the call op with the class of spec, the secret of data and machine m (none when its
// Name is empty).
func (o Objects) Call(op Op, spec map[string]any, data map[string][]byte, m Machine) (Call, error) {
	raw, err := json.Marshal(spec)
	if err != nil {
		return Call{}, err
	}
	class := &v1alpha1.MachineClass{
		TypeMeta:     metav1.TypeMeta{APIVersion: "machine.sapcloud.io/v1alpha1", Kind: "MachineClass"},
		ObjectMeta:   metav1.ObjectMeta{Name: "oracle-" + o.Scenario, Namespace: o.Namespace},
		Provider:     o.Provider,
		ProviderSpec: runtime.RawExtension{Raw: raw},
		SecretRef:    &corev1.SecretReference{Name: o.SecretName, Namespace: o.Namespace},
	}
	c := Call{Op: op, MachineClass: class, Secret: &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: o.SecretName, Namespace: o.Namespace},
		Data:       data,
	}}
	if m.Name != "" {
		machine := &v1alpha1.Machine{
			TypeMeta:   metav1.TypeMeta{APIVersion: "machine.sapcloud.io/v1alpha1", Kind: "Machine"},
			ObjectMeta: metav1.ObjectMeta{Name: m.Name, Namespace: o.Namespace, UID: k8stypes.UID("uid-" + o.Scenario + "-" + m.Name)},
		}
		machine.Spec.Class = v1alpha1.ClassSpec{Kind: "MachineClass", Name: class.Name}
		machine.Spec.ProviderID = m.ProviderID
		if len(m.Annotations) > 0 {
			machine.Spec.NodeTemplateSpec.Annotations = m.Annotations
		}
		c.Machine = machine
	}
	return c, nil
}
