package machine

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/fallback"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/internal/truncate"
)

// Capacity fallback on the create path (package fallback). A machine takes part when its
// MachineSet carries fallback.AnnotationClasses, it has no VM yet and it is not a rebalance
// surge machine. Moving a machine to another class is one update of spec.class together with
// fallback.AnnotationVacate naming the class it leaves; before anything is created on the new
// class, the old one is asked for a VM of the machine and any it holds is deleted. So a create
// that failed half-way, or a controller or provider that died between the steps, never leaves a
// replica with two VMs: every step is recorded on the Machine before the next one starts, and
// each is safe to repeat.

// capacityFallback is the create path's part of the capacity fallback: which class a machine
// without a VM is created on, the exhausted marks a failed create leaves, and the cleanup of the
// class a machine moved away from.
type capacityFallback struct {
	*deps
	creator *creator // records the failed create when every class is marked
}

// fallbackPlan is what the capacity fallback knows about a machine about to be created.
type fallbackPlan struct {
	chain fallback.Chain
	// owner receives the deployment-level events: the MachineDeployment of the set, else the set.
	owner runtime.Object
}

// planFor returns the plan of a machine that takes part in the capacity fallback, nil for every
// other machine (which is created exactly as without the feature).
func (r *capacityFallback) planFor(ctx context.Context, m *v1alpha1.Machine) (*fallbackPlan, error) {
	if m.Spec.ProviderID != "" || fallback.IsSurge(m) {
		return nil, nil
	}
	ref := metav1.GetControllerOf(m)
	if ref == nil || ref.Kind != "MachineSet" {
		return nil, nil
	}
	ms := &v1alpha1.MachineSet{}
	if err := r.client.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: ref.Name}, ms); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("machine: read machine set %s: %w", ref.Name, err)
	}
	if ms.UID != ref.UID {
		return nil, nil
	}
	chain, _, ok := fallback.ChainOf(ms)
	if !ok || len(chain.Classes) < 2 {
		return nil, nil
	}
	p := &fallbackPlan{chain: chain, owner: ms}
	if dref := metav1.GetControllerOf(ms); dref != nil && dref.Kind == "MachineDeployment" {
		p.owner = &v1alpha1.MachineDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: ms.Namespace, Name: dref.Name, UID: dref.UID}}
	}
	return p, nil
}

// usableClass reports whether a class of the chain exists and is not being deleted, adopting
// the mark it may carry from before a restart.
func (r *capacityFallback) usableClass(ctx context.Context, namespace string) func(string) bool {
	return func(name string) bool {
		class := &v1alpha1.MachineClass{}
		if err := r.client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, class); err != nil {
			return false
		}
		r.opts.Fallback.Adopt(class)
		return class.DeletionTimestamp == nil
	}
}

// beforeCreate runs before a machine without a VM is created: it finishes a move to another
// class (vacate), and moves the machine when its class is marked exhausted. done reports that
// this reconcile ends here with res.
func (r *capacityFallback) beforeCreate(ctx context.Context, m *v1alpha1.Machine) (res reconcile.Result, done bool, err error) {
	if m.Spec.ProviderID != "" {
		return reconcile.Result{}, false, nil
	}
	if old := m.Annotations[fallback.AnnotationVacate]; old != "" {
		if res, vacated, err := r.vacate(ctx, m, old); !vacated {
			return res, true, err
		}
	}
	plan, err := r.planFor(ctx, m)
	if err != nil || plan == nil {
		return reconcile.Result{}, err != nil, err
	}
	current := m.Spec.Class.Name
	target, skipped, ok := fallback.Pick(plan.chain, r.opts.Fallback, r.usableClass(ctx, m.Namespace))
	switch {
	case !ok:
		if len(skipped) == 0 {
			// Nothing usable and nothing marked: the class problem path reports it.
			return reconcile.Result{}, false, nil
		}
		res, err := r.allExhausted(ctx, m, plan, skipped)
		return res, true, err
	case target == current:
		return reconcile.Result{}, false, nil
	}
	why := "class " + current + " is not in the fallback list"
	if mk, marked := skipped[current]; marked {
		why = fallback.Describe([]string{current}, map[string]fallback.Mark{current: mk})
	} else if plan.chain.Contains(current) {
		why = "class " + target + " comes first in the fallback list and has capacity again"
	}
	res, err = r.switchClass(ctx, m, plan, current, target, why)
	return res, true, err
}

