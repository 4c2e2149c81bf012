package machinedeployment

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// The InPlaceUpdate strategy, as MCM orchestrates it (pkg/controller/deployment_inplace.go):
// machines move from the old MachineSets to the new one without their VMs being replaced.
//
//  1. Every old set is labelled node.machine.sapcloud.io/scale-up-disabled, so it never creates a
//     machine for one that moved away, and every node of an old set's machine is labelled
//     candidate-for-update.
//  2. Auto orchestration labels candidates selected-for-update, as many at a time as
//     maxUnavailable allows (a selected node counts as unavailable until its machine has moved);
//     with Manual orchestration the user labels them.
//  3. The Machine controller drains a selected node and marks it ReadyForUpdate (node condition
//     InPlaceUpdate); the agent on the node updates it and labels it update-result=successful
//     (or failed, with the update-failed-reason annotation).
//  4. A machine whose node updated successfully changes owner: its labels and controller
//     reference move to the new set, which grows by one while the old set shrinks by one. Its
//     node is uncordoned and, on the next pass, loses the update labels and gets the
//     critical-components-not-ready taint (until its critical components are ready again).
//
// maxSurge (Auto only; Manual forces 0) lets the new set start with up to maxSurge fresh
// machines; once the new set has all replicas, old machines not updated yet are deleted.
// A failed update leaves its machine in the old set with its node still selected, so with
// maxUnavailable reached no further node is selected: the rollout stops there.

// isInPlaceUpdate reports whether the deployment updates its machines in place.
func isInPlaceUpdate(d *v1alpha1.MachineDeployment) bool {
	return d.Spec.Strategy.Type == v1alpha1.InPlaceUpdateMachineDeploymentStrategyType
}

// isManualInPlace reports whether the user selects the nodes of an in-place update.
func isManualInPlace(d *v1alpha1.MachineDeployment) bool {
	ip := d.Spec.Strategy.InPlaceUpdate
	return isInPlaceUpdate(d) && ip != nil && ip.OrchestrationType == v1alpha1.OrchestrationTypeManual
}

// validateInPlace checks spec.strategy.inPlaceUpdate as MCM's validation does
// (pkg/apis/machine/validation/machinedeployment.go): the block is required, maxSurge and
// maxUnavailable must resolve to numbers, orchestrationType is Auto or Manual. MCM does not
// default anything here, so neither does this.
func validateInPlace(d *v1alpha1.MachineDeployment) error {
	ip := d.Spec.Strategy.InPlaceUpdate
	if ip == nil {
		return errors.New("spec.strategy.inPlaceUpdate is required for strategy type InPlaceUpdate: set maxSurge, maxUnavailable and orchestrationType (Auto or Manual)")
	}
	var errs []error
	for _, f := range []struct {
		name string
		v    *intstr.IntOrString
	}{{"maxSurge", ip.MaxSurge}, {"maxUnavailable", ip.MaxUnavailable}} {
		path := "spec.strategy.inPlaceUpdate." + f.name
		if f.v == nil {
			errs = append(errs, fmt.Errorf("%s is required: set a count such as 1 or a percentage such as 25%%", path))
			continue
		}
		n, err := intstr.GetScaledValueFromIntOrPercent(f.v, int(d.Spec.Replicas), true)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s %q: %w: use a count such as 1 or a percentage such as 25%%", path, f.v.String(), err))
			continue
		}
		if n < 0 {
			errs = append(errs, fmt.Errorf("%s %q must not be negative", path, f.v.String()))
		}
	}
	switch ip.OrchestrationType {
	case v1alpha1.OrchestrationTypeAuto, v1alpha1.OrchestrationTypeManual:
	default:
		errs = append(errs, fmt.Errorf("spec.strategy.inPlaceUpdate.orchestrationType %q is invalid: use Auto (the controller selects the nodes) or Manual (you label them %s)",
			ip.OrchestrationType, v1alpha1.LabelNodeSelectedForUpdate))
	}
	return errors.Join(errs...)
}

