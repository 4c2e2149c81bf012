package machine

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/mcmmetrics"
)

// reconcileHealth follows the node of a machine whose VM exists
// (docs/compatibility/mcm-controllers.md#health): it syncs the node, copies its conditions, moves
// Pending → Running once the node is healthy, Running → Unknown when it is not (or vanished), and
// Unknown or Pending → Failed after the health or creation timeout (Unknown → Failed rate-limited
// per MachineDeployment). A preserved Failed machine goes back to Running when its node recovers.
// Then it manages the machine's preservation (preserve.go).
func (r *reconciler) reconcileHealth(ctx context.Context, m *v1alpha1.Machine) (reconcile.Result, error) {
	if r.target == nil {
		return r.withPreservation(ctx, m, nil, false, reconcile.Result{RequeueAfter: r.opts.LongRetry})
	}
	return r.reconcileHealthFrom(ctx, m, m.Status, nil)
}

// reconcileHealthFrom is reconcileHealth starting from base, a status not written yet (the
// creation's Pending; written is then non-nil): one write carries both, so a machine whose node
// is healthy already goes from creation to Running in one status update. written runs once base
// or what follows from it is written, before the transition's event; a reconcile that stops
// early still writes base.
func (r *reconciler) reconcileHealthFrom(ctx context.Context, m *v1alpha1.Machine, base v1alpha1.MachineStatus, written func()) (reconcile.Result, error) {
	longRetry := reconcile.Result{RequeueAfter: r.opts.LongRetry}
	writeBase := func() {
		if written != nil && r.writeStatus(ctx, m, base) == nil {
			written()
		}
	}
	phase := base.CurrentStatus.Phase
	switch {
	case phase == v1alpha1.MachineFailed && base.CurrentStatus.PreserveExpiryTime == nil:
		// Failed machines wait for their MachineSet (unless preserved).
		writeBase()
		return r.withPreservation(ctx, m, nil, false, longRetry)
	case phase == v1alpha1.MachineInPlaceUpdating, phase == v1alpha1.MachineInPlaceUpdateFailed:
		// Health is undefined during an in-place update (inplace.go).
		writeBase()
		res, err := r.reconcileInPlacePhase(ctx, m)
		if err != nil {
			return res, err
		}
		return r.withPreservation(ctx, m, nil, false, res)
	}

	var node *corev1.Node
	if name := m.Labels[v1alpha1.LabelNode]; name != "" {
		n := &corev1.Node{}
		if err := r.target.GetClient().Get(ctx, client.ObjectKey{Name: name}, n); err == nil {
			node = n
		} else if !apierrors.IsNotFound(err) {
			writeBase()
			return reconcile.Result{}, err
		}
	}
	if node != nil {
		if node.DeletionTimestamp != nil {
			// Deleting a Node deletes its machine (the node controller does it too).
			writeBase()
			return reconcile.Result{}, r.deleteMachineOfNode(ctx, m, node)
		}
		if err := r.syncNode(ctx, m, node); err != nil {
			writeBase()
			return requeueOnConflict(err)
		}
	}

	now := r.now()
	st := base.DeepCopy()
	if node != nil && !equality.Semantic.DeepEqual(withoutHeartbeats(node.Status.Conditions), withoutHeartbeats(st.Conditions)) {
		st.Conditions = node.Status.Conditions
	}
	healthy := node != nil && isHealthy(node.Status.Conditions, r.effectiveNodeConditions(m))
	requeue := r.opts.LongRetry
	// The event of a transition is recorded once its status is written: a reconcile of a stale
	// machine fails the write and must not report the transition a second time.
	var announce healthEvent

	switch phase {
	case v1alpha1.MachinePending, v1alpha1.MachineAvailable, "":
		switch {
		case healthy && !hasTaint(node, v1alpha1.TaintCriticalComponentsNotReady):
			joined := now.Sub(m.CreationTimestamp.Time).Round(time.Second)
			st.CurrentStatus.Phase = v1alpha1.MachineRunning
			st.CurrentStatus.TimeoutActive = false
			st.LastOperation = v1alpha1.LastOperation{
				Type: v1alpha1.MachineOperationCreate, State: v1alpha1.MachineStateSuccessful,
				Description: fmt.Sprintf("Machine %s successfully joined the cluster in %s", m.Name, joined),
			}
			// First the optimistic write: a reconcile of a stale machine (already Running) stops
			// at its conflict, before any other request or a second Joined event.
			if err := r.setJoinDuration(ctx, m, joined); err != nil {
				writeBase()
				return requeueOnConflict(err)
			}
			if err := r.deleteBootstrapToken(ctx, m); err != nil {
				writeBase()
				return reconcile.Result{}, err
			}
			announce = healthEvent{corev1.EventTypeNormal, "Joined"}
		case now.Sub(m.CreationTimestamp.Time) > r.effectiveCreationTimeout(m):
			st.CurrentStatus.Phase = v1alpha1.MachineFailed
			st.CurrentStatus.TimeoutActive = false
			mcmmetrics.MachineFailedToJoin(m)
			why := "its node did not become healthy"
			if node == nil {
				why = "its node did not register"
			} else if healthy {
				why = "its node kept the " + v1alpha1.TaintCriticalComponentsNotReady + " taint"
			}
			st.LastOperation = v1alpha1.LastOperation{
				Type: v1alpha1.MachineOperationCreate, State: v1alpha1.MachineStateFailed,
				Description: fmt.Sprintf("Machine %s failed to join the cluster in %s: %s", m.Name, r.effectiveCreationTimeout(m), why),
			}
			announce = healthEvent{corev1.EventTypeWarning, "Failed"}
		default:
			requeue = min(r.untilCreationTimeout(m), r.opts.PendingRecheck)
		}

	case v1alpha1.MachineRunning:
		if !healthy {
			st.CurrentStatus.Phase = v1alpha1.MachineUnknown
			st.CurrentStatus.TimeoutActive = true
			st.LastOperation = v1alpha1.LastOperation{
				Type: v1alpha1.MachineOperationHealthCheck, State: v1alpha1.MachineStateProcessing,
				Description: fmt.Sprintf("Machine %s is unhealthy - changing MachineState to Unknown. %s", m.Name, unhealthyReason(node, r.effectiveNodeConditions(m))),
			}
			announce = healthEvent{corev1.EventTypeWarning, "Unhealthy"}
			requeue = clampRequeue(r.effectiveHealthTimeout(m)+time.Second, r.opts.LongRetry)
		}

	case v1alpha1.MachineInPlaceUpdateSuccessful:
		if healthy {
			announce = backToRunning(st, fmt.Sprintf("Machine %s successfully re-joined the cluster", m.Name), "Rejoined")
		}

	case v1alpha1.MachineUnknown:
		unknownFor := since(now, m.Status.CurrentStatus.LastUpdateTime)
		switch {
		case healthy:
			announce = backToRunning(st, fmt.Sprintf("Machine %s has re-joined the cluster", m.Name), "Recovered")
		case healthTimeoutDisabled(m):
		case unknownFor > r.effectiveHealthTimeout(m) && !r.stillUnknownSince(ctx, m):
			// The cache was stale (e.g. the safety controller just reset the machine); the
			// update brings it back.
			requeue = r.opts.ShortRetry
		case unknownFor > r.effectiveHealthTimeout(m):
			ok, why, err := r.limiter.mayFail(ctx, r, m)
			if err != nil {
				return reconcile.Result{}, err
			}
			if !ok {
				st.LastOperation = v1alpha1.LastOperation{
					Type: v1alpha1.MachineOperationHealthCheck, State: v1alpha1.MachineStateProcessing,
					Description: fmt.Sprintf("Machine %s health checks failing since %s; it couldn't be marked FAILED, other machines are getting replaced (%s)", m.Name, unknownFor.Round(time.Second), why),
				}
				requeue = r.opts.ShortRetry
				break
			}
			st.CurrentStatus.Phase = v1alpha1.MachineFailed
			st.CurrentStatus.TimeoutActive = false
			st.LastOperation = v1alpha1.LastOperation{
				Type: v1alpha1.MachineOperationHealthCheck, State: v1alpha1.MachineStateFailed,
				Description: fmt.Sprintf("Machine %s health checks failing for %s (timeout %s). Changing status to Failed. %s", m.Name, unknownFor.Round(time.Second), r.effectiveHealthTimeout(m), unhealthyReason(node, r.effectiveNodeConditions(m))),
			}
			announce = healthEvent{corev1.EventTypeWarning, "Failed"}
		default:
			requeue = clampRequeue(r.effectiveHealthTimeout(m)-unknownFor+time.Second, r.opts.LongRetry)
		}

	case v1alpha1.MachineFailed:
		// Only a preserved Failed machine gets here: its VM is kept, and a node that recovers
		// brings it back to Running (MCM moves any non-Running machine with a healthy node to
		// Running).
		if healthy {
			announce = backToRunning(st, fmt.Sprintf("Machine %s has re-joined the cluster", m.Name), "Recovered")
		}
	}

	if err := r.writeStatus(ctx, m, *st); err != nil {
		r.limiter.unmark(m)
		return requeueOnConflict(err)
	}
	if written != nil {
		written()
	}
	if announce.reason != "" {
		r.event(m, announce.eventType, announce.reason, "HealthCheck", st.LastOperation.Description)
	}
	res := reconcile.Result{RequeueAfter: requeue}
	if node != nil && m.Status.CurrentStatus.Phase != v1alpha1.MachineFailed {
		var err error
		if res, err = r.stepInPlace(ctx, m, node, res); err != nil {
			return res, err
		}
	}
	return r.withPreservation(ctx, m, node, true, res)
}

