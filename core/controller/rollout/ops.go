package rollout

import (
	"maps"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// Op is one operation of a step. Each kind has an Apply method that makes the change on a copy
// of the object it writes, which the controller then writes and Project keeps.
type Op interface {
	// Kind names the operation in JSON ("op") and in messages.
	Kind() string
}

// MarkForDeletion gives a machine a scaler named for deletion priority 1 and the time of the
// request, so its MachineSet deletes exactly it when the scaler's lower replicas arrive.
type MarkForDeletion struct {
	Machine string `json:"machine"`
	At      string `json:"at"`
}

// PruneTrigger rewrites the trigger-deletion annotation without the entries whose machines are
// gone or belong elsewhere (Remove: without the annotation).
type PruneTrigger struct {
	Value   string           `json:"value,omitempty"`
	Remove  bool             `json:"remove,omitempty"`
	Dropped []DroppedTrigger `json:"dropped"`
}

// DroppedTrigger is an entry PruneTrigger drops, and why.
type DroppedTrigger struct {
	Machine string        `json:"machine"`
	Why     TriggerLookup `json:"why"`
}

// CreateSet creates the MachineSet of the deployment's current template.
type CreateSet struct {
	// Set is the object to create.
	Set      *v1alpha1.MachineSet `json:"-"`
	Name     string               `json:"set"`
	Replicas int32                `json:"replicas"`
	Revision int64                `json:"revision"`
}

// SyncSet keeps the current set in step with the deployment without a rollout: its revision,
// the deployment's annotations, minReadySeconds, autoPreserveFailedMachineMax, and the fields
// applied in place (Decision.Fields).
type SyncSet struct {
	Set      string `json:"set"`
	Revision int64  `json:"revision"`
	d        *v1alpha1.MachineDeployment
}

// ScaleSet sets a set's replicas and records the deployment's replicas and replicas + maxSurge
// in its annotations. Goes names, for a scale-down, the machines its MachineSet deletes first
// (its scale-down order).
type ScaleSet struct {
	Set             string   `json:"set"`
	From            int32    `json:"from"`
	To              int32    `json:"to"`
	DesiredReplicas int32    `json:"desiredReplicas"`
	MaxReplicas     int32    `json:"maxReplicas"`
	Goes            []string `json:"goes,omitempty"`
}

// DeleteSet deletes an old set without replicas or machines beyond the revision history limit.
type DeleteSet struct {
	Set          string `json:"set"`
	HistoryLimit int32  `json:"historyLimit"`
}

// SetScaleUpDisabled labels a set node.machine.sapcloud.io/scale-up-disabled (or removes the
// label): an old set of an in-place update must not replace a machine that moved away.
type SetScaleUpDisabled struct {
	Set      string `json:"set"`
	Disabled bool   `json:"disabled"`
}

// LabelNode labels a machine's node (candidate-for-update or selected-for-update) "true".
type LabelNode struct {
	Machine string `json:"machine"`
	Node    string `json:"node"`
	Label   string `json:"label"`
}

// FinishInPlaceUpdate clears the update state of the node of a machine that moved to the new
// set after a successful in-place update.
type FinishInPlaceUpdate struct {
	Machine string `json:"machine"`
	Node    string `json:"node"`
	Set     string `json:"set"`
}

// MoveMachine hands a machine whose node was updated in place from an old set to the new one.
type MoveMachine struct {
	Machine string `json:"machine"`
	From    string `json:"from"`
	To      string `json:"to"`
}

// Uncordon makes a node of a moved machine schedulable again.
type Uncordon struct {
	Node string `json:"node"`
}

// ClearUpdateResult removes the update-result label from a machine that moved to the new set.
type ClearUpdateResult struct {
	Machine string `json:"machine"`
}

// MarkNode gives a node of the deployment the rollout's marks, or takes them away: the
// PreferNoSchedule taint on old sets' nodes and Cluster Autoscaler's scale-down-disabled
// annotation.
type MarkNode struct {
	Machine           string `json:"machine"`
	Node              string `json:"node"`
	PreferNoSchedule  bool   `json:"preferNoSchedule"`
	ScaleDownDisabled bool   `json:"scaleDownDisabled"`
}

// Kind implements Op.
func (MarkForDeletion) Kind() string     { return "MarkForDeletion" }
func (PruneTrigger) Kind() string        { return "PruneTrigger" }
func (CreateSet) Kind() string           { return "CreateSet" }
func (SyncSet) Kind() string             { return "SyncSet" }
func (ScaleSet) Kind() string            { return "ScaleSet" }
func (DeleteSet) Kind() string           { return "DeleteSet" }
func (SetScaleUpDisabled) Kind() string  { return "SetScaleUpDisabled" }
func (LabelNode) Kind() string           { return "LabelNode" }
func (FinishInPlaceUpdate) Kind() string { return "FinishInPlaceUpdate" }
func (MoveMachine) Kind() string         { return "MoveMachine" }
func (Uncordon) Kind() string            { return "Uncordon" }
func (ClearUpdateResult) Kind() string   { return "ClearUpdateResult" }
func (MarkNode) Kind() string            { return "MarkNode" }

// Apply marks the machine.
func (o MarkForDeletion) Apply(m *v1alpha1.Machine) {
	if m.Annotations == nil {
		m.Annotations = map[string]string{}
	}
	m.Annotations[v1alpha1.AnnotationMachinePriority] = v1alpha1.DeletionCandidateMachinePriority
	m.Annotations[v1alpha1.AnnotationMarkedForDeletionTime] = o.At
}

// Apply rewrites the deployment's annotation.
func (o PruneTrigger) Apply(d *v1alpha1.MachineDeployment) {
	if o.Remove {
		delete(d.Annotations, v1alpha1.AnnotationTriggerDeletionByMCM)
		return
	}
	d.Annotations[v1alpha1.AnnotationTriggerDeletionByMCM] = o.Value
}

// Apply brings the set in step with the deployment; it reports a change.
func (o SyncSet) Apply(ms *v1alpha1.MachineSet) bool {
	changed := copyAnnotations(o.d, ms)
	changed = setRevision(ms, o.Revision) || changed
	changed = syncInPlace(o.d, ms) || changed
	if ms.Spec.MinReadySeconds != o.d.Spec.MinReadySeconds {
		ms.Spec.MinReadySeconds = o.d.Spec.MinReadySeconds
		changed = true
	}
	if ms.Spec.AutoPreserveFailedMachineMax != o.d.Spec.AutoPreserveFailedMachineMax {
		// Not a rollout: MCM copies it into the current set in place.
		ms.Spec.AutoPreserveFailedMachineMax = o.d.Spec.AutoPreserveFailedMachineMax
		changed = true
	}
	return changed
}

// Apply sizes the set; it reports a change.
func (o ScaleSet) Apply(ms *v1alpha1.MachineSet) bool {
	changed := setReplicaAnnotations(ms, o.DesiredReplicas, o.MaxReplicas)
	if ms.Spec.Replicas != o.To {
		ms.Spec.Replicas = o.To
		changed = true
	}
	return changed
}

// Apply labels or unlabels the set; it reports a change.
func (o SetScaleUpDisabled) Apply(ms *v1alpha1.MachineSet) bool {
	_, has := ms.Labels[v1alpha1.LabelScaleUpDisabled]
	switch {
	case has == o.Disabled:
		return false
	case has:
		delete(ms.Labels, v1alpha1.LabelScaleUpDisabled)
	default:
		if ms.Labels == nil {
			ms.Labels = map[string]string{}
		}
		ms.Labels[v1alpha1.LabelScaleUpDisabled] = "true"
	}
	return true
}

// Apply labels the node; it reports a change.
func (o LabelNode) Apply(node *corev1.Node) bool {
	if _, ok := node.Labels[o.Label]; ok {
		return false
	}
	if node.Labels == nil {
		node.Labels = map[string]string{}
	}
	node.Labels[o.Label] = "true"
	return true
}

// criticalComponentsNotReady keeps workload off an updated node until its critical components
// (DaemonSet pods) are ready again; Gardener's resource manager removes it, and so does the
// local provider's node agent.
var criticalComponentsNotReady = corev1.Taint{Key: v1alpha1.TaintCriticalComponentsNotReady, Effect: corev1.TaintEffectNoSchedule}

// Apply clears the node's update labels and annotation, uncordons it, takes the rollout's
// PreferNoSchedule taint off and puts the critical-components-not-ready taint on.
func (o FinishInPlaceUpdate) Apply(node *corev1.Node) {
	delete(node.Labels, v1alpha1.LabelNodeCandidateForUpdate)
	delete(node.Labels, v1alpha1.LabelNodeSelectedForUpdate)
	delete(node.Labels, v1alpha1.LabelNodeUpdateResult)
	delete(node.Annotations, v1alpha1.AnnotationUpdateFailedReason)
	node.Spec.Unschedulable = false
	var taints []corev1.Taint
	hasCritical := false
	for _, t := range node.Spec.Taints {
		if t.Key == PreferNoSchedule.Key && t.Value == PreferNoSchedule.Value && t.Effect == PreferNoSchedule.Effect {
			continue
		}
		hasCritical = hasCritical || (t.Key == criticalComponentsNotReady.Key && t.Effect == criticalComponentsNotReady.Effect)
		taints = append(taints, t)
	}
	if !hasCritical {
		taints = append(taints, criticalComponentsNotReady)
	}
	node.Spec.Taints = taints
}

// Apply gives the machine the new set's selector labels (plus update-result=successful, so the
// new set does not take it for a surplus before it grows) and controller reference.
func (o MoveMachine) Apply(m *v1alpha1.Machine, from, to *v1alpha1.MachineSet) {
	labels := maps.Clone(m.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	if from.Spec.Selector != nil {
		for k := range from.Spec.Selector.MatchLabels {
			delete(labels, k)
		}
	}
	if to.Spec.Selector != nil {
		maps.Copy(labels, to.Spec.Selector.MatchLabels)
	}
	labels[v1alpha1.LabelNodeUpdateResult] = v1alpha1.LabelValueNodeUpdateSuccessful
	m.Labels = labels
	m.OwnerReferences = []metav1.OwnerReference{{
		APIVersion:         v1alpha1.SchemeGroupVersion.String(),
		Kind:               "MachineSet",
		Name:               to.Name,
		UID:                to.UID,
		Controller:         ptr.To(true),
		BlockOwnerDeletion: ptr.To(true),
	}}
}

// Apply uncordons the node; it reports a change.
func (o Uncordon) Apply(node *corev1.Node) bool {
	changed := node.Spec.Unschedulable
	node.Spec.Unschedulable = false
	return changed
}

// Apply removes the label.
func (o ClearUpdateResult) Apply(m *v1alpha1.Machine) {
	delete(m.Labels, v1alpha1.LabelNodeUpdateResult)
}

// PreferNoSchedule is put on the nodes of old MachineSets during a rollout, so new pods prefer
// the nodes that stay (MCM's deployment.machine.sapcloud.io/prefer-no-schedule=True).
var PreferNoSchedule = corev1.Taint{Key: v1alpha1.TaintPreferNoSchedule, Value: "True", Effect: corev1.TaintEffectPreferNoSchedule}

// Apply gives the node the marks or takes them away; it reports a change. The annotation is
// taken away only where a controller put it (v1alpha1.UnmarkScaleDownDisabled).
func (o MarkNode) Apply(node *corev1.Node) bool {
	changed := syncPreferNoSchedule(node, o.PreferNoSchedule)
	if node.Annotations == nil {
		node.Annotations = map[string]string{}
	}
	if o.ScaleDownDisabled {
		return v1alpha1.MarkScaleDownDisabled(node.Annotations) || changed
	}
	return v1alpha1.UnmarkScaleDownDisabled(node.Annotations) || changed
}

// syncPreferNoSchedule adds or removes the rollout's taint; it reports a change.
func syncPreferNoSchedule(node *corev1.Node, want bool) bool {
	has := false
	var taints []corev1.Taint
	for _, t := range node.Spec.Taints {
		if t.Key == PreferNoSchedule.Key && t.Effect == PreferNoSchedule.Effect {
			has = true
			continue
		}
		taints = append(taints, t)
	}
	if has == want {
		return false
	}
	if want {
		taints = append(taints, PreferNoSchedule)
	}
	node.Spec.Taints = taints
	return true
}

// annotations a MachineSet does not inherit from its deployment.
var notCopied = map[string]bool{
	"kubectl.kubernetes.io/last-applied-configuration": true,
	v1alpha1.AnnotationRevision:                        true,
	v1alpha1.AnnotationRevisionHistory:                 true,
	v1alpha1.AnnotationDesiredReplicas:                 true,
	v1alpha1.AnnotationMaxReplicas:                     true,
	v1alpha1.AnnotationTriggerDeletionByMCM:            true,
}

// copyAnnotations copies the deployment's annotations onto a set; it reports a change.
func copyAnnotations(d *v1alpha1.MachineDeployment, ms *v1alpha1.MachineSet) bool {
	changed := false
	if ms.Annotations == nil {
		ms.Annotations = map[string]string{}
	}
	for k, v := range d.Annotations {
		if notCopied[k] || ms.Annotations[k] == v {
			continue
		}
		ms.Annotations[k] = v
		changed = true
	}
	return changed
}

// setRevision gives a set a revision, keeping the ones it had in the revision history.
func setRevision(ms *v1alpha1.MachineSet, rev int64) bool {
	old := ms.Annotations[v1alpha1.AnnotationRevision]
	want := strconv.FormatInt(rev, 10)
	if old == want {
		return false
	}
	if cur, err := strconv.ParseInt(old, 10, 64); err == nil && cur > rev {
		return false
	}
	if old != "" {
		h := ms.Annotations[v1alpha1.AnnotationRevisionHistory]
		if h != "" {
			h += ","
		}
		ms.Annotations[v1alpha1.AnnotationRevisionHistory] = h + old
	}
	ms.Annotations[v1alpha1.AnnotationRevision] = want
	return true
}

// setReplicaAnnotations records a deployment's replicas and replicas + maxSurge on a set.
func setReplicaAnnotations(ms *v1alpha1.MachineSet, desired, maxReplicas int32) bool {
	if ms.Annotations == nil {
		ms.Annotations = map[string]string{}
	}
	d, m := strconv.Itoa(int(desired)), strconv.Itoa(int(maxReplicas))
	changed := ms.Annotations[v1alpha1.AnnotationDesiredReplicas] != d || ms.Annotations[v1alpha1.AnnotationMaxReplicas] != m
	ms.Annotations[v1alpha1.AnnotationDesiredReplicas] = d
	ms.Annotations[v1alpha1.AnnotationMaxReplicas] = m
	return changed
}
