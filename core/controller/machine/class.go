package machine

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/internal/crdfield"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/registry"
	"github.com/machinist-io/machinist/internal/truncate"
)

// classReconciler is the MachineClass controller: it keeps the finalizer on MachineClasses while
// machines use them, so a class (and the credentials its VMs need to be deleted) cannot
// disappear before its machines, and records the offline check of each class's providerSpec.
type classReconciler struct {
	*deps
	// status is where ProviderSpecValid conditions go (the class's status, when the CRD has it).
	status *classStatusStore
}

func (r *classReconciler) setup(mgr manager.Manager) error {
	return builder.ControllerManagedBy(mgr).
		Named("machineclass").
		For(&v1alpha1.MachineClass{}).
		// Only a machine that appears, goes or changes the classes it uses can change whether a
		// class is in use: not the many other machine updates.
		Watches(&v1alpha1.Machine{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			var out []reconcile.Request
			for _, n := range classesOf(o.(*v1alpha1.Machine)) {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: n}})
			}
			return out
		}), builder.WithPredicates(predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
			o, okOld := e.ObjectOld.(*v1alpha1.Machine)
			n, okNew := e.ObjectNew.(*v1alpha1.Machine)
			return !okOld || !okNew || !slices.Equal(classesOf(o), classesOf(n))
		}})).
		WithOptions(r.opts.controllerOptions()).
		Complete(r)
}

// Reconcile keeps a class's finalizer and ProviderSpecValid condition.
func (r *classReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	class := &v1alpha1.MachineClass{}
	if err := r.client.Get(ctx, req.NamespacedName, class); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if class.DeletionTimestamp == nil {
		if err := r.recordSpecCheck(ctx, class); err != nil {
			return requeueOnConflict(err)
		}
	}
	has := controllerutil.ContainsFinalizer(class, v1alpha1.FinalizerMachineControllerManager)
	if has && class.DeletionTimestamp == nil {
		// A live class keeps its finalizer whether machines use it or not: nothing to look up
		// (this is every machine creation's reconcile, so it must not list the class's machines).
		return reconcile.Result{}, nil
	}
	var machines v1alpha1.MachineList
	if err := r.client.List(ctx, &machines, client.InNamespace(class.Namespace), client.MatchingFields{IndexMachineClassName: class.Name}, client.UnsafeDisableDeepCopy); err != nil {
		return reconcile.Result{}, err
	}
	switch {
	case len(machines.Items) > 0 && !has && class.DeletionTimestamp == nil:
		return r.addFinalizer(ctx, class, v1alpha1.FinalizerMachineControllerManager)
	case len(machines.Items) == 0 && has && class.DeletionTimestamp != nil:
		// Confirm with the API server: a machine created a moment ago may not be cached yet.
		var live v1alpha1.MachineList
		if err := r.apiReader.List(ctx, &live, client.InNamespace(class.Namespace)); err != nil {
			return reconcile.Result{}, err
		}
		for _, m := range live.Items {
			if slices.Contains(classesOf(&m), class.Name) {
				return reconcile.Result{RequeueAfter: r.opts.ShortRetry}, nil
			}
		}
		return r.removeFinalizer(ctx, class, v1alpha1.FinalizerMachineControllerManager)
	case len(machines.Items) > 0 && class.DeletionTimestamp != nil:
		names := make([]string, 0, 3)
		for i, m := range machines.Items {
			if i == 3 {
				names = append(names, "...")
				break
			}
			names = append(names, m.Name)
		}
		r.recorder.Eventf(class, nil, corev1.EventTypeNormal, "InUse", "Delete",
			"MachineClass is deleted once its %d machines are gone (%s)", len(machines.Items), strings.Join(names, ", "))
	}
	return reconcile.Result{}, nil
}

