package driver

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	sigsjson "sigs.k8s.io/json"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// ProviderSpecPath is the field path of a class's provider spec in error messages.
var ProviderSpecPath = field.NewPath("providerSpec")

// CheckProvider returns InvalidArgument unless class.provider names the driver called name
// (case-insensitively, so "OpenStack" matches "openstack").
func CheckProvider(class *v1alpha1.MachineClass, name string) error {
	if class == nil {
		return Error(InvalidArgument, "machineClass is missing from the request")
	}
	if !strings.EqualFold(class.Provider, name) {
		return Errorf(InvalidArgument,
			"machineClass %q: provider is %q but this is the %s driver: set provider: %s or use a class of provider %q",
			class.Name, class.Provider, name, name, class.Provider)
	}
	return nil
}

// DecodeProviderSpec decodes class.providerSpec into out leniently with encoding/json's names
// (driver.Lenient, driver.FoldedNames) and drops the warnings. Drivers that report warnings or
// honour a strict mode use DecodeSpec.
func DecodeProviderSpec(class *v1alpha1.MachineClass, out any) error {
	_, err := DecodeSpec(class, out, Lenient, FoldedNames)
	return err
}

// DecodeSpec decodes class.providerSpec into out, matching keys to fields by names. In Lenient
// mode it returns the fields it ignored or matched loosely as warnings; in Strict mode they are
// InvalidArgument. Syntax errors and values of the wrong type are InvalidArgument naming the
// field in both modes.
func DecodeSpec(class *v1alpha1.MachineClass, out any, mode SpecMode, names FieldNames) ([]SpecWarning, error) {
	if class == nil {
		return nil, Error(InvalidArgument, "machineClass is missing from the request")
	}
	raw := class.ProviderSpec.Raw
	if len(raw) == 0 {
		return nil, Errorf(InvalidArgument, "machineClass %q: providerSpec is empty: set the provider's machine template", class.Name)
	}
	return DecodeJSON(raw, out, mode, names, "machineClass "+quote(class.Name)+": providerSpec", ProviderSpecPath)
}

// DecodeJSON decodes data into out in mode, matching keys by names. what prefixes error
// messages; root is the path the warnings' field paths start from.
func DecodeJSON(data []byte, out any, mode SpecMode, names FieldNames, what string, root *field.Path) ([]SpecWarning, error) {
	var err error
	if names == ExactNames {
		// What Kubernetes' runtime decoders (apimachinery's JSON serializer) run.
		err = sigsjson.UnmarshalCaseSensitivePreserveInts(data, out)
	} else {
		err = json.Unmarshal(data, out)
	}
	if err != nil {
		var syn *json.SyntaxError
		if errors.As(err, &syn) || !json.Valid(data) {
			return nil, Errorf(InvalidArgument, "%s: not valid JSON: %s: fix the manifest", what, strings.TrimPrefix(err.Error(), "json: "))
		}
		warnings, _ := SpecWarnings(data, out, names, root)
		msg := fmt.Sprintf("%s: %s: fix the value", what, strings.TrimPrefix(err.Error(), "json: "))
		if mode == Strict && len(warnings) > 0 {
			msg += "; " + strictRefusal(warnings)
		}
		return warnings, Error(InvalidArgument, msg)
	}
	warnings, err := SpecWarnings(data, out, names, root)
	if err != nil {
		return nil, Errorf(InvalidArgument, "%s: %v: fix the manifest", what, err)
	}
	if mode == Strict && len(warnings) > 0 {
		// The warnings' paths start at root: do not name it twice.
		return warnings, Errorf(InvalidArgument, "%s: %s", strings.TrimSuffix(what, ": "+root.String()), strictRefusal(warnings))
	}
	return warnings, nil
}

func strictRefusal(warnings []SpecWarning) string {
	msgs := make([]string, len(warnings))
	for i, w := range warnings {
		msgs[i] = w.strictText()
	}
	return strings.Join(msgs, "; ") + ": fix the field names (see the provider's README for the spec fields), or decode leniently as Gardener's providers do (without strict mode)"
}

// DecodeStrict decodes JSON into out strictly and names what is wrong relative to path: an
// unknown field, a field whose name differs in case, a duplicate field or a value of the wrong
// type is InvalidArgument. It is meant for machinist's own files, not for Gardener's specs.
func DecodeStrict(data []byte, out any, path string) error {
	strict, err := sigsjson.UnmarshalStrict(data, out, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	if err != nil {
		return Errorf(InvalidArgument, "%s: %s: fix the value", path, strings.TrimPrefix(err.Error(), "json: "))
	}
	if len(strict) > 0 {
		msgs := make([]string, 0, len(strict))
		for _, e := range strict {
			msgs = append(msgs, e.Error())
		}
		return Errorf(InvalidArgument, "%s: %s: remove or rename the field (see the provider's README for the spec fields)", path, strings.Join(msgs, "; "))
	}
	return nil
}

// Invalid turns a validation result into InvalidArgument naming every bad field, or nil when the
// list is empty. Field paths are relative to the class (providerSpec.flavorName).
func Invalid(class *v1alpha1.MachineClass, errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	name := ""
	if class != nil {
		name = class.Name
	}
	return Errorf(InvalidArgument, "machineClass %q is invalid: %s", name, errs.ToAggregate().Error())
}

// SecretValue returns the value of key in secret's data, or "" when the secret or key is absent.
func SecretValue(secret *corev1.Secret, key string) string {
	if secret == nil {
		return ""
	}
	if v, ok := secret.Data[key]; ok {
		return string(v)
	}
	return secret.StringData[key]
}

func quote(s string) string { return fmt.Sprintf("%q", s) }

// DecodeValidSpec is a provider's decoding of a class's providerSpec into a new T: the class must
// be provider's (CheckProvider), the spec is decoded in mode with names (DecodeSpec) and then
// validated. The warnings name what was ignored or matched loosely; an error, InvalidArgument
// naming every bad field, notes them too (a misspelt field is why a required one is missing).
func DecodeValidSpec[T any](class *v1alpha1.MachineClass, provider string, mode SpecMode, names FieldNames, validate func(*T) field.ErrorList) (*T, []SpecWarning, error) {
	if err := CheckProvider(class, provider); err != nil {
		return nil, nil, err
	}
	spec := new(T)
	warnings, err := DecodeSpec(class, spec, mode, names)
	if err == nil {
		err = Invalid(class, validate(spec))
	}
	if err != nil {
		return nil, warnings, NoteSpecWarnings(err, warnings)
	}
	return spec, warnings, nil
}