// afterCreateFailed handles a failed create of a machine that takes part in the fallback: a
// ResourceExhausted marks the class (for every machine that uses it) and moves the machine to the
// next class at once. handled is false when the usual failure path applies.
func (r *capacityFallback) afterCreateFailed(ctx context.Context, m *v1alpha1.Machine, class *v1alpha1.MachineClass, cause error) (res reconcile.Result, handled bool, err error) {
	if driver.CodeOf(cause) != driver.ResourceExhausted || ctx.Err() != nil {
		return reconcile.Result{}, false, nil
	}
	mark := r.markExhausted(ctx, class, driver.MessageOf(cause))
	plan, err := r.planFor(ctx, m)
	if err != nil || plan == nil || m.Spec.Class.Name != class.Name {
		return reconcile.Result{}, false, nil
	}
	target, skipped, ok := fallback.Pick(plan.chain, r.opts.Fallback, r.usableClass(ctx, m.Namespace))
	if !ok {
		skipped[class.Name] = mark
		res, err := r.allExhausted(ctx, m, plan, skipped)
		return res, true, err
	}
	why := fallback.Describe([]string{class.Name}, map[string]fallback.Mark{class.Name: mark})
	res, err = r.switchClass(ctx, m, plan, class.Name, target, why)
	return res, true, err
}

// markExhausted marks a class in the cache and publishes the mark on the class for the Cluster
// Autoscaler server (best effort: the in-memory mark is what the controllers use).
func (r *capacityFallback) markExhausted(ctx context.Context, class *v1alpha1.MachineClass, msg string) fallback.Mark {
	mark := r.opts.Fallback.Mark(class.Namespace, class.Name, msg)
	r.opts.Log.Info("machine class marked exhausted", "class", class.Namespace+"/"+class.Name, "until", mark.Until.Format(time.RFC3339), "message", mark.Message)
	if pub, ok := fallback.PublishedMark(class, r.now()); ok && pub.Until.Sub(r.now()) > r.opts.Fallback.TTL()/2 {
		// Published recently enough: machines retrying on the class do not rewrite it each time.
		return mark
	}
	r.publishMark(ctx, class, mark.Encode())
	return mark
}

// createdOn lifts the mark of a class a create just succeeded on: it has capacity again.
func (r *capacityFallback) createdOn(ctx context.Context, class *v1alpha1.MachineClass) {
	cleared := r.opts.Fallback.Clear(class.Namespace, class.Name)
	if _, published := class.Annotations[fallback.AnnotationExhausted]; published {
		r.publishMark(ctx, class, "")
	} else if cleared {
		r.opts.Log.Info("machine class has capacity again", "class", class.Namespace+"/"+class.Name)
	}
}

// publishMark sets (value != "") or removes the class's exhausted annotation.
func (r *capacityFallback) publishMark(ctx context.Context, class *v1alpha1.MachineClass, value string) {
	var v any
	if value != "" {
		v = value
	}
	raw, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{fallback.AnnotationExhausted: v}}})
	if err == nil {
		err = r.client.Patch(ctx, class.DeepCopy(), client.RawPatch(types.MergePatchType, raw))
	}
	if err != nil && !apierrors.IsNotFound(err) {
		r.opts.Log.Warn("publish exhausted mark on machine class", "class", class.Namespace+"/"+class.Name, "err", err)
	}
}

// switchClass moves a machine without a VM from class from to class to: one update of
// spec.class and the vacate annotation, so a restart at any point resumes the move.
func (r *capacityFallback) switchClass(ctx context.Context, m *v1alpha1.Machine, plan *fallbackPlan, from, to, why string) (reconcile.Result, error) {
	orig := m.DeepCopy()
	m.Spec.Class.Name = to
	if m.Annotations == nil {
		m.Annotations = map[string]string{}
	}
	m.Annotations[fallback.AnnotationVacate] = from
	if err := r.client.Patch(ctx, m, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		*m = *orig
		return requeueOnConflict(err)
	}
	primary := plan.chain.Primary()
	reason, eventType := fallback.ReasonCapacityFallback, corev1.EventTypeWarning
	if to == primary {
		reason, eventType = fallback.ReasonRebalance, corev1.EventTypeNormal
	}
	note := fmt.Sprintf("Creating on class %s instead of %s: %s", to, from, why)
	r.event(m, eventType, reason, "Create", note)
	r.recorder.Eventf(plan.owner, m, eventType, reason, "Create", "%s", truncate.String(fmt.Sprintf("Machine %s: %s", m.Name, note), 1000))
	r.log(m).Info("capacity fallback: machine moved to another class", "from", from, "to", to, "why", why)

	op := m.Status.LastOperation
	if op.Type == v1alpha1.MachineOperationCreate && op.State == v1alpha1.MachineStateFailed {
		// A failed create would read as the machine's state (Cluster Autoscaler would take a
		// ResourceExhausted for a stock-out of the group) while it is being created elsewhere.
		st := m.Status.DeepCopy()
		st.LastOperation = v1alpha1.LastOperation{Type: v1alpha1.MachineOperationCreate, State: v1alpha1.MachineStateProcessing, Description: "Capacity fallback - " + note}
		if err := r.writeStatus(ctx, m, *st); err != nil {
			return requeueOnConflict(err)
		}
	}
	// The spec update brings the machine back at once; the requeue is a backstop.
	return reconcile.Result{RequeueAfter: conflictRetry}, nil
}

