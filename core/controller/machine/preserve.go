package machine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/internal/preservation"
	"github.com/machinist-io/machinist/core/controller/mcmmetrics"
)

// Machine preservation, as Gardener MCM implements it (docs/usage/machine-preservation.md and
// manageMachinePreservation in MCM's machine controller): the annotation
// node.machine.sapcloud.io/preserve on the Node (wins) or the Machine keeps a machine — and its
// VM — for up to the preserve timeout. A preserved machine's node carries Cluster Autoscaler's
// scale-down-disabled annotations and the condition Preserved; a preserved Failed machine stays
// Failed (its MachineSet does not replace it), its node is tainted NoSchedule and drained
// (DaemonSet pods stay), and it goes back to Running if the node recovers. When preservation
// ends the marks go again; when it expires the annotation is removed too, and a Failed machine
// of a MachineSet is deleted, so it is replaced.

// preservedTaint keeps new pods off a preserved Failed machine's node. MCM taints instead of
// cordoning, so a node an operator cordoned stays cordoned when preservation ends.
var preservedTaint = corev1.Taint{Key: v1alpha1.TaintPreserved, Effect: corev1.TaintEffectNoSchedule}

// errPreservedDrain is a drain of a preserved node that did not finish; it is retried after the
// short retry, like MCM, instead of with the controller's error backoff.
type errPreservedDrain struct{ err error }

func (e *errPreservedDrain) Error() string { return e.err.Error() }
func (e *errPreservedDrain) Unwrap() error { return e.err }

// preserver keeps, completes and ends the preservation of machines.
type preserver struct{ *deps }

// after runs the preservation step after the health step (MCM runs it right after
// reconcileMachineHealth) and folds its requeue into res. node is the machine's node when the
// caller read it (nodeRead), so it is not read twice.
func (r *preserver) after(ctx context.Context, m *v1alpha1.Machine, node *corev1.Node, nodeRead bool, res reconcile.Result) (reconcile.Result, error) {
	after, err := r.reconcile(ctx, m, node, nodeRead)
	var drainErr *errPreservedDrain
	switch {
	case errors.As(err, &drainErr):
		after = r.opts.ShortRetry
	case err != nil:
		return requeueOnConflict(err)
	}
	if after > 0 && (res.RequeueAfter == 0 || after < res.RequeueAfter) {
		res.RequeueAfter = after
	}
	return res, nil
}