// recordSpecCheck sets the class's ProviderSpecValid condition from the offline check of its
// providerSpec by the compiled-in provider (registry.Resolver.CheckSpec) and, when the condition
// changes to field warnings or to invalid, emits one Warning Event. The condition records the
// generation it was computed for and is written only when it changes, so reconciling an unchanged
// class (machines come and go, the controller restarts) neither writes nor announces anything.
//
// Gardener MCM's MachineClass CRD has no status subresource: the API server refuses the write
// (404). The controller then says so once, stops writing conditions and keeps the last one in
// memory, so the Event is still emitted once per change (once more after a restart).
func (r *classReconciler) recordSpecCheck(ctx context.Context, class *v1alpha1.MachineClass) error {
	cond := specCondition(class, r.drivers.CheckSpec(class))
	if old := r.status.current(class); old != nil && old.Status == cond.Status &&
		old.Reason == cond.Reason && old.Message == cond.Message && old.ObservedGeneration == cond.ObservedGeneration {
		return nil
	}
	if !r.status.field.Dropped() {
		orig := class.DeepCopy()
		meta.SetStatusCondition(&class.Status.Conditions, cond)
		err := r.client.Status().Patch(ctx, class, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
		if err != nil && !r.noStatusSubresource(ctx, class, err) {
			return err
		}
	}
	r.status.remember(class, cond)
	if cond.Reason == v1alpha1.ReasonProviderSpecFieldWarnings || cond.Reason == v1alpha1.ReasonProviderSpecInvalid {
		r.recorder.Eventf(class, nil, corev1.EventTypeWarning, cond.Reason, "CheckProviderSpec", "%s", truncate.String(cond.Message, maxEventNote))
	}
	return nil
}

// noStatusSubresource tells a status write refused because the CRD has no status subresource
// (the class itself exists) from other errors, and logs the first such refusal.
func (r *classReconciler) noStatusSubresource(ctx context.Context, class *v1alpha1.MachineClass, err error) bool {
	if !apierrors.IsNotFound(err) {
		return false
	}
	if gerr := r.apiReader.Get(ctx, client.ObjectKeyFromObject(class), &v1alpha1.MachineClass{}); gerr != nil {
		return false // gone, or unknown: the class's next reconcile sees
	}
	if r.status.field.Observe(true, false) {
		r.opts.Log.Info(r.status.field.Message())
	}
	return true
}

// classStatusStore holds the ProviderSpecValid conditions while the CRD cannot store them.
type classStatusStore struct {
	field *crdfield.Field
	last  sync.Map // class UID → metav1.Condition
}

func newClassStatusStore() *classStatusStore {
	return &classStatusStore{field: crdfield.New("the MachineClass CRD's status subresource",
		"MachineClasses show no ProviderSpecValid condition; the Warning Events about their providerSpecs are still emitted (install machinist's CRDs, kubernetes/crds, for the condition)")}
}

// current is the condition last recorded for the class: its status's, or the one remembered
// while the CRD has no status.
func (s *classStatusStore) current(class *v1alpha1.MachineClass) *metav1.Condition {
	if s.field.Dropped() {
		if c, ok := s.last.Load(class.UID); ok {
			cond := c.(metav1.Condition)
			return &cond
		}
		return nil
	}
	return meta.FindStatusCondition(class.Status.Conditions, v1alpha1.ClassConditionProviderSpecValid)
}

func (s *classStatusStore) remember(class *v1alpha1.MachineClass, cond metav1.Condition) {
	if s.field.Dropped() {
		s.last.Store(class.UID, cond)
	}
}

// maxEventNote keeps a note under the 1 kB events.k8s.io allows (as Machine events do).
const maxEventNote = 1000

// maxConditionMessage is the longest message a metav1.Condition takes.
const maxConditionMessage = 32768

// specCondition is the ProviderSpecValid condition for a check's result. Its messages name
// fields, never values: the warnings are built so, and invalid specs carry the driver's message.
func specCondition(class *v1alpha1.MachineClass, check registry.SpecCheck) metav1.Condition {
	provider := registry.Normalize(class.Provider)
	cond := metav1.Condition{Type: v1alpha1.ClassConditionProviderSpecValid, ObservedGeneration: class.Generation}
	switch {
	case !check.Checked:
		cond.Status, cond.Reason = metav1.ConditionUnknown, v1alpha1.ReasonProviderSpecNotChecked
		cond.Message = fmt.Sprintf("provider %q is not compiled into this controller, or a driver server or a dialled-in provider serves it and decodes the spec itself: run `machinist driver list --class` with a binary that has the provider to see its warnings", provider)
	case check.Err != nil:
		cond.Status, cond.Reason = metav1.ConditionFalse, v1alpha1.ReasonProviderSpecInvalid
		cond.Message = fmt.Sprintf("the %s driver refuses the providerSpec (%s decoding): %s", provider, check.Mode, driver.MessageOf(check.Err))
	case len(check.Warnings) > 0:
		cond.Status, cond.Reason = metav1.ConditionTrue, v1alpha1.ReasonProviderSpecFieldWarnings
		cond.Message = fmt.Sprintf("the %s driver accepts the providerSpec, read as Gardener's %s provider reads it: %s", provider, provider, driver.JoinSpecWarnings(check.Warnings))
	default:
		cond.Status, cond.Reason = metav1.ConditionTrue, v1alpha1.ReasonProviderSpecValid
		cond.Message = fmt.Sprintf("the %s driver accepts the providerSpec (%s decoding)", provider, check.Mode)
	}
	cond.Message = truncate.String(cond.Message, maxConditionMessage)
	return cond
}

// secretReconciler keeps a finalizer on Secrets referenced by a MachineClass (secretRef or
// credentialsSecretRef), so credentials cannot be deleted while a class points at them.
type secretReconciler struct{ *deps }

func (r *secretReconciler) setup(mgr manager.Manager) error {
	return builder.ControllerManagedBy(mgr).
		Named("machineclass-secret").
		For(&corev1.Secret{}).
		Watches(&v1alpha1.MachineClass{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			var out []reconcile.Request
			for _, ref := range secretRefs(o.(*v1alpha1.MachineClass)) {
				ns, name, _ := strings.Cut(ref, "/")
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: name}})
			}
			return out
		})).
		WithOptions(r.opts.controllerOptions()).
		Complete(r)
}

// Reconcile adds or removes a secret's finalizer.
func (r *secretReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	secret := &corev1.Secret{}
	if err := r.client.Get(ctx, req.NamespacedName, secret); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	var classes v1alpha1.MachineClassList
	ref := secret.Namespace + "/" + secret.Name
	if err := r.client.List(ctx, &classes, client.MatchingFields{IndexClassSecret: ref}); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, fmt.Errorf("machine: classes of secret %s: %w", ref, err)
	}
	if len(classes.Items) > 0 {
		if controllerutil.ContainsFinalizer(secret, v1alpha1.FinalizerSecret) {
			return reconcile.Result{}, nil
		}
		return r.addFinalizer(ctx, secret, v1alpha1.FinalizerSecret)
	}
	return r.removeFinalizer(ctx, secret, v1alpha1.FinalizerSecret)
}

var (
	_ reconcile.Reconciler = (*classReconciler)(nil)
	_ reconcile.Reconciler = (*secretReconciler)(nil)
)