// inPlaceFenceposts resolves an in-place deployment's maxSurge (rounded up; 0 with Manual
// orchestration) and maxUnavailable (rounded down), 1 unavailable when both are 0, as MCM's
// ResolveFenceposts does for either strategy.
func inPlaceFenceposts(d *v1alpha1.MachineDeployment) (surge, unavailable int32) {
	ip := d.Spec.Strategy.InPlaceUpdate
	if ip == nil {
		return 0, 1
	}
	zero := intstr.FromInt32(0)
	desired := int(d.Spec.Replicas)
	s, err := intstr.GetScaledValueFromIntOrPercent(intstr.ValueOrDefault(ip.MaxSurge, zero), desired, true)
	if err != nil || s < 0 || isManualInPlace(d) {
		s = 0
	}
	u, err := intstr.GetScaledValueFromIntOrPercent(intstr.ValueOrDefault(ip.MaxUnavailable, zero), desired, false)
	if err != nil || u < 0 {
		u = 0
	}
	if s == 0 && u == 0 {
		u = 1
	}
	return int32(s), int32(u)
}

// inPlaceNewSetReplicas is the size of a new set when it is created (MCM's NewISNewReplicas):
// 0 with Manual orchestration (machines only come from old sets), else as many fresh machines as
// maxSurge allows on top of the machines there are.
func (ro *rollout) inPlaceNewSetReplicas(all []*v1alpha1.MachineSet, newMS *v1alpha1.MachineSet) int32 {
	d := ro.d
	var newSpec int32
	if newMS != nil {
		newSpec = newMS.Spec.Replicas
	}
	if isManualInPlace(d) {
		return newSpec
	}
	surge, _ := inPlaceFenceposts(d)
	var current int32
	for _, ms := range all {
		current += ro.machineCount(ms)
	}
	maxTotal := d.Spec.Replicas + surge
	if current >= maxTotal {
		return newSpec
	}
	return newSpec + max(min(maxTotal-current, d.Spec.Replicas-newSpec), 0)
}

// errInPlaceNoTarget: an in-place update needs the nodes.
var errInPlaceNoTarget = errors.New("spec.strategy.type InPlaceUpdate needs the target cluster's nodes, and this controller runs without a target cluster (--target-kubeconfig=none): use RollingUpdate or Recreate, or run with a target cluster")

// rolloutInPlace moves one step of an in-place update (MCM's rolloutInPlace).
func (ro *rollout) rolloutInPlace(ctx context.Context) error {
	if ro.r.opts.Target == nil {
		ro.r.recorder.Eventf(ro.d, nil, "Warning", ReasonInvalidSpec, "Validate", "%v", errInPlaceNoTarget)
		return ro.r.writeInvalidStatus(ctx, ro.d, errInPlaceNoTarget)
	}
	newMS, old, err := ro.getAllSets(ctx, true)
	if err != nil {
		return err
	}
	all := append(append([]*v1alpha1.MachineSet{}, old...), newMS)

	if err := ro.setScaleUpDisabled(ctx, newMS, old); err != nil {
		return err
	}
	if err := ro.labelCandidates(ctx, old); err != nil {
		return err
	}
	if err := ro.syncInPlaceSets(ctx, old, newMS); err != nil {
		return err
	}
	scaledUp, err := ro.reconcileNewSetInPlace(ctx, old, newMS)
	if err != nil {
		return err
	}
	if scaledUp {
		return ro.syncStatus(ctx, newMS)
	}
	workDone, err := ro.reconcileOldSetsInPlace(ctx, all, activeSets(old), newMS)
	if err != nil {
		return err
	}
	if !workDone && complete(ro.d, &ro.d.Status) {
		if err := ro.cleanup(ctx, old); err != nil {
			return err
		}
	}
	return ro.syncStatus(ctx, newMS)
}

// setScaleUpDisabled labels the old sets that still have machines scale-up-disabled, so a set
// whose machine moved to the new set does not create another before it is scaled down. The new
// set never carries the label: a set that was old once and is current again (a rollback) must
// be able to create machines (MCM leaves the label in place there).
func (ro *rollout) setScaleUpDisabled(ctx context.Context, newMS *v1alpha1.MachineSet, old []*v1alpha1.MachineSet) error {
	for _, ms := range old {
		if _, ok := ms.Labels[v1alpha1.LabelScaleUpDisabled]; ok || (ms.Spec.Replicas == 0 && len(ro.machines[ms.UID]) == 0) {
			continue
		}
		if err := ro.patchSetLabel(ctx, ms, ptr.To("true")); err != nil {
			return err
		}
	}
	if _, ok := newMS.Labels[v1alpha1.LabelScaleUpDisabled]; ok {
		return ro.patchSetLabel(ctx, newMS, nil)
	}
	return nil
}

