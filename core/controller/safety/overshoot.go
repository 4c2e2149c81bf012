package safety

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/internal/coalesce"
	"github.com/machinist-io/machinist/core/controller/internal/ownership"
)

// Reasons of the Frozen condition, MCM's.
const (
	ReasonOvershooting  = "OverShootingReplicaCount"
	ReasonUndershooting = "UnderShootingReplicaCount"
	ReasonUnfrozen      = "UnfreezeAnnotation"
	freezeValue         = "True"
)

// overshootFreeze freezes a MachineSet that creates machines past its limit
// (docs/compatibility/mcm-controllers.md#overshooting-freeze) and unfreezes it.
type overshootFreeze struct {
	*deps

	// manualUnfreeze remembers, per MachineSet UID, the machine count at a manual unfreeze: the
	// set is not frozen again for the same overshoot, only if it grows further.
	unfreezeMu     sync.Mutex
	manualUnfreeze map[types.UID]int32

	// histories remembers what the check saw of each MachineSet.
	historiesMu sync.Mutex
	histories   map[client.ObjectKey]*setHistory
}

// setup checks every MachineSet for overshooting
// (docs/compatibility/mcm-controllers.md#overshooting-freeze) every OvershootingPeriod and whenever
// one of its machines, the set or its deployment changes.
func (c *overshootFreeze) setup(mgr manager.Manager) error {
	for _, obj := range []client.Object{&v1alpha1.Machine{}, &v1alpha1.MachineSet{}} {
		if err := ownership.AddIndex(context.Background(), mgr.GetFieldIndexer(), obj); err != nil {
			return fmt.Errorf("safety: %w", err)
		}
	}
	err := builder.ControllerManagedBy(mgr).
		Named("machine-safety-overshoot").
		// A set's status says nothing the check reads (but the Frozen condition it writes itself).
		For(&v1alpha1.MachineSet{}, builder.WithPredicates(coalesce.NotStatusOnly())).
		// A check counts all the set's machines: their events are coalesced (a check a second per
		// 1000 machines at most during a scale-up, not one per machine event).
		Watches(&v1alpha1.Machine{}, &coalesce.Handler{Map: func(_ context.Context, o client.Object) []reconcile.Request {
			if ref := metav1.GetControllerOf(o); ref != nil && ref.Kind == "MachineSet" {
				return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: ref.Name}}}
			}
			return nil
		}}, builder.WithPredicates(countChanged())).
		Watches(&v1alpha1.MachineDeployment{}, handler.EnqueueRequestsFromMapFunc(c.deploymentToSets), builder.WithPredicates(coalesce.NotStatusOnly())).
		Complete(reconcile.Func(c.reconcile))
	if err != nil {
		return fmt.Errorf("safety: overshoot controller: %w", err)
	}
	return nil
}

// countChanged passes the machine updates that change what a check counts: a machine that starts
// terminating or changes its controller. Creations and deletions always pass; the other updates
// (several per machine in a scale-up: status, labels, annotations) leave the count as it was.
func countChanged() predicate.Funcs {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		if e.ObjectOld == nil || e.ObjectNew == nil {
			return true
		}
		return (e.ObjectOld.GetDeletionTimestamp() == nil) != (e.ObjectNew.GetDeletionTimestamp() == nil) ||
			controllerUID(e.ObjectOld) != controllerUID(e.ObjectNew)
	}}
}

func controllerUID(o client.Object) types.UID {
	if ref := metav1.GetControllerOfNoCopy(o); ref != nil {
		return ref.UID
	}
	return ""
}

func (c *overshootFreeze) deploymentToSets(ctx context.Context, o client.Object) []reconcile.Request {
	var sets v1alpha1.MachineSetList
	if err := ownership.Controlled(ctx, c.client, &sets, o.GetNamespace(), o.GetUID(), client.UnsafeDisableDeepCopy); err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(sets.Items))
	for i := range sets.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&sets.Items[i])})
	}
	return out
}

