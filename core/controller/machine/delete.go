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
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	machinistv1alpha1 "github.com/machinist-io/machinist/core/apis/machinist/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/fallback"
	"github.com/machinist-io/machinist/core/controller/mcmmetrics"
	"github.com/machinist-io/machinist/core/drain"
	"github.com/machinist-io/machinist/core/driver"
)

// step is one step of the deletion sequence. The values are the step names of MCM's deletion
// flow; each step's description (what lastOperation says) is MCM's text, so a machine whose
// deletion MCM started is resumed at the right step, and tools that read the text still work.
type step string

const (
	stepGetVMStatus       step = "GetVMStatus"
	stepDrain             step = "InitiateDrain"
	stepVolumeAttachments step = "DelVolumesAttachments"
	stepVMDeletion        step = "InitiateVMDeletion"
	stepNodeDeletion      step = "InitiateNodeDeletion"
	stepFinalizerRemoval  step = "InitiateFinalizerRemoval"
)

// stepOrder is the sequence; a machine never goes back.
var stepOrder = []step{stepGetVMStatus, stepDrain, stepVolumeAttachments, stepVMDeletion, stepNodeDeletion, stepFinalizerRemoval}

var stepText = map[step]string{
	stepGetVMStatus:       "Set machine status to termination. Now, getting VM Status",
	stepDrain:             "Initiate node drain",
	stepVolumeAttachments: "Delete Volume Attachments",
	stepVMDeletion:        "Initiate VM deletion",
	stepNodeDeletion:      "Initiate node object deletion",
	stepFinalizerRemoval:  "Initiate machine object finalizer removal",
}

// AnnotationDeletion on a Machine being deleted is the stable marker of its deletion sequence:
// JSON {"step": ..., "since": RFC3339, "fromPhase": ...}. It is the controller's state; the
// lastOperation text is only its human-readable (and MCM-compatible) echo.
const AnnotationDeletion = "machinist.io/deletion"

type deletionState struct {
	Step      step                  `json:"step"`
	Since     metav1.Time           `json:"since"`
	FromPhase v1alpha1.MachinePhase `json:"fromPhase,omitempty"`
}

func deletionStateOf(m *v1alpha1.Machine) (deletionState, bool) {
	var s deletionState
	raw := m.Annotations[AnnotationDeletion]
	if raw == "" || json.Unmarshal([]byte(raw), &s) != nil || stepText[s.Step] == "" {
		return deletionState{}, false
	}
	return s, true
}

// mcmStep reads the step of a deletion MCM started from its description text (MCM's own rule,
// docs/compatibility/mcm-controllers.md#deletion-flow); used only for machines without our marker.
func mcmStep(m *v1alpha1.Machine) (step, bool) {
	if m.Status.CurrentStatus.Phase != v1alpha1.MachineTerminating {
		return "", false
	}
	for i := len(stepOrder) - 1; i >= 0; i-- {
		if strings.Contains(m.Status.LastOperation.Description, stepText[stepOrder[i]]) {
			return stepOrder[i], true
		}
	}
	return "", false
}

// terminationReconciler is the termination controller: it runs the deletion sequence of machines
// being deleted, on a queue of its own so deletions are not starved by creations (MCM's
// machinetermination queue).
type terminationReconciler struct {
	*deps
	tokens   *bootstrapTokens
	fallback *capacityFallback // deletes the VM a moved machine may have left on its old class
}

// setup watches machines being deleted.
func (r *terminationReconciler) setup(mgr manager.Manager) error {
	deleting := predicate.NewPredicateFuncs(func(o client.Object) bool { return !notDeleting(o) })
	return builder.ControllerManagedBy(mgr).
		Named("machine-termination").
		For(&v1alpha1.Machine{}, builder.WithPredicates(deleting, specOrMetaChanged())).
		WithOptions(r.opts.controllerOptions()).
		Complete(r)
}

