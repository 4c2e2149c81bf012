// Package machinedeployment is the MachineDeployment controller. Each reconcile reads the world
// (the deployment, the MachineSets it claims, their machines, and the nodes an in-place update
// needs), asks core/controller/rollout what to do (rollout.Decide: MCM's RollingUpdate,
// Recreate and InPlaceUpdate, pause, proportional scaling, revision history, the Cluster
// Autoscaler's deletion marks), executes exactly the step decided, and writes the status
// (conditions Available, Progressing, ReplicaFailure, Frozen, FallbackClasses).
package machinedeployment

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	machinistv1alpha1 "github.com/machinist-io/machinist/core/apis/machinist/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/fallback"
	"github.com/machinist-io/machinist/core/controller/internal/coalesce"
	"github.com/machinist-io/machinist/core/controller/internal/crdfield"
	"github.com/machinist-io/machinist/core/controller/internal/ownership"
	"github.com/machinist-io/machinist/core/controller/pool"
	"github.com/machinist-io/machinist/core/controller/rollout"
	"github.com/machinist-io/machinist/core/eventnote"
)

// ControllerName names the controller in logs, metrics and events.
const ControllerName = "machinedeployment"

// Options configure the MachineDeployment controller.
type Options struct {
	// ConcurrentSyncs is how many MachineDeployments are reconciled at once (MCM: --concurrent-syncs).
	ConcurrentSyncs int
	// ResyncPeriod re-reconciles every deployment this often even without events.
	ResyncPeriod time.Duration
	// DefaultRevisionHistoryLimit applies when spec.revisionHistoryLimit is unset; nil keeps every
	// old MachineSet (MCM's behaviour for an unset limit).
	DefaultRevisionHistoryLimit *int32
	// Target reads and marks the nodes of the target cluster during rollouts (PreferNoSchedule
	// taint on old nodes, Cluster Autoscaler scale-down-disabled annotation); nil means no target
	// cluster.
	Target client.Client
	// TargetCache is the cache behind Target; with it a node selected for update (MCM's
	// selected-for-update label: Manual approval) wakes its deployment at once. nil: such a
	// label takes effect at the deployment's next reconcile.
	TargetCache cache.Cache
	// NoScaleDownAnnotationDuringRollout leaves Cluster Autoscaler's annotation alone
	// (MCM: --autoscaler-scaledown-annotation-during-rollout=false).
	NoScaleDownAnnotationDuringRollout bool
	// Log is the controller's logger; nil means slog.Default().
	Log *slog.Logger
	// Clock is the time of the controller's timeouts and status conditions; nil means the real
	// clock (tests pass a fake one, k8s.io/utils/clock/testing).
	Clock clock.PassiveClock
	// Gate, when set, is asked before each decision with the controller's own (cached) reader;
	// false holds the deployment and asks again shortly. nil decides at once. The planner's golden
	// test steps the controller through settled worlds with it, as the plan plays them.
	Gate func(ctx context.Context, c client.Reader, d *v1alpha1.MachineDeployment) bool
}

// gateRetry is how soon a deployment held by Options.Gate is asked about again.
const gateRetry = 100 * time.Millisecond

// DefaultOptions returns the defaults: 10 concurrent syncs, a 10 minute resync, and an unset
// revisionHistoryLimit keeping every old set, as MCM does.
func DefaultOptions() Options {
	return Options{ConcurrentSyncs: 10, ResyncPeriod: 10 * time.Minute}
}

