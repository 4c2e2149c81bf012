package kit

import (
	"fmt"
	"strings"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
)

// StandbyModeAnnotation on a MachineClass picks how a provider stops its machines' VMs for
// standby (hibernate, shelve, suspend, deallocate, ...). It is an annotation, not a providerSpec
// field, because Gardener's providerSpec types must stay decodable unchanged by Gardener's own
// providers.
const StandbyModeAnnotation = "machinist.io/standby-mode"

// StandbyMode returns the class's standby mode: the annotation's value when it is one of
// allowed, else def when the annotation is absent or empty. Any other value is InvalidArgument
// naming the annotation and the allowed values.
func StandbyMode(provider string, class *v1alpha1.MachineClass, def string, allowed ...string) (string, error) {
	if class == nil {
		return def, nil
	}
	v, ok := class.Annotations[StandbyModeAnnotation]
	if !ok || v == "" {
		return def, nil
	}
	for _, a := range allowed {
		if v == a {
			return v, nil
		}
	}
	quoted := make([]string, len(allowed))
	for i, a := range allowed {
		quoted[i] = fmt.Sprintf("%q", a)
	}
	return "", driver.Errorf(driver.InvalidArgument, "%s: MachineClass %s: annotation %s is %q; the %s provider accepts %s (absent means %q): fix or remove the annotation",
		provider, class.Name, StandbyModeAnnotation, v, provider, strings.Join(quoted, " or "), def)
}