// allExhausted records that every class of the machine is marked: no cloud call is made; the
// machine waits with the ResourceExhausted backoff, and its failed create (code
// ResourceExhausted) tells Cluster Autoscaler at once that the group is out of resources.
func (r *capacityFallback) allExhausted(ctx context.Context, m *v1alpha1.Machine, plan *fallbackPlan, marks map[string]fallback.Mark) (reconcile.Result, error) {
	msg := "every class of the machine is out of capacity: " + fallback.Describe(plan.chain.Classes, marks)
	if m.Status.LastOperation.ErrorCode != driver.ResourceExhausted.String() {
		r.event(m, corev1.EventTypeWarning, fallback.ReasonAllClassesExhausted, "Create", msg)
		r.recorder.Eventf(plan.owner, m, corev1.EventTypeWarning, fallback.ReasonAllClassesExhausted, "Create", "%s", truncate.String("Machine "+m.Name+": "+msg, 1000))
	}
	return r.creator.createFailed(ctx, m, driver.Error(driver.ResourceExhausted, msg), "", "")
}

// vacate makes sure class old holds no VM of the machine: it asks the class's driver and deletes
// a VM it finds, then drops the vacate annotation. vacated is false while that is not certain
// (the reconcile ends with res: a retry, or a wait for the deletion).
func (r *capacityFallback) vacate(ctx context.Context, m *v1alpha1.Machine, old string) (res reconcile.Result, vacated bool, err error) {
	if old != m.Spec.Class.Name {
		gone, err := r.deleteOnClass(ctx, m, old)
		if err != nil {
			code := driver.CodeOf(err)
			r.event(m, corev1.EventTypeWarning, "FallbackCleanupFailed", "Create",
				fmt.Sprintf("Cannot make sure class %s holds no VM of this machine before creating it on %s: %v (%s); retrying", old, m.Spec.Class.Name, driver.MessageOf(err), code))
			return reconcile.Result{RequeueAfter: r.backoff.next(keyOf(m), code, r.opts)}, false, nil
		}
		if !gone {
			return reconcile.Result{RequeueAfter: r.opts.ShortRetry}, false, nil
		}
	}
	orig := m.DeepCopy()
	delete(m.Annotations, fallback.AnnotationVacate)
	if err := r.client.Patch(ctx, m, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		*m = *orig
		res, err := requeueOnConflict(err)
		return res, false, err
	}
	return reconcile.Result{}, true, nil
}

// deleteOnClass deletes the VM the named class may hold for the machine. gone is true once the
// driver says there is none; a VM it found is deleted and gone stays false until a later look
// confirms it. A class that no longer exists holds nothing this controller can reach.
func (r *capacityFallback) deleteOnClass(ctx context.Context, m *v1alpha1.Machine, name string) (gone bool, err error) {
	class := &v1alpha1.MachineClass{}
	if err := r.client.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: name}, class); err != nil {
		if apierrors.IsNotFound(err) {
			r.log(m).Warn("capacity fallback: the class to vacate is gone; its VMs cannot be looked for", "class", name)
			return true, nil
		}
		return false, err
	}
	drv, err := r.driverFor(class)
	if err != nil {
		return false, err
	}
	secret, err := r.secretFor(ctx, class)
	if err != nil {
		return false, err
	}
	callCtx, cancel := context.WithTimeout(ctx, max(r.opts.CreationTimeout, r.opts.LongRetry))
	defer cancel()
	probe := m.DeepCopy()
	probe.Spec.Class.Name = name
	probe.Spec.ProviderID = ""
	st, err := drv.GetMachineStatus(callCtx, &driver.GetMachineStatusRequest{Machine: probe, MachineClass: class, Secret: secret})
	switch driver.CodeOf(err) {
	case driver.NotFound:
		return true, nil
	case driver.OK, driver.Uninitialized:
		if st == nil || st.ProviderID == "" {
			if driver.CodeOf(err) == driver.OK {
				return true, nil
			}
		} else {
			probe.Spec.ProviderID = st.ProviderID
		}
	case driver.Unimplemented:
		// The driver cannot tell: delete by machine, which is a no-op when there is nothing.
		_, err := drv.DeleteMachine(callCtx, &driver.DeleteMachineRequest{Machine: probe, MachineClass: class, Secret: secret})
		if c := driver.CodeOf(err); c != driver.OK && c != driver.NotFound {
			return false, err
		}
		return true, nil
	default:
		return false, err
	}
	if _, err := drv.DeleteMachine(callCtx, &driver.DeleteMachineRequest{Machine: probe, MachineClass: class, Secret: secret}); err != nil && !driver.IsCode(err, driver.NotFound) {
		return false, err
	}
	r.event(m, corev1.EventTypeNormal, "FallbackCleanup", "Create", fmt.Sprintf("Deleted VM %s that class %s held for this machine before creating it on %s", probe.Spec.ProviderID, name, m.Spec.Class.Name))
	return false, nil
}