func (o Options) withDefaults() Options {
	d := DefaultOptions()
	if o.ConcurrentSyncs <= 0 {
		o.ConcurrentSyncs = d.ConcurrentSyncs
	}
	if o.ResyncPeriod <= 0 {
		o.ResyncPeriod = d.ResyncPeriod
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	return o
}

// Reconciler reconciles MachineDeployments.
type Reconciler struct {
	client   client.Client
	reader   client.Reader // uncached, for adoption re-checks and hash collisions
	recorder events.EventRecorder
	opts     Options
	writes   *writes
	now      func() time.Time
	// own coalesces the deployment's own status updates; told of each status write, it drops
	// that write's echo.
	own *coalesce.Handler

	// nodesClean holds the deployments (types.NamespacedName) whose nodes had a clean-up pass
	// since the process started or their last rollout: they need no other until the next one.
	nodesClean sync.Map
	// Status fields Gardener MCM's MachineDeployment CRD lacks (see crdfield).
	fallbackField, selectorField *crdfield.Field
	log                          *slog.Logger

	// poolsOn: the API server serves PoolPolicies; a governed deployment decides with its
	// pool's share and gates (pool.go), under its pool's lock.
	poolsOn    bool
	poolReader pool.Reader
	pools      poolLocks
}

// Setup registers the MachineDeployment controller with mgr.
func Setup(mgr manager.Manager, opts Options) error {
	opts = opts.withDefaults()
	r := &Reconciler{
		client:   mgr.GetClient(),
		reader:   mgr.GetAPIReader(),
		recorder: eventnote.For(mgr, ControllerName),
		opts:     opts,
		writes:   newWrites(),
		now:      opts.Clock.Now,
		log:      opts.Log,

		fallbackField: crdfield.New("the MachineDeployment CRD's status.fallbackReplicas",
			"install machinist's CRDs (kubernetes/crds) to see the count of machines on a fallback class"),
		selectorField: crdfield.New("the MachineDeployment CRD's status.labelSelector",
			"the scale subresource then has no selector (kubectl scale works; a HorizontalPodAutoscaler cannot target the deployment)"),
	}
	if r.log == nil {
		r.log = slog.Default()
	}
	r.poolsOn = pool.Served(mgr.GetRESTMapper())
	r.poolReader = pool.Reader{Client: r.client}
	if opts.Target != nil {
		r.poolReader.Target = opts.Target
	}
	if err := fallback.RegisterMetrics(metrics.Registry); err != nil {
		return fmt.Errorf("machinedeployment: register fallback metrics: %w", err)
	}
	for _, obj := range []client.Object{&v1alpha1.MachineSet{}, &v1alpha1.Machine{}} {
		if err := ownership.AddIndex(context.Background(), mgr.GetFieldIndexer(), obj); err != nil {
			return fmt.Errorf("machinedeployment: %w", err)
		}
	}
	// A deployment reads all its machines: their events and the updates of its own status
	// (mostly this controller's writes) are coalesced, except those noted in urgentForDeployment.
	// Its sets' status updates are coalesced the same way outside a rollout (the scale-up of one
	// set updates its status every pass); their other changes, and all during a rollout, are not.
	machines := &coalesce.Handler{Map: r.deploymentOfMachine, Urgent: r.urgentForDeployment}
	r.own = machines
	sets := &coalesce.Handler{Map: deploymentOfSet, Urgent: r.urgentSetEvent, SizedBy: machines}
	b := ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&v1alpha1.MachineDeployment{}, builder.WithPredicates(coalesce.NotStatusOnly())).
		Watches(&v1alpha1.MachineDeployment{}, machines.Own()).
		Watches(&v1alpha1.MachineSet{}, sets).
		Watches(&v1alpha1.MachineSet{}, handler.EnqueueRequestsFromMapFunc(ownership.OrphanMapper(r.client,
			func() *v1alpha1.MachineDeploymentList { return &v1alpha1.MachineDeploymentList{} },
			func(o client.Object) *metav1.LabelSelector { return o.(*v1alpha1.MachineDeployment).Spec.Selector }))).
		// Machines matter too: a terminating machine still counts against maxSurge until it is
		// gone, and trigger-deletion marks must be seen in the cache before scaling down.
		Watches(&v1alpha1.Machine{}, machines).
		// A fallback class that appears or goes changes the FallbackClasses condition.
		Watches(&v1alpha1.MachineClass{}, handler.EnqueueRequestsFromMapFunc(r.deploymentsOfClass),
			builder.WithPredicates(predicate.Funcs{UpdateFunc: func(event.UpdateEvent) bool { return false }})).
		WithOptions(controller.Options{MaxConcurrentReconciles: opts.ConcurrentSyncs})
	if r.poolsOn {
		// A policy's change reaches the deployments it selects; a member's set change reaches
		// the pool's other members, which may wait for the budget it frees.
		b = b.Watches(&machinistv1alpha1.PoolPolicy{}, handler.EnqueueRequestsFromMapFunc(r.membersOfPolicy), builder.WithPredicates(policyChanged())).
			Watches(&v1alpha1.MachineSet{}, handler.EnqueueRequestsFromMapFunc(r.otherMembersOfSet)).
			Watches(&v1alpha1.Machine{}, handler.EnqueueRequestsFromMapFunc(r.otherMembersOfMachine), builder.WithPredicates(machineFreesBudget()))
	}
	if opts.Target != nil && opts.TargetCache != nil {
		b = b.WatchesRawSource(r.approvals())
	}
	return b.Complete(r)
}