// Reconcile runs the deletion sequence of a machine. Its start is recorded (phase
// Terminating, the marker with the phase it came from); after that a step is recorded (the
// marker and MCM's lastOperation text) when it may take a while — a drain with pods to move, a
// VM deletion the driver has not finished within slowStepAfter — and when it waits or fails. A
// step that is done at once is not: a smooth deletion costs two writes and the finalizer's
// removal instead of two writes per step. Every step is idempotent, so after a restart (or a
// crash mid-step) the sequence resumes at the last recorded step and runs the quick ones again.
func (r *terminationReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	m := &v1alpha1.Machine{}
	if err := r.client.Get(ctx, req.NamespacedName, m); err != nil {
		if apierrors.IsNotFound(err) {
			r.backoff.forget(req.String())
			r.writes.forget(req.String())
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if r.writes.outdated(req.String(), m.ResourceVersion) {
		// The cache does not show our last writes yet (the finalizer's removal: the machine is
		// gone): acting on it would repeat them.
		return reconcile.Result{RequeueAfter: conflictRetry}, nil
	}
	if m.DeletionTimestamp == nil || !controllerutil.ContainsFinalizer(m, v1alpha1.FinalizerMachineControllerManager) {
		return reconcile.Result{}, nil
	}
	if _, busy := r.creating.Load(keyOf(m)); busy {
		// A CreateMachine for it is in flight: let it return, then delete what it made.
		return reconcile.Result{RequeueAfter: r.opts.ShortRetry}, nil
	}

	state, ok := deletionStateOf(m)
	if !ok {
		s, fromMCM := mcmStep(m)
		if !fromMCM {
			s = stepGetVMStatus
		}
		state = deletionState{Step: s, Since: metav1.NewTime(r.now()), FromPhase: m.Status.CurrentStatus.Phase}
		if err := r.enterStep(ctx, m, state); err != nil {
			return requeueOnConflict(err)
		}
		r.event(m, corev1.EventTypeNormal, "Deleting", "Delete", "Deleting machine: "+stepText[state.Step])
	}

	for {
		next, res, err := r.runStep(ctx, m, state)
		if err != nil || next == "" {
			return res, err
		}
		if next == state.Step {
			// The machine waits in this step: show where (a failed step has shown why already).
			if err := r.recordStep(ctx, m, state); err != nil {
				return requeueOnConflict(err)
			}
			return res, nil
		}
		state = deletionState{Step: next, Since: metav1.NewTime(r.now()), FromPhase: state.FromPhase}
	}
}

// recordStep records s unless the marker names it already.
func (r *terminationReconciler) recordStep(ctx context.Context, m *v1alpha1.Machine, s deletionState) error {
	if cur, ok := deletionStateOf(m); ok && cur.Step == s.Step {
		return nil
	}
	return r.enterStep(ctx, m, s)
}

// slowStepAfter is how long a step's call may run before the step is recorded while it runs, so
// lastOperation says what a slow deletion waits for (a cloud taking minutes to delete a VM).
const slowStepAfter = 2 * time.Second

// recordIfSlow runs call (which must not touch m) and records s from another goroutine if call
// takes longer than slowStepAfter; m then holds the recorded machine.
func (r *terminationReconciler) recordIfSlow(ctx context.Context, m *v1alpha1.Machine, s deletionState, call func()) {
	done := make(chan struct{})
	recorded := make(chan *v1alpha1.Machine, 1)
	go func() {
		t := r.clock.NewTimer(slowStepAfter)
		defer t.Stop()
		select {
		case <-done:
			recorded <- nil
		case <-t.C():
			c := m.DeepCopy() // reading m while call reads it too
			if err := r.recordStep(ctx, c, s); err != nil {
				r.log(m).Debug("record a slow deletion step", "step", s.Step, "err", err)
			}
			recorded <- c
		}
	}()
	call()
	close(done)
	if c := <-recorded; c != nil {
		*m = *c
	}
}

// enterStep records the step: the marker first (the controller's state), then the status
// (phase Terminating, MCM's text).
func (r *terminationReconciler) enterStep(ctx context.Context, m *v1alpha1.Machine, s deletionState) error {
	if err := r.markStep(ctx, m, s); err != nil {
		return err
	}
	st := m.Status.DeepCopy()
	st.CurrentStatus.Phase = v1alpha1.MachineTerminating
	st.CurrentStatus.TimeoutActive = false
	st.CurrentStatus.PreserveExpiryTime = nil
	st.LastOperation = v1alpha1.LastOperation{Type: v1alpha1.MachineOperationDelete, State: v1alpha1.MachineStateProcessing, Description: stepText[s.Step]}
	return r.writeStatus(ctx, m, *st)
}

// markStep writes the marker of s (the controller's state) unless it names s already.
func (r *terminationReconciler) markStep(ctx context.Context, m *v1alpha1.Machine, s deletionState) error {
	if cur, ok := deletionStateOf(m); ok && cur.Step == s.Step {
		return nil
	}
	raw, err := json.Marshal(s)
	if err != nil {
		return err
	}
	orig := m.DeepCopy()
	if m.Annotations == nil {
		m.Annotations = map[string]string{}
	}
	m.Annotations[AnnotationDeletion] = string(raw)
	if err := r.client.Patch(ctx, m, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		*m = *orig
		return err
	}
	return nil
}

// stepFailed keeps the machine in its step, shows why in lastOperation (MCM's text last, so
// MCM would resume the same step) and retries with backoff by code.
func (r *terminationReconciler) stepFailed(ctx context.Context, m *v1alpha1.Machine, s deletionState, err error, code driver.Code) (step, reconcile.Result, error) {
	if ctx.Err() != nil {
		return "", reconcile.Result{}, ctx.Err()
	}
	delay := r.backoff.next(keyOf(m), code, r.opts)
	if err := r.markStep(ctx, m, s); err != nil {
		res, rerr := requeueOnConflict(err)
		return "", res, rerr
	}
	st := m.Status.DeepCopy()
	st.LastOperation = v1alpha1.LastOperation{
		Type: v1alpha1.MachineOperationDelete, State: v1alpha1.MachineStateFailed,
		Description: fmt.Sprintf("%s. Will retry in next sync. %s", strings.TrimSuffix(err.Error(), "."), stepText[s.Step]),
	}
	if code != driver.OK {
		st.LastOperation.ErrorCode = code.String()
	}
	r.event(m, corev1.EventTypeWarning, "DeleteFailed", "Delete", st.LastOperation.Description)
	r.log(m).Info("machine deletion step failed", "step", s.Step, "err", err, "retryIn", delay.Round(time.Millisecond))
	if werr := r.writeStatus(ctx, m, *st); werr != nil {
		res, rerr := requeueOnConflict(werr)
		return "", res, rerr
	}
	return s.Step, reconcile.Result{RequeueAfter: delay}, nil
}

// runStep runs one step and returns the step to go to (the same step to wait, "" to stop).
func (r *terminationReconciler) runStep(ctx context.Context, m *v1alpha1.Machine, s deletionState) (step, reconcile.Result, error) {
	switch s.Step {
	case stepGetVMStatus:
		return r.stepGetVMStatus(ctx, m, s)
	case stepDrain:
		return r.stepDrain(ctx, m, s)
	case stepVolumeAttachments:
		return r.stepVolumeAttachments(ctx, m, s)
	case stepVMDeletion:
		return r.stepVMDeletion(ctx, m, s)
	case stepNodeDeletion:
		return r.stepNodeDeletion(ctx, m, s)
	case stepFinalizerRemoval:
		return r.stepFinalizerRemoval(ctx, m)
	}
	return "", reconcile.Result{}, fmt.Errorf("machine: unknown deletion step %q", s.Step)
}

// stepGetVMStatus makes sure the machine knows its node: from its label, a node labelled with
// the machine's name, or the driver's GetMachineStatus.
func (r *terminationReconciler) stepGetVMStatus(ctx context.Context, m *v1alpha1.Machine, s deletionState) (step, reconcile.Result, error) {
	if r.target == nil {
		return stepVMDeletion, reconcile.Result{}, nil
	}
	if m.Labels[v1alpha1.LabelNode] != "" {
		return stepDrain, reconcile.Result{}, nil
	}
	var nodes corev1.NodeList
	if err := r.target.GetClient().List(ctx, &nodes, client.MatchingLabels{v1alpha1.LabelNodeMachineName: m.Name}); err != nil {
		return "", reconcile.Result{}, err
	}
	nodeName := ""
	if len(nodes.Items) > 0 {
		nodeName = nodes.Items[0].Name
	} else {
		class, err := r.machineClass(ctx, m)
		var ce *errClass
		if errors.As(err, &ce) {
			return stepDrain, reconcile.Result{}, nil // the VM deletion step deals with it
		}
		if err != nil {
			return r.stepFailed(ctx, m, s, err, driver.OK)
		}
		drv, err := r.driverFor(class)
		if err != nil {
			return r.stepFailed(ctx, m, s, err, driver.CodeOf(err))
		}
		secret, err := r.secretFor(ctx, class)
		if err != nil {
			return "", reconcile.Result{}, err
		}
		callCtx, cancel := context.WithTimeout(ctx, r.opts.LongRetry)
		defer cancel()
		st, err := drv.GetMachineStatus(callCtx, &driver.GetMachineStatusRequest{Machine: m, MachineClass: class, Secret: secret})
		switch code := driver.CodeOf(err); code {
		case driver.OK:
			if st != nil {
				nodeName = st.NodeName
			}
		case driver.NotFound, driver.Unimplemented, driver.Uninitialized:
			// Nothing to learn; the VM deletion step cleans up whatever exists.
		default:
			return r.stepFailed(ctx, m, s, fmt.Errorf("get VM status: %s", driver.MessageOf(err)), code)
		}
	}
	if nodeName != "" {
		orig := m.DeepCopy()
		if m.Labels == nil {
			m.Labels = map[string]string{}
		}
		m.Labels[v1alpha1.LabelNode] = nodeName
		if err := r.client.Patch(ctx, m, client.MergeFrom(orig)); err != nil {
			*m = *orig
			res, err := requeueOnConflict(err)
			return "", res, err
		}
	}
	return stepDrain, reconcile.Result{}, nil
}

// stepDrain drains the node. A node that never joined (no node name, no Node object) is not
// drained. The drain turns forceful after the drain timeout (counted from the deletion request,
// which never moves), with the force-deletion label, or when the node has been NotReady for
// long; a forced drain then waits for volume attachments to go.
func (r *terminationReconciler) stepDrain(ctx context.Context, m *v1alpha1.Machine, s deletionState) (step, reconcile.Result, error) {
	nodeName := m.Labels[v1alpha1.LabelNode]
	if nodeName == "" || r.target == nil {
		return stepVMDeletion, reconcile.Result{}, nil
	}
	node, err := nodeToDrain(ctx, r.target, nodeName)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return stepVMDeletion, reconcile.Result{}, nil
		}
		return "", reconcile.Result{}, err
	}
	drainTimeout := r.opts.drainTimeout(m)
	elapsed := r.now().Sub(m.DeletionTimestamp.Time)
	force, why := forceDrain(m, node, elapsed, drainTimeout, r.now(), r.opts.ForceDrainNotReadyAfter)
	var parked *machinistv1alpha1.PoolPolicy
	if force && timedOutOnly(m, node, elapsed, drainTimeout, r.now(), r.opts.ForceDrainNotReadyAfter) {
		if parked, err = (undrainable{r.deps}).cordonPolicy(ctx, m); err != nil {
			return "", reconcile.Result{}, err
		}
		force = parked == nil
	}

	reason := v1alpha1.NodeTerminationReasonScaleDown
	if s.FromPhase == v1alpha1.MachineFailed {
		reason = v1alpha1.NodeTerminationReasonUnhealthy
	}
	if err := setNodeTerminating(ctx, r.target.GetClient(), node, reason, r.now()); err != nil && !force {
		return r.stepFailed(ctx, m, s, fmt.Errorf("set node condition Terminating: %w", err), driver.OK)
	}

	opts := r.drainOptionsFor(ctx, m, s, force, drainTimeout, elapsed)
	if parked != nil {
		opts.Timeout = parkedDrainTimeout
	}
	if force {
		r.event(m, corev1.EventTypeNormal, "ForceDrain", "Drain", "Draining node "+nodeName+" forcefully: "+why)
	}
	began := r.now()
	err = r.drainer(ctx, m).Drain(ctx, nodeName, opts)
	switch {
	case err == nil && !force:
		mcmmetrics.MachineDrained(m, r.now().Sub(began))
		r.event(m, corev1.EventTypeNormal, "Drained", "Drain", "Drained node "+nodeName)
		return stepVMDeletion, reconcile.Result{}, nil
	case force:
		mcmmetrics.MachineDrained(m, r.now().Sub(began))
		if err != nil {
			r.event(m, corev1.EventTypeWarning, "ForceDrainIncomplete", "Drain", err.Error())
		}
		return stepVolumeAttachments, reconcile.Result{}, nil
	default:
		code := driver.OK
		var mis *drain.MisconfiguredPDBError
		if errors.As(err, &mis) {
			code = driver.FailedPrecondition
		}
		if parked != nil {
			if perr := (undrainable{r.deps}).park(ctx, m, parked, nodeName, err); perr != nil {
				res, rerr := requeueOnConflict(perr)
				return "", res, rerr
			}
		}
		next, res, ferr := r.stepFailed(ctx, m, s, fmt.Errorf("Drain failed due to - %w", err), code) //nolint:staticcheck // MCM's LastOperation text, verbatim (docs/compatibility/mcm-controllers.md)
		if ferr == nil && res.RequeueAfter > 0 {
			res.RequeueAfter, ferr = undrainable{r.deps}.retry(ctx, m, parked, drainTimeout-elapsed, res.RequeueAfter)
		}
		return next, res, ferr
	}
}

