package oracle

import (
	"github.com/machinist-io/machinist/providers/aws/fakeaws"
	"github.com/machinist-io/machinist/providers/kit/oraclekit"
)

// Scenario is a MachineClass and the calls made with it, in order.
type Scenario struct {
	// Name names the scenario and its corpus file.
	Name string
	// About says what it exercises.
	About string
	// Spec returns the class's providerSpec in the shape Gardener writes it.
	Spec func() map[string]any
	// Steps are the calls, in order.
	Steps []Step
}

// Step is one call of a scenario.
type Step struct {
	Op      oraclekit.Op
	Machine string
	// ByProviderID gives the machine the provider ID this driver's create of it returned (the
	// controllers send it once they know it).
	ByProviderID bool
	// ProviderID gives the machine this provider ID instead.
	ProviderID string
	// ProviderIDOf gives the machine the provider ID this driver's create of another machine
	// returned.
	ProviderIDOf string
	// Placement is the machine's node template annotation machine.sapcloud.io/awsPlacement.
	Placement string
	// Spec, when set, replaces the class's providerSpec for this call.
	Spec func() map[string]any
	// SecretData, when set, replaces the secret's data for this call.
	SecretData map[string]string
	// Before prepares the fake (capacity, faults) before the call; faults are cleared after it.
	Before func(*fakeaws.Cloud)
	// Note says what the step shows; it names the step in the transcript.
	Note string
}

// label names a step in a transcript.
func (st Step) label(i int) string { return oraclekit.Label(i, st.Op, st.Machine, st.Note) }

// call is the driver call of a step; created holds the provider IDs this driver's creates
// returned.
func (s Scenario) call(st Step, created map[string]string) (oraclekit.Call, error) {
	specOf := s.Spec
	if st.Spec != nil {
		specOf = st.Spec
	}
	data := NewSecret().Data
	if st.SecretData != nil {
		data = map[string][]byte{}
		for k, v := range st.SecretData {
			data[k] = []byte(v)
		}
	}
	m := oraclekit.Machine{Name: st.Machine}
	switch {
	case st.ProviderID != "":
		m.ProviderID = st.ProviderID
	case st.ByProviderID:
		m.ProviderID = created[st.Machine]
	case st.ProviderIDOf != "":
		m.ProviderID = created[st.ProviderIDOf]
	}
	if st.Placement != "" {
		m.Annotations = map[string]string{"machine.sapcloud.io/awsPlacement": st.Placement}
	}
	objects := oraclekit.Objects{Provider: "AWS", Namespace: Namespace, SecretName: SecretName, Scenario: s.Name}
	return objects.Call(st.Op, specOf(), data, m)
}
