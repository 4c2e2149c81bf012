package machine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/internal/classsecret"
	"github.com/machinist-io/machinist/core/controller/internal/drivercall"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/registry"
)

// conflictRetry is the wait after an optimistic-lock conflict: the newer object is already in
// flight to the cache.
const conflictRetry = 200 * time.Millisecond

// frozenRetry is the longest wait of a machine left alone while an API server is unreachable;
// the machine is looked at again soon after the freeze ends.
const frozenRetry = 30 * time.Second

// reconcileMachine drives a machine that is not being deleted: it creates the VM when there is
// none yet and then follows the node's health.
func (r *reconciler) reconcileMachine(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	key := req.String()
	m := &v1alpha1.Machine{}
	if err := r.client.Get(ctx, req.NamespacedName, m); err != nil {
		if apierrors.IsNotFound(err) {
			r.backoff.forget(key)
			r.writes.forget(key)
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, err
	}
	if r.writes.outdated(key, m.ResourceVersion) {
		// The cache does not show our last writes yet: the newer machine is on its way.
		return reconcile.Result{RequeueAfter: conflictRetry}, nil
	}
	if m.DeletionTimestamp != nil {
		return reconcile.Result{}, nil // the termination controller owns it now
	}
	if !controllerutil.ContainsFinalizer(m, v1alpha1.FinalizerMachineControllerManager) {
		return r.addFinalizer(ctx, m, v1alpha1.FinalizerMachineControllerManager)
	}
	if r.frozen() {
		r.log(m).Debug("machine controller frozen: an API server is unreachable")
		return reconcile.Result{RequeueAfter: min(frozenRetry, r.opts.LongRetry, max(r.opts.ShortRetry, time.Second))}, nil
	}

	if needsCreation(m) {
		if res, done, err := r.capacityFallback(ctx, m); done || err != nil {
			return res, err
		}
	}
	class, err := r.machineClass(ctx, m)
	if err != nil {
		return r.classProblem(ctx, m, err)
	}
	if needsCreation(m) {
		return r.create(ctx, m, class)
	}
	return r.reconcileHealth(ctx, m)
}

func (r *reconciler) frozen() bool { return r.opts.Freeze != nil && r.opts.Freeze.Frozen() }

// needsCreation: the VM may not exist yet. Failed machines are left for their MachineSet to
// replace; nothing is created for them.
func needsCreation(m *v1alpha1.Machine) bool {
	switch m.Status.CurrentStatus.Phase {
	case "", v1alpha1.MachineCrashLoopBackOff:
		return true
	case v1alpha1.MachineFailed, v1alpha1.MachineTerminating:
		return false
	}
	return m.Spec.ProviderID == ""
}

func (r *reconciler) addFinalizer(ctx context.Context, o client.Object, finalizer string) (reconcile.Result, error) {
	orig := o.DeepCopyObject().(client.Object)
	controllerutil.AddFinalizer(o, finalizer)
	if err := r.client.Patch(ctx, o, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return requeueOnConflict(err)
	}
	// The update event brings the machine back.
	return reconcile.Result{}, nil
}

func requeueOnConflict(err error) (reconcile.Result, error) {
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return reconcile.Result{RequeueAfter: conflictRetry}, nil
	}
	return reconcile.Result{}, err
}

// errClass marks problems with the machine's class (missing, unreadable secret); they are the
// user's to fix and are reported like a failed creation without an error code.
type errClass struct{ msg string }

func (e *errClass) Error() string { return e.msg }

// machineClass returns the machine's class and makes sure it carries the finalizer, so the class
// cannot go away while a VM made from it exists.
func (r *reconciler) machineClass(ctx context.Context, m *v1alpha1.Machine) (*v1alpha1.MachineClass, error) {
	name := m.Spec.Class.Name
	if name == "" {
		return nil, &errClass{"spec.class.name is empty: set it to the name of a MachineClass in namespace " + m.Namespace}
	}
	if k := m.Spec.Class.Kind; k != "" && k != "MachineClass" {
		return nil, &errClass{fmt.Sprintf("spec.class.kind %q is not supported: use kind MachineClass (provider-specific class kinds were removed from MCM)", k)}
	}
	class := &v1alpha1.MachineClass{}
	if err := r.client.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: name}, class); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &errClass{fmt.Sprintf("MachineClass %s/%s not found: create it or fix spec.class.name", m.Namespace, name)}
		}
		return nil, err
	}
	if class.DeletionTimestamp == nil && !controllerutil.ContainsFinalizer(class, v1alpha1.FinalizerMachineControllerManager) {
		if _, err := r.addFinalizer(ctx, class, v1alpha1.FinalizerMachineControllerManager); err != nil {
			return nil, err
		}
	}
	return class, nil
}