// deploymentOfMachine maps a machine to the deployment owning its MachineSet.
func (r *Reconciler) deploymentOfMachine(ctx context.Context, obj client.Object) []reconcile.Request {
	ref := metav1.GetControllerOf(obj)
	if ref == nil || ref.Kind != "MachineSet" {
		return nil
	}
	ms := &v1alpha1.MachineSet{}
	if err := r.client.Get(ctx, types.NamespacedName{Namespace: obj.GetNamespace(), Name: ref.Name}, ms, client.UnsafeDisableDeepCopy); err != nil {
		return nil
	}
	dref := metav1.GetControllerOf(ms)
	if dref == nil || dref.Kind != "MachineDeployment" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: dref.Name}}}
}

// urgentForDeployment: during a rollout a machine that goes or starts terminating (surge room)
// reaches the deployment at once, and so does a deletion mark that appears; other machine events
// wait to be coalesced — outside a rollout a deletion only changes the status, which the sets'
// status updates bring, so a scale-down of thousands does not read every machine per deletion.
func (r *Reconciler) urgentForDeployment(kind coalesce.Event, old, m client.Object) bool {
	switch kind {
	case coalesce.Delete:
		return r.rolling(m)
	case coalesce.Update:
		for _, a := range []string{v1alpha1.AnnotationMachinePriority, v1alpha1.AnnotationMarkedForDeletionTime} {
			if old.GetAnnotations()[a] != m.GetAnnotations()[a] {
				return true
			}
		}
		if (old.GetDeletionTimestamp() == nil) != (m.GetDeletionTimestamp() == nil) {
			return r.rolling(m)
		}
	}
	return false
}

// rolling reports whether the deployment of a machine rolls out.
func (r *Reconciler) rolling(m client.Object) bool {
	ref := metav1.GetControllerOfNoCopy(m)
	if ref == nil || ref.Kind != "MachineSet" {
		return false
	}
	ms := &v1alpha1.MachineSet{}
	if err := r.client.Get(context.Background(), types.NamespacedName{Namespace: m.GetNamespace(), Name: ref.Name}, ms, client.UnsafeDisableDeepCopy); err != nil {
		return true // cannot tell: do not delay
	}
	return r.setRolling(ms)
}

// setRolling reports whether the deployment of a set rolls out: more than one of its sets has
// machines or is to have some (read from the cache; a deployment has few sets).
func (r *Reconciler) setRolling(ms client.Object) bool {
	d := metav1.GetControllerOfNoCopy(ms)
	if d == nil || d.Kind != "MachineDeployment" {
		return false
	}
	var sets v1alpha1.MachineSetList
	if err := ownership.Controlled(context.Background(), r.client, &sets, ms.GetNamespace(), d.UID, client.UnsafeDisableDeepCopy); err != nil {
		return true
	}
	active := 0
	for i := range sets.Items {
		s := &sets.Items[i]
		if c := metav1.GetControllerOfNoCopy(s); c != nil && c.UID == d.UID && (s.Spec.Replicas > 0 || s.Status.Replicas > 0) {
			active++
		}
	}
	return active > 1
}

