// Package pool is the standby pool reconciler: per MachineDeployment annotated
// machinist.io/standby, it keeps the pool standby.PlanPool decides (creating standby machines from
// the current MachineSet's template, deleting outdated and surplus ones) and reports it in the
// deployment's StandbyReady condition. A provider without the power capability gets no standby
// machine and a False condition saying what to do. Stopping, starting and claiming are the
// Machine and MachineSet controllers' (docs/machine-controller.md, "Standby machines").
package pool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/internal/coalesce"
	"github.com/machinist-io/machinist/core/controller/internal/crdfield"
	"github.com/machinist-io/machinist/core/controller/internal/ownership"
	"github.com/machinist-io/machinist/core/controller/rollout"
	"github.com/machinist-io/machinist/core/controller/standby"
	"github.com/machinist-io/machinist/core/driver"
)

// ConditionStandbyReady on a MachineDeployment with a pool: True when every wanted standby
// machine is stopped, False with the counts while the pool fills, or with the reason it cannot.
const ConditionStandbyReady v1alpha1.MachineDeploymentConditionType = "StandbyReady"

// Reasons of ConditionStandbyReady.
const (
	ReasonReady       = "StandbyStopped"
	ReasonFilling     = "StandbyFilling"
	ReasonUnavailable = "StandbyUnavailable" // the provider cannot stop and start machines
	ReasonInvalid     = "InvalidStandby"     // the annotation is not a count
)

// Drivers resolves a MachineClass to its driver (registry.Resolver does).
type Drivers interface {
	ForClass(class *v1alpha1.MachineClass) (driver.Driver, error)
}

// Options configure the reconciler.
type Options struct {
	Drivers Drivers
	Log     *slog.Logger
	// Now is the time of conditions; nil means time.Now.
	Now func() time.Time
}

// Reconciler keeps the standby pools.
type Reconciler struct {
	client client.Client
	reader client.Reader // uncached: a pool's members are listed live, so a pass never creates twice
	opts   Options
	// countsField is status.standbyReady/standbyStarting, which Gardener MCM's CRD lacks.
	countsField *crdfield.Field
}

// Setup adds the reconciler to mgr: it watches deployments and the standby machines of each.
func Setup(mgr manager.Manager, opts Options) error {
	if opts.Drivers == nil {
		return errors.New("standby pool: no driver resolver")
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	r := &Reconciler{client: mgr.GetClient(), reader: mgr.GetAPIReader(), opts: opts,
		countsField: crdfield.New("the MachineDeployment CRD's status.standbyReady and status.standbyStarting",
			"the StandbyReady condition's message still counts the pool; install machinist's CRDs (kubernetes/crds) to get the fields back")}
	for _, obj := range []client.Object{&v1alpha1.MachineSet{}, &v1alpha1.Machine{}} {
		if err := ownership.AddIndex(context.Background(), mgr.GetFieldIndexer(), obj); err != nil {
			return fmt.Errorf("standby pool: %w", err)
		}
	}
	return builder.ControllerManagedBy(mgr).
		Named("standbypool").
		// A pool reads no deployment's or set's status but its own condition, which the
		// deployment controller's status writes keep: their status-only updates (several per
		// set and deployment in a scale-up) bring it nothing.
		For(&v1alpha1.MachineDeployment{}, builder.WithPredicates(coalesce.NotStatusOnly())).
		Watches(&v1alpha1.Machine{}, handler.EnqueueRequestsFromMapFunc(poolOf)).
		Watches(&v1alpha1.MachineSet{}, handler.EnqueueRequestForOwner(mgr.GetScheme(), mgr.GetRESTMapper(), &v1alpha1.MachineDeployment{}),
			builder.WithPredicates(coalesce.NotStatusOnly())).
		Complete(r)
}

// poolOf maps a standby machine to its deployment.
func poolOf(_ context.Context, o client.Object) []reconcile.Request {
	name := o.GetLabels()[standby.LabelDeployment]
	if name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: name}}}
}