// classProblem records a class problem on a machine that has no VM yet (or logs it for one that
// has) and retries with backoff; the class watch brings the machine back sooner when the class
// appears.
func (r *reconciler) classProblem(ctx context.Context, m *v1alpha1.Machine, err error) (reconcile.Result, error) {
	var ce *errClass
	if !errors.As(err, &ce) {
		return reconcile.Result{}, err
	}
	delay := r.backoff.next(r.key(m), driver.FailedPrecondition, r.opts)
	if needsCreation(m) {
		st := m.Status.DeepCopy()
		st.CurrentStatus.Phase = v1alpha1.MachineCrashLoopBackOff
		st.LastOperation = v1alpha1.LastOperation{
			Type:        v1alpha1.MachineOperationCreate,
			State:       v1alpha1.MachineStateFailed,
			Description: "Machine class problem - " + ce.msg,
		}
		r.event(m, corev1.EventTypeWarning, "ClassProblem", "Create", ce.msg)
		if werr := r.writeStatus(ctx, m, *st); werr != nil {
			return requeueOnConflict(werr)
		}
	} else {
		r.log(m).Warn("machine class problem", "problem", ce.msg)
	}
	return reconcile.Result{RequeueAfter: delay}, nil
}

// driverFor resolves the driver of class and instruments it.
func (r *reconciler) driverFor(class *v1alpha1.MachineClass) (driver.Driver, error) {
	d, err := r.drivers.ForClass(class)
	if err != nil {
		return nil, err
	}
	return drivercall.Instrument(registry.Normalize(class.Provider), d), nil
}

// secretFor builds the secret the driver receives for class.
func (r *reconciler) secretFor(ctx context.Context, class *v1alpha1.MachineClass) (*corev1.Secret, error) {
	return classsecret.Get(ctx, r.client, class)
}

func secretRefs(class *v1alpha1.MachineClass) []string { return classsecret.Refs(class) }

func (r *reconciler) key(m *v1alpha1.Machine) string {
	return m.Namespace + "/" + m.Name
}

// effectiveCreationTimeout: the effective-creation-timeout annotation (copied from the
// MachineDeployment), then spec.creationTimeout, then the flag.
func (r *reconciler) effectiveCreationTimeout(m *v1alpha1.Machine) time.Duration {
	if v := m.Annotations[v1alpha1.AnnotationEffectiveCreationTimeout]; v != "" {
		if d, err := time.ParseDuration(v); err == nil && d > 0 {
			return d
		}
	}
	if c := m.Spec.MachineConfiguration; c != nil && c.MachineCreationTimeout != nil && c.MachineCreationTimeout.Duration > 0 {
		return c.MachineCreationTimeout.Duration
	}
	return r.opts.CreationTimeout
}

func (r *reconciler) effectiveHealthTimeout(m *v1alpha1.Machine) time.Duration {
	if c := m.Spec.MachineConfiguration; c != nil && c.MachineHealthTimeout != nil && c.MachineHealthTimeout.Duration > 0 {
		return c.MachineHealthTimeout.Duration
	}
	return r.opts.HealthTimeout
}

func (r *reconciler) effectiveDrainTimeout(m *v1alpha1.Machine) time.Duration {
	if c := m.Spec.MachineConfiguration; c != nil && c.MachineDrainTimeout != nil && c.MachineDrainTimeout.Duration > 0 {
		return c.MachineDrainTimeout.Duration
	}
	return r.opts.DrainTimeout
}

func (r *reconciler) effectiveMaxEvictRetries(m *v1alpha1.Machine) int32 {
	if c := m.Spec.MachineConfiguration; c != nil && c.MaxEvictRetries != nil && *c.MaxEvictRetries > 0 {
		return *c.MaxEvictRetries
	}
	return r.opts.MaxEvictRetries
}

func (r *reconciler) effectiveNodeConditions(m *v1alpha1.Machine) []string {
	if c := m.Spec.MachineConfiguration; c != nil && c.NodeConditions != nil {
		return ParseNodeConditions(*c.NodeConditions)
	}
	return r.opts.NodeConditions
}

func healthTimeoutDisabled(m *v1alpha1.Machine) bool {
	c := m.Spec.MachineConfiguration
	return c != nil && c.DisableHealthTimeout != nil && *c.DisableHealthTimeout
}

// event records an event on the machine (events.k8s.io API).
func (r *reconciler) event(m *v1alpha1.Machine, eventType, reason, action, note string) {
	r.recorder.Eventf(m, nil, eventType, reason, action, "%s", truncate(note, 1000))
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

func isTrue(v string) bool { return strings.EqualFold(v, "true") }

func since(now time.Time, t metav1.Time) time.Duration {
	if t.IsZero() {
		return 0
	}
	return now.Sub(t.Time)
}