// patchSetLabel sets (value non-nil) or removes the scale-up-disabled label of a set.
func (ro *rollout) patchSetLabel(ctx context.Context, ms *v1alpha1.MachineSet, value *string) error {
	upd := ms.DeepCopy()
	if value != nil {
		if upd.Labels == nil {
			upd.Labels = map[string]string{}
		}
		upd.Labels[v1alpha1.LabelScaleUpDisabled] = *value
	} else {
		delete(upd.Labels, v1alpha1.LabelScaleUpDisabled)
	}
	if err := ro.r.client.Patch(ctx, upd, client.MergeFrom(ms)); err != nil {
		return fmt.Errorf("machinedeployment: label machine set %s %s: %w", ms.Name, v1alpha1.LabelScaleUpDisabled, err)
	}
	*ms = *upd
	return nil
}

// labelCandidates labels the node of every machine of the old sets candidate-for-update.
func (ro *rollout) labelCandidates(ctx context.Context, old []*v1alpha1.MachineSet) error {
	for _, ms := range old {
		for _, m := range ro.machines[ms.UID] {
			if m.DeletionTimestamp != nil {
				continue
			}
			if _, err := ro.labelNode(ctx, m, v1alpha1.LabelNodeCandidateForUpdate); err != nil {
				return err
			}
		}
	}
	return nil
}

// node reads the node of a machine from the target cluster's cache; nil when the machine has
// none (yet) or it is gone.
func (ro *rollout) node(ctx context.Context, m *v1alpha1.Machine) (*corev1.Node, error) {
	name := m.Labels[v1alpha1.LabelNode]
	if name == "" {
		return nil, nil
	}
	node := &corev1.Node{}
	if err := ro.r.opts.Target.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("machinedeployment: read node %s of machine %s: %w", name, m.Name, err)
	}
	return node, nil
}

// labelNode sets label=true on a machine's node unless it has it; it reports whether the
// machine has a node.
func (ro *rollout) labelNode(ctx context.Context, m *v1alpha1.Machine, label string) (bool, error) {
	node, err := ro.node(ctx, m)
	if err != nil || node == nil {
		return false, err
	}
	if _, ok := node.Labels[label]; ok {
		return true, nil
	}
	upd := node.DeepCopy()
	if upd.Labels == nil {
		upd.Labels = map[string]string{}
	}
	upd.Labels[label] = "true"
	if err := ro.r.opts.Target.Patch(ctx, upd, client.MergeFrom(node)); err != nil && !apierrors.IsNotFound(err) {
		return false, fmt.Errorf("machinedeployment: label node %s %s: %w", node.Name, label, err)
	}
	return true, nil
}

// inPlaceCondition returns a machine's copy of its node's InPlaceUpdate condition.
func inPlaceCondition(conds []corev1.NodeCondition) *corev1.NodeCondition {
	for i := range conds {
		if conds[i].Type == v1alpha1.NodeConditionInPlaceUpdate {
			return &conds[i]
		}
	}
	return nil
}

// updateSucceeded is MCM's test for a finished update: the condition says UpdateSuccessful and
// the node carries update-result=successful.
func updateSucceeded(cond *corev1.NodeCondition, nodeLabels map[string]string) bool {
	return cond != nil && cond.Reason == v1alpha1.ReasonUpdateSuccessful &&
		nodeLabels[v1alpha1.LabelNodeUpdateResult] == v1alpha1.LabelValueNodeUpdateSuccessful
}

