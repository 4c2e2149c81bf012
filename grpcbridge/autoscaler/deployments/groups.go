package deployments

import (
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Annotations on a MachineDeployment that make it a node group. Both keys of a pair must be set;
// machinist's pair wins over cluster-api's, which is honoured so manifests written for Cluster
// Autoscaler's clusterapi provider keep working.
const (
	AnnotationMinSize     = "autoscaler.machinist.io/min-size"
	AnnotationMaxSize     = "autoscaler.machinist.io/max-size"
	CAPIAnnotationMinSize = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size"
	CAPIAnnotationMaxSize = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size"
)

// Bounds are a group's minimum and maximum size.
type Bounds struct{ Min, Max int }

// GroupID returns the node group id of a MachineDeployment: <namespace>.<name>, the form
// --nodes takes. Namespaces cannot contain dots, so the id splits back unambiguously.
func GroupID(md types.NamespacedName) string { return md.Namespace + "." + md.Name }

// ParseGroupID splits a group id into the MachineDeployment's namespace and name.
func ParseGroupID(id string) (types.NamespacedName, bool) {
	ns, name, ok := strings.Cut(id, ".")
	if !ok || ns == "" || name == "" {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: ns, Name: name}, true
}

// FlagGroup is one --nodes value.
type FlagGroup struct {
	MachineDeployment types.NamespacedName
	Bounds
}

// ParseFlagGroup parses a --nodes value "<min>:<max>:<namespace>.<machineDeployment>", the
// form of Gardener's MCM provider.
func ParseFlagGroup(s string) (FlagGroup, error) {
	parts := strings.SplitN(s, ":", 3)
	if len(parts) != 3 {
		return FlagGroup{}, fmt.Errorf("--nodes %q: want <min>:<max>:<namespace>.<machineDeployment>, e.g. 0:10:shoot--dev.workers", s)
	}
	b, err := parseBounds(parts[0], parts[1])
	if err != nil {
		return FlagGroup{}, fmt.Errorf("--nodes %q: %w", s, err)
	}
	md, ok := ParseGroupID(parts[2])
	if !ok {
		return FlagGroup{}, fmt.Errorf("--nodes %q: %q is not <namespace>.<machineDeployment>", s, parts[2])
	}
	if errs := validation.IsDNS1123Label(md.Namespace); len(errs) > 0 {
		return FlagGroup{}, fmt.Errorf("--nodes %q: namespace %q: %s", s, md.Namespace, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(md.Name); len(errs) > 0 {
		return FlagGroup{}, fmt.Errorf("--nodes %q: machineDeployment %q: %s", s, md.Name, strings.Join(errs, "; "))
	}
	return FlagGroup{MachineDeployment: md, Bounds: b}, nil
}

func parseBounds(minText, maxText string) (Bounds, error) {
	lo, err := strconv.Atoi(strings.TrimSpace(minText))
	if err != nil || lo < 0 {
		return Bounds{}, fmt.Errorf("min size %q is not a non-negative integer", minText)
	}
	hi, err := strconv.Atoi(strings.TrimSpace(maxText))
	if err != nil || hi < 0 {
		return Bounds{}, fmt.Errorf("max size %q is not a non-negative integer", maxText)
	}
	if lo > hi {
		return Bounds{}, fmt.Errorf("min size %d is above max size %d", lo, hi)
	}
	return Bounds{Min: lo, Max: hi}, nil
}

// BoundsFromAnnotations reads a MachineDeployment's size annotations. ok is false when the
// deployment is not a node group; a non-empty problem explains an annotation that is set but
// unusable (the deployment is then not a group either).
func BoundsFromAnnotations(annotations map[string]string) (b Bounds, source string, ok bool, problem string) {
	for _, pair := range [][2]string{{AnnotationMinSize, AnnotationMaxSize}, {CAPIAnnotationMinSize, CAPIAnnotationMaxSize}} {
		lo, hasMin := annotations[pair[0]]
		hi, hasMax := annotations[pair[1]]
		switch {
		case hasMin && hasMax:
			b, err := parseBounds(lo, hi)
			if err != nil {
				return Bounds{}, "", false, fmt.Sprintf("annotations %s/%s: %v", pair[0], pair[1], err)
			}
			return b, "annotations " + strings.SplitN(pair[0], "/", 2)[0], true, ""
		case hasMin:
			return Bounds{}, "", false, fmt.Sprintf("annotation %s is set but %s is not: set both", pair[0], pair[1])
		case hasMax:
			return Bounds{}, "", false, fmt.Sprintf("annotation %s is set but %s is not: set both", pair[1], pair[0])
		}
	}
	return Bounds{}, "", false, ""
}