// retry bounds the retry of a failed drain under a Cordon policy: a machine not yet
// parked comes back when its drain timeout passes (a blocked budget's backoff may be far
// longer), a parked one tries again at least every parkedRetry. Other machines keep delay.
func (r undrainable) retry(ctx context.Context, m *v1alpha1.Machine, parked *machinistv1alpha1.PoolPolicy, untilTimeout, delay time.Duration) (time.Duration, error) {
	if parked != nil {
		return min(delay, parkedRetry), nil
	}
	p, err := r.cordonPolicy(ctx, m)
	if err != nil || p == nil {
		return delay, err
	}
	return min(delay, max(untilTimeout+time.Second, r.opts.DrainPollInterval)), nil
}

// nodeToDrain reads the node from the cache, which suffices for what the drain step reads
// (conditions; the drain reads and cordons the node itself); only a node the cache does not
// show is asked for (it may be brand new).
func nodeToDrain(ctx context.Context, target cluster.Cluster, name string) (*corev1.Node, error) {
	node := &corev1.Node{}
	err := target.GetClient().Get(ctx, client.ObjectKey{Name: name}, node)
	if apierrors.IsNotFound(err) {
		err = target.GetAPIReader().Get(ctx, client.ObjectKey{Name: name}, node)
	}
	return node, err
}

