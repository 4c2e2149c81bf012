package machine

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/mcmmetrics"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/registry"
)

// Descriptions written to lastOperation; the texts are MCM's so tools reading them keep working.
const (
	descCreating         = "Creating machine on cloud provider"
	descCreated          = "Created machine on cloud provider"
	descProviderPrefix   = "Cloud provider message - "
	descStaleNode        = "VM using old node obj"
	descInitializeSuffix = ". Initialize VM Instance"
	descWaitingPrefix    = "Waiting for the preferred provider - "
)

// created is what the driver told about a machine's VM.
type created struct {
	providerID     string
	nodeName       string
	addresses      []corev1.NodeAddress
	lastKnownState string
	fresh          bool // CreateMachine made it in this attempt (not adopted)
	uninitialized  bool
}

// creator creates the VM of a machine that has none yet
// (docs/compatibility/mcm-controllers.md#creation-flow), with the capacity fallback's choice of
// class (fallback.go) and the bootstrap token (bootstrap.go), and hands the machine to the health
// check (health.go) in the same status write.
type creator struct {
	*deps
	tokens   *bootstrapTokens
	fallback *capacityFallback
	health   *healthChecker
}

// create runs the creation flow (docs/compatibility/mcm-controllers.md#creation-flow):
// GetMachineStatus first so an existing VM is adopted, CreateMachine only when there is none,
// InitializeMachine when needed, then the machine gets its node label, providerID and priority and
// goes Pending (Available without a target cluster).
func (r *creator) create(ctx context.Context, m *v1alpha1.Machine, class *v1alpha1.MachineClass) (reconcile.Result, error) {
	key := keyOf(m)
	if _, busy := r.creating.LoadOrStore(key, struct{}{}); busy {
		return reconcile.Result{RequeueAfter: r.opts.ShortRetry}, nil
	}
	defer r.creating.Delete(key)

	call, res, err := r.prepare(ctx, m, class)
	if call == nil {
		return res, err
	}
	defer call.cancel()

	c, err := r.findOrCreateVM(call.ctx, call.drv, m, class, call.secret)
	if err != nil {
		return r.notCreated(ctx, m, class, c, err)
	}
	if c.fresh {
		mcmmetrics.MachineCreated(m, r.now().Sub(m.CreationTimestamp.Time))
	}
	if res, done, err := r.checkVM(ctx, call, m, class, c); done {
		return res, err
	}
	if err := r.recordVM(ctx, m, c); err != nil {
		return requeueOnConflict(err)
	}
	if err := r.initialize(call, m, class, c); err != nil {
		return r.createFailed(ctx, m, err, c.lastKnownState, descInitializeSuffix)
	}
	r.backoff.forget(key)
	if c.fresh {
		r.fallback.createdOn(ctx, class)
	}
	return r.handOver(ctx, m, c)
}

// createCall is what the driver calls of one creation use: the class's driver, its secret with
// the machine's user data, and the creation timeout.
type createCall struct {
	drv    driver.Driver
	secret *corev1.Secret
	ctx    context.Context
	cancel context.CancelFunc
}

// prepare resolves the class's driver and secret and renders the user data (with a bootstrap
// token). Without a call, the reconcile ends with the result and error returned.
func (r *creator) prepare(ctx context.Context, m *v1alpha1.Machine, class *v1alpha1.MachineClass) (*createCall, reconcile.Result, error) {
	drv, err := r.driverFor(class)
	var waiting *registry.WaitingError
	if errors.As(err, &waiting) {
		res, err := r.waitForProvider(ctx, m, waiting)
		return nil, res, err
	}
	if err != nil {
		res, err := r.createFailed(ctx, m, err, "", "")
		return nil, res, err
	}
	secret, err := r.secretFor(ctx, class)
	if err != nil {
		return nil, reconcile.Result{}, err
	}
	secret, err = r.tokens.userData(ctx, m, secret)
	if err != nil {
		r.log(m).Warn("bootstrap token", "err", err)
		return nil, reconcile.Result{RequeueAfter: r.backoff.next(keyOf(m), driver.Unavailable, r.opts)}, nil
	}
	callCtx, cancel := context.WithTimeout(ctx, r.opts.creationTimeout(m))
	return &createCall{drv: drv, secret: secret, ctx: callCtx, cancel: cancel}, reconcile.Result{}, nil
}

