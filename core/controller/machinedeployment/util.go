package machinedeployment

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"maps"
	"sort"
	"strconv"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/rand"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// templateHash hashes a template (and the collision count) into the machine-template-hash label
// value of a new MachineSet. Like MCM's it hashes the whole template; which set is the current
// one is decided by sameTemplate, not by the hash, so a set whose nodeTemplate was updated in
// place keeps its name and hash label.
func templateHash(t *v1alpha1.MachineTemplateSpec, collisionCount *int32) string {
	h := fnv.New32a()
	// encoding/json is deterministic for structs and sorts map keys.
	b, _ := json.Marshal(t)
	h.Write(b)
	if collisionCount != nil {
		h.Write([]byte(strconv.FormatInt(int64(*collisionCount), 10)))
	}
	return strconv.FormatUint(uint64(h.Sum32()), 10)
}

// setName is the name of the MachineSet of a template hash: the deployment's name and the first
// five characters of the encoded hash, as MCM names them.
func setName(d *v1alpha1.MachineDeployment, hash string) string {
	enc := rand.SafeEncodeString(hash)
	if len(enc) > 5 {
		enc = enc[:5]
	}
	return d.Name + "-" + enc
}

// setTemplate is the template of a deployment's new MachineSet, as MCM writes it: the
// deployment's template plus the template-hash label, nothing else.
func setTemplate(d *v1alpha1.MachineDeployment, hash string) v1alpha1.MachineTemplateSpec {
	t := *d.Spec.Template.DeepCopy()
	t.Labels = maps.Clone(t.Labels)
	if t.Labels == nil {
		t.Labels = map[string]string{}
	}
	t.Labels[v1alpha1.LabelMachineTemplateHash] = hash
	return t
}

// sameTemplate decides whether two templates are the same revision exactly as MCM's
// EqualIgnoreHash does, so that MCM and machinist take the same set for the current one:
// the labels compare equal except machine-template-hash, and spec.nodeTemplate,
// spec.machineConfiguration and spec.class.kind are ignored (they are applied in place, see
// syncInPlace). The labels are compared over the keys of the larger map, as MCM does: a label
// with an empty value counts as absent when the maps are of equal size.
func sameTemplate(a, b *v1alpha1.MachineTemplateSpec) bool {
	small, large := a.Labels, b.Labels
	if len(small) > len(large) {
		small, large = large, small
	}
	for k, v := range large {
		if k != v1alpha1.LabelMachineTemplateHash && small[k] != v {
			return false
		}
	}
	return equality.Semantic.DeepEqual(revisionPart(a), revisionPart(b))
}

// revisionPart is the part of a template a change of which rolls out a new MachineSet.
func revisionPart(t *v1alpha1.MachineTemplateSpec) *v1alpha1.MachineTemplateSpec {
	c := t.DeepCopy()
	c.Labels = nil
	c.Spec.NodeTemplateSpec = v1alpha1.NodeTemplateSpec{}
	c.Spec.MachineConfiguration = nil
	c.Spec.Class.Kind = ""
	return c
}

// templateMatches reports whether a MachineSet carries the deployment's current template.
func templateMatches(d *v1alpha1.MachineDeployment, ms *v1alpha1.MachineSet) bool {
	return sameTemplate(&ms.Spec.Template, &d.Spec.Template)
}

// syncInPlace copies into a set's template what the deployment changes without a rollout (as
// MCM's SetNewMachineSetNodeTemplate, SetNewMachineSetConfig and UpdateMachineSetClassKind do):
// the nodeTemplate, the machine configuration and the class kind. It reports a change. The
// MachineSet controller passes them on to the set's machines, the Machine controller to nodes.
func syncInPlace(d *v1alpha1.MachineDeployment, ms *v1alpha1.MachineSet) bool {
	want, got := &d.Spec.Template.Spec, &ms.Spec.Template.Spec
	changed := false
	if !equality.Semantic.DeepEqual(want.NodeTemplateSpec, got.NodeTemplateSpec) {
		got.NodeTemplateSpec = *want.NodeTemplateSpec.DeepCopy()
		changed = true
	}
	if !equality.Semantic.DeepEqual(want.MachineConfiguration, got.MachineConfiguration) {
		got.MachineConfiguration = want.MachineConfiguration.DeepCopy()
		changed = true
	}
	if want.Class.Kind != got.Class.Kind {
		got.Class.Kind = want.Class.Kind
		changed = true
	}
	return changed
}

// isRollingUpdate reports whether the deployment replaces machines gradually; an empty type is
// RollingUpdate.
func isRollingUpdate(d *v1alpha1.MachineDeployment) bool {
	t := d.Spec.Strategy.Type
	return t == "" || t == v1alpha1.RollingUpdateMachineDeploymentStrategyType
}