// syncInPlaceSets finishes what earlier passes started (MCM's syncMachineSets): the new set
// counts machines that moved to it, moved machines lose the update-result label, their nodes
// lose the update labels (uncordoned, PreferNoSchedule taint off, critical-components-not-ready
// taint on), and old sets shrink to the machines they still have.
func (ro *rollout) syncInPlaceSets(ctx context.Context, old []*v1alpha1.MachineSet, newMS *v1alpha1.MachineSet) error {
	newMachines := ro.machines[newMS.UID]
	var moved []*v1alpha1.Machine
	for _, m := range newMachines {
		if m.Labels[v1alpha1.LabelNodeUpdateResult] == v1alpha1.LabelValueNodeUpdateSuccessful {
			if c := inPlaceCondition(m.Status.Conditions); c != nil && c.Reason == v1alpha1.ReasonUpdateSuccessful {
				moved = append(moved, m)
			}
		}
	}
	if extra := int32(len(newMachines)) - newMS.Spec.Replicas; extra > 0 && len(moved) > 0 {
		// A pass moved machines and stopped before growing the set.
		if _, err := ro.scaleSet(ctx, newMS, newMS.Spec.Replicas+min(int32(len(moved)), extra)); err != nil {
			return err
		}
	}
	for _, m := range moved {
		upd := m.DeepCopy()
		delete(upd.Labels, v1alpha1.LabelNodeUpdateResult)
		if err := ro.r.client.Patch(ctx, upd, client.MergeFrom(m)); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("machinedeployment: remove label %s from machine %s: %w", v1alpha1.LabelNodeUpdateResult, m.Name, err)
		}
	}
	for _, m := range newMachines {
		if err := ro.finishNode(ctx, m); err != nil {
			return err
		}
	}
	for _, ms := range old {
		if have := int32(len(ro.machines[ms.UID])); have < ms.Spec.Replicas {
			if _, err := ro.scaleSet(ctx, ms, have); err != nil {
				return err
			}
		}
	}
	return nil
}

// criticalComponentsNotReady keeps workload off an updated node until its critical components
// (DaemonSet pods) are ready again; Gardener's resource manager removes it, and so does the
// local provider's node agent.
var criticalComponentsNotReady = corev1.Taint{Key: v1alpha1.TaintCriticalComponentsNotReady, Effect: corev1.TaintEffectNoSchedule}

// finishNode clears the update state of the node of a machine that moved to the new set after
// a successful update.
func (ro *rollout) finishNode(ctx context.Context, m *v1alpha1.Machine) error {
	node, err := ro.node(ctx, m)
	if err != nil || node == nil {
		return err // a fresh machine of the new set may have no node yet
	}
	if !updateSucceeded(inPlaceCondition(node.Status.Conditions), node.Labels) {
		return nil
	}
	upd := node.DeepCopy()
	delete(upd.Labels, v1alpha1.LabelNodeCandidateForUpdate)
	delete(upd.Labels, v1alpha1.LabelNodeSelectedForUpdate)
	delete(upd.Labels, v1alpha1.LabelNodeUpdateResult)
	delete(upd.Annotations, v1alpha1.AnnotationUpdateFailedReason)
	upd.Spec.Unschedulable = false
	var taints []corev1.Taint
	hasCritical := false
	for _, t := range upd.Spec.Taints {
		if t.Key == preferNoSchedule.Key && t.Value == preferNoSchedule.Value && t.Effect == preferNoSchedule.Effect {
			continue
		}
		hasCritical = hasCritical || (t.Key == criticalComponentsNotReady.Key && t.Effect == criticalComponentsNotReady.Effect)
		taints = append(taints, t)
	}
	if !hasCritical {
		taints = append(taints, criticalComponentsNotReady)
	}
	upd.Spec.Taints = taints
	if err := ro.r.opts.Target.Patch(ctx, upd, client.MergeFromWithOptions(node, client.MergeFromWithOptimisticLock{})); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("machinedeployment: clear the in-place update of node %s: %w", node.Name, err)
	}
	ro.r.recorder.Eventf(ro.d, m, "Normal", "InPlaceUpdated", "InPlaceUpdate", "Machine %s (node %s) was updated in place and moved to machine set %s", m.Name, node.Name, ownerName(m))
	return nil
}

func ownerName(m *v1alpha1.Machine) string {
	if ref := metav1.GetControllerOf(m); ref != nil {
		return ref.Name
	}
	return ""
}

