// Package machineset is the MachineSet controller: it keeps spec.replicas machines of a set
// alive, like a ReplicaSet keeps pods, with MCM's semantics
// (docs/compatibility/mcm-controllers.md#machineset-controller): machines are created in slow-start
// batches and owned by the set; surplus machines are deleted in MCM's order (priority annotation
// first, then marked-for-deletion time, phase, age); Failed machines are deleted so they are
// replaced; a frozen set creates nothing; the template's nodeTemplate, machine configuration and
// class kind are passed on to existing machines in place (see syncInPlace). Expectations keep a
// stale cache from creating or deleting the same machines twice.
package machineset

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/fallback"
	"github.com/machinist-io/machinist/core/controller/internal/coalesce"
	"github.com/machinist-io/machinist/core/controller/internal/crdfield"
	"github.com/machinist-io/machinist/core/controller/internal/ownership"
	"github.com/machinist-io/machinist/core/controller/mcmmetrics"
	"github.com/machinist-io/machinist/core/eventnote"
)

// ControllerName names the controller in logs, metrics and events.
const ControllerName = "machineset"

// Options configure the MachineSet controller.
type Options struct {
	// ConcurrentSyncs is how many MachineSets are reconciled at once (MCM: --concurrent-syncs).
	ConcurrentSyncs int
	// BurstReplicas caps the machines created or deleted in one pass (MCM: 100).
	BurstReplicas int
	// ExpectationsTTL is how long a created or deleted machine the cache has not shown yet holds
	// the set back (MCM: 5m).
	ExpectationsTTL time.Duration
	// ResyncPeriod re-reconciles every set this often even without events (MCM: 10m).
	ResyncPeriod time.Duration
	// Fallback is the cache of MachineClasses marked exhausted, shared with the Machine
	// controller (capacity fallback); nil means a cache of the controller's own.
	Fallback *fallback.Cache
	// Nodes reads the target cluster's Nodes, whose preserve annotation wins over the
	// Machine's when a Failed machine is kept or auto-preserved; nil without a target cluster.
	Nodes client.Reader
	// Clock is the time of the controller's timeouts and status conditions; nil means the real
	// clock (tests pass a fake one, k8s.io/utils/clock/testing).
	Clock clock.PassiveClock
}

// DefaultOptions returns MCM's defaults.
func DefaultOptions() Options {
	return Options{ConcurrentSyncs: 10, BurstReplicas: 100, ExpectationsTTL: 5 * time.Minute, ResyncPeriod: 10 * time.Minute}
}

func (o Options) withDefaults() Options {
	d := DefaultOptions()
	if o.ConcurrentSyncs <= 0 {
		o.ConcurrentSyncs = d.ConcurrentSyncs
	}
	if o.BurstReplicas <= 0 {
		o.BurstReplicas = d.BurstReplicas
	}
	if o.ExpectationsTTL <= 0 {
		o.ExpectationsTTL = d.ExpectationsTTL
	}
	if o.ResyncPeriod <= 0 {
		o.ResyncPeriod = d.ResyncPeriod
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Fallback == nil {
		o.Fallback = fallback.NewCache(fallback.DefaultTTL).WithClock(o.Clock)
	}
	return o
}

var (
	errCreate = errors.New("create machines")
	errDelete = errors.New("delete machines")
)

// Reconciler reconciles MachineSets.
type Reconciler struct {
	client   client.Client
	reader   client.Reader // uncached, for adoption re-checks
	recorder events.EventRecorder
	opts     Options
	exp      *expectations
	now      func() time.Time
	// own coalesces the set's own status updates; told of each status write, it drops that
	// write's echo.
	own *coalesce.Handler
	// selectorField is status.labelSelector, which Gardener MCM's MachineSet CRD lacks.
	selectorField *crdfield.Field
}

// Setup registers the MachineSet controller with mgr.
func Setup(mgr manager.Manager, opts Options) error {
	opts = opts.withDefaults()
	r := &Reconciler{
		client:   mgr.GetClient(),
		reader:   mgr.GetAPIReader(),
		recorder: eventnote.For(mgr, ControllerName),
		opts:     opts,
		now:      opts.Clock.Now,
		selectorField: crdfield.New("the MachineSet CRD's status.labelSelector",
			"the scale subresource then has no selector (kubectl scale works; a HorizontalPodAutoscaler cannot target the set)"),
	}
	r.exp = newExpectations(opts.ExpectationsTTL, r.now)
	if err := ownership.AddIndex(context.Background(), mgr.GetFieldIndexer(), &v1alpha1.Machine{}); err != nil {
		return fmt.Errorf("machineset: %w", err)
	}
	// A set reads all its machines, so their many updates during a scale-up are coalesced, and
	// so are the updates of its own status (mostly this controller's writes); creations,
	// deletions and moves of machines reach it at once (expectations).
	machines := &coalesce.Handler{Map: controllingSet, Urgent: r.urgentForSet}
	r.own = machines
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&v1alpha1.MachineSet{}, builder.WithPredicates(coalesce.NotStatusOnly())).
		Watches(&v1alpha1.MachineSet{}, machines.Own()).
		Watches(&v1alpha1.Machine{}, machines).
		// Machines nobody controls may be adopted by a set whose selector matches them.
		Watches(&v1alpha1.Machine{}, handler.EnqueueRequestsFromMapFunc(ownership.OrphanMapper(r.client,
			func() *v1alpha1.MachineSetList { return &v1alpha1.MachineSetList{} },
			func(o client.Object) *metav1.LabelSelector { return o.(*v1alpha1.MachineSet).Spec.Selector }))).
		WithOptions(controller.Options{MaxConcurrentReconciles: opts.ConcurrentSyncs}).
		Complete(r)
}

