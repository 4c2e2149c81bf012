package jsoncloud

import (
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
)

// Tag key prefixes that scope a class to one cluster and one role (Gardener's convention).
const (
	ClusterTagPrefix = "kubernetes.io-cluster-"
	RoleTagPrefix    = "kubernetes.io-role-"
	// MachineTag names the machine a VM belongs to.
	MachineTag = "machinist.io/machine"
)

// ProviderSpec is MachineClass.providerSpec of a jsoncloud class:
//
//	{"region": "eu-1", "size": "small", "tags": {"kubernetes.io-cluster-shoot--a": "1", "kubernetes.io-role-worker": "1"}}
type ProviderSpec struct {
	// Region of the VMs; required, part of the ProviderID.
	Region string `json:"region"`
	// Size of the VMs; required. A VM of another size for the same machine is AlreadyExists.
	Size string `json:"size"`
	// Tags go on every VM; one key must start with ClusterTagPrefix and one with RoleTagPrefix.
	Tags map[string]string `json:"tags"`
}

// classSpec checks that class is a jsoncloud class and returns its validated spec.
func classSpec(class *v1alpha1.MachineClass) (*ProviderSpec, error) {
	if err := driver.CheckProvider(class, ProviderName); err != nil {
		return nil, err
	}
	var s ProviderSpec
	if err := driver.DecodeProviderSpec(class, &s); err != nil {
		return nil, err
	}
	var errs field.ErrorList
	path := driver.ProviderSpecPath
	if s.Region == "" || strings.Contains(s.Region, "/") {
		errs = append(errs, field.Invalid(path.Child("region"), s.Region, `set the region of the VMs (no "/")`))
	}
	if s.Size == "" {
		errs = append(errs, field.Required(path.Child("size"), "set the size of the VMs"))
	}
	if s.scope(ClusterTagPrefix) == "" || s.scope(RoleTagPrefix) == "" {
		errs = append(errs, field.Required(path.Child("tags"), "add a "+ClusterTagPrefix+"<cluster> and a "+RoleTagPrefix+"<role> tag"))
	}
	return &s, driver.Invalid(class, errs)
}

// scope returns the first tag key with prefix, in sorted order.
func (s *ProviderSpec) scope(prefix string) string {
	var keys []string
	for k := range s.Tags {
		if len(k) > len(prefix) && strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	if len(keys) == 0 {
		return ""
	}
	return keys[0]
}

// owns reports whether vm carries the class's cluster and role tags.
func (s *ProviderSpec) owns(vm VM) bool {
	_, cluster := vm.Tags[s.scope(ClusterTagPrefix)]
	_, role := vm.Tags[s.scope(RoleTagPrefix)]
	return cluster && role
}