// deploymentOfSet maps a MachineSet to the deployment controlling it.
func deploymentOfSet(_ context.Context, ms client.Object) []reconcile.Request {
	d := metav1.GetControllerOfNoCopy(ms)
	if d == nil || d.Kind != "MachineDeployment" || !strings.HasPrefix(d.APIVersion, v1alpha1.GroupName+"/") {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: ms.GetNamespace(), Name: d.Name}}}
}

// urgentSetEvent: a set that appears, goes or changes anything but its status reaches its
// deployment at once, and so does every status update during a rollout (its progress); other
// status updates are coalesced.
func (r *Reconciler) urgentSetEvent(kind coalesce.Event, old, ms client.Object) bool {
	return kind != coalesce.Update || !coalesce.StatusOnly(old, ms) || r.setRolling(ms)
}

// Reconcile rolls one MachineDeployment forward and records its status.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	res, err := r.reconcile(ctx, req)
	if apierrors.IsConflict(err) {
		// Another writer (a scaler, the MachineSet controller, a user) got there first: retry on
		// fresh data soon, without logging an error.
		return reconcile.Result{RequeueAfter: 50 * time.Millisecond}, nil
	}
	return res, err
}

func (r *Reconciler) reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	d := &v1alpha1.MachineDeployment{}
	if err := r.client.Get(ctx, req.NamespacedName, d); err != nil {
		if apierrors.IsNotFound(err) {
			r.writes.forget(req.NamespacedName)
			r.nodesClean.Delete(req.NamespacedName)
			fallback.ForgetDeployment(req.Namespace, req.Name)
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, err
	}
	if d.DeletionTimestamp != nil {
		return r.reconcileDelete(ctx, d)
	}
	if !controllerutil.ContainsFinalizer(d, v1alpha1.FinalizerMachineControllerManager) {
		controllerutil.AddFinalizer(d, v1alpha1.FinalizerMachineControllerManager)
		return reconcile.Result{}, r.client.Update(ctx, d)
	}

	if r.opts.Gate != nil && !r.opts.Gate(ctx, r.client, d) {
		return reconcile.Result{RequeueAfter: gateRetry}, nil
	}
	p, wait, err := r.read(ctx, d)
	if err != nil || wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, err
	}
	if p == nil {
		// An invalid spec: nothing is read, nothing is done but saying why.
		return reconcile.Result{}, r.writeBlocked(ctx, d, rollout.Decide(rollout.Input{Deployment: d, Now: r.now()}))
	}
	unlock, wait, err := p.joinPool(ctx)
	if err != nil || wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, err
	}
	defer unlock()
	p.dec = rollout.Decide(p.in)
	if p.dec.Blocked(rollout.BlockedNoTargetCluster) {
		return reconcile.Result{}, r.writeBlocked(ctx, d, p.dec)
	}
	res, err := p.run(ctx)
	return p.recheck(res), err
}

// run executes a decided step and records the status.
func (p *pass) run(ctx context.Context) (reconcile.Result, error) {
	if err := (executor{p}).execute(ctx); err != nil {
		return reconcile.Result{}, err
	}
	if p.dec.Step.AwaitMarks {
		// Marked machines must be seen as marked by the MachineSet controller before any set is
		// scaled down, or it could delete other machines. The marks' watch events bring us back.
		return reconcile.Result{RequeueAfter: 200 * time.Millisecond}, nil
	}
	if err := p.syncStatus(ctx); err != nil {
		return reconcile.Result{}, err
	}
	if err := p.markNodes(ctx); err != nil {
		return reconcile.Result{}, err
	}
	res := reconcile.Result{RequeueAfter: p.r.opts.ResyncPeriod}
	if after := p.requeueAfter; after > 0 && after < res.RequeueAfter {
		res.RequeueAfter = after
	}
	return res, nil
}