// controllingSet maps a machine to the MachineSet controlling it.
func controllingSet(_ context.Context, obj client.Object) []reconcile.Request {
	if key, ok := setOf(obj); ok {
		return []reconcile.Request{{NamespacedName: key}}
	}
	return nil
}

func setOf(obj client.Object) (types.NamespacedName, bool) {
	ref := metav1.GetControllerOfNoCopy(obj)
	if ref == nil || ref.Kind != "MachineSet" || !strings.HasPrefix(ref.APIVersion, v1alpha1.GroupName+"/") {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: obj.GetNamespace(), Name: ref.Name}, true
}

// urgentForSet: a machine event reaches its set at once when the set's expectations wait for it
// (expectations.observe), when a machine changes sets, and when one failed (it is replaced);
// other events (phases, a creation or deletion the set does not wait for) only change its status
// and wait to be coalesced. So a pass of 100 creations costs the set one more reconcile, not one
// per creation, each reading every machine.
func (r *Reconciler) urgentForSet(kind coalesce.Event, old, m client.Object) bool {
	key, _ := setOf(m)
	switch kind {
	case coalesce.Create:
		return r.exp.observe(key, m.GetName(), "", false)
	case coalesce.Delete:
		return r.exp.observe(key, "", m.GetUID(), true)
	case coalesce.Generic:
		return true
	}
	if o, n := metav1.GetControllerOfNoCopy(old), metav1.GetControllerOfNoCopy(m); (o == nil) != (n == nil) || (o != nil && o.UID != n.UID) {
		return true
	}
	if old.GetDeletionTimestamp() == nil && m.GetDeletionTimestamp() != nil {
		return r.exp.observe(key, "", m.GetUID(), true)
	}
	om, ok1 := old.(*v1alpha1.Machine)
	nm, ok2 := m.(*v1alpha1.Machine)
	return ok1 && ok2 && nm.Status.CurrentStatus.Phase == v1alpha1.MachineFailed && om.Status.CurrentStatus.Phase != v1alpha1.MachineFailed
}

// selectorOf returns a set's selector; an empty selector is an error, since it would select
// every machine in the namespace.
func selectorOf(ms *v1alpha1.MachineSet) (labels.Selector, error) {
	return ownership.Selector(ms.Spec.Selector)
}

// Reconcile brings one MachineSet towards its desired replicas and records its status.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	res, err := r.reconcile(ctx, req)
	if apierrors.IsConflict(err) {
		// Another writer (the deployment or safety controller, a user) got there first: retry on
		// fresh data soon, without logging an error.
		return reconcile.Result{RequeueAfter: 50 * time.Millisecond}, nil
	}
	return res, err
}

