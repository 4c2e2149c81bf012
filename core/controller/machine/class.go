package machine

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// setupClassController keeps the finalizer on MachineClasses while machines use them, so a
// class (and the credentials its VMs need to be deleted) cannot disappear before its machines.
func (r *reconciler) setupClassController(mgr manager.Manager) error {
	return builder.ControllerManagedBy(mgr).
		Named("machineclass").
		For(&v1alpha1.MachineClass{}).
		Watches(&v1alpha1.Machine{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			var out []reconcile.Request
			for _, n := range classesOf(o.(*v1alpha1.Machine)) {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: n}})
			}
			return out
		})).
		WithOptions(r.controllerOptions()).
		Complete(reconcile.Func(r.reconcileClass))
}

func (r *reconciler) reconcileClass(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	class := &v1alpha1.MachineClass{}
	if err := r.client.Get(ctx, req.NamespacedName, class); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	var machines v1alpha1.MachineList
	if err := r.client.List(ctx, &machines, client.InNamespace(class.Namespace), client.MatchingFields{IndexMachineClassName: class.Name}); err != nil {
		return reconcile.Result{}, err
	}
	has := controllerutil.ContainsFinalizer(class, v1alpha1.FinalizerMachineControllerManager)
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

func (r *reconciler) removeFinalizer(ctx context.Context, o client.Object, finalizer string) (reconcile.Result, error) {
	orig := o.DeepCopyObject().(client.Object)
	if !controllerutil.RemoveFinalizer(o, finalizer) {
		return reconcile.Result{}, nil
	}
	if err := r.client.Patch(ctx, o, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return requeueOnConflict(err)
	}
	return reconcile.Result{}, nil
}

// setupSecretController keeps a finalizer on Secrets referenced by a MachineClass (secretRef or
// credentialsSecretRef), so credentials cannot be deleted while a class points at them.
func (r *reconciler) setupSecretController(mgr manager.Manager) error {
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
		WithOptions(r.controllerOptions()).
		Complete(reconcile.Func(r.reconcileSecret))
}

func (r *reconciler) reconcileSecret(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
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
