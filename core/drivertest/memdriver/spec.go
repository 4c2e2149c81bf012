package memdriver

import (
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
)

// ProviderSpec is the providerSpec of a mem MachineClass.
type ProviderSpec struct {
	// Cluster scopes the class's VMs; required. It appears in ProviderIDs, so it may not
	// contain "/".
	Cluster string `json:"cluster"`
	// Role scopes the class's VMs within the cluster (e.g. "worker"); required.
	Role string `json:"role"`
	// Size is the VM size; free-form. A VM of another size for the same machine is AlreadyExists.
	Size string `json:"size,omitempty"`
	// Tags are copied onto the VM.
	Tags map[string]string `json:"tags,omitempty"`
}

// classSpec checks the class's provider and decodes and validates its providerSpec.
func classSpec(class *v1alpha1.MachineClass) (*ProviderSpec, error) {
	if err := driver.CheckProvider(class, ProviderName); err != nil {
		return nil, err
	}
	var spec ProviderSpec
	if err := driver.DecodeProviderSpec(class, &spec); err != nil {
		return nil, err
	}
	var errs field.ErrorList
	path := driver.ProviderSpecPath
	switch {
	case spec.Cluster == "":
		errs = append(errs, field.Required(path.Child("cluster"), "set the cluster the machines belong to"))
	case strings.Contains(spec.Cluster, "/"):
		errs = append(errs, field.Invalid(path.Child("cluster"), spec.Cluster, `must not contain "/"`))
	}
	if spec.Role == "" {
		errs = append(errs, field.Required(path.Child("role"), "set the role of the machines, e.g. worker"))
	}
	if err := driver.Invalid(class, errs); err != nil {
		return nil, err
	}
	return &spec, nil
}

// parseProviderID splits mem:///<cluster>/<id>.
func parseProviderID(providerID string) (cluster, id string, ok bool) {
	rest, found := strings.CutPrefix(providerID, "mem:///")
	if !found {
		return "", "", false
	}
	cluster, id, found = strings.Cut(rest, "/")
	if !found || cluster == "" || id == "" || strings.Contains(id, "/") {
		return "", "", false
	}
	return cluster, id, true
}