// reconcileNewSetInPlace sizes the new set (MCM's reconcileNewMachineSetInPlace): down to
// replicas when above, up to what old sets do not cover, and up by the machines it takes over
// from old sets after their update.
func (ro *rollout) reconcileNewSetInPlace(ctx context.Context, old []*v1alpha1.MachineSet, newMS *v1alpha1.MachineSet) (bool, error) {
	d := ro.d
	switch {
	case newMS.Spec.Replicas == d.Spec.Replicas:
		return false, nil
	case newMS.Spec.Replicas > d.Spec.Replicas:
		return ro.scaleSet(ctx, newMS, d.Spec.Replicas)
	}
	oldReplicas := replicaSum(old)
	if oldReplicas == 0 {
		return ro.scaleSet(ctx, newMS, d.Spec.Replicas)
	}
	if oldReplicas+newMS.Spec.Replicas < d.Spec.Replicas {
		return ro.scaleSet(ctx, newMS, d.Spec.Replicas-oldReplicas)
	}
	moved, err := ro.moveUpdatedMachines(ctx, old, newMS)
	if err != nil || moved == 0 {
		return false, err
	}
	return ro.scaleSet(ctx, newMS, newMS.Spec.Replicas+moved)
}

// moveUpdatedMachines hands the machines of old sets whose nodes were updated to the new set:
// labels (the old set's selector labels replaced by the new set's, plus update-result=successful
// so the new set does not take the machine for a surplus before it grows) and controller
// reference in one write, then uncordons the node and shrinks the old set.
func (ro *rollout) moveUpdatedMachines(ctx context.Context, old []*v1alpha1.MachineSet, newMS *v1alpha1.MachineSet) (int32, error) {
	var total int32
	for _, ms := range old {
		var moved int32
		for _, m := range ro.machines[ms.UID] {
			if m.DeletionTimestamp != nil || m.Status.CurrentStatus.Phase == v1alpha1.MachineInPlaceUpdating {
				continue
			}
			node, err := ro.node(ctx, m)
			if err != nil {
				return total, err
			}
			if node == nil || !updateSucceeded(inPlaceCondition(m.Status.Conditions), node.Labels) {
				continue
			}
			if err := ro.moveMachine(ctx, m, ms, newMS); err != nil {
				return total, err
			}
			if node.Spec.Unschedulable {
				upd := node.DeepCopy()
				upd.Spec.Unschedulable = false
				if err := ro.r.opts.Target.Patch(ctx, upd, client.MergeFrom(node)); err != nil && !apierrors.IsNotFound(err) {
					return total, fmt.Errorf("machinedeployment: uncordon node %s: %w", node.Name, err)
				}
			}
			moved++
		}
		if moved == 0 {
			continue
		}
		total += moved
		if _, err := ro.scaleSet(ctx, ms, max(ms.Spec.Replicas-moved, 0)); err != nil {
			return total, err
		}
	}
	return total, nil
}