// forceDrain decides whether the drain is forceful, and why: the machine's force-deletion
// label, the drain timeout passed, or a node not ready for longer than notReadyAfter.
func forceDrain(m *v1alpha1.Machine, node *corev1.Node, elapsed, drainTimeout time.Duration, now time.Time, notReadyAfter time.Duration) (bool, string) {
	switch {
	case isTrue(m.Labels[v1alpha1.LabelForceDeletion]):
		return true, "label " + v1alpha1.LabelForceDeletion
	case elapsed > drainTimeout:
		return true, fmt.Sprintf("drain timeout %s passed", drainTimeout)
	}
	if d := notReadyFor(node, now); d > notReadyAfter {
		return true, fmt.Sprintf("node not ready for %s", d.Round(time.Second))
	}
	return false, ""
}

// timedOutOnly: the drain timeout is the only reason forceDrain gives to force (no force label,
// the node Ready enough to drain gracefully).
func timedOutOnly(m *v1alpha1.Machine, node *corev1.Node, elapsed, drainTimeout time.Duration, now time.Time, notReadyAfter time.Duration) bool {
	return elapsed > drainTimeout && !isTrue(m.Labels[v1alpha1.LabelForceDeletion]) && notReadyFor(node, now) <= notReadyAfter
}

// drainOptionsFor are the drain's options: a forceful drain gets a minute and one eviction
// attempt; a graceful one the rest of the drain timeout, reporting what blocks it.
func (r *terminationReconciler) drainOptionsFor(ctx context.Context, m *v1alpha1.Machine, s deletionState, force bool, drainTimeout, elapsed time.Duration) drain.Options {
	opts := r.opts.drainOptions()
	opts.Force = force
	// A drain with pods to move may take a while: record it before the first goes.
	opts.OnPods = func(int) {
		if err := r.recordStep(ctx, m, s); err != nil {
			r.log(m).Debug("record the drain step", "err", err)
		}
	}
	if force {
		opts.Timeout = time.Minute
		opts.MaxEvictRetries = 1
		return opts
	}
	opts.Timeout, opts.MaxEvictRetries = drainTimeout-elapsed, r.opts.evictRetries(m, drainTimeout)
	deadline := m.DeletionTimestamp.Add(drainTimeout).UTC().Format(time.RFC3339)
	opts.OnProblem = func(problem error) { r.reportDrainProblem(ctx, m.Namespace, m.Name, problem, true) }
	opts.OnBlocked = func(problem error) {
		r.reportDrainProblem(ctx, m.Namespace, m.Name, fmt.Errorf("%w; retrying until the drain timeout (%s), then draining forcefully", problem, deadline), false)
	}
	return opts
}