// healthEvent is the event a health transition records.
type healthEvent struct{ eventType, reason string }

// backToRunning moves a machine whose node is healthy again (after Unknown, a preserved
// failure or an in-place update) to Running, and returns the event the transition records.
func backToRunning(st *v1alpha1.MachineStatus, description, reason string) healthEvent {
	st.CurrentStatus.Phase = v1alpha1.MachineRunning
	st.CurrentStatus.TimeoutActive = false
	st.LastOperation = v1alpha1.LastOperation{
		Type: v1alpha1.MachineOperationHealthCheck, State: v1alpha1.MachineStateSuccessful, Description: description,
	}
	return healthEvent{corev1.EventTypeNormal, reason}
}

// stillUnknownSince confirms with the API server, right before the irreversible Unknown →
// Failed, that the machine is still Unknown since the same time: a machine the safety controller
// reset after an API-server outage must not be failed from a stale cache.
func (r *reconciler) stillUnknownSince(ctx context.Context, m *v1alpha1.Machine) bool {
	live := &v1alpha1.Machine{}
	if err := r.apiReader.Get(ctx, client.ObjectKeyFromObject(m), live); err != nil {
		return false
	}
	return live.Status.CurrentStatus.Phase == v1alpha1.MachineUnknown &&
		live.Status.CurrentStatus.LastUpdateTime.Equal(&m.Status.CurrentStatus.LastUpdateTime)
}