// reconcile freezes a MachineSet that creates machines past its limit — replicas + surge
// + safetyUp (2 × replicas + safetyUp for a set without deployment) — and unfreezes it once its
// machines are back at or below that limit minus safetyDown, or when a user sets the unfreeze
// annotation on the set or its deployment. A frozen set creates no machines (the MachineSet
// controller's side); deleting goes on. After a manual unfreeze the set is frozen again only if
// it grows beyond the count the user accepted.
//
// A set is frozen when it has gained machines since the previous check while at or above its
// limit, not merely for being above it: a set whose replicas were lowered is above its new limit
// with the machines it had, and deleting them down is its job (MCM's check counts every machine
// of the set against the limit and freezes such a set; docs/machine-controller.md). Machines
// being deleted do not count: they are on their way out. A lowered limit applies one
// OvershootingPeriod after the first check that saw it, so the creations of a pass that was
// under way when the replicas were lowered, and those the previous check had not seen yet, are
// not taken for an overshoot. At the first check after a start, the machines created since the
// start are the new ones (setHistory.observe).
func (c *overshootFreeze) reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	requeue := reconcile.Result{RequeueAfter: c.opts.OvershootingPeriod}
	ms := &v1alpha1.MachineSet{}
	if err := c.client.Get(ctx, req.NamespacedName, ms); err != nil {
		if apierrors.IsNotFound(err) {
			c.forgetHistory(req.NamespacedName)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if ms.DeletionTimestamp != nil {
		c.forgetHistory(req.NamespacedName)
		return reconcile.Result{}, nil
	}
	var mcd *v1alpha1.MachineDeployment
	if ref := metav1.GetControllerOf(ms); ref != nil && ref.Kind == "MachineDeployment" {
		d := &v1alpha1.MachineDeployment{}
		if err := c.client.Get(ctx, client.ObjectKey{Namespace: ms.Namespace, Name: ref.Name}, d); err == nil && d.UID == ref.UID {
			mcd = d
		} else if err != nil && !apierrors.IsNotFound(err) {
			return reconcile.Result{}, err
		}
	}

	if _, ok := ms.Annotations[v1alpha1.AnnotationUnfreeze]; ok || (mcd != nil && hasAnnotation(mcd, v1alpha1.AnnotationUnfreeze)) {
		if err := c.unfreeze(ctx, ms, mcd, ReasonUnfrozen, "unfrozen by the "+v1alpha1.AnnotationUnfreeze+" annotation"); err != nil {
			return requeueConflict(err)
		}
		if err := c.dropAnnotation(ctx, ms, v1alpha1.AnnotationUnfreeze); err != nil {
			return requeueConflict(err)
		}
		c.rememberManualUnfreeze(ctx, ms, mcd)
		if mcd != nil {
			if err := c.unfreezeSiblings(ctx, mcd, ms); err != nil {
				return requeueConflict(err)
			}
			if err := c.dropAnnotation(ctx, mcd, v1alpha1.AnnotationUnfreeze); err != nil {
				return requeueConflict(err)
			}
		}
		return requeue, nil
	}

	high := 2*ms.Spec.Replicas + c.opts.SafetyUp
	if mcd != nil {
		high = mcd.Spec.Replicas + surge(mcd) + c.opts.SafetyUp
	}
	low := high - c.opts.SafetyDown
	machines, err := c.setMachines(ctx, ms)
	if err != nil {
		return reconcile.Result{}, err
	}
	count := liveCount(machines)
	newcomers, limit := c.history(ms).observe(machines, high, c.now(), c.started, c.opts.OvershootingPeriod)

	c.unfreezeMu.Lock()
	allowed, manual := c.manualUnfreeze[ms.UID]
	if manual && count <= low {
		delete(c.manualUnfreeze, ms.UID)
		manual = false
	}
	c.unfreezeMu.Unlock()

	switch frozen := isFrozen(ms); {
	case count >= limit && newcomers > 0 && !frozen && (!manual || count > allowed):
		msg := fmt.Sprintf("MachineSet %s has %d machines, at or above its limit %d (replicas + surge + safety-up %d), and %d of them were created since the last check: no more machines are created until it is back at %d or %s is set",
			ms.Name, count, limit, c.opts.SafetyUp, newcomers, low, v1alpha1.AnnotationUnfreeze)
		if err := c.freeze(ctx, ms, mcd, msg); err != nil {
			return requeueConflict(err)
		}
		c.log.Warn("safety: froze overshooting MachineSet", "machineSet", ms.Namespace+"/"+ms.Name, "machines", count, "limit", limit, "new", newcomers)
	case count <= low && frozen && frozenBy(ms, ReasonOvershooting):
		if err := c.unfreeze(ctx, ms, mcd, ReasonUndershooting, fmt.Sprintf("MachineSet %s is back at %d machines (limit %d)", ms.Name, count, high)); err != nil {
			return requeueConflict(err)
		}
		c.log.Info("safety: unfroze MachineSet", "machineSet", ms.Namespace+"/"+ms.Name, "machines", count)
	}
	return requeue, nil
}

// setMachines lists the machines the set controls, the cache's own objects (no copies: a set
// may have thousands). They are only read.
func (c *overshootFreeze) setMachines(ctx context.Context, ms *v1alpha1.MachineSet) ([]v1alpha1.Machine, error) {
	var machines v1alpha1.MachineList
	if err := ownership.Controlled(ctx, c.client, &machines, ms.Namespace, ms.UID, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	return machines.Items, nil
}

// liveCount counts the machines that are not being deleted.
func liveCount(machines []v1alpha1.Machine) int32 {
	n := int32(0)
	for i := range machines {
		if machines[i].DeletionTimestamp == nil {
			n++
		}
	}
	return n
}

// liveMachines counts the machines of a set that are not being deleted.
func (c *overshootFreeze) liveMachines(ctx context.Context, ms *v1alpha1.MachineSet) (int32, error) {
	machines, err := c.setMachines(ctx, ms)
	if err != nil {
		return 0, err
	}
	return liveCount(machines), nil
}

// setHistory is what the overshoot check remembers of one MachineSet between its checks: the
// machines it saw, to tell those created since, and the limit it is held to.
type setHistory struct {
	uid    types.UID
	seen   map[types.UID]uint64 // machine → the last check that saw it
	checks uint64
	peak   int32     // the limit the set is held to
	lowAt  time.Time // the first check that saw a limit below peak; zero while none did
}

// history returns the set's history, a fresh one for a set not seen before (or a new set of the
// same name).
func (c *overshootFreeze) history(ms *v1alpha1.MachineSet) *setHistory {
	c.historiesMu.Lock()
	defer c.historiesMu.Unlock()
	key := client.ObjectKeyFromObject(ms)
	h := c.histories[key]
	if h == nil || h.uid != ms.UID {
		h = &setHistory{uid: ms.UID, seen: map[types.UID]uint64{}}
		c.histories[key] = h
	}
	return h
}

func (c *overshootFreeze) forgetHistory(key client.ObjectKey) {
	c.historiesMu.Lock()
	defer c.historiesMu.Unlock()
	delete(c.histories, key)
}

// observe records one check of the set: its machines (being deleted or not) and its current
// limit high. It returns how many machines were not there at the previous check — at the first
// check of a set, how many were created since the controller started (started; the API server
// stamps creation times in whole seconds, so the second it started in counts), as the machines
// before it cannot be told apart — and the limit to hold the set to. A raised limit applies at
// once; a lowered one window after the first check that saw it: the machines new at that check
// were created between the checks, perhaps before the replicas were lowered (checks are at
// least a period apart, so a window counted from the last check at the higher limit would
// often be over already), and a pass under way then may still create some. A check of one set
// never runs concurrently with another of the same set (one work queue key).
func (h *setHistory) observe(machines []v1alpha1.Machine, high int32, now, started time.Time, window time.Duration) (newcomers int, limit int32) {
	first := h.checks == 0
	h.checks++
	since := started.Truncate(time.Second)
	for i := range machines {
		m := &machines[i]
		_, known := h.seen[m.UID]
		if (!first && !known) || (first && !m.CreationTimestamp.Time.Before(since)) {
			newcomers++
		}
		h.seen[m.UID] = h.checks
	}
	if len(h.seen) > len(machines) {
		for uid, at := range h.seen {
			if at != h.checks {
				delete(h.seen, uid) // gone since
			}
		}
	}
	switch {
	case first || high >= h.peak:
		h.peak, h.lowAt = high, time.Time{}
	case h.lowAt.IsZero():
		h.lowAt = now
	case now.Sub(h.lowAt) >= window:
		h.peak, h.lowAt = high, time.Time{}
	}
	return newcomers, h.peak
}

// rememberManualUnfreeze records the current machine count of the set (and of its deployment's
// sets) as what the user accepted.
func (c *overshootFreeze) rememberManualUnfreeze(ctx context.Context, ms *v1alpha1.MachineSet, mcd *v1alpha1.MachineDeployment) {
	sets := []v1alpha1.MachineSet{*ms}
	if mcd != nil {
		var list v1alpha1.MachineSetList
		if err := c.client.List(ctx, &list, client.InNamespace(ms.Namespace)); err == nil {
			sets = sets[:0]
			for _, s := range list.Items {
				if ref := metav1.GetControllerOf(&s); s.UID == ms.UID || (ref != nil && ref.UID == mcd.UID) {
					sets = append(sets, s)
				}
			}
		}
	}
	for i := range sets {
		n, err := c.liveMachines(ctx, &sets[i])
		if err != nil {
			continue
		}
		s := &sets[i]
		c.unfreezeMu.Lock()
		c.manualUnfreeze[s.UID] = n
		c.unfreezeMu.Unlock()
	}
}

// surge resolves the deployment's maxSurge against its replicas, rounding up; 0 when unset and
// for Recreate. MCM fails on an unset maxSurge, which ends its whole overshooting pass
// (docs/compatibility/mcm-controllers.md#overshooting-freeze); machinist checks such a set
// against replicas + safetyUp.
func surge(d *v1alpha1.MachineDeployment) int32 {
	var s *intstr.IntOrString
	switch d.Spec.Strategy.Type {
	case "", v1alpha1.RollingUpdateMachineDeploymentStrategyType:
		if d.Spec.Strategy.RollingUpdate != nil {
			s = d.Spec.Strategy.RollingUpdate.MaxSurge
		}
	case v1alpha1.InPlaceUpdateMachineDeploymentStrategyType:
		if d.Spec.Strategy.InPlaceUpdate != nil {
			s = d.Spec.Strategy.InPlaceUpdate.MaxSurge
		}
	}
	if s == nil {
		return 0
	}
	v, err := intstr.GetScaledValueFromIntOrPercent(s, int(d.Spec.Replicas), true)
	if err != nil || v < 0 {
		return 0
	}
	return int32(v)
}

func isFrozen(ms *v1alpha1.MachineSet) bool {
	if ms.Labels[v1alpha1.LabelFreeze] == freezeValue {
		return true
	}
	for _, cond := range ms.Status.Conditions {
		if cond.Type == v1alpha1.MachineSetFrozen && cond.Status == v1alpha1.ConditionTrue {
			return true
		}
	}
	return false
}

// frozenBy reports whether the set's freeze is the overshoot freeze (a freeze label someone set
// by hand without the condition is left for them to lift).
func frozenBy(ms *v1alpha1.MachineSet, reason string) bool {
	for _, cond := range ms.Status.Conditions {
		if cond.Type == v1alpha1.MachineSetFrozen && cond.Status == v1alpha1.ConditionTrue {
			return cond.Reason == reason
		}
	}
	return false
}

func hasAnnotation(o client.Object, key string) bool {
	_, ok := o.GetAnnotations()[key]
	return ok
}

// freeze labels the set (and its deployment) freeze=True and sets the set's Frozen condition;
// the MachineDeployment controller derives the deployment's Frozen condition from its sets.
func (c *overshootFreeze) freeze(ctx context.Context, ms *v1alpha1.MachineSet, mcd *v1alpha1.MachineDeployment, msg string) error {
	if err := c.setFrozenCondition(ctx, ms, v1alpha1.ConditionTrue, ReasonOvershooting, msg); err != nil {
		return err
	}
	if err := c.setLabel(ctx, ms, true); err != nil {
		return err
	}
	c.recorder.Eventf(ms, nil, corev1.EventTypeWarning, "FrozeMachineSet", "Freeze", "%s", msg)
	if mcd != nil {
		if err := c.setLabel(ctx, mcd, true); err != nil {
			return err
		}
		c.recorder.Eventf(mcd, nil, corev1.EventTypeWarning, "FrozeMachineDeployment", "Freeze", "%s", msg)
	}
	return nil
}

// unfreeze lifts the set's freeze and, when no other set of the deployment is frozen, the
// deployment's label.
func (c *overshootFreeze) unfreeze(ctx context.Context, ms *v1alpha1.MachineSet, mcd *v1alpha1.MachineDeployment, reason, msg string) error {
	wasFrozen := isFrozen(ms)
	if err := c.setFrozenCondition(ctx, ms, v1alpha1.ConditionFalse, reason, msg); err != nil {
		return err
	}
	if err := c.setLabel(ctx, ms, false); err != nil {
		return err
	}
	if wasFrozen {
		c.recorder.Eventf(ms, nil, corev1.EventTypeNormal, "UnfrozeMachineSet", "Unfreeze", "%s", msg)
	}
	if mcd == nil {
		return nil
	}
	var sets v1alpha1.MachineSetList
	if err := c.client.List(ctx, &sets, client.InNamespace(ms.Namespace)); err != nil {
		return err
	}
	for i := range sets.Items {
		s := &sets.Items[i]
		if ref := metav1.GetControllerOf(s); s.UID != ms.UID && ref != nil && ref.UID == mcd.UID && isFrozen(s) {
			return nil // another set still holds the deployment frozen
		}
	}
	return c.setLabel(ctx, mcd, false)
}

// unfreezeSiblings unfreezes every other set of a deployment a user unfroze.
func (c *overshootFreeze) unfreezeSiblings(ctx context.Context, mcd *v1alpha1.MachineDeployment, except *v1alpha1.MachineSet) error {
	var sets v1alpha1.MachineSetList
	if err := c.client.List(ctx, &sets, client.InNamespace(mcd.Namespace)); err != nil {
		return err
	}
	for i := range sets.Items {
		s := &sets.Items[i]
		if ref := metav1.GetControllerOf(s); s.UID != except.UID && ref != nil && ref.UID == mcd.UID && isFrozen(s) {
			if err := c.unfreeze(ctx, s, mcd, ReasonUnfrozen, "unfrozen by the "+v1alpha1.AnnotationUnfreeze+" annotation on MachineDeployment "+mcd.Name); err != nil {
				return err
			}
		}
	}
	return nil
}

// setFrozenCondition sets (or, for an unfreeze, clears to False) the set's Frozen condition,
// re-reading the set on conflicts: the MachineSet controller writes the same status.
func (c *overshootFreeze) setFrozenCondition(ctx context.Context, ms *v1alpha1.MachineSet, status v1alpha1.ConditionStatus, reason, msg string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &v1alpha1.MachineSet{}
		if err := c.apiReader.Get(ctx, client.ObjectKeyFromObject(ms), cur); err != nil {
			return err
		}
		idx := -1
		for i, cond := range cur.Status.Conditions {
			if cond.Type == v1alpha1.MachineSetFrozen {
				idx = i
			}
		}
		if status == v1alpha1.ConditionFalse && (idx < 0 || cur.Status.Conditions[idx].Status == v1alpha1.ConditionFalse) {
			return nil
		}
		cond := v1alpha1.MachineSetCondition{Type: v1alpha1.MachineSetFrozen, Status: status, Reason: reason, Message: msg, LastTransitionTime: metav1.NewTime(c.now())}
		if idx >= 0 {
			old := cur.Status.Conditions[idx]
			if old.Status == status && old.Reason == reason && old.Message == msg {
				return nil
			}
			if old.Status == status {
				cond.LastTransitionTime = old.LastTransitionTime
			}
			cur.Status.Conditions[idx] = cond
		} else {
			cur.Status.Conditions = append(cur.Status.Conditions, cond)
		}
		return c.client.Status().Update(ctx, cur)
	})
}

// setLabel adds or removes freeze=True.
func (c *overshootFreeze) setLabel(ctx context.Context, o client.Object, frozen bool) error {
	has := o.GetLabels()[v1alpha1.LabelFreeze] == freezeValue
	if has == frozen {
		return nil
	}
	orig := o.DeepCopyObject().(client.Object)
	labels := o.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	if frozen {
		labels[v1alpha1.LabelFreeze] = freezeValue
	} else {
		delete(labels, v1alpha1.LabelFreeze)
	}
	o.SetLabels(labels)
	return c.client.Patch(ctx, o, client.MergeFrom(orig))
}

func (c *overshootFreeze) dropAnnotation(ctx context.Context, o client.Object, key string) error {
	if !hasAnnotation(o, key) {
		return nil
	}
	orig := o.DeepCopyObject().(client.Object)
	ann := o.GetAnnotations()
	delete(ann, key)
	o.SetAnnotations(ann)
	return c.client.Patch(ctx, o, client.MergeFrom(orig))
}

func requeueConflict(err error) (reconcile.Result, error) {
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return reconcile.Result{RequeueAfter: 200 * time.Millisecond}, nil
	}
	return reconcile.Result{}, err
}