// notCreated handles a creation that failed: a machine about to be deleted waits, a class out
// of capacity falls back to the next one, anything else is recorded as the failure.
func (r *creator) notCreated(ctx context.Context, m *v1alpha1.Machine, class *v1alpha1.MachineClass, c *created, err error) (reconcile.Result, error) {
	var surplus *errSurplus
	if errors.As(err, &surplus) {
		r.log(m).Debug("no VM created: the machine is about to be deleted", "why", surplus.why)
		return reconcile.Result{RequeueAfter: r.opts.ShortRetry}, nil
	}
	if res, handled, ferr := r.fallback.afterCreateFailed(ctx, m, class, err); handled {
		return res, ferr
	}
	var lks string
	if c != nil {
		lks = c.lastKnownState
	}
	return r.createFailed(ctx, m, err, lks, "")
}

// checkVM refuses what the driver returned when the machine cannot take it: a fresh VM that
// registered as a stale node, an empty ProviderID, no NodeName with a target cluster. done
// says the reconcile ends with the result and error returned.
func (r *creator) checkVM(ctx context.Context, call *createCall, m *v1alpha1.Machine, class *v1alpha1.MachineClass, c *created) (res reconcile.Result, done bool, err error) {
	if c.fresh && r.target != nil && c.nodeName != "" {
		stale, err := r.staleNode(ctx, c)
		if err != nil {
			return reconcile.Result{}, true, err
		}
		if stale {
			res, err := r.rejectStaleNode(call.ctx, ctx, call.drv, m, class, call.secret, c)
			return res, true, err
		}
	}
	switch {
	case c.providerID == "":
		res, err = r.createFailed(ctx, m, driver.Error(driver.Internal, "the driver returned an empty ProviderID"), c.lastKnownState, "")
		return res, true, err
	case r.target != nil && c.nodeName == "":
		res, err = r.createFailed(ctx, m, driver.Error(driver.Internal, "the driver returned an empty NodeName"), c.lastKnownState, "")
		return res, true, err
	}
	return reconcile.Result{}, false, nil
}

// initialize calls InitializeMachine for a VM created now or not initialized yet; a driver
// answering Unimplemented needs none.
func (r *creator) initialize(call *createCall, m *v1alpha1.Machine, class *v1alpha1.MachineClass, c *created) error {
	if !c.fresh && !c.uninitialized {
		return nil
	}
	began := r.now()
	resp, err := call.drv.InitializeMachine(call.ctx, &driver.InitializeMachineRequest{Machine: m, MachineClass: class, Secret: call.secret})
	switch driver.CodeOf(err) {
	case driver.OK:
		mcmmetrics.MachineInitialized(m, r.now().Sub(began))
		if resp != nil && len(resp.Addresses) > 0 {
			c.addresses = resp.Addresses
		}
	case driver.Unimplemented:
	default:
		return err
	}
	return nil
}