// writeBlocked says why a deployment cannot be acted on: a Warning Event and the ReplicaFailure
// condition.
func (r *Reconciler) writeBlocked(ctx context.Context, d *v1alpha1.MachineDeployment, dec rollout.Decision) error {
	msg := dec.BlockedBy[0].Message
	r.recorder.Eventf(d, nil, "Warning", ReasonInvalidSpec, "Validate", "%s", msg)
	return r.writeInvalidStatus(ctx, d, msg)
}

// claimSets lists the MachineSets the deployment controls, adopting orphans its selector matches
// and releasing controlled sets that no longer match.
func (r *Reconciler) claimSets(ctx context.Context, d *v1alpha1.MachineDeployment, sel labels.Selector) ([]*v1alpha1.MachineSet, error) {
	// Its own sets and the orphans from the controller index, not every set of the namespace
	// (hundreds of deployments share one); copies only of those it keeps.
	var list, orphans v1alpha1.MachineSetList
	if err := ownership.Controlled(ctx, r.client, &list, d.Namespace, d.UID, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("machinedeployment: list machine sets: %w", err)
	}
	if err := ownership.Orphans(ctx, r.client, &orphans, d.Namespace, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("machinedeployment: list machine sets: %w", err)
	}
	list.Items = append(list.Items, orphans.Items...)
	var owned []*v1alpha1.MachineSet
	var checked, canAdopt bool
	for i := range list.Items {
		ref := metav1.GetControllerOfNoCopy(&list.Items[i])
		matches := sel.Matches(labels.Set(list.Items[i].Labels))
		if !(ref != nil && ref.UID == d.UID) && !(ref == nil && matches && list.Items[i].DeletionTimestamp == nil) {
			continue
		}
		ms := list.Items[i].DeepCopy()
		switch {
		case ref != nil && ref.UID == d.UID:
			if !matches && ms.DeletionTimestamp == nil {
				patch := client.MergeFromWithOptions(ms.DeepCopy(), client.MergeFromWithOptimisticLock{})
				if err := controllerutil.RemoveControllerReference(d, ms, r.client.Scheme()); err != nil {
					return nil, fmt.Errorf("machinedeployment: release machine set %s: %w", ms.Name, err)
				}
				if err := r.client.Patch(ctx, ms, patch); err != nil && !apierrors.IsNotFound(err) {
					return nil, fmt.Errorf("machinedeployment: release machine set %s: %w", ms.Name, err)
				}
				continue
			}
			owned = append(owned, ms)
		case ref == nil && matches && ms.DeletionTimestamp == nil:
			if !checked {
				checked = true
				fresh := &v1alpha1.MachineDeployment{}
				canAdopt = r.reader.Get(ctx, client.ObjectKeyFromObject(d), fresh) == nil && fresh.UID == d.UID && fresh.DeletionTimestamp == nil
			}
			if !canAdopt {
				continue
			}
			patch := client.MergeFromWithOptions(ms.DeepCopy(), client.MergeFromWithOptimisticLock{})
			if err := controllerutil.SetControllerReference(d, ms, r.client.Scheme(), controllerutil.WithBlockOwnerDeletion(true)); err != nil {
				return nil, fmt.Errorf("machinedeployment: adopt machine set %s: %w", ms.Name, err)
			}
			if err := r.client.Patch(ctx, ms, patch); err != nil {
				if apierrors.IsNotFound(err) {
					continue
				}
				return nil, fmt.Errorf("machinedeployment: adopt machine set %s: %w", ms.Name, err)
			}
			r.recorder.Eventf(d, ms, "Normal", "Adopted", "Adopt", "Adopted machine set %s", ms.Name)
			owned = append(owned, ms)
		}
	}
	return owned, nil
}

// machinesBySet lists the machines of each set (terminating ones included), keyed by set UID.
// The machines are the cache's own objects: read them, never modify them.
func (r *Reconciler) machinesBySet(ctx context.Context, d *v1alpha1.MachineDeployment, sets []*v1alpha1.MachineSet) (map[types.UID][]*v1alpha1.Machine, error) {
	out := make(map[types.UID][]*v1alpha1.Machine, len(sets))
	for _, ms := range sets {
		var list v1alpha1.MachineList
		if err := ownership.Controlled(ctx, r.client, &list, d.Namespace, ms.UID, client.UnsafeDisableDeepCopy); err != nil {
			return nil, fmt.Errorf("machinedeployment: list machines: %w", err)
		}
		for i := range list.Items {
			out[ms.UID] = append(out[ms.UID], &list.Items[i])
		}
	}
	return out, nil
}

