package machinedeployment

import (
	"context"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// rolloutRolling moves one step of a rolling update: grow the new set within maxSurge, else
// shrink old sets within maxUnavailable, then clean up and record status.
func (ro *rollout) rolloutRolling(ctx context.Context) error {
	newMS, old, err := ro.getAllSets(ctx, true)
	if err != nil {
		return err
	}
	all := append(append([]*v1alpha1.MachineSet{}, old...), newMS)

	scaledUp, err := ro.reconcileNewSet(ctx, all, newMS)
	if err != nil {
		return err
	}
	if !scaledUp {
		if _, err := ro.reconcileOldSets(ctx, all, activeSets(old), newMS); err != nil {
			return err
		}
	}
	// Only empty old sets beyond the history limit are deleted, so this is safe mid-rollout and
	// keeps a rollout that cannot finish from piling up sets.
	if err := ro.cleanup(ctx, old); err != nil {
		return err
	}
	return ro.syncStatus(ctx, newMS)
}

// reconcileNewSet grows (or, above replicas, shrinks) the new set.
func (ro *rollout) reconcileNewSet(ctx context.Context, all []*v1alpha1.MachineSet, newMS *v1alpha1.MachineSet) (bool, error) {
	d := ro.d
	switch {
	case newMS.Spec.Replicas == d.Spec.Replicas:
		return false, nil
	case newMS.Spec.Replicas > d.Spec.Replicas:
		return ro.scaleSet(ctx, newMS, d.Spec.Replicas)
	}
	return ro.scaleSet(ctx, newMS, ro.newSetReplicas(all, newMS))
}

// reconcileOldSets shrinks old sets as far as availability allows: first their unavailable
// machines, then available ones down to replicas - maxUnavailable available in total.
func (ro *rollout) reconcileOldSets(ctx context.Context, all, old []*v1alpha1.MachineSet, newMS *v1alpha1.MachineSet) (bool, error) {
	d := ro.d
	if replicaSum(old) == 0 {
		return false, nil
	}
	minAvailable := d.Spec.Replicas - maxUnavailable(d)
	newUnavailable := newMS.Spec.Replicas - availableForDecisions(newMS)
	maxScaledDown := replicaSum(all) - minAvailable - newUnavailable
	if maxScaledDown <= 0 {
		return false, nil
	}
	cleaned, err := ro.cleanupUnhealthy(ctx, old, maxScaledDown)
	if err != nil {
		return false, err
	}
	scaled, err := ro.scaleDownOld(ctx, all, old, minAvailable)
	if err != nil {
		return false, err
	}
	return cleaned+scaled > 0, nil
}

// cleanupUnhealthy removes old sets' unavailable replicas first (oldest set first), up to
// maxCleanup: losing them costs no availability.
func (ro *rollout) cleanupUnhealthy(ctx context.Context, old []*v1alpha1.MachineSet, maxCleanup int32) (int32, error) {
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
		if _, err := ro.scaleSet(ctx, ms, ms.Spec.Replicas-n); err != nil {
			return total, err
		}
		total += n
	}
	return total, nil
}

// scaleDownOld removes available old replicas while more than minAvailable are available.
func (ro *rollout) scaleDownOld(ctx context.Context, all, old []*v1alpha1.MachineSet, minAvailable int32) (int32, error) {
	available := availableSum(all)
	if available <= minAvailable {
		return 0, nil
	}
	budget := available - minAvailable
	sortByCreation(old)
	var total int32
	for _, ms := range old {
		if total >= budget {
			break
		}
		if ms.Spec.Replicas == 0 {
			continue
		}
		n := min(ms.Spec.Replicas, budget-total)
		if _, err := ro.scaleSet(ctx, ms, ms.Spec.Replicas-n); err != nil {
			return total, err
		}
		total += n
	}
	return total, nil
}

// rolloutRecreate scales every old set to zero, waits until their machines are gone, then
// brings the new set up to replicas.
func (ro *rollout) rolloutRecreate(ctx context.Context) error {
	newMS, old, err := ro.getAllSets(ctx, false)
	if err != nil {
		return err
	}
	scaledDown := false
	for _, ms := range activeSets(old) {
		ok, err := ro.scaleSet(ctx, ms, 0)
		if err != nil {
			return err
		}
		scaledDown = scaledDown || ok
	}
	if scaledDown || ro.oldMachinesLeft(old) {
		return ro.syncStatus(ctx, newMS)
	}
	if newMS == nil {
		if newMS, old, err = ro.getAllSets(ctx, true); err != nil {
			return err
		}
	}
	if _, err := ro.scaleSet(ctx, newMS, ro.d.Spec.Replicas); err != nil {
		return err
	}
	if complete(ro.d, &ro.d.Status) {
		if err := ro.cleanup(ctx, old); err != nil {
			return err
		}
	}
	return ro.syncStatus(ctx, newMS)
}

// oldMachinesLeft reports whether an old set still has any machine, terminating ones included.
func (ro *rollout) oldMachinesLeft(old []*v1alpha1.MachineSet) bool {
	for _, ms := range old {
		if len(ro.machines[ms.UID]) > 0 || ms.Status.Replicas > 0 {
			return true
		}
	}
	return false
}