// handOver records the created machine: Available without a target cluster, else Pending and
// handed to the health check in the same status write.
func (r *creator) handOver(ctx context.Context, m *v1alpha1.Machine, c *created) (reconcile.Result, error) {
	st := m.Status.DeepCopy()
	st.LastKnownState = c.lastKnownState
	if r.target == nil {
		st.CurrentStatus.Phase = v1alpha1.MachineAvailable
		st.CurrentStatus.TimeoutActive = false
		st.Addresses = withHostname(c.addresses, c.nodeName)
		st.LastOperation = v1alpha1.LastOperation{Type: v1alpha1.MachineOperationCreate, State: v1alpha1.MachineStateSuccessful, Description: descCreated}
	} else {
		st.CurrentStatus.Phase = v1alpha1.MachinePending
		st.CurrentStatus.TimeoutActive = true
		st.LastOperation = v1alpha1.LastOperation{Type: v1alpha1.MachineOperationCreate, State: v1alpha1.MachineStateProcessing, Description: descCreating}
	}
	announce := func() {
		if c.fresh {
			r.event(m, corev1.EventTypeNormal, "Created", "Create", fmt.Sprintf("Created VM %s (node %s)", c.providerID, c.nodeName))
		} else {
			r.event(m, corev1.EventTypeNormal, "Adopted", "Create", fmt.Sprintf("Found existing VM %s (node %s)", c.providerID, c.nodeName))
		}
		r.log(m).Info("machine created", "providerID", c.providerID, "node", c.nodeName, "adopted", !c.fresh)
	}
	if r.target == nil {
		if err := r.writeStatus(ctx, m, *st); err != nil {
			return requeueOnConflict(err)
		}
		announce()
		return reconcile.Result{RequeueAfter: r.opts.LongRetry}, nil
	}
	// Look at the node now, before Pending is written: it may have registered already (during
	// CreateMachine, or long before for an adopted VM) and then sends no more events, and when it
	// is healthy one status write takes the machine from creation to Running. A node still to
	// come brings the machine back with its events; the health check's Pending recheck is the
	// backstop.
	return r.health.reconcileFrom(ctx, m, *st, announce)
}

// findOrCreateVM asks GetMachineStatus first and calls CreateMachine only when the driver has
// no VM (or cannot tell) and the machine has no providerID yet.
func (r *creator) findOrCreateVM(ctx context.Context, drv driver.Driver, m *v1alpha1.Machine, class *v1alpha1.MachineClass, secret *corev1.Secret) (*created, error) {
	st, err := drv.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: m, MachineClass: class, Secret: secret})
	switch code := driver.CodeOf(err); code {
	case driver.OK:
		if st != nil && st.ProviderID != "" {
			return &created{providerID: st.ProviderID, nodeName: st.NodeName, addresses: st.Addresses, lastKnownState: m.Status.LastKnownState}, nil
		}
	case driver.NotFound, driver.Unimplemented:
		if m.Spec.ProviderID != "" {
			// The VM was made before; trust what the machine recorded (MCM's rule).
			return &created{providerID: m.Spec.ProviderID, nodeName: m.Labels[v1alpha1.LabelNode], lastKnownState: m.Status.LastKnownState}, nil
		}
	case driver.Uninitialized:
		if st != nil && st.ProviderID != "" {
			return &created{providerID: st.ProviderID, nodeName: st.NodeName, addresses: st.Addresses, lastKnownState: m.Status.LastKnownState, uninitialized: true}, nil
		}
		// No details with the error: CreateMachine is idempotent and tells them.
	default:
		return nil, err
	}
	// Right before the call, so the scale-down that makes a machine surplus has had the most time
	// to reach the cache (when machinist takes over, the deployment controller may be scaling a
	// set down at this moment).
	if why := r.aboutToBeDeleted(ctx, m); why != "" {
		return nil, &errSurplus{why}
	}
	resp, err := drv.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: m, MachineClass: class, Secret: secret})
	if err != nil {
		c := &created{}
		if resp != nil {
			c.lastKnownState = resp.LastKnownState
		}
		return c, err
	}
	if resp == nil {
		return nil, driver.Error(driver.Internal, "the driver returned no response and no error")
	}
	return &created{providerID: resp.ProviderID, nodeName: resp.NodeName, addresses: resp.Addresses, lastKnownState: resp.LastKnownState, fresh: true}, nil
}

// staleNode reports whether a node with the new VM's node name already exists for another VM
// (a cloud reusing node names): the new VM's kubelet would take over the old node object.
func (r *creator) staleNode(ctx context.Context, c *created) (bool, error) {
	node := &corev1.Node{}
	// The cache suffices: a stale node is one that existed long before this VM.
	if err := r.target.GetClient().Get(ctx, client.ObjectKey{Name: c.nodeName}, node); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("machine: check for a stale node %s: %w", c.nodeName, err)
	}
	return node.Spec.ProviderID != "" && !driver.SameProviderID(node.Spec.ProviderID, c.providerID), nil
}