// reconcile starts, keeps up or stops the machine's preservation, and returns when
// to look again (at the expiry at the latest).
func (r *preserver) reconcile(ctx context.Context, m *v1alpha1.Machine, node *corev1.Node, nodeRead bool) (time.Duration, error) {
	nodeName := m.Labels[v1alpha1.LabelNode]
	if r.target == nil {
		nodeName, node = "", nil
	}
	if nodeName != "" && !nodeRead {
		n, err := r.nodeOf(ctx, m)
		if err != nil {
			return 0, err
		}
		node = n
	}
	s := preservation.Of(m, node, nodeName != "" && node == nil)
	if s.MachineAnnotated && !v1alpha1.ValidPreserveValue(s.MachineValue) {
		r.event(m, corev1.EventTypeWarning, "InvalidPreserveAnnotation", "Preserve", fmt.Sprintf(
			"annotation %s=%q on the machine is ignored: use one of %s", v1alpha1.AnnotationPreserve, s.MachineValue, strings.Join(v1alpha1.PreserveValues, ", ")))
		s.MachineAnnotated, s.MachineValue = false, ""
	}
	if s.NodeAnnotated && !v1alpha1.ValidPreserveValue(s.NodeValue) {
		// MCM leaves the machine alone until the node's value is fixed.
		r.event(m, corev1.EventTypeWarning, "InvalidPreserveAnnotation", "Preserve", fmt.Sprintf(
			"annotation %s=%q on node %s is not valid, preservation is left as it is: use one of %s", v1alpha1.AnnotationPreserve, s.NodeValue, nodeName, strings.Join(v1alpha1.PreserveValues, ", ")))
		return 0, nil
	}
	if !s.Bound(m) {
		return 0, nil
	}

	value := s.Effective()
	exp := m.Status.CurrentStatus.PreserveExpiryTime
	expired := exp != nil && !exp.After(r.now())
	failed := m.Status.CurrentStatus.Phase == v1alpha1.MachineFailed
	var err error
	removed := false
	switch {
	case value == "" || value == v1alpha1.PreserveFalse:
		err = r.stopPreservation(ctx, m, node, false, stopReason(value))
	case expired && failed && ownedBySet(m):
		// Its MachineSet replaces it: deleting it is where MCM's stop-then-terminate ends up
		// (the node goes with the VM). Deleting it here keeps the set from mistaking it for a
		// fresh failure and auto-preserving it again in between.
		return 0, r.deleteExpiredFailed(ctx, m)
	case expired:
		// The annotation goes too, so the machine is not preserved again right away.
		removed = true
		err = r.stopPreservation(ctx, m, node, true, "the preservation expired")
	case value == v1alpha1.PreserveWhenFailed && !failed:
		// when-failed preserves a Failed machine only; the annotation stays for the next failure.
		err = r.stopPreservation(ctx, m, node, false, "the machine is no longer Failed (preserve=when-failed)")
	case value == v1alpha1.PreserveAuto && !failed:
		// Auto-preservation was for the failure; the MachineSet may auto-preserve it again.
		removed = true
		err = r.stopPreservation(ctx, m, node, true, "the machine is no longer Failed (auto-preserved)")
	default:
		err = r.preserve(ctx, m, node, value)
	}
	if err != nil {
		return 0, err
	}
	preserved := m.Status.CurrentStatus.PreserveExpiryTime != nil
	if preserved && node != nil && m.Status.CurrentStatus.Phase == v1alpha1.MachineRunning {
		// A preserved machine that recovered (preserve=now) takes pods again.
		if err := r.setNodeMarks(ctx, node, nodeMarks{untaint: true}); err != nil {
			return 0, err
		}
	}
	if !removed && s.SyncMachine() {
		if err := r.applyNodeValue(ctx, m, s.NodeValue); err != nil {
			return 0, err
		}
	}
	if exp := m.Status.CurrentStatus.PreserveExpiryTime; exp != nil {
		return max(exp.Sub(r.now())+time.Second, time.Second), nil
	}
	return 0, nil
}

func stopReason(value string) string {
	if value == v1alpha1.PreserveFalse {
		return "annotation " + v1alpha1.AnnotationPreserve + "=false"
	}
	return "annotation " + v1alpha1.AnnotationPreserve + " removed"
}

// preserve starts or completes preservation (MCM's preserveMachine): the expiry time first, then
// the node's Cluster Autoscaler annotations, for a Failed machine the taint and the drain, and
// last the Preserved condition that records how far it got.
func (r *preserver) preserve(ctx context.Context, m *v1alpha1.Machine, node *corev1.Node, value string) error {
	if m.Status.CurrentStatus.PreserveExpiryTime == nil {
		exp := metav1.NewTime(r.now().Add(r.opts.preserveTimeout(m)).Truncate(time.Second))
		st := m.Status.DeepCopy()
		st.CurrentStatus.PreserveExpiryTime = &exp
		if err := r.writeStatus(ctx, m, *st); err != nil {
			return err
		}
		r.event(m, corev1.EventTypeNormal, "Preserved", "Preserve", fmt.Sprintf("Machine preserved until %s (%s=%s)", exp.UTC().Format(time.RFC3339), v1alpha1.AnnotationPreserve, value))
		r.log(m).Info("machine preserved", "until", exp.UTC(), "value", value)
	}
	if node == nil {
		return nil // without a node the expiry time is all there is
	}
	cond := nodeCondition(node, v1alpha1.NodeConditionPreserved)
	failed := m.Status.CurrentStatus.Phase == v1alpha1.MachineFailed
	drainNeeded := failed && (cond == nil || !strings.Contains(cond.Message, v1alpha1.PreservedMessageDrained))
	if cond != nil && cond.Status == corev1.ConditionTrue && !drainNeeded {
		return nil
	}
	if err := r.setNodeMarks(ctx, node, nodeMarks{annotate: true, taint: drainNeeded}); err != nil {
		return err
	}
	var drainErr error
	if drainNeeded {
		drainErr = r.drainPreserved(ctx, m, node)
	}
	if want, changed := preservedCondition(m, value, drainErr, cond, r.now()); changed {
		if err := r.setNodeCondition(ctx, node, want); err != nil {
			return err
		}
	}
	if drainErr != nil {
		r.event(m, corev1.EventTypeWarning, "PreservedNodeDrainFailed", "Drain", fmt.Sprintf("%s %v", v1alpha1.PreservedMessageNotDrained, drainErr))
		return &errPreservedDrain{drainErr}
	}
	if drainNeeded {
		r.event(m, corev1.EventTypeNormal, "PreservedNodeDrained", "Drain", fmt.Sprintf("%s Node %s keeps its DaemonSet pods.", v1alpha1.PreservedMessageDrained, node.Name))
	}
	return nil
}