func (r *Reconciler) reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	ms := &v1alpha1.MachineSet{}
	if err := r.client.Get(ctx, req.NamespacedName, ms); err != nil {
		if apierrors.IsNotFound(err) {
			r.exp.forget(req.NamespacedName)
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, err
	}
	if ms.DeletionTimestamp != nil {
		return r.reconcileDelete(ctx, ms)
	}
	if !controllerutil.ContainsFinalizer(ms, v1alpha1.FinalizerMachineControllerManager) {
		controllerutil.AddFinalizer(ms, v1alpha1.FinalizerMachineControllerManager)
		// The update's watch event brings the set back with the finalizer in place.
		return reconcile.Result{}, r.client.Update(ctx, ms)
	}

	sel, err := selectorOf(ms)
	if err == nil && !sel.Matches(labels.Set(ms.Spec.Template.Labels)) {
		err = fmt.Errorf("spec.template.metadata.labels %v do not match spec.selector %s: make the template carry the selected labels", ms.Spec.Template.Labels, sel)
	}
	if err != nil {
		r.recorder.Eventf(ms, nil, "Warning", "InvalidSpec", "Validate", "%v", err)
		return reconcile.Result{}, r.updateStatus(ctx, ms, nil, nil, err)
	}

	if wait, waiting := r.exp.awaitsCreation(req.NamespacedName, r.cached(ctx, ms)); waiting {
		// A machine it created is not in the cache yet: reading every machine would only show
		// that. Its creation event brings the set back (expectations.observe); wait bounds it.
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	machines, err := r.claimMachines(ctx, ms, sel)
	if err != nil {
		return reconcile.Result{}, err
	}
	if err := r.syncInPlace(ctx, ms, machines); err != nil {
		return reconcile.Result{}, err
	}
	view := cacheView{names: map[string]bool{}, live: map[types.UID]bool{}}
	for _, m := range machines {
		view.names[m.Name] = true
		if m.DeletionTimestamp == nil {
			view.live[m.UID] = true
		}
	}
	machines = r.autoPreserve(ctx, ms, machines)
	ok, wait := r.exp.satisfied(req.NamespacedName, view)
	var manageErr error
	var recheck time.Duration
	if ok {
		recheck, manageErr = r.manageReplicas(ctx, ms, machines)
	}
	res := reconcile.Result{RequeueAfter: r.opts.ResyncPeriod}
	if recheck > 0 && recheck < res.RequeueAfter {
		res.RequeueAfter = recheck
	}
	if !ok && wait < res.RequeueAfter {
		// Watch events normally satisfy the expectations sooner; this bounds the wait if they never come.
		res.RequeueAfter = wait
	}
	if next := r.nextAvailableCheck(ms, machines); next > 0 && next < res.RequeueAfter {
		res.RequeueAfter = next
	}
	if err := r.updateStatus(ctx, ms, machines, sel, manageErr); err != nil {
		return reconcile.Result{}, err
	}
	if manageErr != nil {
		return reconcile.Result{}, manageErr
	}
	return res, nil
}

// cached reports whether the cache shows the named machine as one of the set's (a claimed standby
// machine is in the cache before its claim is).
func (r *Reconciler) cached(ctx context.Context, ms *v1alpha1.MachineSet) func(string) bool {
	return func(name string) bool {
		m := &v1alpha1.Machine{}
		if r.client.Get(ctx, client.ObjectKey{Namespace: ms.Namespace, Name: name}, m, client.UnsafeDisableDeepCopy) != nil {
			return false
		}
		o := metav1.GetControllerOf(m)
		return o == nil || o.UID == ms.UID
	}
}

// claimMachines lists the machines the set controls, adopting orphans that match its selector
// and releasing controlled machines that no longer match (as a ReplicaSet does).
func (r *Reconciler) claimMachines(ctx context.Context, ms *v1alpha1.MachineSet, sel labels.Selector) ([]*v1alpha1.Machine, error) {
	// The cache's own objects, not copies: a set of 1000 machines is listed on every machine
	// event. They are only read; adopt and release change copies. Its machines and the orphans
	// come from the controller index, not a list of the namespace's machines: hundreds of sets
	// share a namespace.
	var list, orphans v1alpha1.MachineList
	if err := ownership.Controlled(ctx, r.client, &list, ms.Namespace, ms.UID, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("machineset: list machines: %w", err)
	}
	if err := ownership.Orphans(ctx, r.client, &orphans, ms.Namespace, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("machineset: list machines: %w", err)
	}
	list.Items = append(list.Items, orphans.Items...)
	var owned []*v1alpha1.Machine
	var adoptChecked, canAdopt bool
	for i := range list.Items {
		m := &list.Items[i]
		ref := metav1.GetControllerOfNoCopy(m)
		matches := sel.Matches(labels.Set(m.Labels))
		switch {
		case ref != nil && ref.UID == ms.UID:
			if !matches && m.DeletionTimestamp == nil {
				if err := r.release(ctx, ms, m); err != nil {
					return nil, err
				}
				continue
			}
			owned = append(owned, m)
		case ref == nil && matches && m.DeletionTimestamp == nil:
			if !adoptChecked {
				adoptChecked = true
				canAdopt = r.canAdopt(ctx, ms)
			}
			if !canAdopt {
				continue
			}
			adopted, err := r.adopt(ctx, ms, m)
			if err != nil {
				if apierrors.IsNotFound(err) {
					continue
				}
				return nil, err
			}
			owned = append(owned, adopted)
		}
	}
	return owned, nil
}

// canAdopt re-reads the set from the API server: a set already being deleted must not adopt.
func (r *Reconciler) canAdopt(ctx context.Context, ms *v1alpha1.MachineSet) bool {
	fresh := &v1alpha1.MachineSet{}
	if err := r.reader.Get(ctx, client.ObjectKeyFromObject(ms), fresh); err != nil {
		return false
	}
	return fresh.UID == ms.UID && fresh.DeletionTimestamp == nil
}

func (r *Reconciler) adopt(ctx context.Context, ms *v1alpha1.MachineSet, cached *v1alpha1.Machine) (*v1alpha1.Machine, error) {
	m := cached.DeepCopy()
	patch := client.MergeFromWithOptions(cached, client.MergeFromWithOptimisticLock{})
	if err := controllerutil.SetControllerReference(ms, m, r.client.Scheme(), controllerutil.WithBlockOwnerDeletion(true)); err != nil {
		return nil, fmt.Errorf("machineset: adopt machine %s: %w", m.Name, err)
	}
	if err := r.client.Patch(ctx, m, patch); err != nil {
		return nil, fmt.Errorf("machineset: adopt machine %s: %w", m.Name, err)
	}
	r.recorder.Eventf(ms, m, "Normal", "Adopted", "Adopt", "Adopted machine %s", m.Name)
	return m, nil
}

func (r *Reconciler) release(ctx context.Context, ms *v1alpha1.MachineSet, cached *v1alpha1.Machine) error {
	m := cached.DeepCopy()
	patch := client.MergeFromWithOptions(cached, client.MergeFromWithOptimisticLock{})
	refs := m.OwnerReferences[:0:0]
	for _, ref := range m.OwnerReferences {
		if ref.UID != ms.UID {
			refs = append(refs, ref)
		}
	}
	m.OwnerReferences = refs
	if err := r.client.Patch(ctx, m, patch); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("machineset: release machine %s: %w", m.Name, err)
	}
	r.recorder.Eventf(ms, m, "Normal", "Released", "Release", "Released machine %s: its labels no longer match the selector", m.Name)
	return nil
}