// moveMachine gives a machine the new set's selector labels and controller reference.
func (ro *rollout) moveMachine(ctx context.Context, m *v1alpha1.Machine, from, to *v1alpha1.MachineSet) error {
	upd := m.DeepCopy()
	labels := maps.Clone(m.Labels)
	if from.Spec.Selector != nil {
		for k := range from.Spec.Selector.MatchLabels {
			delete(labels, k)
		}
	}
	if to.Spec.Selector != nil {
		maps.Copy(labels, to.Spec.Selector.MatchLabels)
	}
	labels[v1alpha1.LabelNodeUpdateResult] = v1alpha1.LabelValueNodeUpdateSuccessful
	upd.Labels = labels
	upd.OwnerReferences = []metav1.OwnerReference{{
		APIVersion:         v1alpha1.SchemeGroupVersion.String(),
		Kind:               "MachineSet",
		Name:               to.Name,
		UID:                to.UID,
		Controller:         ptr.To(true),
		BlockOwnerDeletion: ptr.To(true),
	}}
	if err := ro.r.client.Patch(ctx, upd, client.MergeFromWithOptions(m, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("machinedeployment: move machine %s to machine set %s: %w", m.Name, to.Name, err)
	}
	return nil
}

// reconcileOldSetsInPlace selects nodes of old sets for update within maxUnavailable (MCM's
// reconcileOldMachineSetsInPlace); once the new set is full, the old machines left are deleted.
func (ro *rollout) reconcileOldSetsInPlace(ctx context.Context, all, old []*v1alpha1.MachineSet, newMS *v1alpha1.MachineSet) (bool, error) {
	d := ro.d
	if replicaSum(old) == 0 {
		return false, nil
	}
	if newMS.Spec.Replicas == d.Spec.Replicas {
		// maxSurge filled the new set: the old machines need no update.
		for _, ms := range old {
			if _, err := ro.scaleSet(ctx, ms, 0); err != nil {
				return false, err
			}
		}
		return true, nil
	}
	if isManualInPlace(d) {
		return false, nil
	}
	undergoing, err := ro.selectedCount(ctx, old)
	if err != nil {
		return false, err
	}
	// Selected machines move to the new set once updated: select no more than it lacks.
	if undergoing+newMS.Spec.Replicas >= d.Spec.Replicas {
		return false, nil
	}
	minAvailable := d.Spec.Replicas - maxUnavailable(d)
	newUnavailable := max(newMS.Spec.Replicas-availableForDecisions(newMS), 0)
	if replicaSum(all)-minAvailable-newUnavailable-undergoing <= 0 {
		return false, nil
	}
	n, err := ro.selectForUpdate(ctx, all, old, newMS, undergoing, minAvailable)
	return n > 0, err
}

// selectedCount counts the machines of the sets whose node is selected for update.
func (ro *rollout) selectedCount(ctx context.Context, sets []*v1alpha1.MachineSet) (int32, error) {
	var n int32
	for _, ms := range sets {
		for _, m := range ro.machines[ms.UID] {
			node, err := ro.node(ctx, m)
			if err != nil {
				return 0, err
			}
			if node == nil {
				continue
			}
			if _, ok := node.Labels[v1alpha1.LabelNodeSelectedForUpdate]; ok {
				n++
			}
		}
	}
	return n, nil
}

// selectForUpdate labels candidate nodes of old sets (oldest set first) selected-for-update:
// as many as keep minAvailable machines available and no more than the new set lacks.
func (ro *rollout) selectForUpdate(ctx context.Context, all, old []*v1alpha1.MachineSet, newMS *v1alpha1.MachineSet, undergoing, minAvailable int32) (int32, error) {
	available := availableSum(all) - undergoing
	if available <= minAvailable {
		return 0, nil
	}
	budget := min(available-minAvailable, max(ro.d.Spec.Replicas-newMS.Spec.Replicas, 0))
	sortByCreation(old)
	var total int32
	for _, ms := range old {
		if total >= budget {
			break
		}
		if ms.Spec.Replicas == 0 {
			continue
		}
		want := min(ms.Spec.Replicas, budget-total)
		for _, m := range ro.candidates(ms) {
			if want == 0 {
				break
			}
			node, err := ro.node(ctx, m)
			if err != nil {
				return total, err
			}
			if node == nil {
				continue
			}
			if _, ok := node.Labels[v1alpha1.LabelNodeCandidateForUpdate]; !ok {
				continue
			}
			if _, ok := node.Labels[v1alpha1.LabelNodeSelectedForUpdate]; ok {
				continue
			}
			if _, err := ro.labelNode(ctx, m, v1alpha1.LabelNodeSelectedForUpdate); err != nil {
				return total, err
			}
			ro.r.recorder.Eventf(ro.d, m, "Normal", "SelectedForUpdate", "InPlaceUpdate", "Selected node %s of machine %s for an in-place update", node.Name, m.Name)
			want--
			total++
		}
	}
	return total, nil
}

// candidates are a set's live machines with a node, in a stable order (oldest first).
func (ro *rollout) candidates(ms *v1alpha1.MachineSet) []*v1alpha1.Machine {
	var out []*v1alpha1.Machine
	for _, m := range ro.machines[ms.UID] {
		if m.DeletionTimestamp == nil && m.Labels[v1alpha1.LabelNode] != "" {
			out = append(out, m)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		return a.Name < b.Name
	})
	return out
}