// Reconcile brings one deployment's pool to its plan.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	md := &v1alpha1.MachineDeployment{}
	if err := r.client.Get(ctx, req.NamespacedName, md); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if md.DeletionTimestamp != nil {
		return reconcile.Result{}, nil // the garbage collector deletes the pool with it
	}
	_, annotated := md.Annotations[standby.Annotation]
	if !annotated {
		// Most deployments have no pool and every event of theirs and their sets comes here:
		// the cache says whether a pool is left to drain, without a live list per event.
		left, err := r.cachedMembers(ctx, md)
		if err != nil || !left {
			return reconcile.Result{}, errors.Join(err, r.clearStatus(ctx, md))
		}
	}
	members, err := r.members(ctx, md)
	if err != nil {
		return reconcile.Result{}, err
	}
	want, err := standby.Desired(md)
	if err != nil {
		// A typo never empties a pool: it stays as it is until the value is fixed.
		// The counts stay as they were, like the pool.
		return reconcile.Result{}, r.setStatus(ctx, md, poolStatus{status: v1alpha1.ConditionFalse, reason: ReasonInvalid,
			msg: err.Error(), ready: md.Status.StandbyReady, starting: md.Status.StandbyStarting})
	}
	if !annotated && len(members) == 0 {
		return reconcile.Result{}, r.clearStatus(ctx, md)
	}
	ms, err := r.currentSet(ctx, md)
	if err != nil || ms == nil {
		return reconcile.Result{}, err // the deployment controller creates it; its watch brings us back
	}
	var perr error
	if want > 0 {
		if perr = r.power(ctx, ms); perr != nil {
			want = 0
		}
	}
	hash := ms.Labels[v1alpha1.LabelMachineTemplateHash]
	plan := standby.PlanPool(want, hash, members)
	if err := r.apply(ctx, md, ms, plan, members); err != nil {
		return reconcile.Result{}, err
	}
	ps := poolCondition(want, hash, members, plan)
	if perr != nil {
		ps.status, ps.reason, ps.msg = v1alpha1.ConditionFalse, ReasonUnavailable, perr.Error()
	}
	return reconcile.Result{}, r.setStatus(ctx, md, ps)
}

// members lists the deployment's standby machines (controlled by it, of its name), from the API
// server: the cache may not show the machines the last pass created yet (a pool is at most
// MaxPool machines, so the read is small).
func (r *Reconciler) members(ctx context.Context, md *v1alpha1.MachineDeployment) ([]standby.Member, error) {
	var list v1alpha1.MachineList
	if err := r.reader.List(ctx, &list, client.InNamespace(md.Namespace), client.MatchingLabels{standby.LabelDeployment: md.Name}); err != nil {
		return nil, fmt.Errorf("standby pool: list machines of %s: %w", md.Name, err)
	}
	var out []standby.Member
	for i := range list.Items {
		m := &list.Items[i]
		if o := metav1.GetControllerOf(m); o == nil || o.UID != md.UID {
			continue
		}
		if mem, ok := standby.MemberOf(m, md.Name); ok {
			out = append(out, mem)
		}
	}
	return out, nil
}

// cachedMembers reports whether the cache shows a standby machine of the deployment.
func (r *Reconciler) cachedMembers(ctx context.Context, md *v1alpha1.MachineDeployment) (bool, error) {
	var list v1alpha1.MachineList
	if err := ownership.Controlled(ctx, r.client, &list, md.Namespace, md.UID, client.UnsafeDisableDeepCopy); err != nil {
		return false, fmt.Errorf("standby pool: list machines of %s: %w", md.Name, err)
	}
	for i := range list.Items {
		if _, ok := standby.MemberOf(&list.Items[i], md.Name); ok {
			return true, nil
		}
	}
	return false, nil
}

