// Package poolpolicy is the PoolPolicy controller (machinist.io/v1alpha1): it writes each
// policy's status — the pool's budgets used and left, every governed deployment's part, the
// rollout's failures (which halt it after spec.rollout.haltAfterFailures) and the conditions —
// from the decisions of core/controller/pool. The MachineDeployment controller applies the
// pool's budgets and gates itself; this controller only reports and records failures.
package poolpolicy

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	machinistv1alpha1 "github.com/machinist-io/machinist/core/apis/machinist/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/internal/ownership"
	"github.com/machinist-io/machinist/core/controller/pool"
	"github.com/machinist-io/machinist/core/controller/rollout"
)

// ControllerName names the controller in logs and metrics.
const ControllerName = "poolpolicy"

// Options configure the PoolPolicy controller.
type Options struct {
	// Target reads the target cluster's nodes (Manual approval's WaitingForApproval); nil: none.
	Target client.Reader
	// RollingResync re-reads a pool this often while it rolls out (health gates and soaks pass
	// with time, not with events).
	RollingResync time.Duration
	// Log is the controller's logger; nil means slog.Default().
	Log *slog.Logger
	// Clock is the time of the status; nil means the real clock.
	Clock clock.PassiveClock
}

// Reconciler writes PoolPolicies' status.
type Reconciler struct {
	client client.Client
	reader pool.Reader
	opts   Options
	seen   *failedMachines
}

var _ reconcile.Reconciler = (*Reconciler)(nil)

// Setup registers the PoolPolicy controller with mgr.
func Setup(mgr manager.Manager, opts Options) error {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.RollingResync <= 0 {
		opts.RollingResync = 10 * time.Second
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	r := &Reconciler{client: mgr.GetClient(), reader: pool.Reader{Client: mgr.GetClient()}, opts: opts, seen: newFailedMachines()}
	if opts.Target != nil {
		r.reader.Target = opts.Target
	}
	for _, obj := range []client.Object{&v1alpha1.MachineSet{}, &v1alpha1.Machine{}} {
		if err := ownership.AddIndex(context.Background(), mgr.GetFieldIndexer(), obj); err != nil {
			return fmt.Errorf("poolpolicy: %w", err)
		}
	}
	all := handler.EnqueueRequestsFromMapFunc(r.policiesOf)
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&machinistv1alpha1.PoolPolicy{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&v1alpha1.MachineDeployment{}, all).
		Watches(&v1alpha1.MachineSet{}, all).
		Watches(&v1alpha1.Machine{}, all, builder.WithPredicates(predicate.Funcs{UpdateFunc: r.noteFailure})).
		Complete(r)
}

// policiesOf maps any object of a namespace to the namespace's policies: there are few.
func (r *Reconciler) policiesOf(ctx context.Context, obj client.Object) []reconcile.Request {
	var list machinistv1alpha1.PoolPolicyList
	if err := r.client.List(ctx, &list, client.InNamespace(obj.GetNamespace()), client.UnsafeDisableDeepCopy); err != nil {
		return nil
	}
	out := make([]reconcile.Request, len(list.Items))
	for i := range list.Items {
		out[i] = reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])}
	}
	return out
}

// noteFailure remembers a machine that went Failed (its set may replace it before the status
// is written) and passes every update on.
func (r *Reconciler) noteFailure(e event.UpdateEvent) bool {
	old, ok1 := e.ObjectOld.(*v1alpha1.Machine)
	m, ok2 := e.ObjectNew.(*v1alpha1.Machine)
	if ok1 && ok2 && m.Status.CurrentStatus.Phase == v1alpha1.MachineFailed && old.Status.CurrentStatus.Phase != v1alpha1.MachineFailed {
		r.seen.note(m, r.opts.Clock.Now())
	}
	return true
}

// Reconcile writes one policy's status.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	policy := &machinistv1alpha1.PoolPolicy{}
	if err := r.client.Get(ctx, req.NamespacedName, policy); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, err
	}
	if policy.DeletionTimestamp != nil {
		return reconcile.Result{}, nil
	}
	a, _, err := r.reader.Assign(ctx, policy.Namespace)
	if err != nil {
		return reconcile.Result{}, err
	}
	var members []rollout.Input
	now := r.opts.Clock.Now()
	for _, d := range a.Members(policy.Name) {
		in, err := r.reader.World(ctx, policy, d)
		if err != nil {
			return reconcile.Result{}, err
		}
		in.Now = now
		members = append(members, in)
	}
	p := pool.Pool{Policy: policy, Members: members, Now: now}
	st := p.Status(a.Problem(policy.Name), r.seen.of(policy.Namespace))
	res := reconcile.Result{}
	if c := condition(st, machinistv1alpha1.PoolProgressing); c != nil && c.Reason == pool.ReasonRollingOut {
		res.RequeueAfter = r.opts.RollingResync
	}
	if apiequality.Semantic.DeepEqual(policy.Status, st) {
		return res, nil
	}
	// An update, not a merge patch: a patch leaves out fields equal in the old and new JSON
	// (zeros of a budget the stored object does not have yet), which the schema requires.
	policy.Status = st
	if err := r.client.Status().Update(ctx, policy); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, nil
		}
		if apierrors.IsConflict(err) {
			return reconcile.Result{RequeueAfter: 50 * time.Millisecond}, nil
		}
		return reconcile.Result{}, fmt.Errorf("poolpolicy: write status of %s: %w", req.NamespacedName, err)
	}
	return res, nil
}

func condition(st machinistv1alpha1.PoolPolicyStatus, t string) *metav1.Condition {
	for i := range st.Conditions {
		if st.Conditions[i].Type == t {
			return &st.Conditions[i]
		}
	}
	return nil
}

// failedMachines are the machines seen going Failed, per namespace, bounded: Pool.Failures
// keeps those of a rollout's current sets, and the status records them.
type failedMachines struct {
	mu   sync.Mutex
	byNS map[string][]pool.FailedMachine
}

// maxSeen bounds the failures remembered per namespace.
const maxSeen = 200

func newFailedMachines() *failedMachines {
	return &failedMachines{byNS: map[string][]pool.FailedMachine{}}
}

func (f *failedMachines) note(m *v1alpha1.Machine, now time.Time) {
	ref := metav1.GetControllerOf(m)
	if ref == nil || ref.Kind != "MachineSet" {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	fm := pool.FailedMachine{Machine: m.Name, Set: ref.Name, Reason: m.Status.LastOperation.Description, At: now}
	f.byNS[m.Namespace] = append(f.byNS[m.Namespace], fm)
	if list := f.byNS[m.Namespace]; len(list) > maxSeen {
		f.byNS[m.Namespace] = list[len(list)-maxSeen:]
	}
}

func (f *failedMachines) of(ns string) []pool.FailedMachine {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]pool.FailedMachine(nil), f.byNS[ns]...)
}