// preservedCondition computes the node's Preserved condition as MCM does
// (computeNewNodePreservedCondition): for a Failed machine True once the drain succeeded and
// False with "could not be drained" while it has not; for any other phase True. The reason
// says who preserved it.
func preservedCondition(m *v1alpha1.Machine, value string, drainErr error, existing *corev1.NodeCondition, now time.Time) (corev1.NodeCondition, bool) {
	until := ""
	if exp := m.Status.CurrentStatus.PreserveExpiryTime; exp != nil {
		until = exp.UTC().String()
	}
	c := corev1.NodeCondition{Type: v1alpha1.NodeConditionPreserved, Status: corev1.ConditionFalse, LastTransitionTime: metav1.NewTime(now)}
	changed := existing == nil
	if existing != nil {
		c = *existing
	}
	set := func(status corev1.ConditionStatus, msg string) {
		if c.Status != status {
			c.LastTransitionTime = metav1.NewTime(now)
		}
		c.Status, c.Message, changed = status, msg, true
	}
	switch {
	case m.Status.CurrentStatus.Phase == v1alpha1.MachineFailed && drainErr == nil:
		if !strings.Contains(c.Message, v1alpha1.PreservedMessageDrained) {
			set(corev1.ConditionTrue, fmt.Sprintf("%s %s %s.", v1alpha1.PreservedMessageDrained, v1alpha1.PreservedMessageUntil, until))
		}
	case m.Status.CurrentStatus.Phase == v1alpha1.MachineFailed:
		if !strings.Contains(c.Message, v1alpha1.PreservedMessageNotDrained) {
			set(corev1.ConditionFalse, fmt.Sprintf("%s %s %s.", v1alpha1.PreservedMessageNotDrained, v1alpha1.PreservedMessageUntil, until))
		}
	case c.Status != corev1.ConditionTrue:
		set(corev1.ConditionTrue, fmt.Sprintf("%s %s.", v1alpha1.PreservedMessageUntil, until))
	}
	reason := v1alpha1.PreservedReasonByUser
	if value == v1alpha1.PreserveAuto {
		reason = v1alpha1.PreservedReasonByMCM
	}
	if c.Reason != reason {
		c.Reason, changed = reason, true
	}
	return c, changed
}

