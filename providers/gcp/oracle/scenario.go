package oracle

import (
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/providers/gcp/fakegcp"
)

// Namespace is the namespace of the scenarios' objects.
const Namespace = "shoot--oracle--gcp"

// Scenario is a MachineClass and the calls made with it, in order, each against a fresh fake.
type Scenario struct {
	// Name names the scenario and its corpus file.
	Name string
	// About says what it exercises.
	About string
	// Spec returns the class's providerSpec in the shape Gardener writes it.
	Spec func() map[string]any
	// Secret changes the secret's data (from World.SecretData) for every call.
	Secret func(data map[string][]byte)
	// Steps are the calls, in order.
	Steps []Step
}

// Step is one call of a scenario.
type Step struct {
	Op      Op
	Machine string
	// ByProviderID gives the machine the provider ID this driver's create of it returned (the
	// controllers send it once they know it).
	ByProviderID bool
	// Spec, when set, replaces the class's providerSpec for this call.
	Spec func() map[string]any
	// Before prepares the fake (capacity, faults, instances of others) before the call; faults
	// are cleared after it.
	Before func(*fakegcp.Cloud)
	// Note says what the step shows; it names the step in the transcript.
	Note string
}

// label names a step in a transcript.
func (st Step) label(i int) string {
	s := fmt.Sprintf("%d %s", i+1, st.Op)
	if st.Machine != "" {
		s += " " + st.Machine
	}
	if st.Note != "" {
		s += ": " + st.Note
	}
	return s
}

// call is the driver call of a step; created holds the provider IDs this driver's creates
// returned.
func (s Scenario) call(st Step, w *World, created map[string]string) (Call, error) {
	specOf := s.Spec
	if st.Spec != nil {
		specOf = st.Spec
	}
	raw, err := json.Marshal(specOf())
	if err != nil {
		return Call{}, err
	}
	class := &v1alpha1.MachineClass{
		TypeMeta:     metav1.TypeMeta{APIVersion: "machine.sapcloud.io/v1alpha1", Kind: "MachineClass"},
		ObjectMeta:   metav1.ObjectMeta{Name: "oracle-" + s.Name, Namespace: Namespace},
		Provider:     "GCP",
		ProviderSpec: runtime.RawExtension{Raw: raw},
		SecretRef:    &corev1.SecretReference{Name: "cloudprovider", Namespace: Namespace},
	}
	data := w.SecretData()
	if s.Secret != nil {
		s.Secret(data)
	}
	secret := &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: "cloudprovider", Namespace: Namespace},
		Data:       data,
	}
	c := Call{Op: st.Op, MachineClass: class, Secret: secret}
	if st.Machine != "" {
		m := &v1alpha1.Machine{
			TypeMeta:   metav1.TypeMeta{APIVersion: "machine.sapcloud.io/v1alpha1", Kind: "Machine"},
			ObjectMeta: metav1.ObjectMeta{Name: st.Machine, Namespace: Namespace, UID: k8stypes.UID("uid-" + s.Name + "-" + st.Machine)},
		}
		m.Spec.Class = v1alpha1.ClassSpec{Kind: "MachineClass", Name: class.Name}
		if st.ByProviderID {
			m.Spec.ProviderID = created[st.Machine]
		}
		c.Machine = m
	}
	return c, nil
}
