package kit

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
)

// Spec is how a provider decodes a class's providerSpec into its type T.
type Spec[T any] struct {
	// Provider is the provider's name; a class of another provider is refused.
	Provider string
	// Names is how Gardener's provider of the cloud matches keys to fields: driver.FoldedNames
	// for encoding/json, driver.ExactNames for apimachinery's decoder.
	Names driver.FieldNames
	// Validate checks a decoded spec, as Gardener's provider validates it, for a create.
	Validate func(*T) field.ErrorList
	// Scope checks what reaching a class's existing machines needs (their region or zone, the
	// cluster and role tags that scope them), for DecodeScope; nil: DecodeScope is not used.
	Scope func(*T) field.ErrorList
	// Hint, when set, says more about a spec that does not decode or validate ("the fields belong
	// under providerSpec.spec"); "" adds nothing.
	Hint func(class *v1alpha1.MachineClass) string
}

// Decode decodes and validates class's providerSpec in mode (driver.DecodeValidSpec): the
// warnings name what was ignored or matched loosely, and an invalid spec's error notes them too.
func (s Spec[T]) Decode(class *v1alpha1.MachineClass, mode driver.SpecMode) (*T, []driver.SpecWarning, error) {
	spec, warnings, err := driver.DecodeValidSpec(class, s.Provider, mode, s.Names, s.Validate)
	if err != nil && s.Hint != nil {
		if hint := s.Hint(class); hint != "" {
			err = driver.Errorf(driver.CodeOf(err), "%s (%s)", driver.MessageOf(err), hint)
		}
	}
	return spec, warnings, err
}

// Purpose is what an operation does with a class, and so how much of its spec must be valid.
type Purpose int

const (
	// ToCreate: CreateMachine and InitializeMachine act on the whole spec, decoded in the
	// driver's mode and validated (Decode).
	ToCreate Purpose = iota
	// ToReach: DeleteMachine, GetMachineStatus and ListMachines reach machines that exist; they
	// need only what Scope checks (DecodeScope), so a class that no longer validates can still
	// have its machines found and deleted.
	ToReach
)

// DecodeFor decodes class's providerSpec for purpose p: Decode in mode to create, DecodeScope to
// reach.
func (s Spec[T]) DecodeFor(class *v1alpha1.MachineClass, mode driver.SpecMode, p Purpose) (*T, error) {
	if p == ToReach {
		return s.DecodeScope(class)
	}
	spec, _, err := s.Decode(class, mode)
	return spec, err
}

// Check is the provider's registry.Registration.CheckSpec: Decode without a cloud call.
func (s Spec[T]) Check(class *v1alpha1.MachineClass, mode driver.SpecMode) ([]driver.SpecWarning, error) {
	_, warnings, err := s.Decode(class, mode)
	return warnings, err
}

// DecodeScope decodes what DeleteMachine, GetMachineStatus and ListMachines need of a class,
// checked by Scope. The rest of the spec is read as far as it decodes (encoding/json skips a
// value of the wrong type and goes on) and not validated, in any mode: a class the driver would
// now refuse to create from must not keep its existing machines from being found and deleted.
func (s Spec[T]) DecodeScope(class *v1alpha1.MachineClass) (*T, error) {
	if err := driver.CheckProvider(class, s.Provider); err != nil {
		return nil, err
	}
	raw := class.ProviderSpec.Raw
	if len(raw) == 0 {
		return nil, driver.Errorf(driver.InvalidArgument, "machineClass %q: providerSpec is empty: set the provider's machine template", class.Name)
	}
	spec := new(T)
	var typeErr *json.UnmarshalTypeError
	if err := json.Unmarshal(raw, spec); err != nil && !errors.As(err, &typeErr) {
		return nil, driver.Errorf(driver.InvalidArgument, "machineClass %q: providerSpec is not valid JSON: %s: fix the manifest", class.Name, strings.TrimPrefix(err.Error(), "json: "))
	}
	if err := driver.Invalid(class, s.Scope(spec)); err != nil {
		return nil, err
	}
	return spec, nil
}

// EnumStrings are the values of a string enumeration, sorted: what a NotSupported error lists.
func EnumStrings[T ~string](values []T) []string {
	out := make([]string, len(values))
	for i, v := range values {
		out[i] = string(v)
	}
	slices.Sort(out)
	return out
}
