package machine

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/mcmmetrics"
)

// The node side of an in-place update (MCM's updateNodeConditionBasedOnLabel, inPlaceUpdate and
// drainNodeForInPlace in pkg/util/provider/machinecontroller/machine_util.go). The
// MachineDeployment controller labels nodes candidate-for-update and selected-for-update; this
// controller turns the labels into the node condition InPlaceUpdate and acts on it:
//
//	candidate-for-update label         → CandidateForUpdate "Node is a candidate for in-place update"
//	selected-for-update label          → SelectedForUpdate  "Node is selected for in-place update"
//	node cordoned and drained          → DrainSuccessful    "Node draining successful"
//	                                     (machine phase InPlaceUpdating)
//	next pass                          → ReadyForUpdate     "Node is ready for in-place update"
//	agent: update-result=successful    → UpdateSuccessful   "Node in-place update successful"
//	                                     (machine phase InPlaceUpdateSuccessful, then Running)
//	agent: update-result=failed        → UpdateFailed       "Node in-place update failed: <reason>"
//	                                     (machine phase InPlaceUpdateFailed)
//
// An agent that reports nothing within the in-place update timeout fails the machine the same
// way. A machine whose update failed stays in its old MachineSet; after the health timeout
// (unless spec.disableHealthTimeout) it is Failed and replaced like any broken machine.

// Texts of the in-place update, as MCM writes them.
const (
	msgCandidateForUpdate = "Node is a candidate for in-place update"
	msgSelectedForUpdate  = "Node is selected for in-place update"
	msgDrainSuccessful    = "Node draining successful"
	msgReadyForUpdate     = "Node is ready for in-place update"
	msgUpdateSuccessful   = "Node in-place update successful"
	msgUpdateFailed       = "Node in-place update failed: "
)

// labelForceDrain ("True") on a machine drains its node forcefully for an in-place update, as
// MCM's in-place drain reads it (the deletion flow reads force-deletion instead).
const labelForceDrain = "force-drain"

// readonlyFilesystem is the node condition that, true for long, forces a drain.
const readonlyFilesystem corev1.NodeConditionType = "ReadonlyFilesystem"

// inPlaceUpdater runs the machine's side of an in-place update: the phases while its node is
// updated, and the node's InPlaceUpdate condition after the health check.
type inPlaceUpdater struct{ *deps }

// reconcilePhase follows a machine whose node is being updated in place (phase
// InPlaceUpdating) or failed to be (InPlaceUpdateFailed): health is undefined then, so the
// phase follows the agent's update-result label and the timeouts instead.
func (r *inPlaceUpdater) reconcilePhase(ctx context.Context, m *v1alpha1.Machine) (reconcile.Result, error) {
	node, stop := r.syncedNode(ctx, m)
	if stop != nil {
		return stop.res, stop.err
	}
	st := m.Status.DeepCopy()
	if node != nil && !conditionsEqual(node.Status.Conditions, st.Conditions) {
		st.Conditions = node.Status.Conditions
	}
	t, err := r.transition(ctx, m, node, st)
	if err != nil {
		return reconcile.Result{}, err
	}
	if err := r.writeStatus(ctx, m, *st); err != nil {
		r.limiter.unmark(m)
		return requeueOnConflict(err)
	}
	if t.announce.reason != "" {
		r.event(m, t.announce.eventType, t.announce.reason, "InPlaceUpdate", st.LastOperation.Description)
	}
	res := reconcile.Result{RequeueAfter: t.requeue}
	if node == nil || m.Status.CurrentStatus.Phase == v1alpha1.MachineFailed {
		return res, nil
	}
	return r.step(ctx, m, node, res)
}

// phaseTransition is what a pass of an in-place update does besides changing the status: when
// to look again, and the event to record.
type phaseTransition struct {
	requeue  time.Duration
	announce phaseEvent
}

