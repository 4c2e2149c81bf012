package kit

import (
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ScopeTags are the two tags by which a cloud provider tells a class's VMs from other clusters'
// and roles' (Gardener's kubernetes.io-cluster-… and kubernetes.io-role-… tags, spelled per
// cloud). Without them a delete or an orphan listing could reach VMs that are not the class's,
// so even Delete, List and Status require them.
type ScopeTags struct {
	// Cluster and Role are the fragments a tag's name contains.
	Cluster, Role string
	// Value follows the tag in the hint, e.g. ` (value "1")`; empty where tags have no value.
	Value string
}

// Errors requires, among a class's tag names, one naming the cluster and one naming the role.
// at gives the path each missing tag is reported at, from its fragment.
func (s ScopeTags) Errors(names []string, at func(fragment string) *field.Path) field.ErrorList {
	cluster, role := false, false
	for _, n := range names {
		cluster = cluster || strings.Contains(n, s.Cluster)
		role = role || strings.Contains(n, s.Role)
	}
	var errs field.ErrorList
	if !cluster {
		errs = append(errs, field.Required(at(s.Cluster), "add a tag "+s.Cluster+"<cluster name>"+s.Value+": it scopes the class to its cluster"))
	}
	if !role {
		errs = append(errs, field.Required(at(s.Role), "add a tag "+s.Role+"<role>, e.g. "+s.Role+"node"+s.Value+": it scopes the class to its role"))
	}
	return errs
}