// reportDrainProblem shows in the machine's lastOperation what a running drain waits for: a
// problem that needs a human (a misconfigured budget: Failed, FailedPrecondition) or a budget
// that refuses an eviction for now (Processing).
func (r *terminationReconciler) reportDrainProblem(ctx context.Context, ns, name string, problem error, needsHuman bool) {
	m := &v1alpha1.Machine{}
	if err := r.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, m); err != nil {
		return
	}
	st := m.Status.DeepCopy()
	st.LastOperation = v1alpha1.LastOperation{
		Type: v1alpha1.MachineOperationDelete, State: v1alpha1.MachineStateProcessing,
		Description: fmt.Sprintf("Drain waiting - %v. %s", problem, stepText[stepDrain]),
	}
	reason := "DrainWaiting"
	if needsHuman {
		st.LastOperation.State = v1alpha1.MachineStateFailed
		st.LastOperation.ErrorCode = driver.FailedPrecondition.String()
		st.LastOperation.Description = fmt.Sprintf("Drain problem - %v. %s", problem, stepText[stepDrain])
		reason = "DrainBlocked"
	}
	if err := r.writeStatus(ctx, m, *st); err != nil {
		r.log(m).Debug("report drain problem", "err", err)
	}
	eventType := corev1.EventTypeNormal
	if needsHuman {
		eventType = corev1.EventTypeWarning
	}
	r.event(m, eventType, reason, "Drain", problem.Error())
}