// currentSet is the deployment's set of its current template (as rollout.SameTemplate decides,
// the way MCM picks it), or nil while there is none.
func (r *Reconciler) currentSet(ctx context.Context, md *v1alpha1.MachineDeployment) (*v1alpha1.MachineSet, error) {
	var sets v1alpha1.MachineSetList
	if err := ownership.Controlled(ctx, r.client, &sets, md.Namespace, md.UID); err != nil {
		return nil, fmt.Errorf("standby pool: list sets of %s: %w", md.Name, err)
	}
	var cur *v1alpha1.MachineSet
	for i := range sets.Items {
		ms := &sets.Items[i]
		if o := metav1.GetControllerOf(ms); o == nil || o.UID != md.UID || ms.DeletionTimestamp != nil {
			continue
		}
		if rollout.SameTemplate(&ms.Spec.Template, &md.Spec.Template) && (cur == nil || ms.CreationTimestamp.Before(&cur.CreationTimestamp)) {
			cur = ms
		}
	}
	return cur, nil
}

// power checks that the provider of the set's class serves StopMachine and StartMachine.
func (r *Reconciler) power(ctx context.Context, ms *v1alpha1.MachineSet) error {
	name := ms.Spec.Template.Spec.Class.Name
	if name == "" {
		name = ms.Spec.MachineClass.Name
	}
	class := &v1alpha1.MachineClass{}
	if err := r.client.Get(ctx, client.ObjectKey{Namespace: ms.Namespace, Name: name}, class); err != nil {
		return fmt.Errorf("MachineClass %q of set %s: %w", name, ms.Name, err)
	}
	d, err := r.opts.Drivers.ForClass(class)
	if err != nil {
		return fmt.Errorf("provider %q of MachineClass %q: %w", class.Provider, name, err)
	}
	_, err = driver.PowerOf(ctx, class.Provider, d)
	return err
}

// apply creates and deletes what the plan says.
func (r *Reconciler) apply(ctx context.Context, md *v1alpha1.MachineDeployment, ms *v1alpha1.MachineSet, plan standby.Plan, members []standby.Member) error {
	var errs []error
	for _, name := range plan.Delete {
		m := &v1alpha1.Machine{}
		m.Namespace, m.Name = md.Namespace, name
		if err := r.client.Delete(ctx, m); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("standby pool: delete %s: %w", name, err))
		}
	}
	for range plan.Create {
		if err := r.client.Create(ctx, standby.NewMachine(md, ms)); err != nil {
			errs = append(errs, fmt.Errorf("standby pool: create a standby machine of %s: %w", md.Name, err))
		}
	}
	if plan.Create+len(plan.Delete) > 0 {
		r.opts.Log.Info("standby pool", "deployment", md.Namespace+"/"+md.Name, "members", len(members),
			"created", plan.Create, "deleted", plan.Delete)
	}
	return errors.Join(errs...)
}

// poolCondition says how far the pool is: True when want machines of the current template are
// stopped and nothing is planned. Its counts are the message's, of the machines the pool keeps
// (current template, not being or just deleted): stopped ones up to want are ready; booting and
// stopping ones, with those this pass created, are starting.
func poolCondition(want int, hash string, members []standby.Member, plan standby.Plan) poolStatus {
	var stopped, other int
	for _, m := range members {
		switch {
		case m.Deleting || m.Hash != hash || slices.Contains(plan.Delete, m.Name):
		case m.State == standby.Stopped:
			stopped++
		default:
			other++
		}
	}
	ps := poolStatus{status: v1alpha1.ConditionFalse, reason: ReasonFilling,
		ready: int32(min(stopped, want)), starting: int32(other + plan.Create)} //nolint:gosec // a pool is at most standby.MaxPool machines
	ps.msg = fmt.Sprintf("%d of %d standby machines stopped, %d booting or stopping", ps.ready, want, ps.starting)
	if stopped >= want && plan.Create == 0 && len(plan.Delete) == 0 {
		ps.status, ps.reason = v1alpha1.ConditionTrue, ReasonReady
	}
	return ps
}