// transition moves st along the agent's update-result label and the timeouts.
func (r *inPlaceUpdater) transition(ctx context.Context, m *v1alpha1.Machine, node *corev1.Node, st *v1alpha1.MachineStatus) (phaseTransition, error) {
	now := r.now()
	phase := m.Status.CurrentStatus.Phase
	result := ""
	if node != nil {
		result = node.Labels[v1alpha1.LabelNodeUpdateResult]
	}
	t := phaseTransition{requeue: r.opts.LongRetry}
	switch {
	case result == v1alpha1.LabelValueNodeUpdateSuccessful:
		st.CurrentStatus.Phase = v1alpha1.MachineInPlaceUpdateSuccessful
		st.LastOperation = v1alpha1.LastOperation{
			Type: v1alpha1.MachineOperationInPlaceUpdate, State: v1alpha1.MachineStateSuccessful,
			Description: fmt.Sprintf("Machine %s successfully updated dependencies", m.Name),
		}
		t = phaseTransition{requeue: r.opts.ShortRetry, announce: phaseEvent{corev1.EventTypeNormal, "InPlaceUpdateSuccessful"}}
	case result == v1alpha1.LabelValueNodeUpdateFailed && phase != v1alpha1.MachineInPlaceUpdateFailed:
		r.updateFailed(m, st, fmt.Sprintf("Machine %s failed to update dependencies: %s", m.Name, node.Annotations[v1alpha1.AnnotationUpdateFailedReason]), &t)
	case phase == v1alpha1.MachineInPlaceUpdating:
		timeout := r.opts.inPlaceUpdateTimeout(m)
		if elapsed := since(now, m.Status.CurrentStatus.LastUpdateTime); elapsed <= timeout {
			t.requeue = clampRequeue(timeout-elapsed+time.Second, r.opts.LongRetry)
			break
		}
		r.updateFailed(m, st, fmt.Sprintf("Machine %s failed to in-place update in %s minutes.", m.Name, timeout), &t)
	case phase == v1alpha1.MachineInPlaceUpdateFailed && !healthTimeoutDisabled(m):
		return r.replaceFailedUpdate(ctx, m, st, now)
	}
	return t, nil
}

// updateFailed moves the machine to InPlaceUpdateFailed, to be looked at again after its
// health timeout.
func (r *inPlaceUpdater) updateFailed(m *v1alpha1.Machine, st *v1alpha1.MachineStatus, why string, t *phaseTransition) {
	st.CurrentStatus.Phase = v1alpha1.MachineInPlaceUpdateFailed
	st.LastOperation = v1alpha1.LastOperation{
		Type: v1alpha1.MachineOperationInPlaceUpdate, State: v1alpha1.MachineStateFailed, Description: why,
	}
	t.announce = phaseEvent{corev1.EventTypeWarning, "InPlaceUpdateFailed"}
	t.requeue = clampRequeue(r.opts.healthTimeout(m)+time.Second, r.opts.LongRetry)
}

// replaceFailedUpdate fails a machine whose update failed longer than its health timeout ago:
// the damage is unknown, so it is replaced like an unhealthy one (rate-limited per
// MachineDeployment).
func (r *inPlaceUpdater) replaceFailedUpdate(ctx context.Context, m *v1alpha1.Machine, st *v1alpha1.MachineStatus, now time.Time) (phaseTransition, error) {
	failedFor := since(now, m.Status.CurrentStatus.LastUpdateTime)
	if failedFor <= r.opts.healthTimeout(m) {
		return phaseTransition{requeue: clampRequeue(r.opts.healthTimeout(m)-failedFor+time.Second, r.opts.LongRetry)}, nil
	}
	ok, why, err := r.limiter.mayFail(ctx, r.client, m, r.opts.MaxReplacements, now)
	if err != nil {
		return phaseTransition{}, err
	}
	if !ok {
		r.log(m).Info("in-place update failed, machine not replaced yet", "why", why)
		return phaseTransition{requeue: r.opts.ShortRetry}, nil
	}
	st.CurrentStatus.Phase = v1alpha1.MachineFailed
	st.CurrentStatus.TimeoutActive = false
	st.LastOperation = v1alpha1.LastOperation{
		Type: v1alpha1.MachineOperationHealthCheck, State: v1alpha1.MachineStateFailed,
		Description: fmt.Sprintf("Machine %s failed its in-place update %s ago (health timeout %s). Changing status to Failed.", m.Name, failedFor.Round(time.Second), r.opts.healthTimeout(m)),
	}
	return phaseTransition{requeue: r.opts.LongRetry, announce: phaseEvent{corev1.EventTypeWarning, "Failed"}}, nil
}

// phaseEvent is the event a phase transition records.
type phaseEvent struct{ eventType, reason string }

// conditionsEqual compares node conditions without their heartbeats.
func conditionsEqual(a, b []corev1.NodeCondition) bool {
	x, y := withoutHeartbeats(a), withoutHeartbeats(b)
	if len(x) != len(y) {
		return false
	}
	for i := range x {
		if x[i].Type != y[i].Type || x[i].Status != y[i].Status || x[i].Reason != y[i].Reason ||
			x[i].Message != y[i].Message || !x[i].LastTransitionTime.Equal(&y[i].LastTransitionTime) {
			return false
		}
	}
	return true
}