// isHealthy is MCM's rule: the node reports conditions, Ready is True, and none of the
// configured problem conditions is anything but False.
func isHealthy(conds []corev1.NodeCondition, problemTypes []string) bool {
	if len(conds) == 0 {
		return false
	}
	ready := false
	for _, c := range conds {
		if c.Type == corev1.NodeReady {
			ready = c.Status == corev1.ConditionTrue
			continue
		}
		for _, t := range problemTypes {
			if string(c.Type) == t && c.Status != corev1.ConditionFalse {
				return false
			}
		}
	}
	return ready
}

func unhealthyReason(node *corev1.Node, problemTypes []string) string {
	if node == nil {
		return "Node object went missing."
	}
	var parts []string
	for _, c := range node.Status.Conditions {
		bad := c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue
		for _, t := range problemTypes {
			if string(c.Type) == t && c.Status != corev1.ConditionFalse {
				bad = true
			}
		}
		if bad {
			parts = append(parts, fmt.Sprintf("%s=%s (%s)", c.Type, c.Status, c.Reason))
		}
	}
	if len(parts) == 0 {
		return "Node reports no conditions."
	}
	return "Node conditions: " + strings.Join(parts, ", ") + "."
}

// withoutHeartbeats drops the heartbeat times, which change on every kubelet report, so
// conditions are copied to the machine only when they say something new.
func withoutHeartbeats(conds []corev1.NodeCondition) []corev1.NodeCondition {
	out := make([]corev1.NodeCondition, len(conds))
	for i, c := range conds {
		c.LastHeartbeatTime = metav1Zero
		out[i] = c
	}
	return out
}

func hasTaint(node *corev1.Node, key string) bool {
	if node == nil {
		return false
	}
	for _, t := range node.Spec.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}

// setJoinDuration records how long the machine took to join, with an optimistic lock: it is the
// first write of the Pending → Running transition, so a stale cached machine fails here.
func (r *reconciler) setJoinDuration(ctx context.Context, m *v1alpha1.Machine, d time.Duration) error {
	if m.Annotations[v1alpha1.AnnotationMachineJoinDuration] != "" {
		return nil
	}
	orig := m.DeepCopy()
	if m.Annotations == nil {
		m.Annotations = map[string]string{}
	}
	m.Annotations[v1alpha1.AnnotationMachineJoinDuration] = d.String()
	if err := r.client.Patch(ctx, m, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		*m = *orig
		return err
	}
	mcmmetrics.MachineJoined(m, d)
	return nil
}

// deleteMachineOfNode deletes the machine of a node someone deleted (MCM #1055): the user asked
// for the node to go, so its VM goes too and the MachineSet replaces it.
func (r *reconciler) deleteMachineOfNode(ctx context.Context, m *v1alpha1.Machine, node *corev1.Node) error {
	if m.DeletionTimestamp != nil {
		return nil
	}
	uid := m.UID
	if err := r.client.Delete(ctx, m, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("machine: delete machine of deleted node %s: %w", node.Name, err)
	}
	r.event(m, corev1.EventTypeNormal, "NodeDeleted", "Delete", fmt.Sprintf("Node %s is being deleted: deleting its machine", node.Name))
	r.log(m).Info("node deleted: deleting its machine", "node", node.Name)
	return nil
}