// Frozen reports whether the safety controller froze the set (label freeze=True or condition
// Frozen=True); a frozen set creates no machines.
func Frozen(ms *v1alpha1.MachineSet) bool {
	if ms.Labels[v1alpha1.LabelFreeze] == "True" {
		return true
	}
	for _, c := range ms.Status.Conditions {
		if c.Type == v1alpha1.MachineSetFrozen && c.Status == v1alpha1.ConditionTrue {
			return true
		}
	}
	return false
}

// manageReplicas deletes Failed machines (they are replaced) and surplus machines, or creates
// missing ones, at most BurstReplicas per pass, after the capacity fallback's rebalancing. A
// preserved Failed machine is kept and holds its replica (MCM: preserved machines count towards
// replicas); surplus machines go in SortForDeletion's order, preserved ones last. It returns
// when the set wants to be looked at again without an event (0: no need).
func (r *Reconciler) manageReplicas(ctx context.Context, ms *v1alpha1.MachineSet, machines []*v1alpha1.Machine) (time.Duration, error) {
	now := r.now()
	var active, failed []*v1alpha1.Machine
	for _, m := range machines {
		switch {
		case m.DeletionTimestamp != nil:
		case m.Status.CurrentStatus.Phase == v1alpha1.MachineFailed && !r.keepFailed(ctx, m, now):
			failed = append(failed, m)
		default:
			active = append(active, m)
		}
	}
	active, recheck, err := r.rebalance(ctx, ms, machines, active)
	if err != nil {
		return 0, err
	}
	budget := r.opts.BurstReplicas
	var errs []error
	if len(failed) > 0 {
		if len(failed) > budget {
			failed = failed[:budget]
		}
		budget -= len(failed)
		errs = append(errs, r.deleteMachines(ctx, ms, failed, "replacing failed machine"))
	}
	replaces := pendingReplacements(machines, failed)

	diff := len(active) - int(ms.Spec.Replicas)
	switch {
	case diff < 0 && budget > 0:
		if Frozen(ms) {
			log.FromContext(ctx).V(1).Info("set is frozen: not creating machines", "missing", -diff)
			break
		}
		if _, ok := ms.Labels[v1alpha1.LabelScaleUpDisabled]; ok {
			break
		}
		want := min(-diff, budget)
		claimed, err := r.claimStandby(ctx, ms, want)
		errs = append(errs, err)
		if want > claimed {
			errs = append(errs, r.createMachines(ctx, ms, want-claimed, replaces))
		}
	case diff > 0 && budget > 0:
		// A machine that just moved here after an in-place update (label update-result=successful)
		// is not a surplus: its MachineDeployment grows the set next (MCM's rule).
		surplus := notMovedInPlace(active)
		if n := len(surplus) - int(ms.Spec.Replicas); n > 0 {
			SortForDeletion(surplus, now)
			errs = append(errs, r.deleteMachines(ctx, ms, surplus[:min(n, budget)], "scaling down"))
		}
	}
	return recheck, errors.Join(errs...)
}