func notReadyFor(node *corev1.Node, now time.Time) time.Duration {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			if c.Status == corev1.ConditionTrue || c.LastTransitionTime.IsZero() {
				return 0
			}
			return now.Sub(c.LastTransitionTime.Time)
		}
	}
	return 0
}

// setNodeTerminating sets the node condition Terminating (reason Unhealthy or ScaleDown), so
// node-local agents know the node is going.
func setNodeTerminating(ctx context.Context, c client.Client, node *corev1.Node, reason string, at time.Time) error {
	for _, c := range node.Status.Conditions {
		if c.Type == v1alpha1.NodeConditionTerminating && c.Status == corev1.ConditionTrue {
			return nil
		}
	}
	n := node.DeepCopy()
	now := metav1.NewTime(at)
	n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{
		Type: v1alpha1.NodeConditionTerminating, Status: corev1.ConditionTrue, Reason: reason,
		Message: "The machine of this node is being deleted", LastTransitionTime: now, LastHeartbeatTime: now,
	})
	// Strategic merge on conditions (merge key type) leaves the kubelet's conditions alone.
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{n.Status.Conditions[len(n.Status.Conditions)-1]}}})
	if err != nil {
		return err
	}
	return c.Status().Patch(ctx, n, client.RawPatch(types.StrategicMergePatchType, patch))
}

