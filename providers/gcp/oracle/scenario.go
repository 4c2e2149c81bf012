package oracle

import (
	"github.com/machinist-io/machinist/providers/gcp/fakegcp"
	"github.com/machinist-io/machinist/providers/kit/oraclekit"
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
	Op      oraclekit.Op
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
func (st Step) label(i int) string { return oraclekit.Label(i, st.Op, st.Machine, st.Note) }

// call is the driver call of a step; created holds the provider IDs this driver's creates
// returned.
func (s Scenario) call(st Step, w *World, created map[string]string) (oraclekit.Call, error) {
	specOf := s.Spec
	if st.Spec != nil {
		specOf = st.Spec
	}
	data := w.SecretData()
	if s.Secret != nil {
		s.Secret(data)
	}
	m := oraclekit.Machine{Name: st.Machine}
	if st.ByProviderID {
		m.ProviderID = created[st.Machine]
	}
	objects := oraclekit.Objects{Provider: "GCP", Namespace: Namespace, SecretName: "cloudprovider", Scenario: s.Name}
	return objects.Call(st.Op, specOf(), data, m)
}