// reconcileDelete deletes the sets of a deployment being deleted (their controller deletes the
// machines) and lifts the finalizer once they are gone. No garbage collector is assumed.
func (r *Reconciler) reconcileDelete(ctx context.Context, d *v1alpha1.MachineDeployment) (reconcile.Result, error) {
	if !controllerutil.ContainsFinalizer(d, v1alpha1.FinalizerMachineControllerManager) {
		return reconcile.Result{}, nil
	}
	var list v1alpha1.MachineSetList
	if err := ownership.Controlled(ctx, r.client, &list, d.Namespace, d.UID); err != nil {
		return reconcile.Result{}, fmt.Errorf("machinedeployment: list machine sets: %w", err)
	}
	remaining := 0
	for i := range list.Items {
		ms := &list.Items[i]
		if ref := metav1.GetControllerOf(ms); ref == nil || ref.UID != d.UID {
			continue
		}
		remaining++
		if ms.DeletionTimestamp != nil {
			continue
		}
		if err := r.client.Delete(ctx, ms, client.Preconditions{UID: &ms.UID}); err != nil && !apierrors.IsNotFound(err) {
			return reconcile.Result{}, fmt.Errorf("machinedeployment: delete machine set %s: %w", ms.Name, err)
		}
		r.recorder.Eventf(d, ms, "Normal", "DeletingMachineSet", "Delete", "Deleting machine set %s: the deployment is being deleted", ms.Name)
	}
	if remaining > 0 {
		return reconcile.Result{RequeueAfter: 30 * time.Second}, nil
	}
	controllerutil.RemoveFinalizer(d, v1alpha1.FinalizerMachineControllerManager)
	if err := r.client.Update(ctx, d); err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, err
	}
	r.writes.forget(client.ObjectKeyFromObject(d))
	return reconcile.Result{}, nil
}

// writes remembers, per deployment, the MachineSet generations this controller wrote and the
// sets it created, until the informer cache shows them (read-your-writes across reconciles).
type writes struct {
	mu      sync.Mutex
	gens    map[types.NamespacedName]map[types.UID]int64
	created map[types.NamespacedName]map[string]time.Time
}

func newWrites() *writes {
	return &writes{gens: map[types.NamespacedName]map[types.UID]int64{}, created: map[types.NamespacedName]map[string]time.Time{}}
}

// writesTTL bounds how long an unseen write holds a deployment back.
const writesTTL = time.Minute

func (w *writes) wrote(d types.NamespacedName, ms *v1alpha1.MachineSet) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.gens[d] == nil {
		w.gens[d] = map[types.UID]int64{}
	}
	w.gens[d][ms.UID] = ms.Generation
}

func (w *writes) create(d types.NamespacedName, name string, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.created[d] == nil {
		w.created[d] = map[string]time.Time{}
	}
	w.created[d][name] = now
}

// seen reports whether the cache shows every write, dropping those it shows.
func (w *writes) seen(d types.NamespacedName, sets []*v1alpha1.MachineSet, now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	ok := true
	byUID := map[types.UID]*v1alpha1.MachineSet{}
	byName := map[string]bool{}
	for _, ms := range sets {
		byUID[ms.UID] = ms
		byName[ms.Name] = true
	}
	for uid, gen := range w.gens[d] {
		ms, found := byUID[uid]
		if !found || ms.Generation >= gen {
			delete(w.gens[d], uid)
			continue
		}
		ok = false
	}
	for name, at := range w.created[d] {
		if byName[name] || now.Sub(at) > writesTTL {
			delete(w.created[d], name)
			continue
		}
		ok = false
	}
	return ok
}

func (w *writes) forget(d types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.gens, d)
	delete(w.created, d)
}