// drainPreserved drains a preserved Failed machine's node without cordoning it (the taint keeps
// new pods away) and leaves DaemonSet pods. As in MCM the drain turns forceful with the
// force-drain label, once the drain timeout has passed since the machine failed, or when the
// node has been NotReady for long.
func (r *preserver) drainPreserved(ctx context.Context, m *v1alpha1.Machine, node *corev1.Node) error {
	if r.targetCS == nil {
		return nil
	}
	drainTimeout := r.opts.drainTimeout(m)
	elapsed := since(r.now(), m.Status.CurrentStatus.LastUpdateTime)
	force, why := false, ""
	switch {
	case isTrue(m.Labels[v1alpha1.LabelForceDrain]):
		force, why = true, "label "+v1alpha1.LabelForceDrain
	case elapsed > drainTimeout:
		force, why = true, fmt.Sprintf("drain timeout %s passed since the machine failed", drainTimeout)
	default:
		if d := notReadyFor(node, r.now()); d > r.opts.ForceDrainNotReadyAfter {
			force, why = true, fmt.Sprintf("node not ready for %s", d.Round(time.Second))
		}
	}
	opts := r.opts.drainOptions()
	opts.SkipCordon, opts.Force = true, force
	if force {
		opts.Timeout, opts.MaxEvictRetries = time.Minute, 1
		r.log(m).Info("draining preserved node forcefully", "node", node.Name, "why", why)
	} else {
		opts.Timeout, opts.MaxEvictRetries = drainTimeout-elapsed, r.opts.evictRetries(m, drainTimeout)
	}
	began := r.now()
	if err := r.drainer(ctx, m).Drain(ctx, node.Name, opts); err != nil {
		return err
	}
	mcmmetrics.MachineDrained(m, r.now().Sub(began))
	return nil
}

// stopPreservation ends a preservation (MCM's stopPreservationIfActive): the node's condition
// Preserved turns False, the Cluster Autoscaler annotations this controller set and the
// preserved taint go, with removeAnnotations the preserve annotations of node and machine too,
// and last the expiry time, so an interrupted stop is finished by the next reconcile.
func (r *preserver) stopPreservation(ctx context.Context, m *v1alpha1.Machine, node *corev1.Node, removeAnnotations bool, why string) error {
	if m.Status.CurrentStatus.PreserveExpiryTime == nil {
		return nil
	}
	if node != nil {
		if err := r.setNodeCondition(ctx, node, corev1.NodeCondition{
			Type: v1alpha1.NodeConditionPreserved, Status: corev1.ConditionFalse, Reason: v1alpha1.PreservedReasonStopped,
			LastTransitionTime: metav1.NewTime(r.now()),
		}); err != nil {
			return err
		}
		if err := r.setNodeMarks(ctx, node, nodeMarks{unannotate: true, untaint: true, removePreserve: removeAnnotations}); err != nil {
			return err
		}
	}
	if removeAnnotations {
		if err := r.removePreserveAnnotations(ctx, m); err != nil {
			return err
		}
	}
	st := m.Status.DeepCopy()
	st.CurrentStatus.PreserveExpiryTime = nil
	if err := r.writeStatus(ctx, m, *st); err != nil {
		return err
	}
	r.event(m, corev1.EventTypeNormal, "PreservationStopped", "Preserve", "Preservation stopped: "+why)
	r.log(m).Info("machine preservation stopped", "why", why)
	return nil
}

func ownedBySet(m *v1alpha1.Machine) bool {
	ref := metav1.GetControllerOf(m)
	return ref != nil && ref.Kind == "MachineSet"
}

// deleteExpiredFailed deletes a Failed machine of a MachineSet whose preservation expired, so
// the set replaces it. MCM removes the annotation and the expiry time and leaves the deletion
// to the MachineSet, which can tell such a machine from a fresh failure only for a moment (it
// would auto-preserve it again); the deletion clears the expiry time. A machine without a
// MachineSet has its preservation stopped and stays Failed, like any Failed machine.
func (r *preserver) deleteExpiredFailed(ctx context.Context, m *v1alpha1.Machine) error {
	ref := metav1.GetControllerOf(m)
	uid := m.UID
	if err := r.client.Delete(ctx, m, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("machine: delete failed machine whose preservation expired: %w", err)
	}
	r.event(m, corev1.EventTypeNormal, "PreservationExpired", "Delete", "Deleting the Failed machine: its preservation expired; MachineSet "+ref.Name+" replaces it")
	return nil
}

// applyNodeValue moves the node's preserve value onto the machine: the machine's own annotation
// goes and last-applied-node-preserve-value records the node's (MCM's
// updatePreserveAnnotationOnMachine).
func (r *preserver) applyNodeValue(ctx context.Context, m *v1alpha1.Machine, nodeValue string) error {
	orig := m.DeepCopy()
	if m.Annotations == nil {
		m.Annotations = map[string]string{}
	}
	delete(m.Annotations, v1alpha1.AnnotationPreserve)
	m.Annotations[v1alpha1.AnnotationLastAppliedNodePreserveValue] = nodeValue
	if err := r.client.Patch(ctx, m, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		*m = *orig
		return err
	}
	return nil
}

