package machineset

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// Ready reports whether a machine is up: Running, or Available when there is no target cluster
// (its VM exists and no node health can be waited for).
func Ready(m *v1alpha1.Machine) bool {
	if m.DeletionTimestamp != nil {
		return false
	}
	p := m.Status.CurrentStatus.Phase
	return p == v1alpha1.MachineRunning || p == v1alpha1.MachineAvailable
}

// Available reports whether a machine counts as available: ready for at least minReady.
// A machine's currentStatus.lastUpdateTime is when it entered its phase.
func Available(m *v1alpha1.Machine, minReady time.Duration, now time.Time) bool {
	if !Ready(m) {
		return false
	}
	if minReady <= 0 {
		return true
	}
	since := m.Status.CurrentStatus.LastUpdateTime
	return !since.IsZero() && !since.Add(minReady).After(now)
}

// nextAvailableCheck returns when the next Running machine becomes available, if any is waiting
// for minReadySeconds, so the status is refreshed then.
func (r *Reconciler) nextAvailableCheck(ms *v1alpha1.MachineSet, machines []*v1alpha1.Machine) time.Duration {
	minReady := time.Duration(ms.Spec.MinReadySeconds) * time.Second
	if minReady <= 0 {
		return 0
	}
	now := r.now()
	var next time.Duration
	for _, m := range machines {
		if !Ready(m) || Available(m, minReady, now) {
			continue
		}
		wait := m.Status.CurrentStatus.LastUpdateTime.Add(minReady).Sub(now) + time.Second
		if next == 0 || wait < next {
			next = wait
		}
	}
	return next
}

// computeStatus derives a set's status from its machines. sel is nil when the spec is invalid.
func (r *Reconciler) computeStatus(ms *v1alpha1.MachineSet, machines []*v1alpha1.Machine, sel labels.Selector, manageErr error) v1alpha1.MachineSetStatus {
	now := r.now()
	st := ms.Status.DeepCopy()
	st.ObservedGeneration = ms.Generation
	if sel != nil && !r.selectorField.Dropped() {
		st.LabelSelector = sel.String()
	}
	minReady := time.Duration(ms.Spec.MinReadySeconds) * time.Second
	var replicas, fully, ready, available, preserved int32
	var failed []v1alpha1.MachineSummary
	tmpl := labels.SelectorFromSet(ms.Spec.Template.Labels)
	for _, m := range machines {
		if m.DeletionTimestamp != nil {
			continue
		}
		replicas++
		if tmpl.Matches(labels.Set(m.Labels)) {
			fully++
		}
		phase := m.Status.CurrentStatus.Phase
		if Ready(m) {
			ready++
		}
		if Available(m, minReady, now) {
			available++
		}
		// A preserved Failed machine is counted apart, not as a failed machine, so it does not
		// make the deployment look broken (MCM's isMachinePreservedAndFailed: expiry set).
		if phase == v1alpha1.MachineFailed && m.Status.CurrentStatus.PreserveExpiryTime != nil {
			preserved++
		} else if m.Status.LastOperation.State == v1alpha1.MachineStateFailed {
			failed = append(failed, v1alpha1.MachineSummary{
				Name:          m.Name,
				ProviderID:    m.Spec.ProviderID,
				LastOperation: m.Status.LastOperation,
				OwnerRef:      ms.Name,
			})
		}
	}
	if sel != nil {
		st.Replicas, st.FullyLabeledReplicas, st.ReadyReplicas, st.AvailableReplicas = replicas, fully, ready, available
		st.PreservedFailedReplicas = preserved
		st.AutoPreserveFailedMachineCount = autoPreserveCount(machines)
		if len(failed) > 0 {
			st.FailedMachines = &failed
		} else {
			st.FailedMachines = nil
		}
	}

	switch {
	case sel == nil && manageErr != nil:
		setCondition(st, v1alpha1.MachineSetReplicaFailure, v1alpha1.ConditionTrue, "InvalidSpec", manageErr.Error(), now)
	case errors.Is(manageErr, errCreate):
		setCondition(st, v1alpha1.MachineSetReplicaFailure, v1alpha1.ConditionTrue, "FailedCreate", manageErr.Error(), now)
	case errors.Is(manageErr, errDelete):
		setCondition(st, v1alpha1.MachineSetReplicaFailure, v1alpha1.ConditionTrue, "FailedDelete", manageErr.Error(), now)
	case manageErr == nil:
		removeCondition(st, v1alpha1.MachineSetReplicaFailure)
	}
	return *st
}

// updateStatus writes the computed status when it changed. The Frozen condition belongs to the
// safety controller and is carried over untouched.
func (r *Reconciler) updateStatus(ctx context.Context, ms *v1alpha1.MachineSet, machines []*v1alpha1.Machine, sel labels.Selector, manageErr error) error {
	st := r.computeStatus(ms, machines, sel, manageErr)
	if equality.Semantic.DeepEqual(st, ms.Status) {
		return nil
	}
	upd := ms.DeepCopy()
	upd.Status = st
	if err := r.client.Status().Update(ctx, upd); err != nil {
		return fmt.Errorf("machineset: update status of %s: %w", client.ObjectKeyFromObject(ms), err)
	}
	r.own.Wrote(upd)
	if r.selectorField.Observe(st.LabelSelector != "", upd.Status.LabelSelector != "") {
		log.FromContext(ctx).Info(r.selectorField.Message())
	}
	return nil
}

func setCondition(st *v1alpha1.MachineSetStatus, t v1alpha1.MachineSetConditionType, status v1alpha1.ConditionStatus, reason, msg string, now time.Time) {
	for i := range st.Conditions {
		c := &st.Conditions[i]
		if c.Type != t {
			continue
		}
		if c.Status != status {
			c.LastTransitionTime = metav1.NewTime(now)
		}
		c.Status, c.Reason, c.Message = status, reason, msg
		return
	}
	st.Conditions = append(st.Conditions, v1alpha1.MachineSetCondition{
		Type: t, Status: status, Reason: reason, Message: msg, LastTransitionTime: metav1.NewTime(now),
	})
}

func removeCondition(st *v1alpha1.MachineSetStatus, t v1alpha1.MachineSetConditionType) {
	out := st.Conditions[:0:0]
	for _, c := range st.Conditions {
		if c.Type != t {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		out = nil
	}
	st.Conditions = out
}
