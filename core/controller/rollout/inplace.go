package rollout

import (
	"sort"

	corev1 "k8s.io/api/core/v1"

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

// inPlace plans the steps of the InPlaceUpdate strategy.
type inPlace struct{ *planner }

// rollout plans one step of an in-place update (MCM's rolloutInPlace).
func (ip inPlace) rollout() {
	ip.pool().applyGates() // a halt only stops it: in place, nothing new is created to give up
	newMS, old := ip.currentAndOld(true)
	all := append(append([]*v1alpha1.MachineSet{}, old...), newMS)
	ip.setScaleUpDisabled(newMS, old)
	ip.labelCandidates(old)
	ip.syncSets(old, newMS)
	if ip.reconcileNewSet(old, newMS) {
		return
	}
	if !ip.reconcileOldSets(all, activeSets(old), newMS) && Complete(ip.d, &ip.d.Status) {
		ip.cleanup(old)
	}
}

// setScaleUpDisabled labels the old sets that still have machines scale-up-disabled, so a set
// whose machine moved to the new set does not create another before it is scaled down. The new
// set never carries the label: a set that was old once and is current again (a rollback) must
// be able to create machines (MCM leaves the label in place there).
func (ip inPlace) setScaleUpDisabled(newMS *v1alpha1.MachineSet, old []*v1alpha1.MachineSet) {
	for _, ms := range old {
		if _, ok := ms.Labels[v1alpha1.LabelScaleUpDisabled]; ok || (ms.Spec.Replicas == 0 && len(ip.machinesOf(ms)) == 0) {
			continue
		}
		ip.labelSet(ms, true)
	}
	if _, ok := newMS.Labels[v1alpha1.LabelScaleUpDisabled]; ok {
		ip.labelSet(newMS, false)
	}
}

func (ip inPlace) labelSet(ms *v1alpha1.MachineSet, disabled bool) {
	op := SetScaleUpDisabled{Set: ms.Name, Disabled: disabled}
	op.Apply(ms)
	ip.add(op)
}

// labelCandidates labels the node of every machine of the old sets candidate-for-update.
func (ip inPlace) labelCandidates(old []*v1alpha1.MachineSet) {
	for _, ms := range old {
		for _, m := range ip.machinesOf(ms) {
			if m.DeletionTimestamp == nil {
				ip.labelNode(m, v1alpha1.LabelNodeCandidateForUpdate)
			}
		}
	}
}

// labelNode labels a machine's node label=true unless it has the label; it reports whether the
// machine has a node.
func (ip inPlace) labelNode(m *v1alpha1.Machine, label string) bool {
	node := ip.node(m)
	if node == nil {
		return false
	}
	if _, ok := node.Labels[label]; ok {
		return true
	}
	op := LabelNode{Machine: m.Name, Node: node.Name, Label: label}
	op.Apply(ip.writableNode(node))
	ip.add(op)
	return true
}

// inPlaceCondition returns a copy's InPlaceUpdate condition (a node's, or a machine's copy of
// it).
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

// syncSets finishes what earlier passes started (MCM's syncMachineSets): the new set counts
// machines that moved to it, moved machines lose the update-result label, their nodes lose the
// update labels (uncordoned, PreferNoSchedule taint off, critical-components-not-ready taint
// on), and old sets shrink to the machines they still have.
func (ip inPlace) syncSets(old []*v1alpha1.MachineSet, newMS *v1alpha1.MachineSet) {
	newMachines := ip.machinesOf(newMS)
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
		ip.scaleSet(newMS, newMS.Spec.Replicas+min(int32(len(moved)), extra))
	}
	for _, m := range moved {
		ip.add(ClearUpdateResult{Machine: m.Name})
	}
	for _, m := range newMachines {
		node := ip.node(m)
		if node == nil || !updateSucceeded(inPlaceCondition(node.Status.Conditions), node.Labels) {
			continue // a fresh machine of the new set may have no node yet
		}
		op := FinishInPlaceUpdate{Machine: m.Name, Node: node.Name, Set: newMS.Name}
		op.Apply(ip.writableNode(node))
		ip.add(op)
	}
	for _, ms := range old {
		if have := int32(len(ip.machinesOf(ms))); have < ms.Spec.Replicas {
			ip.scaleSet(ms, have)
		}
	}
}

// reconcileNewSet sizes the new set (MCM's reconcileNewMachineSetInPlace): down to replicas when
// above, up to what old sets do not cover, and up by the machines it takes over from old sets
// after their update. It reports a change of size.
func (ip inPlace) reconcileNewSet(old []*v1alpha1.MachineSet, newMS *v1alpha1.MachineSet) bool {
	d := ip.d
	switch {
	case newMS.Spec.Replicas == d.Spec.Replicas:
		return false
	case newMS.Spec.Replicas > d.Spec.Replicas:
		return ip.scaleSet(newMS, d.Spec.Replicas)
	}
	oldReplicas := replicaSum(old)
	if oldReplicas == 0 {
		return ip.scaleSet(newMS, d.Spec.Replicas)
	}
	if oldReplicas+newMS.Spec.Replicas < d.Spec.Replicas {
		return ip.scaleSet(newMS, d.Spec.Replicas-oldReplicas)
	}
	moved := ip.moveUpdatedMachines(old, newMS)
	if moved == 0 {
		return false
	}
	return ip.scaleSet(newMS, newMS.Spec.Replicas+moved)
}