// step moves a node through the in-place update after the machine's health pass; res
// is that pass's result (the earlier requeue wins).
func (r *inPlaceUpdater) step(ctx context.Context, m *v1alpha1.Machine, node *corev1.Node, res reconcile.Result) (reconcile.Result, error) {
	cond, err := r.syncInPlaceCondition(ctx, node)
	if err != nil {
		return requeueOnConflict(err)
	}
	if cond == nil {
		return res, nil
	}
	switch cond.Reason {
	case v1alpha1.ReasonSelectedForUpdate:
		if m.Status.CurrentStatus.Phase == v1alpha1.MachineInPlaceUpdating {
			// Drained by an earlier pass, whose write of the node condition this one reads
			// from a cache that has not caught up yet, or that failed.
			if err := r.setInPlaceCondition(ctx, node, v1alpha1.ReasonDrainSuccessful, msgDrainSuccessful); err != nil {
				return requeueOnConflict(err)
			}
			return earlier(res, r.opts.ShortRetry), nil
		}
		return r.drainForInPlace(ctx, m, node, cond)
	case v1alpha1.ReasonDrainSuccessful:
		if err := r.setInPlaceCondition(ctx, node, v1alpha1.ReasonReadyForUpdate, msgReadyForUpdate); err != nil {
			return requeueOnConflict(err)
		}
		r.event(m, corev1.EventTypeNormal, v1alpha1.ReasonReadyForUpdate, "InPlaceUpdate", fmt.Sprintf("Node %s is ready for an in-place update", node.Name))
		return earlier(res, r.opts.MediumRetry), nil
	case v1alpha1.ReasonReadyForUpdate:
		// The agent on the node updates it; its update-result label brings the machine back.
		return earlier(res, r.opts.MediumRetry), nil
	}
	return res, nil
}

func earlier(res reconcile.Result, d time.Duration) reconcile.Result {
	if res.RequeueAfter <= 0 || d < res.RequeueAfter {
		res.RequeueAfter = d
	}
	return res
}

// syncInPlaceCondition sets the node's InPlaceUpdate condition from its labels (MCM's
// updateNodeConditionBasedOnLabel) and returns it: nil on a node that is no candidate and never
// was. A node is a candidate again after an earlier successful update once the update-result
// label is gone; a failed update is not forgotten by relabelling.
func (r *inPlaceUpdater) syncInPlaceCondition(ctx context.Context, node *corev1.Node) (*corev1.NodeCondition, error) {
	cond := findNodeCondition(node.Status.Conditions, v1alpha1.NodeConditionInPlaceUpdate)
	if _, ok := node.Labels[v1alpha1.LabelNodeCandidateForUpdate]; !ok {
		return cond, nil
	}
	_, selected := node.Labels[v1alpha1.LabelNodeSelectedForUpdate]
	result, hasResult := node.Labels[v1alpha1.LabelNodeUpdateResult]
	var reason, msg string
	switch {
	case cond == nil || (cond.Reason == v1alpha1.ReasonUpdateSuccessful && !hasResult):
		reason, msg = v1alpha1.ReasonCandidateForUpdate, msgCandidateForUpdate
	case selected && cond.Reason == v1alpha1.ReasonCandidateForUpdate:
		reason, msg = v1alpha1.ReasonSelectedForUpdate, msgSelectedForUpdate
	case selected && cond.Reason == v1alpha1.ReasonSelectedForUpdate:
		return cond, nil // not drained yet
	case result == v1alpha1.LabelValueNodeUpdateSuccessful && cond.Reason != v1alpha1.ReasonUpdateSuccessful:
		reason, msg = v1alpha1.ReasonUpdateSuccessful, msgUpdateSuccessful
	case result == v1alpha1.LabelValueNodeUpdateFailed && cond.Reason != v1alpha1.ReasonUpdateFailed:
		reason, msg = v1alpha1.ReasonUpdateFailed, msgUpdateFailed+node.Annotations[v1alpha1.AnnotationUpdateFailedReason]
	default:
		return cond, nil
	}
	if err := r.setInPlaceCondition(ctx, node, reason, msg); err != nil {
		return nil, err
	}
	return findNodeCondition(node.Status.Conditions, v1alpha1.NodeConditionInPlaceUpdate), nil
}

func findNodeCondition(conds []corev1.NodeCondition, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}

// setInPlaceCondition sets the node condition InPlaceUpdate (status True) with a strategic
// merge patch of that one condition, leaving the kubelet's conditions alone; node holds the
// patched node afterwards. The patch carries the node's resourceVersion: a decision taken on a
// cached node older than the last write conflicts instead of undoing it.
func (r *inPlaceUpdater) setInPlaceCondition(ctx context.Context, node *corev1.Node, reason, msg string) error {
	now := metav1.NewTime(r.now())
	c := corev1.NodeCondition{
		Type: v1alpha1.NodeConditionInPlaceUpdate, Status: corev1.ConditionTrue, Reason: reason, Message: msg,
		LastTransitionTime: now, LastHeartbeatTime: now,
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": node.ResourceVersion},
		"status":   map[string]any{"conditions": []corev1.NodeCondition{c}},
	})
	if err != nil {
		return err
	}
	if err := r.target.GetClient().Status().Patch(ctx, node, client.RawPatch(types.StrategicMergePatchType, patch)); err != nil {
		return fmt.Errorf("machine: set node %s condition %s=%s: %w", node.Name, v1alpha1.NodeConditionInPlaceUpdate, reason, err)
	}
	return nil
}