// stepVolumeAttachments deletes the node's VolumeAttachments after a forced drain and waits
// (bounded by the PV detach timeout) until the node has none left, so volumes are free before
// the VM goes.
func (r *terminationReconciler) stepVolumeAttachments(ctx context.Context, m *v1alpha1.Machine, s deletionState) (step, reconcile.Result, error) {
	nodeName := m.Labels[v1alpha1.LabelNode]
	if nodeName == "" || r.targetCS == nil {
		return stepVMDeletion, reconcile.Result{}, nil
	}
	list, err := r.targetCS.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", reconcile.Result{}, fmt.Errorf("machine: list volume attachments: %w", err)
	}
	left := 0
	for _, va := range list.Items {
		if va.Spec.NodeName != nodeName {
			continue
		}
		left++
		if va.DeletionTimestamp == nil {
			if err := r.targetCS.StorageV1().VolumeAttachments().Delete(ctx, va.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return "", reconcile.Result{}, fmt.Errorf("machine: delete volume attachment %s: %w", va.Name, err)
			}
		}
	}
	if left == 0 {
		return stepVMDeletion, reconcile.Result{}, nil
	}
	node := &corev1.Node{}
	if err := r.target.GetAPIReader().Get(ctx, client.ObjectKey{Name: nodeName}, node); apierrors.IsNotFound(err) || (err == nil && len(node.Status.VolumesAttached) == 0) {
		return stepVMDeletion, reconcile.Result{}, nil
	}
	if waited := r.now().Sub(s.Since.Time); waited > r.opts.PVDetachTimeout {
		r.event(m, corev1.EventTypeWarning, "VolumeAttachmentsLeft", "Delete",
			fmt.Sprintf("%d volume attachments of node %s still exist after %s; deleting the VM anyway", left, nodeName, waited.Round(time.Second)))
		return stepVMDeletion, reconcile.Result{}, nil
	}
	return s.Step, reconcile.Result{RequeueAfter: r.opts.DrainPollInterval}, nil
}

// stepVMDeletion calls DeleteMachine, even when the VM seems gone, so partial creations (NICs,
// disks) are cleaned up. NotFound counts as done.
func (r *terminationReconciler) stepVMDeletion(ctx context.Context, m *v1alpha1.Machine, s deletionState) (step, reconcile.Result, error) {
	if old := m.Annotations[fallback.AnnotationVacate]; old != "" && old != m.Spec.Class.Name {
		// A capacity fallback moved the machine before the class it left was checked.
		if gone, err := r.fallback.deleteOnClass(ctx, m, old); err != nil || !gone {
			if err == nil {
				return s.Step, reconcile.Result{RequeueAfter: r.opts.ShortRetry}, nil
			}
			return r.stepFailed(ctx, m, s, fmt.Errorf("class %s this machine was moved away from: %s%s", old, descProviderPrefix, driver.MessageOf(err)), driver.CodeOf(err))
		}
	}
	class, err := r.machineClass(ctx, m)
	var ce *errClass
	if errors.As(err, &ce) && m.Spec.ProviderID == "" {
		// No class (a typo, or never created): no driver was ever called for this machine, since
		// a class keeps its finalizer while machines use it, so there is no VM to delete.
		r.event(m, corev1.EventTypeNormal, "NoVM", "Delete", "No VM to delete: "+ce.msg)
		return stepAfterVMDeletion(r.target)
	}
	if err != nil {
		if errors.As(err, &ce) {
			err = fmt.Errorf("%s; the VM %s cannot be deleted without it: recreate the class, or delete the VM yourself and remove the finalizer %s", ce.msg, m.Spec.ProviderID, v1alpha1.FinalizerMachineControllerManager)
		}
		return r.stepFailed(ctx, m, s, err, driver.OK)
	}
	drv, err := r.driverFor(class)
	if err != nil {
		return r.stepFailed(ctx, m, s, err, driver.CodeOf(err))
	}
	secret, err := r.secretFor(ctx, class)
	if err != nil {
		return "", reconcile.Result{}, err
	}
	callCtx, cancel := context.WithTimeout(ctx, max(r.opts.CreationTimeout, r.opts.LongRetry))
	defer cancel()
	var resp *driver.DeleteMachineResponse
	req := &driver.DeleteMachineRequest{Machine: m.DeepCopy(), MachineClass: class, Secret: secret}
	r.recordIfSlow(ctx, m, s, func() { resp, err = drv.DeleteMachine(callCtx, req) })
	if code := driver.CodeOf(err); code != driver.OK && code != driver.NotFound {
		if resp != nil && resp.LastKnownState != "" {
			m.Status.LastKnownState = resp.LastKnownState
		}
		return r.stepFailed(ctx, m, s, fmt.Errorf("%s%s", descProviderPrefix, driver.MessageOf(err)), code)
	}
	r.backoff.forget(keyOf(m))
	mcmmetrics.MachineDeleted(m, r.now().Sub(m.DeletionTimestamp.Time))
	r.event(m, corev1.EventTypeNormal, "VMDeleted", "Delete", "Deleted VM "+m.Spec.ProviderID)
	return stepAfterVMDeletion(r.target)
}