// rejectStaleNode deletes the VM just made and fails the machine: its node name belongs to a
// node of another VM. The MachineSet replaces the machine.
func (r *creator) rejectStaleNode(callCtx, ctx context.Context, drv driver.Driver, m *v1alpha1.Machine, class *v1alpha1.MachineClass, secret *corev1.Secret, c *created) (reconcile.Result, error) {
	probe := m.DeepCopy()
	probe.Spec.ProviderID = c.providerID
	if _, err := drv.DeleteMachine(callCtx, &driver.DeleteMachineRequest{Machine: probe, MachineClass: class, Secret: secret}); err != nil && !driver.IsCode(err, driver.NotFound) {
		return reconcile.Result{RequeueAfter: r.backoff.next(keyOf(m), driver.CodeOf(err), r.opts)}, nil
	}
	st := m.Status.DeepCopy()
	st.CurrentStatus.Phase = v1alpha1.MachineFailed
	st.CurrentStatus.TimeoutActive = false
	st.LastOperation = v1alpha1.LastOperation{
		Type: v1alpha1.MachineOperationCreate, State: v1alpha1.MachineStateFailed,
		Description: fmt.Sprintf("%s: node %s already exists for another VM; deleted the new VM %s", descStaleNode, c.nodeName, c.providerID),
	}
	r.event(m, corev1.EventTypeWarning, "StaleNode", "Create", st.LastOperation.Description)
	if err := r.writeStatus(ctx, m, *st); err != nil {
		return requeueOnConflict(err)
	}
	return reconcile.Result{RequeueAfter: r.opts.ShortRetry}, nil
}

// recordVM stores the VM on the machine: spec.providerID, the node label (with a target
// cluster) and the default scale-down priority.
func (r *creator) recordVM(ctx context.Context, m *v1alpha1.Machine, c *created) error {
	orig := m.DeepCopy()
	changed := false
	if m.Spec.ProviderID != c.providerID {
		m.Spec.ProviderID = c.providerID
		changed = true
	}
	if r.target != nil && m.Labels[v1alpha1.LabelNode] != c.nodeName {
		if m.Labels == nil {
			m.Labels = map[string]string{}
		}
		m.Labels[v1alpha1.LabelNode] = c.nodeName
		changed = true
	}
	if m.Annotations[v1alpha1.AnnotationMachinePriority] == "" {
		if m.Annotations == nil {
			m.Annotations = map[string]string{}
		}
		m.Annotations[v1alpha1.AnnotationMachinePriority] = v1alpha1.DefaultMachinePriority
		changed = true
	}
	if !changed {
		return nil
	}
	patch := client.MergeFrom(orig)
	if !c.fresh {
		// An adopted VM may be one this controller recorded moments ago that the cache does not
		// show yet: the lock stops a reconcile of the stale machine here, before it rewrites the
		// newer machine's phase or reports an adoption.
		patch = client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})
	}
	if err := r.client.Patch(ctx, m, patch); err != nil {
		*m = *orig
		return fmt.Errorf("machine: record VM %s on machine: %w", c.providerID, err)
	}
	if r.target != nil && c.nodeName != "" {
		r.recordedNodes.Store(c.nodeName, r.now())
	}
	return nil
}

