package rollout

import (
	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// replacing plans the steps of the RollingUpdate and Recreate strategies.
type replacing struct{ *planner }

// rolling plans one step of a rolling update: grow the new set within maxSurge, else shrink old
// sets within maxUnavailable, then clean up.
func (r replacing) rolling() {
	halted := r.pool().applyGates()
	newMS, old := r.currentAndOld(true)
	all := append(append([]*v1alpha1.MachineSet{}, old...), newMS)
	if halted {
		r.pool().halt(newMS, old)
		r.cleanup(old)
		return
	}
	if !r.reconcileNewSet(all, newMS) {
		r.reconcileOldSets(all, activeSets(old), newMS)
	}
	// Only empty old sets beyond the history limit are deleted, so this is safe mid-rollout and
	// keeps a rollout that cannot finish from piling up sets.
	r.cleanup(old)
}

// reconcileNewSet grows (or, above replicas, shrinks) the new set; it reports a change of size.
func (r replacing) reconcileNewSet(all []*v1alpha1.MachineSet, newMS *v1alpha1.MachineSet) bool {
	d := r.d
	switch {
	case newMS.Spec.Replicas == d.Spec.Replicas:
		return false
	case newMS.Spec.Replicas > d.Spec.Replicas:
		return r.scaleSet(newMS, d.Spec.Replicas)
	}
	return r.scaleSet(newMS, r.newSetReplicas(all, newMS))
}

// reconcileOldSets shrinks old sets as far as availability allows: first their unavailable
// machines, then available ones down to replicas - maxUnavailable available in total.
func (r replacing) reconcileOldSets(all, old []*v1alpha1.MachineSet, newMS *v1alpha1.MachineSet) {
	d := r.d
	if replicaSum(old) == 0 {
		return
	}
	minAvailable := d.Spec.Replicas - r.lim.unavailable
	newUnavailable := newMS.Spec.Replicas - r.pool().availableOf(newMS)
	maxScaledDown := replicaSum(all) - minAvailable - newUnavailable
	if maxScaledDown <= 0 {
		return
	}
	r.cleanupUnhealthy(old, maxScaledDown)
	r.scaleDownOld(all, old, minAvailable)
}

// cleanupUnhealthy removes old sets' unavailable replicas first (oldest set first), up to
// maxCleanup: losing them costs no availability. Not under Manual approval: a set's MachineSet
// would delete its approved machines first, healthy or not.
func (r replacing) cleanupUnhealthy(old []*v1alpha1.MachineSet, maxCleanup int32) {
	if r.pool().manualApproval() {
		return
	}
	sortByCreation(old)
	var total int32
	for _, ms := range old {
		if total >= maxCleanup {
			break
		}
		if ms.Spec.Replicas == 0 {
			continue
		}
		unhealthy := ms.Spec.Replicas - availableForDecisions(ms)
		if unhealthy <= 0 {
			continue
		}
		n := min(maxCleanup-total, unhealthy)
		r.scaleSet(ms, ms.Spec.Replicas-n)
		total += n
	}
}

// scaleDownOld removes available old replicas while more than minAvailable are available.
func (r replacing) scaleDownOld(all, old []*v1alpha1.MachineSet, minAvailable int32) {
	available := r.pool().availableSum(all)
	if available <= minAvailable {
		return
	}
	budget := available - minAvailable
	sortByCreation(old)
	var total int32
	for _, ms := range old {
		if total >= budget {
			break
		}
		n := min(ms.Spec.Replicas-r.pool().floor(ms), budget-total)
		if n <= 0 {
			continue
		}
		r.scaleSet(ms, ms.Spec.Replicas-n)
		total += n
	}
}

// recreate scales every old set to zero, waits until their machines are gone, then brings the
// new set up to replicas.
func (r replacing) recreate() {
	halted := r.pool().applyGates()
	newMS, old := r.currentAndOld(false)
	if halted || len(r.gateBlocks) > 0 {
		return // halted, paused or not its turn: Recreate starts nothing it cannot finish
	}
	if b := r.pool().recreateApproval(old); b != nil {
		r.gateBlocks = append(r.gateBlocks, *b)
		return // Recreate takes every old machine at once: it waits until all are approved
	}
	scaledDown := false
	for _, ms := range activeSets(old) {
		scaledDown = r.scaleSet(ms, 0) || scaledDown
	}
	if scaledDown || r.oldMachinesLeft(old) {
		return
	}
	if newMS == nil {
		newMS, old = r.currentAndOld(true)
	}
	r.scaleSet(newMS, r.d.Spec.Replicas)
	if Complete(r.d, &r.d.Status) {
		r.cleanup(old)
	}
}

// oldMachinesLeft reports whether an old set still has any machine, terminating ones included.
func (r replacing) oldMachinesLeft(old []*v1alpha1.MachineSet) bool {
	for _, ms := range old {
		if len(r.machinesOf(ms)) > 0 || ms.Status.Replicas > 0 {
			return true
		}
	}
	return false
}