// fenceposts resolves maxSurge (rounded up) and maxUnavailable (rounded down) against the
// replicas; when both are 0, maxUnavailable is 1 so a rollout can progress. Unset values are 0.
// MCM has no defaulting either, but its validation refuses a deployment without them and leaves it
// unreconciled (docs/compatibility/mcm-api.md#machineset-and-machinedeployment).
func fenceposts(d *v1alpha1.MachineDeployment) (surge, unavailable int32, err error) {
	var s, u *intstr.IntOrString
	if ru := d.Spec.Strategy.RollingUpdate; ru != nil {
		s, u = ru.MaxSurge, ru.MaxUnavailable
	}
	zero := intstr.FromInt32(0)
	desired := int(d.Spec.Replicas)
	sv, err := intstr.GetScaledValueFromIntOrPercent(intstr.ValueOrDefault(s, zero), desired, true)
	if err != nil {
		return 0, 0, fmt.Errorf("spec.strategy.rollingUpdate.maxSurge: %w", err)
	}
	uv, err := intstr.GetScaledValueFromIntOrPercent(intstr.ValueOrDefault(u, zero), desired, false)
	if err != nil {
		return 0, 0, fmt.Errorf("spec.strategy.rollingUpdate.maxUnavailable: %w", err)
	}
	if sv < 0 || uv < 0 {
		return 0, 0, fmt.Errorf("spec.strategy.rollingUpdate: maxSurge and maxUnavailable must not be negative")
	}
	if sv == 0 && uv == 0 {
		uv = 1
	}
	return int32(sv), int32(uv), nil
}

// maxSurge is the resolved maxSurge of a rolling deployment, else 0.
func maxSurge(d *v1alpha1.MachineDeployment) int32 {
	if !isRollingUpdate(d) {
		return 0
	}
	s, _, _ := fenceposts(d)
	return s
}

// maxUnavailable is the resolved maxUnavailable of a rolling or in-place deployment (at most
// replicas), else 0.
func maxUnavailable(d *v1alpha1.MachineDeployment) int32 {
	if d.Spec.Replicas == 0 {
		return 0
	}
	var u int32
	switch {
	case isRollingUpdate(d):
		_, u, _ = fenceposts(d)
	case isInPlaceUpdate(d):
		_, u = inPlaceFenceposts(d)
	default:
		return 0
	}
	return min(u, d.Spec.Replicas)
}

// revision reads a MachineSet's revision annotation (0 when absent or unreadable).
func revision(ms *v1alpha1.MachineSet) int64 {
	v, err := strconv.ParseInt(ms.Annotations[v1alpha1.AnnotationRevision], 10, 64)
	if err != nil {
		return 0
	}
	return v
}

func maxRevision(sets []*v1alpha1.MachineSet) int64 {
	var m int64
	for _, ms := range sets {
		m = max(m, revision(ms))
	}
	return m
}

// replicaSum is the sum of spec.replicas.
func replicaSum(sets []*v1alpha1.MachineSet) int32 {
	var n int32
	for _, ms := range sets {
		if ms != nil {
			n += ms.Spec.Replicas
		}
	}
	return n
}

// availableForDecisions counts a set's available machines for scaling decisions: never more
// than its spec, so a status the MachineSet controller has not refreshed since a scale-down
// cannot make old machines look available twice.
func availableForDecisions(ms *v1alpha1.MachineSet) int32 {
	if ms == nil {
		return 0
	}
	return min(ms.Status.AvailableReplicas, ms.Spec.Replicas)
}

func availableSum(sets []*v1alpha1.MachineSet) int32 {
	var n int32
	for _, ms := range sets {
		n += availableForDecisions(ms)
	}
	return n
}

// activeSets are the sets with replicas.
func activeSets(sets []*v1alpha1.MachineSet) []*v1alpha1.MachineSet {
	var out []*v1alpha1.MachineSet
	for _, ms := range sets {
		if ms != nil && ms.Spec.Replicas > 0 {
			out = append(out, ms)
		}
	}
	return out
}

// sortByCreation orders sets oldest first (by name on ties).
func sortByCreation(sets []*v1alpha1.MachineSet) {
	sort.SliceStable(sets, func(i, j int) bool {
		a, b := sets[i], sets[j]
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		return a.Name < b.Name
	})
}

// sortBySize orders sets largest first; on equal size newer first when newerFirst, else older.
func sortBySize(sets []*v1alpha1.MachineSet, newerFirst bool) {
	sort.SliceStable(sets, func(i, j int) bool {
		a, b := sets[i], sets[j]
		if a.Spec.Replicas != b.Spec.Replicas {
			return a.Spec.Replicas > b.Spec.Replicas
		}
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			if newerFirst {
				return b.CreationTimestamp.Before(&a.CreationTimestamp)
			}
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		return a.Name < b.Name
	})
}

// annotationInt reads an integer annotation.
func annotationInt(ms *v1alpha1.MachineSet, key string) (int32, bool) {
	v, ok := ms.Annotations[key]
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil {
		return 0, false
	}
	return int32(n), true
}