// createMachines creates n machines in slow-start batches (1, 2, 4, ...), stopping at the first
// batch with a failure so a broken template or quota does not produce a storm of errors. The
// i-th machine created replaces replaces[i], while there are any (replaces.go).
func (r *Reconciler) createMachines(ctx context.Context, ms *v1alpha1.MachineSet, n int, replaces []replacement) error {
	key := client.ObjectKeyFromObject(ms)
	defer r.exp.pass(key)()
	class, note := r.newMachineClass(ctx, ms)
	var mu sync.Mutex
	var made []*v1alpha1.Machine
	defer func() {
		r.fallbackEvents(ms, made, class, note)
		r.replacementEvents(made)
	}()
	build := func(i int) *v1alpha1.Machine {
		m := newMachine(ms)
		if class != "" {
			m.Spec.Class.Name = class
		}
		if i < len(replaces) {
			markReplacement(m, replaces[i])
		}
		return m
	}
	created := 0
	for batch := 1; created < n; batch *= 2 {
		size := min(batch, n-created)
		var wg sync.WaitGroup
		errCh := make(chan error, size)
		for j := range size {
			wg.Go(func() {
				m := build(created + j)
				err := r.client.Create(ctx, m)
				if apierrors.IsAlreadyExists(err) && m.GenerateName != "" {
					// The API server's generated name collided: try one more name.
					m = build(created + j)
					err = r.client.Create(ctx, m)
				}
				if err != nil {
					errCh <- err
					return
				}
				r.exp.created(key, m.Name)
				mu.Lock()
				made = append(made, m)
				mu.Unlock()
			})
		}
		wg.Wait()
		close(errCh)
		var errs []error
		for err := range errCh {
			errs = append(errs, err)
		}
		created += size - len(errs)
		if len(errs) > 0 {
			err := fmt.Errorf("machineset: %w: %w", errCreate, errors.Join(errs...))
			r.recorder.Eventf(ms, nil, "Warning", "FailedCreate", "Create", "Created %d of %d machines: %v", created, n, errs[0])
			return err
		}
	}
	r.recorder.Eventf(ms, nil, "Normal", "SuccessfulCreate", "Create", "Created %d machines", n)
	return nil
}

// newMachine builds a machine of the set from its template.
func newMachine(ms *v1alpha1.MachineSet) *v1alpha1.Machine {
	t := ms.Spec.Template.DeepCopy()
	m := &v1alpha1.Machine{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: ms.Name + "-",
			Namespace:    ms.Namespace,
			Labels:       t.Labels,
			Annotations:  t.Annotations,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion:         v1alpha1.SchemeGroupVersion.String(),
				Kind:               "MachineSet",
				Name:               ms.Name,
				UID:                ms.UID,
				Controller:         ptr.To(true),
				BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: t.Spec,
	}
	if m.Spec.Class.Name == "" {
		m.Spec.Class = ms.Spec.MachineClass
	}
	if m.Annotations == nil {
		m.Annotations = map[string]string{}
	}
	// A pairing is the set's record of one machine, never the template's (replaces.go).
	delete(m.Annotations, AnnotationReplaces)
	delete(m.Annotations, AnnotationReplacesReason)
	if _, ok := m.Annotations[v1alpha1.AnnotationMachinePriority]; !ok {
		m.Annotations[v1alpha1.AnnotationMachinePriority] = v1alpha1.DefaultMachinePriority
	}
	if v, ok := ms.Annotations[v1alpha1.AnnotationEffectiveCreationTimeout]; ok {
		if _, set := m.Annotations[v1alpha1.AnnotationEffectiveCreationTimeout]; !set {
			m.Annotations[v1alpha1.AnnotationEffectiveCreationTimeout] = v
		}
	}
	return m
}