// removePreserveAnnotations removes the machine's preserve and last-applied annotations.
func (r *preserver) removePreserveAnnotations(ctx context.Context, m *v1alpha1.Machine) error {
	_, a := m.Annotations[v1alpha1.AnnotationPreserve]
	_, b := m.Annotations[v1alpha1.AnnotationLastAppliedNodePreserveValue]
	if !a && !b {
		return nil
	}
	orig := m.DeepCopy()
	delete(m.Annotations, v1alpha1.AnnotationPreserve)
	delete(m.Annotations, v1alpha1.AnnotationLastAppliedNodePreserveValue)
	if err := r.client.Patch(ctx, m, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		*m = *orig
		return err
	}
	return nil
}

// nodeMarks are the changes preservation makes to a node's metadata and taints.
type nodeMarks struct {
	// annotate adds Cluster Autoscaler's scale-down-disabled annotation with the by-mcm marker,
	// unless someone else already disabled scale-down; unannotate removes both where a
	// marker (MCM's, or machinist's old key) says a controller set them.
	annotate, unannotate bool
	// taint adds the preserved NoSchedule taint, untaint removes it.
	taint, untaint bool
	// removePreserve removes the node's preserve annotation.
	removePreserve bool
}

// setNodeMarks applies marks to node in one patch, writing only when something changes; node is
// updated to what was written.
func (r *preserver) setNodeMarks(ctx context.Context, node *corev1.Node, marks nodeMarks) error {
	n := node.DeepCopy()
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	ann := n.Annotations
	switch {
	case marks.annotate:
		v1alpha1.MarkScaleDownDisabled(ann)
	case marks.unannotate:
		// MCM's record or machinist's old one; a mark set by hand stays.
		v1alpha1.UnmarkScaleDownDisabled(ann)
	}
	if marks.removePreserve {
		delete(ann, v1alpha1.AnnotationPreserve)
	}
	has := hasTaint(n, preservedTaint.Key)
	switch {
	case marks.taint && !has:
		t := preservedTaint
		added := metav1.NewTime(r.now())
		t.TimeAdded = &added
		n.Spec.Taints = append(n.Spec.Taints, t)
	case marks.untaint && has:
		var keep []corev1.Taint
		for _, t := range n.Spec.Taints {
			if t.Key != preservedTaint.Key {
				keep = append(keep, t)
			}
		}
		n.Spec.Taints = keep
	}
	if len(n.Annotations) == 0 && len(node.Annotations) == 0 {
		n.Annotations = node.Annotations
	}
	if equalStringMaps(n.Annotations, node.Annotations) && len(n.Spec.Taints) == len(node.Spec.Taints) {
		return nil
	}
	if err := r.target.GetClient().Patch(ctx, n, client.MergeFromWithOptions(node, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("machine: mark preserved node %s: %w", node.Name, err)
	}
	*node = *n
	return nil
}

func equalStringMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// setNodeCondition sets one condition of the node's status (strategic merge by type, so the
// kubelet's conditions are left alone), unless the node already has it with the same status,
// reason and message.
func (r *preserver) setNodeCondition(ctx context.Context, node *corev1.Node, c corev1.NodeCondition) error {
	if cur := nodeCondition(node, c.Type); cur != nil && cur.Status == c.Status && cur.Reason == c.Reason && cur.Message == c.Message {
		return nil
	}
	c.LastHeartbeatTime = metav1.NewTime(r.now())
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{c}}})
	if err != nil {
		return err
	}
	n := node.DeepCopy()
	if err := r.target.GetClient().Status().Patch(ctx, n, client.RawPatch(types.StrategicMergePatchType, patch)); err != nil {
		return fmt.Errorf("machine: set condition %s of node %s: %w", c.Type, node.Name, err)
	}
	*node = *n
	return nil
}

func nodeCondition(node *corev1.Node, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == t {
			return &node.Status.Conditions[i]
		}
	}
	return nil
}
