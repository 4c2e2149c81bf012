package machinedeployment

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/rollout"
)

// executor writes a decided step's operations on sets, machines and the deployment, in order,
// stopping at the first that fails; the nodes' operations are nodeWriter's.
type executor struct{ *pass }

// execute runs the step's operations but the nodes' marks (see markNodes).
func (e executor) execute(ctx context.Context) error {
	for _, op := range e.dec.Step.Ops {
		stop, err := e.run(ctx, op)
		if err != nil || stop {
			return err
		}
	}
	return nil
}

// run writes one operation; stop says the rest of the step must wait for a decision on fresh
// data.
func (e executor) run(ctx context.Context, op rollout.Op) (stop bool, err error) {
	nodes := nodeWriter(e)
	switch op := op.(type) {
	case rollout.MarkForDeletion:
		return false, e.markForDeletion(ctx, op)
	case rollout.PruneTrigger:
		return false, e.pruneTrigger(ctx, op)
	case rollout.CreateSet:
		return e.createSet(ctx, op)
	case rollout.SyncSet:
		return false, e.updateSet(ctx, op.Set, op.Apply)
	case rollout.ScaleSet:
		return false, e.scaleSet(ctx, op)
	case rollout.DeleteSet:
		return false, e.deleteSet(ctx, op)
	case rollout.SetScaleUpDisabled:
		return false, e.labelSet(ctx, op)
	case rollout.MoveMachine:
		return false, e.moveMachine(ctx, op)
	case rollout.ClearUpdateResult:
		return false, e.clearUpdateResult(ctx, op)
	case rollout.LabelNode:
		return false, nodes.label(ctx, op)
	case rollout.FinishInPlaceUpdate:
		return false, nodes.finish(ctx, op)
	case rollout.Uncordon:
		return false, nodes.uncordon(ctx, op)
	case rollout.MarkNode:
		return false, nil // after the status: see markNodes
	case rollout.Prioritize:
		return false, e.prioritize(ctx, op)
	case rollout.DeleteMachine:
		return false, e.deleteMachine(ctx, op)
	}
	return true, fmt.Errorf("machinedeployment: operation %s is unknown to this controller", op.Kind())
}

// markForDeletion marks a machine a scaler named for deletion.
func (e executor) markForDeletion(ctx context.Context, op rollout.MarkForDeletion) error {
	mark, err := e.patchMachine(ctx, op.Machine, op.Apply, "mark machine %s for deletion")
	if mark != nil {
		e.r.recorder.Eventf(e.d, mark, "Normal", "MarkedForDeletion", "Scale", "Marked machine %s for deletion at a scaler's request", mark.Name)
	}
	return err
}

// patchMachine applies a change to one of the deployment's machines with a merge patch; what
// names the write in the error (a format with the machine's name). A machine that is gone is no
// error: it returns nil, nil. It returns the patched copy.
func (e executor) patchMachine(ctx context.Context, name string, apply func(*v1alpha1.Machine), what string) (*v1alpha1.Machine, error) {
	m := e.machine(name)
	if m == nil {
		return nil, nil
	}
	upd := m.DeepCopy()
	apply(upd)
	if err := e.r.client.Patch(ctx, upd, client.MergeFrom(m)); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("machinedeployment: "+what+": %w", name, err)
	}
	return upd, nil
}