// drainForInPlace cordons and drains a node selected for update. Success moves the machine to
// InPlaceUpdating and the node to DrainSuccessful; a failure is recorded and retried. The drain
// is forceful with the machine's force-drain label, once the drain timeout has passed since
// the node was selected (then bounded by a minute), or when the node has been NotReady or
// read-only for long.
func (r *inPlaceUpdater) drainForInPlace(ctx context.Context, m *v1alpha1.Machine, node *corev1.Node, selected *corev1.NodeCondition) (reconcile.Result, error) {
	now := r.now()
	drainTimeout := r.opts.drainTimeout(m)
	opts := r.opts.drainOptions()
	opts.Timeout, opts.MaxEvictRetries = drainTimeout, r.opts.evictRetries(m, drainTimeout)
	why := ""
	switch {
	case m.Labels[labelForceDrain] == "True":
		opts.Force, why = true, "label "+labelForceDrain
		opts.Timeout, opts.MaxEvictRetries = time.Minute, 1
	case since(now, selected.LastTransitionTime) > drainTimeout:
		opts.Force, why = true, fmt.Sprintf("drain timeout %s passed since the node was selected", drainTimeout)
		opts.Timeout, opts.MaxEvictRetries = time.Minute, 1
	case notReadyFor(node, now) > r.opts.ForceDrainNotReadyAfter:
		opts.Force, why = true, fmt.Sprintf("node not ready for %s", notReadyFor(node, now).Round(time.Second))
	case conditionNotFalseFor(node, readonlyFilesystem, now) > r.opts.ForceDrainNotReadyAfter:
		opts.Force, why = true, "node read-only for long"
	}
	if opts.Force {
		r.event(m, corev1.EventTypeNormal, "ForceDrain", "Drain", "Draining node "+node.Name+" forcefully for an in-place update: "+why)
	}
	began := r.now()
	if err := r.drainer(ctx, m).Drain(ctx, node.Name, opts); err != nil {
		st := m.Status.DeepCopy()
		st.LastOperation = v1alpha1.LastOperation{
			Type: v1alpha1.MachineOperationDrainNode, State: v1alpha1.MachineStateProcessing,
			Description: fmt.Sprintf("Drain failed due to - %v. Will retry in next sync. %s", err, stepText[stepDrain]),
		}
		r.event(m, corev1.EventTypeWarning, "DrainFailed", "Drain", err.Error())
		if werr := r.writeStatus(ctx, m, *st); werr != nil {
			return requeueOnConflict(werr)
		}
		return reconcile.Result{RequeueAfter: r.opts.ShortRetry}, nil
	}
	mcmmetrics.MachineDrained(m, r.now().Sub(began))
	r.event(m, corev1.EventTypeNormal, "Drained", "Drain", "Drained node "+node.Name+" for an in-place update")

	st := m.Status.DeepCopy()
	st.CurrentStatus.Phase = v1alpha1.MachineInPlaceUpdating
	st.CurrentStatus.TimeoutActive = false
	st.LastOperation = v1alpha1.LastOperation{
		Type: v1alpha1.MachineOperationInPlaceUpdate, State: v1alpha1.MachineStateProcessing,
		Description: fmt.Sprintf("Machine %s is undergoing an in-place update", m.Name),
	}
	if err := r.writeStatus(ctx, m, *st); err != nil {
		return requeueOnConflict(err)
	}
	// The drain cordoned the node: read its new version.
	drained := &corev1.Node{}
	if err := r.target.GetAPIReader().Get(ctx, client.ObjectKey{Name: node.Name}, drained); err != nil {
		return requeueOnConflict(err)
	}
	if err := r.setInPlaceCondition(ctx, drained, v1alpha1.ReasonDrainSuccessful, msgDrainSuccessful); err != nil {
		return requeueOnConflict(err)
	}
	return reconcile.Result{RequeueAfter: r.opts.ShortRetry}, nil
}

// conditionNotFalseFor is how long a node condition has been other than False (0 when it is
// False or absent).
func conditionNotFalseFor(node *corev1.Node, t corev1.NodeConditionType, now time.Time) time.Duration {
	c := findNodeCondition(node.Status.Conditions, t)
	if c == nil || c.Status == corev1.ConditionFalse || c.LastTransitionTime.IsZero() {
		return 0
	}
	return now.Sub(c.LastTransitionTime.Time)
}