// stepAfterVMDeletion: the node goes next, unless there is no target cluster.
func stepAfterVMDeletion(target cluster.Cluster) (step, reconcile.Result, error) {
	if target == nil {
		return stepFinalizerRemoval, reconcile.Result{}, nil
	}
	return stepNodeDeletion, reconcile.Result{}, nil
}

// stepNodeDeletion removes the node finalizer and deletes the Node (a missing node is fine), and
// removes a bootstrap token the node never used.
func (r *terminationReconciler) stepNodeDeletion(ctx context.Context, m *v1alpha1.Machine, s deletionState) (step, reconcile.Result, error) {
	if err := r.tokens.delete(ctx, m); err != nil {
		return r.stepFailed(ctx, m, s, err, driver.OK)
	}
	nodeName := m.Labels[v1alpha1.LabelNode]
	if nodeName == "" || r.target == nil {
		return stepFinalizerRemoval, reconcile.Result{}, nil
	}
	node := &corev1.Node{}
	err := r.target.GetAPIReader().Get(ctx, client.ObjectKey{Name: nodeName}, node)
	if apierrors.IsNotFound(err) {
		return stepFinalizerRemoval, reconcile.Result{}, nil
	}
	if err != nil {
		return "", reconcile.Result{}, err
	}
	if node.Labels[v1alpha1.LabelNodeMachineName] != "" && node.Labels[v1alpha1.LabelNodeMachineName] != m.Name {
		// The name was reused by another machine's node: not ours to delete.
		return stepFinalizerRemoval, reconcile.Result{}, nil
	}
	if controllerutil.ContainsFinalizer(node, v1alpha1.FinalizerNode) {
		orig := node.DeepCopy()
		controllerutil.RemoveFinalizer(node, v1alpha1.FinalizerNode)
		if err := r.target.GetClient().Patch(ctx, node, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			res, err := requeueOnConflict(err)
			return "", res, err
		}
	}
	if node.DeletionTimestamp != nil {
		// Already being deleted (a driver deletes the node with the VM, as a cloud controller
		// manager would): without our finalizer it goes.
		return stepFinalizerRemoval, reconcile.Result{}, nil
	}
	uid := node.UID
	if err := r.target.GetClient().Delete(ctx, node, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return r.stepFailed(ctx, m, s, fmt.Errorf("delete node %s: %w", nodeName, err), driver.OK)
	}
	return stepFinalizerRemoval, reconcile.Result{}, nil
}

// stepFinalizerRemoval lets the machine go.
func (r *terminationReconciler) stepFinalizerRemoval(ctx context.Context, m *v1alpha1.Machine) (step, reconcile.Result, error) {
	last := m.ResourceVersion
	if res, err := r.removeFinalizer(ctx, m, v1alpha1.FinalizerMachineControllerManager); err != nil || res.RequeueAfter > 0 {
		return "", res, err
	}
	// The machine is gone, but the cache may show it at its last version a moment longer: a
	// reconcile of that must not remove the finalizer again.
	r.writes.record(keyOf(m), last)
	r.backoff.forget(keyOf(m))
	if n := m.Labels[v1alpha1.LabelNode]; n != "" {
		r.recordedNodes.Delete(n)
	}
	r.log(m).Info("machine deleted")
	return "", reconcile.Result{}, nil
}

var _ reconcile.Reconciler = (*terminationReconciler)(nil)