// pruneTrigger drops entries from the trigger-deletion annotation.
func (e executor) pruneTrigger(ctx context.Context, op rollout.PruneTrigger) error {
	for _, dr := range op.Dropped {
		switch dr.Why {
		case rollout.TriggerNoMachineSet:
			e.r.recorder.Eventf(e.d, nil, "Warning", "IgnoredDeletionRequest", "Scale", "Machine %s named in %s belongs to no machine set of this deployment", dr.Machine, v1alpha1.AnnotationTriggerDeletionByMCM)
		case rollout.TriggerOtherDeployment:
			e.r.recorder.Eventf(e.d, nil, "Warning", "IgnoredDeletionRequest", "Scale", "Machine %s named in %s belongs to another deployment", dr.Machine, v1alpha1.AnnotationTriggerDeletionByMCM)
		}
	}
	upd := e.d.DeepCopy()
	op.Apply(upd)
	// Optimistic lock: a scaler appending entries meanwhile makes this a conflict, not a loss.
	if err := e.r.client.Patch(ctx, upd, client.MergeFromWithOptions(e.d, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("machinedeployment: prune %s: %w", v1alpha1.AnnotationTriggerDeletionByMCM, err)
	}
	*e.d = *upd
	return nil
}

// createSet creates the MachineSet of the current template. A set of that name that exists
// already is ours from an earlier pass the cache has not shown yet (the step stops: the next
// decision sees it), or a hash collision (counted, so the next name differs).
func (e executor) createSet(ctx context.Context, op rollout.CreateSet) (bool, error) {
	d := e.d
	ms := op.Set.DeepCopy()
	// Created with the finalizer the MachineSet controller would add at once: one write less per
	// set, which a fleet of small deployments (500 sets of 2) pays per machine.
	controllerutil.AddFinalizer(ms, v1alpha1.FinalizerMachineControllerManager)
	err := e.r.client.Create(ctx, ms)
	if apierrors.IsAlreadyExists(err) {
		existing := &v1alpha1.MachineSet{}
		if gerr := e.r.reader.Get(ctx, client.ObjectKeyFromObject(ms), existing); gerr != nil {
			return true, fmt.Errorf("machinedeployment: read existing machine set %s: %w", ms.Name, gerr)
		}
		if ref := metav1.GetControllerOf(existing); ref != nil && ref.UID == d.UID && rollout.TemplateMatches(d, existing) {
			e.r.writes.create(e.key(), existing.Name, e.r.now())
			e.sets = append(e.sets, existing)
			return true, nil
		}
		st := d.DeepCopy()
		st.Status.CollisionCount = ptr.To(ptr.Deref(d.Status.CollisionCount, 0) + 1)
		if uerr := e.r.client.Status().Update(ctx, st); uerr != nil {
			return true, fmt.Errorf("machinedeployment: record hash collision: %w", uerr)
		}
		return true, fmt.Errorf("machinedeployment: machine set %s exists with another template: collision count raised, retrying", ms.Name)
	}
	if err != nil {
		e.r.recorder.Eventf(d, nil, "Warning", "FailedCreate", "Create", "Failed to create machine set %s: %v", ms.Name, err)
		return true, fmt.Errorf("machinedeployment: create machine set %s: %w", ms.Name, err)
	}
	e.r.writes.create(e.key(), ms.Name, e.r.now())
	e.created = ms
	e.sets = append(e.sets, ms)
	e.r.recorder.Eventf(d, ms, "Normal", "ScalingMachineSet", "Scale", "Created machine set %s with %d replicas", ms.Name, ms.Spec.Replicas)
	return false, nil
}

// updateSet writes what change does to a set, if anything.
func (e executor) updateSet(ctx context.Context, name string, change func(*v1alpha1.MachineSet) bool) error {
	ms := e.set(name)
	if ms == nil {
		return fmt.Errorf("machinedeployment: machine set %s of the step is not among the deployment's", name)
	}
	upd := ms.DeepCopy()
	if !change(upd) {
		return nil
	}
	if err := e.r.client.Update(ctx, upd); err != nil {
		return fmt.Errorf("machinedeployment: update machine set %s: %w", upd.Name, err)
	}
	e.r.writes.wrote(e.key(), upd)
	*ms = *upd
	return nil
}

// scaleSet sets a set's replicas and replica annotations.
func (e executor) scaleSet(ctx context.Context, op rollout.ScaleSet) error {
	ms := e.set(op.Set)
	if ms == nil {
		return fmt.Errorf("machinedeployment: machine set %s of the step is not among the deployment's", op.Set)
	}
	from := ms.Spec.Replicas
	if err := e.updateSet(ctx, op.Set, op.Apply); err != nil {
		return fmt.Errorf("machinedeployment: scale machine set %s to %d: %w", op.Set, op.To, err)
	}
	if from != op.To {
		dir := "up"
		if op.To < from {
			dir = "down"
		}
		e.r.recorder.Eventf(e.d, ms, "Normal", "ScalingMachineSet", "Scale", "Scaled %s machine set %s from %d to %d", dir, ms.Name, from, op.To)
	}
	return nil
}

// deleteSet deletes an old set beyond the revision history limit.
func (e executor) deleteSet(ctx context.Context, op rollout.DeleteSet) error {
	ms := e.set(op.Set)
	if ms == nil {
		return nil
	}
	if err := e.r.client.Delete(ctx, ms, client.Preconditions{UID: &ms.UID}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("machinedeployment: delete old machine set %s: %w", ms.Name, err)
	}
	e.r.recorder.Eventf(e.d, ms, "Normal", "DeletedMachineSet", "Cleanup", "Deleted old machine set %s (revision history limit %d)", ms.Name, op.HistoryLimit)
	return nil
}

// labelSet sets or removes a set's scale-up-disabled label.
func (e executor) labelSet(ctx context.Context, op rollout.SetScaleUpDisabled) error {
	ms := e.set(op.Set)
	if ms == nil {
		return nil
	}
	upd := ms.DeepCopy()
	if !op.Apply(upd) {
		return nil
	}
	if err := e.r.client.Patch(ctx, upd, client.MergeFrom(ms)); err != nil {
		return fmt.Errorf("machinedeployment: label machine set %s %s: %w", ms.Name, v1alpha1.LabelScaleUpDisabled, err)
	}
	*ms = *upd
	return nil
}

// moveMachine gives a machine updated in place the new set's selector labels and controller
// reference, in one write.
func (e executor) moveMachine(ctx context.Context, op rollout.MoveMachine) error {
	m, from, to := e.machine(op.Machine), e.set(op.From), e.set(op.To)
	if m == nil || from == nil || to == nil {
		return fmt.Errorf("machinedeployment: move machine %s from %s to %s: not among the deployment's", op.Machine, op.From, op.To)
	}
	upd := m.DeepCopy()
	op.Apply(upd, from, to)
	if err := e.r.client.Patch(ctx, upd, client.MergeFromWithOptions(m, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("machinedeployment: move machine %s to machine set %s: %w", m.Name, to.Name, err)
	}
	return nil
}

// clearUpdateResult removes the update-result label from a machine that moved.
func (e executor) clearUpdateResult(ctx context.Context, op rollout.ClearUpdateResult) error {
	_, err := e.patchMachine(ctx, op.Machine, op.Apply, "remove label "+v1alpha1.LabelNodeUpdateResult+" from machine %s")
	return err
}

// prioritize marks an approved machine to go first when its set shrinks, or unmarks one whose
// node lost the approval (a pool's Manual approval).
func (e executor) prioritize(ctx context.Context, op rollout.Prioritize) error {
	upd, err := e.patchMachine(ctx, op.Machine, op.Apply, "mark the approval of machine %s")
	if upd != nil && op.Approved {
		e.r.recorder.Eventf(e.d, upd, "Normal", "ApprovedForUpdate", "Rollout", "Machine %s goes first: its node carries %s", upd.Name, v1alpha1.LabelNodeSelectedForUpdate)
	}
	return err
}

// deleteMachine deletes a machine a scaler marked whose set kept its replicas
// (gardener/machine-controller-manager#1078); the set replaces it if its replicas still want one.
// The precondition on its UID keeps a machine of the same name created since then.
func (e executor) deleteMachine(ctx context.Context, op rollout.DeleteMachine) error {
	m := e.machine(op.Machine)
	if m == nil {
		return nil
	}
	if err := e.r.client.Delete(ctx, m, client.Preconditions{UID: &m.UID}); err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil
		}
		return fmt.Errorf("machinedeployment: delete machine %s marked for deletion: %w", m.Name, err)
	}
	e.r.recorder.Eventf(e.d, m, "Normal", "DeletedMarkedMachine", "Scale", "Deleted machine %s of machine set %s: a scaler marked it for deletion and the set kept its replicas", m.Name, op.Set)
	return nil
}
