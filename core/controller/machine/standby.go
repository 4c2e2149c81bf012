package machine

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/standby"
	"github.com/machinist-io/machinist/core/drain"
	"github.com/machinist-io/machinist/core/driver"
)

// Event reasons of standby machines.
const (
	ReasonStandbyStopped    = "StandbyStopped"
	ReasonStandbyResumed    = "StandbyResumed"
	ReasonStandbyFreshStart = "StandbyFreshCreate"
)

// standbyDrainTimeout bounds the drain of a standby machine's node: only what landed before the
// standby taint runs there.
const standbyDrainTimeout = 2 * time.Minute

// standbyStep runs the step of a standby machine, or of one resumed from standby
// (docs/machine-controller.md, "Standby machines"); handled false leaves the machine to the
// usual lifecycle.
func (r *machineReconciler) standbyStep(ctx context.Context, m *v1alpha1.Machine, class *v1alpha1.MachineClass) (reconcile.Result, bool, error) {
	step := standby.NextStep(m, m.Status.CurrentStatus.Phase == v1alpha1.MachineRunning)
	switch step {
	case standby.Stop:
		res, err := r.stopStandby(ctx, m, class)
		return res, true, err
	case standby.Idle:
		return reconcile.Result{}, true, nil // no node, no health check, until a set claims it
	case standby.Start:
		res, err := r.resume(ctx, m, class)
		return res, true, err
	}
	return reconcile.Result{}, false, nil
}

// stopStandby records Stopping, drains and deletes the node, stops the VM and records Stopped.
// Each part is idempotent, so a retry or a restart half-way goes through them again.
func (r *machineReconciler) stopStandby(ctx context.Context, m *v1alpha1.Machine, class *v1alpha1.MachineClass) (reconcile.Result, error) {
	if standby.State(m.Annotations[standby.AnnotationState]) != standby.Stopping {
		return requeueOnConflict(r.setStandbyState(ctx, m, standby.Stopping))
	}
	if node := m.Labels[v1alpha1.LabelNode]; node != "" && r.target != nil {
		err := r.drainer(ctx, m).Drain(ctx, node, drain.Options{Timeout: standbyDrainTimeout})
		if err == nil {
			err = r.deleteStandbyNode(ctx, node)
		}
		if err != nil && !apierrors.IsNotFound(err) {
			return r.standbyRetry(m, "Stop", fmt.Errorf("drain and delete node %s: %w", node, err))
		}
	}
	p, secret, err := r.power(ctx, class)
	if err == nil {
		_, err = p.StopMachine(ctx, &driver.StopMachineRequest{Machine: m, MachineClass: class, Secret: secret})
	}
	if err != nil {
		return r.standbyRetry(m, "Stop", err)
	}
	if err := r.setStandbyState(ctx, m, standby.Stopped); err != nil {
		return requeueOnConflict(err)
	}
	r.backoff.forget(keyOf(m))
	standbyStops.WithLabelValues(m.Namespace).Inc()
	r.event(m, corev1.EventTypeNormal, ReasonStandbyStopped, "Stop", "Stopped the standby machine's VM after its first boot; a scale-up resumes it")
	return reconcile.Result{}, nil
}

// resume starts the VM of a machine a set claimed while it was stopped. No capacity to start it
// (or a VM gone) deletes the machine, so its set creates a fresh one.
func (r *machineReconciler) resume(ctx context.Context, m *v1alpha1.Machine, class *v1alpha1.MachineClass) (reconcile.Result, error) {
	p, secret, err := r.power(ctx, class)
	if err == nil {
		began := time.Now()
		_, err = p.StartMachine(ctx, &driver.StartMachineRequest{Machine: m, MachineClass: class, Secret: secret})
		observeStart(began, time.Now())
	}
	if err != nil {
		if standby.OnStartError(err) == standby.Retry {
			return r.standbyRetry(m, "Start", err)
		}
		standbyFreshCreates.WithLabelValues(m.Namespace).Inc()
		r.event(m, corev1.EventTypeWarning, ReasonStandbyFreshStart, "Start",
			"Starting the standby machine failed ("+driver.MessageOf(err)+"): deleting it, so its set creates a fresh machine instead")
		if derr := r.client.Delete(ctx, m); derr != nil && !apierrors.IsNotFound(derr) {
			return reconcile.Result{}, derr
		}
		return reconcile.Result{}, nil
	}
	upd := m.DeepCopy()
	delete(upd.Annotations, standby.AnnotationState)
	if err := r.client.Update(ctx, upd); err != nil {
		return requeueOnConflict(err)
	}
	*m = *upd
	r.backoff.forget(keyOf(m))
	standbyResumes.WithLabelValues(m.Namespace).Inc()
	r.event(m, corev1.EventTypeNormal, ReasonStandbyResumed, "Start", "Started the stopped VM of a standby machine instead of creating one")
	return reconcile.Result{}, nil
}

// deleteStandbyNode deletes a stopping machine's node, with the controller's finalizer removed
// first (the node comes back, with the same name, when the VM starts).
func (r *machineReconciler) deleteStandbyNode(ctx context.Context, name string) error {
	node := &corev1.Node{}
	if err := r.target.GetAPIReader().Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
		return err
	}
	if controllerutil.ContainsFinalizer(node, v1alpha1.FinalizerNode) {
		orig := node.DeepCopy()
		controllerutil.RemoveFinalizer(node, v1alpha1.FinalizerNode)
		if err := r.target.GetClient().Patch(ctx, node, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			return err
		}
	}
	if node.DeletionTimestamp != nil {
		return nil
	}
	uid := node.UID
	return r.target.GetClient().Delete(ctx, node, client.Preconditions{UID: &uid})
}

// power returns the class's driver's power capability and the secret for its calls.
func (r *machineReconciler) power(ctx context.Context, class *v1alpha1.MachineClass) (driver.PowerDriver, *corev1.Secret, error) {
	d, err := r.driverFor(class)
	if err != nil {
		return nil, nil, err
	}
	p, err := driver.PowerOf(ctx, class.Provider, d)
	if err != nil {
		return nil, nil, err
	}
	secret, err := r.secretFor(ctx, class)
	if err != nil {
		return nil, nil, err
	}
	return p, secret, nil
}

func (r *machineReconciler) setStandbyState(ctx context.Context, m *v1alpha1.Machine, s standby.State) error {
	upd := m.DeepCopy()
	upd.Annotations[standby.AnnotationState] = string(s)
	if err := r.client.Update(ctx, upd); err != nil {
		return err
	}
	*m = *upd
	return nil
}

// standbyRetry logs a failed stop or start and retries with the backoff of its code.
func (r *machineReconciler) standbyRetry(m *v1alpha1.Machine, action string, err error) (reconcile.Result, error) {
	delay := r.backoff.next(keyOf(m), driver.CodeOf(err), r.opts)
	r.event(m, corev1.EventTypeWarning, "Standby"+action+"Failed", action, err.Error())
	r.log(m).Warn("standby machine: "+action+" failed", "error", err, "retryIn", delay)
	return reconcile.Result{RequeueAfter: delay}, nil
}