// moveUpdatedMachines hands the machines of old sets whose nodes were updated to the new set,
// uncordons their nodes and shrinks the old sets.
func (ip inPlace) moveUpdatedMachines(old []*v1alpha1.MachineSet, newMS *v1alpha1.MachineSet) int32 {
	var total int32
	for _, ms := range old {
		var moved int32
		for _, m := range ip.machinesOf(ms) {
			if m.DeletionTimestamp != nil || m.Status.CurrentStatus.Phase == v1alpha1.MachineInPlaceUpdating {
				continue
			}
			node := ip.node(m)
			if node == nil || !updateSucceeded(inPlaceCondition(m.Status.Conditions), node.Labels) {
				continue
			}
			ip.add(MoveMachine{Machine: m.Name, From: ms.Name, To: newMS.Name})
			ip.moved[m.Name] = true
			ip.progress = true
			if node.Spec.Unschedulable {
				op := Uncordon{Node: node.Name}
				op.Apply(ip.writableNode(node))
				ip.add(op)
			}
			moved++
		}
		if moved == 0 {
			continue
		}
		total += moved
		ip.scaleSet(ms, max(ms.Spec.Replicas-moved, 0))
	}
	return total
}

// reconcileOldSets selects nodes of old sets for update within maxUnavailable (MCM's
// reconcileOldMachineSetsInPlace); once the new set is full, the old machines left are deleted.
// It reports whether it did any of that.
func (ip inPlace) reconcileOldSets(all, old []*v1alpha1.MachineSet, newMS *v1alpha1.MachineSet) bool {
	d := ip.d
	if replicaSum(old) == 0 {
		return false
	}
	if newMS.Spec.Replicas == d.Spec.Replicas {
		// maxSurge filled the new set: the old machines need no update.
		for _, ms := range old {
			ip.scaleSet(ms, 0)
		}
		return true
	}
	if ip.pool().manualInPlace() {
		return false
	}
	undergoing := ip.selectedCount(old)
	// Selected machines move to the new set once updated: select no more than it lacks.
	if undergoing+newMS.Spec.Replicas >= d.Spec.Replicas {
		return false
	}
	minAvailable := d.Spec.Replicas - ip.lim.unavailable
	newUnavailable := max(newMS.Spec.Replicas-availableForDecisions(newMS), 0)
	if replicaSum(all)-minAvailable-newUnavailable-undergoing <= 0 {
		return false
	}
	return ip.selectForUpdate(all, old, newMS, undergoing, minAvailable) > 0
}

// selectedCount counts the machines of the sets whose node is selected for update.
func (ip inPlace) selectedCount(sets []*v1alpha1.MachineSet) int32 {
	var n int32
	for _, ms := range sets {
		for _, m := range ip.machinesOf(ms) {
			if node := ip.node(m); node != nil {
				if _, ok := node.Labels[v1alpha1.LabelNodeSelectedForUpdate]; ok {
					n++
				}
			}
		}
	}
	return n
}

// selectForUpdate labels candidate nodes of old sets (oldest set first) selected-for-update:
// as many as keep minAvailable machines available and no more than the new set lacks.
func (ip inPlace) selectForUpdate(all, old []*v1alpha1.MachineSet, newMS *v1alpha1.MachineSet, undergoing, minAvailable int32) int32 {
	available := availableSum(all) - undergoing
	if available <= minAvailable {
		return 0
	}
	budget := min(available-minAvailable, max(ip.d.Spec.Replicas-newMS.Spec.Replicas, 0))
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
		for _, m := range candidates(ip.machinesOf(ms)) {
			if want == 0 {
				break
			}
			node := ip.node(m)
			if node == nil {
				continue
			}
			if _, ok := node.Labels[v1alpha1.LabelNodeCandidateForUpdate]; !ok {
				continue
			}
			if _, ok := node.Labels[v1alpha1.LabelNodeSelectedForUpdate]; ok {
				continue
			}
			ip.labelNode(m, v1alpha1.LabelNodeSelectedForUpdate)
			ip.progress = true
			want--
			total++
		}
	}
	return total
}

// candidates are the live machines with a node, in a stable order (oldest first).
func candidates(machines []*v1alpha1.Machine) []*v1alpha1.Machine {
	var out []*v1alpha1.Machine
	for _, m := range machines {
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
