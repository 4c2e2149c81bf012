package machine

import (
	"context"
	"errors"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
)

// conflictRetry is the wait after an optimistic-lock conflict: the newer object is already in
// flight to the cache.
const conflictRetry = 200 * time.Millisecond

// frozenRetry is the longest wait of a machine left alone while an API server is unreachable;
// the machine is looked at again soon after the freeze ends.
const frozenRetry = 30 * time.Second

// machineReconciler is the Machine controller: it drives machines that are not being deleted,
// creating the VM when there is none yet (create.go, with the capacity fallback of fallback.go)
// and then following the node's health (health.go).
type machineReconciler struct {
	*deps
	fallback *capacityFallback
	creator  *creator
	health   *healthChecker
}

// setup watches machines that are not being deleted, their classes and (with a target cluster)
// their nodes.
func (r *machineReconciler) setup(mgr manager.Manager) error {
	b := builder.ControllerManagedBy(mgr).
		Named("machine").
		For(&v1alpha1.Machine{}, builder.WithPredicates(predicate.NewPredicateFuncs(notDeleting), specOrMetaChanged())).
		Watches(&v1alpha1.MachineClass{}, handler.EnqueueRequestsFromMapFunc(r.classToMachines), builder.WithPredicates(notOnlyMarkChanged())).
		WithOptions(r.opts.controllerOptions())
	if r.target != nil {
		b = b.WatchesRawSource(source.Kind(r.target.GetCache(), &corev1.Node{},
			handler.TypedEnqueueRequestsFromMapFunc(r.nodeToMachines), nodeChanged()))
	}
	if a := r.arrivals(); a != nil {
		b = b.WatchesRawSource(a)
	}
	return b.Complete(r)
}

// Reconcile drives a machine that is not being deleted: it creates the VM when there is none
// yet and then follows the node's health.
func (r *machineReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
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
	if r.opts.Freeze != nil && r.opts.Freeze.Frozen() {
		r.log(m).Debug("machine controller frozen: an API server is unreachable")
		return reconcile.Result{RequeueAfter: min(frozenRetry, r.opts.LongRetry, max(r.opts.ShortRetry, time.Second))}, nil
	}

	if needsCreation(m) {
		if res, done, err := r.fallback.beforeCreate(ctx, m); done || err != nil {
			return res, err
		}
	}
	class, err := r.machineClass(ctx, m)
	if err != nil {
		return r.classProblem(ctx, m, err)
	}
	if res, handled, err := r.standbyStep(ctx, m, class); handled {
		return res, err
	}
	if needsCreation(m) {
		return r.creator.create(ctx, m, class)
	}
	return r.health.reconcile(ctx, m)
}

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

// classProblem records a class problem on a machine that has no VM yet (or logs it for one that
// has) and retries with backoff; the class watch brings the machine back sooner when the class
// appears.
func (r *machineReconciler) classProblem(ctx context.Context, m *v1alpha1.Machine, err error) (reconcile.Result, error) {
	var ce *errClass
	if !errors.As(err, &ce) {
		return reconcile.Result{}, err
	}
	delay := r.backoff.next(keyOf(m), driver.FailedPrecondition, r.opts)
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

// classToMachines enqueues the machines of a class, so a class that appears or changes lets
// waiting machines proceed.
func (r *machineReconciler) classToMachines(ctx context.Context, o client.Object) []reconcile.Request {
	var list v1alpha1.MachineList
	if err := r.client.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingFields{IndexMachineClassName: o.GetName()}); err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for _, m := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&m)})
	}
	return out
}

// nodeToMachines maps a node to the machine(s) whose node label names it.
func (r *machineReconciler) nodeToMachines(ctx context.Context, n *corev1.Node) []reconcile.Request {
	var list v1alpha1.MachineList
	opts := []client.ListOption{client.MatchingFields{IndexMachineNode: n.Name}}
	if r.opts.Namespace != "" {
		opts = append(opts, client.InNamespace(r.opts.Namespace))
	}
	if err := r.client.List(ctx, &list, opts...); err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for _, m := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&m)})
	}
	if len(out) == 0 && r.opts.Namespace != "" {
		// The node may register before its machine records the node label (most drivers name
		// the node after the machine): try the machine-name label, else the node's name.
		name := n.Labels[v1alpha1.LabelNodeMachineName]
		if name == "" {
			name = n.Name
		}
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: r.opts.Namespace, Name: name}})
	}
	return out
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

func keyOf(m *v1alpha1.Machine) string { return m.Namespace + "/" + m.Name }

func isTrue(v string) bool { return strings.EqualFold(v, "true") }

func since(now time.Time, t metav1.Time) time.Duration {
	if t.IsZero() {
		return 0
	}
	return now.Sub(t.Time)
}

var _ reconcile.Reconciler = (*machineReconciler)(nil)