// deleteMachines deletes machines (by UID, so a re-created namesake is never hit), in parallel.
func (r *Reconciler) deleteMachines(ctx context.Context, ms *v1alpha1.MachineSet, machines []*v1alpha1.Machine, why string) error {
	if len(machines) == 0 {
		return nil
	}
	key := client.ObjectKeyFromObject(ms)
	defer r.exp.pass(key)()
	var mu sync.Mutex
	var errs []error
	var names []string
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for _, m := range machines {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			err := r.client.Delete(ctx, m, client.Preconditions{UID: &m.UID})
			mu.Lock()
			defer mu.Unlock()
			if err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("delete machine %s: %w", m.Name, err))
				return
			}
			r.exp.deleted(key, m.UID)
			if err == nil {
				mcmmetrics.MachineRemovedBySet(m)
			}
			names = append(names, m.Name)
		})
	}
	wg.Wait()
	if len(names) > 0 {
		// One event per pass, naming the first machines: a pass deletes up to BurstReplicas.
		r.recorder.Eventf(ms, nil, "Normal", "SuccessfulDelete", "Delete", "Deleted %s: %s: %s", eventnote.Plural(len(names), "machine"), eventnote.List(names, eventnote.ListBudget), why)
	}
	if len(errs) > 0 {
		err := fmt.Errorf("machineset: %w: %w", errDelete, errors.Join(errs...))
		r.recorder.Eventf(ms, nil, "Warning", "FailedDelete", "Delete", "%v", errs[0])
		return err
	}
	return nil
}

// reconcileDelete deletes the machines of a set being deleted and lifts its finalizer once they
// are gone. No garbage collector is assumed: the control cluster need not run one.
func (r *Reconciler) reconcileDelete(ctx context.Context, ms *v1alpha1.MachineSet) (reconcile.Result, error) {
	if !controllerutil.ContainsFinalizer(ms, v1alpha1.FinalizerMachineControllerManager) {
		return reconcile.Result{}, nil
	}
	var list v1alpha1.MachineList
	if err := ownership.Controlled(ctx, r.client, &list, ms.Namespace, ms.UID); err != nil {
		return reconcile.Result{}, fmt.Errorf("machineset: list machines: %w", err)
	}
	var remaining, live []*v1alpha1.Machine
	for i := range list.Items {
		m := &list.Items[i]
		if ref := metav1.GetControllerOf(m); ref == nil || ref.UID != ms.UID {
			continue
		}
		remaining = append(remaining, m)
		if m.DeletionTimestamp == nil {
			live = append(live, m)
		}
	}
	if len(remaining) > 0 {
		if err := r.deleteMachines(ctx, ms, live, "machine set is being deleted"); err != nil {
			return reconcile.Result{}, err
		}
		// Machine events bring the set back; this bounds the wait for the last one.
		return reconcile.Result{RequeueAfter: 30 * time.Second}, nil
	}
	controllerutil.RemoveFinalizer(ms, v1alpha1.FinalizerMachineControllerManager)
	if err := r.client.Update(ctx, ms); err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, err
	}
	r.exp.forget(client.ObjectKeyFromObject(ms))
	return reconcile.Result{}, nil
}

// notMovedInPlace drops the machines an in-place update moved to the set whose move its
// MachineDeployment has not finished (they still carry update-result=successful).
func notMovedInPlace(machines []*v1alpha1.Machine) []*v1alpha1.Machine {
	out := make([]*v1alpha1.Machine, 0, len(machines))
	for _, m := range machines {
		if m.Labels[v1alpha1.LabelNodeUpdateResult] != v1alpha1.LabelValueNodeUpdateSuccessful {
			out = append(out, m)
		}
	}
	return out
}