// createFailed records a failed creation attempt: CrashLoopBackOff, or Failed once the effective
// creation timeout has passed (never for a provider no source serves: its machines wait for a
// driver instead of being replaced in a loop), with the driver's code and message, and retries
// with backoff by code.
func (r *creator) createFailed(ctx context.Context, m *v1alpha1.Machine, err error, lastKnownState, suffix string) (reconcile.Result, error) {
	if ctx.Err() != nil {
		return reconcile.Result{}, ctx.Err()
	}
	s := driver.StatusOf(err)
	code := s.Code()
	unresolvable := errors.Is(err, registry.ErrUnknownProvider)
	delay := r.backoff.next(keyOf(m), code, r.opts)
	if unresolvable {
		// A driver may appear any moment (a provider dialling in): look again soon.
		delay = min(delay, time.Minute)
	}

	st := m.Status.DeepCopy()
	timedOut := r.now().Sub(m.CreationTimestamp.Time) > r.opts.creationTimeout(m)
	if timedOut && !unresolvable {
		st.CurrentStatus.Phase = v1alpha1.MachineFailed
		st.CurrentStatus.TimeoutActive = false
	} else {
		st.CurrentStatus.Phase = v1alpha1.MachineCrashLoopBackOff
		st.CurrentStatus.TimeoutActive = true
	}
	desc := descProviderPrefix + s.Message()
	if suffix != "" {
		desc = "Provider error: " + s.Message() + suffix
	}
	if unresolvable {
		desc = "No driver for this machine's class - " + s.Message()
	}
	st.LastOperation = v1alpha1.LastOperation{
		Type: v1alpha1.MachineOperationCreate, State: v1alpha1.MachineStateFailed,
		Description: desc, ErrorCode: code.String(),
	}
	switch {
	case lastKnownState != "":
		st.LastKnownState = lastKnownState
	case code.Retryable() || code == driver.ResourceExhausted:
		// keep what the driver recorded: it may resume from it
	default:
		st.LastKnownState = ""
	}

	reason := "CreateFailed"
	if unresolvable {
		reason = "DriverUnavailable"
	}
	r.event(m, corev1.EventTypeWarning, reason, "Create", fmt.Sprintf("%s (%s); retrying in %s", desc, code, delay.Round(time.Second)))
	if st.CurrentStatus.Phase == v1alpha1.MachineFailed && m.Status.CurrentStatus.Phase != v1alpha1.MachineFailed {
		r.event(m, corev1.EventTypeWarning, "Failed", "Create", fmt.Sprintf("creation did not succeed within %s", r.opts.creationTimeout(m)))
	}
	r.log(m).Info("machine creation failed", "code", code.String(), "message", s.Message(), "retryIn", delay.Round(time.Millisecond), "phase", st.CurrentStatus.Phase)
	if werr := r.writeStatus(ctx, m, *st); werr != nil {
		return requeueOnConflict(werr)
	}
	return reconcile.Result{RequeueAfter: delay}, nil
}

// waitForProvider records that the machine's creation waits for a dialled-in provider preferred
// over the driver that would serve it otherwise (registry.Resolver.PreferGrace), and comes back
// when the wait ends; the provider connecting brings it back sooner (arrivals.go). Waiting is not
// a failure: no backoff, the phase stays.
func (r *creator) waitForProvider(ctx context.Context, m *v1alpha1.Machine, w *registry.WaitingError) (reconcile.Result, error) {
	st := m.Status.DeepCopy()
	st.LastOperation = v1alpha1.LastOperation{
		Type: v1alpha1.MachineOperationCreate, State: v1alpha1.MachineStateProcessing,
		Description: descWaitingPrefix + w.Error(),
	}
	if st.LastOperation.Description != m.Status.LastOperation.Description {
		r.event(m, corev1.EventTypeNormal, "WaitingForProvider", "Create", st.LastOperation.Description)
		r.log(m).Info("machine creation waits for a preferred dialled-in provider", "provider", w.Provider, "until", w.Until, "then", w.Fallback)
	}
	if err := r.writeStatus(ctx, m, *st); err != nil {
		return requeueOnConflict(err)
	}
	return reconcile.Result{RequeueAfter: max(w.Until.Sub(r.now()), time.Second)}, nil
}

// clampRequeue keeps a requeue delay between a second and ceiling.
func clampRequeue(d, ceiling time.Duration) time.Duration {
	if d < time.Second {
		return time.Second
	}
	if d > ceiling {
		return ceiling
	}
	return d
}

// withHostname adds the node name as a Hostname address unless the driver reported one.
func withHostname(addrs []corev1.NodeAddress, nodeName string) []corev1.NodeAddress {
	out := append([]corev1.NodeAddress(nil), addrs...)
	for _, a := range out {
		if a.Type == corev1.NodeHostName {
			return out
		}
	}
	if nodeName != "" {
		out = append(out, corev1.NodeAddress{Type: corev1.NodeHostName, Address: nodeName})
	}
	return out
}
