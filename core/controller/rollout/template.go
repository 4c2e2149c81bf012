package rollout

import (
	"encoding/json"
	"hash/fnv"
	"maps"
	"sort"
	"strconv"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/rand"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// TemplateHash hashes a template (and the collision count) into the machine-template-hash label
// value of a new MachineSet. Like MCM's it hashes the whole template; which set is the current
// one is decided by SameTemplate, not by the hash, so a set whose nodeTemplate was updated in
// place keeps its name and hash label.
func TemplateHash(t *v1alpha1.MachineTemplateSpec, collisionCount *int32) string {
	h := fnv.New32a()
	// encoding/json is deterministic for structs and sorts map keys.
	b, _ := json.Marshal(t)
	h.Write(b)
	if collisionCount != nil {
		h.Write([]byte(strconv.FormatInt(int64(*collisionCount), 10)))
	}
	return strconv.FormatUint(uint64(h.Sum32()), 10)
}

// SetName is the name of the MachineSet of a template hash: the deployment's name and the first
// five characters of the encoded hash, as MCM names them.
func SetName(d *v1alpha1.MachineDeployment, hash string) string {
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

// SameTemplate decides whether two templates are the same revision exactly as MCM's
// EqualIgnoreHash does, so that MCM and machinist take the same set for the current one:
// the labels compare equal except machine-template-hash, and spec.nodeTemplate,
// spec.machineConfiguration and spec.class.kind are ignored (they are applied in place, see
// syncInPlace). The labels are compared over the keys of the larger map, as MCM does: a label
// with an empty value counts as absent when the maps are of equal size.
func SameTemplate(a, b *v1alpha1.MachineTemplateSpec) bool {
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

// revisionPart is the part of a template a change of which rolls out a new MachineSet. It is a
// shallow copy, only for comparing: it shares the template's maps and pointers (never write
// through it). Every deployment reconcile compares its sets' templates, so a deep copy here
// was a tenth of a 500-deployment fleet's reconcile CPU.
func revisionPart(t *v1alpha1.MachineTemplateSpec) *v1alpha1.MachineTemplateSpec {
	c := *t
	c.Labels = nil
	c.Spec.NodeTemplateSpec = v1alpha1.NodeTemplateSpec{}
	c.Spec.MachineConfiguration = nil
	c.Spec.Class.Kind = ""
	return &c
}

// TemplateMatches reports whether a MachineSet carries the deployment's current template.
func TemplateMatches(d *v1alpha1.MachineDeployment, ms *v1alpha1.MachineSet) bool {
	return SameTemplate(&ms.Spec.Template, &d.Spec.Template)
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

// Paths of the fields applied in place, as FieldChange names them.
const (
	fieldNodeTemplate   = "spec.template.spec.nodeTemplate"
	fieldNodeLabels     = fieldNodeTemplate + ".metadata.labels"
	fieldNodeAnnots     = fieldNodeTemplate + ".metadata.annotations"
	fieldNodeTaints     = fieldNodeTemplate + ".spec.taints"
	fieldMachineConfig  = "spec.template.spec.machineConfiguration"
	fieldClassKind      = "spec.template.spec.class.kind"
	reachesNodes        = "nodes"
	reachesMachines     = "machines"
	fieldNodeTemplateNS = fieldNodeTemplate + ".spec"
)

// inPlaceFields lists what syncInPlace would change in a set, field by field: each changed
// label and annotation key of the node template, its taints and the rest of its node spec, the
// other parts of the node template, the machine configuration and the class kind. The node
// template reaches the machines' nodes (the Machine controller syncs labels, annotations and
// taints onto them); the rest reaches the machines.
func inPlaceFields(d *v1alpha1.MachineDeployment, ms *v1alpha1.MachineSet) []FieldChange {
	want, got := &d.Spec.Template.Spec, &ms.Spec.Template.Spec
	var out []FieldChange
	for _, k := range changedKeys(want.NodeTemplateSpec.Labels, got.NodeTemplateSpec.Labels) {
		out = append(out, FieldChange{Path: fieldNodeLabels + "." + k, Reaches: reachesNodes})
	}
	for _, k := range changedKeys(want.NodeTemplateSpec.Annotations, got.NodeTemplateSpec.Annotations) {
		out = append(out, FieldChange{Path: fieldNodeAnnots + "." + k, Reaches: reachesNodes})
	}
	if !equality.Semantic.DeepEqual(want.NodeTemplateSpec.Spec.Taints, got.NodeTemplateSpec.Spec.Taints) {
		out = append(out, FieldChange{Path: fieldNodeTaints, Reaches: reachesNodes})
	}
	wantSpec, gotSpec := want.NodeTemplateSpec.Spec, got.NodeTemplateSpec.Spec
	wantSpec.Taints, gotSpec.Taints = nil, nil
	if !equality.Semantic.DeepEqual(wantSpec, gotSpec) {
		out = append(out, FieldChange{Path: fieldNodeTemplateNS, Reaches: reachesNodes})
	}
	wantMeta, gotMeta := want.NodeTemplateSpec.ObjectMeta, got.NodeTemplateSpec.ObjectMeta
	wantMeta.Labels, wantMeta.Annotations, gotMeta.Labels, gotMeta.Annotations = nil, nil, nil, nil
	if !equality.Semantic.DeepEqual(wantMeta, gotMeta) {
		out = append(out, FieldChange{Path: fieldNodeTemplate + ".metadata", Reaches: reachesNodes})
	}
	if !equality.Semantic.DeepEqual(want.MachineConfiguration, got.MachineConfiguration) {
		out = append(out, FieldChange{Path: fieldMachineConfig, Reaches: reachesMachines})
	}
	if want.Class.Kind != got.Class.Kind {
		out = append(out, FieldChange{Path: fieldClassKind, Reaches: reachesMachines})
	}
	return out
}

// changedKeys are the keys whose values differ between two maps (added, changed or removed),
// sorted.
func changedKeys(want, got map[string]string) []string {
	var out []string
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			out = append(out, k)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// RevisionHash identifies the part of a template whose change rolls out a new MachineSet (what
// SameTemplate compares): equal for templates SameTemplate calls the same, apart from labels
// with empty values. A pool names its rollout by its deployments' revision hashes.
func RevisionHash(t *v1alpha1.MachineTemplateSpec) string {
	c := revisionPart(t)
	labels := map[string]string{}
	for k, v := range t.Labels {
		if k != v1alpha1.LabelMachineTemplateHash && v != "" {
			labels[k] = v
		}
	}
	h := fnv.New32a()
	b, _ := json.Marshal(struct {
		Labels map[string]string
		T      *v1alpha1.MachineTemplateSpec
	}{labels, c})
	h.Write(b)
	return strconv.FormatUint(uint64(h.Sum32()), 16)
}
