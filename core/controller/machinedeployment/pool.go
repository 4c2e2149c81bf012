package machinedeployment

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	machinistv1alpha1 "github.com/machinist-io/machinist/core/apis/machinist/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/pool"
	"github.com/machinist-io/machinist/core/controller/rollout"
)

// poolLocks serialise the decisions of a pool's deployments: each member's share is the pool's
// budget less what the others use, so two members deciding at once could both take the last
// surge machine. A member decides and executes its step under its pool's lock.
type poolLocks struct {
	mu    sync.Mutex
	locks map[types.NamespacedName]*sync.Mutex
}

func (l *poolLocks) lock(key types.NamespacedName) (unlock func()) {
	l.mu.Lock()
	if l.locks == nil {
		l.locks = map[types.NamespacedName]*sync.Mutex{}
	}
	m := l.locks[key]
	if m == nil {
		m = &sync.Mutex{}
		l.locks[key] = m
	}
	l.mu.Unlock()
	m.Lock()
	return m.Unlock
}

// joinPool gives the pass the input of its deployment's pool when a PoolPolicy governs it: its
// share of the pool's budgets and the pool's gates. It returns the pool's unlock (call it once
// the step is executed), or a wait while another member's last writes are not in the cache yet
// (its use of the budget would be undercounted).
func (p *pass) joinPool(ctx context.Context) (unlock func(), wait time.Duration, err error) {
	r := p.r
	if !r.poolsOn {
		return func() {}, 0, nil
	}
	a, _, err := r.poolReader.Assign(ctx, p.d.Namespace)
	if err != nil {
		return nil, 0, err
	}
	policy := a.Governing(p.d.Name)
	if policy == nil {
		return func() {}, 0, nil
	}
	if policy.Spec.Rollout.Approval == machinistv1alpha1.ApprovalManual && p.in.Nodes == nil {
		if p.in.Nodes, err = r.poolReader.Nodes(ctx, p.in.Machines); err != nil {
			return nil, 0, err
		}
	}
	unlock = r.pools.lock(client.ObjectKeyFromObject(policy))
	members := a.Members(policy.Name)
	inputs := make([]rollout.Input, 0, len(members))
	for _, d := range members {
		if d.UID == p.d.UID {
			inputs = append(inputs, p.in)
			continue
		}
		in, err := r.poolReader.World(ctx, policy, d)
		if err != nil {
			unlock()
			return nil, 0, err
		}
		if !r.writes.seen(client.ObjectKeyFromObject(d), in.Sets, r.now()) {
			unlock()
			return nil, 500 * time.Millisecond, nil
		}
		in.Now = r.now()
		inputs = append(inputs, in)
	}
	if in, ok := (pool.Pool{Policy: policy, Members: inputs, Now: r.now()}).Input(p.d.Name); ok {
		p.in = in
	}
	return unlock, 0, nil
}

// recheck shortens the requeue to when a pool gate's time passes (a health gate, a soak).
func (p *pass) recheck(res reconcile.Result) reconcile.Result {
	if p.dec.RecheckAt == nil {
		return res
	}
	after := max(p.dec.RecheckAt.Sub(p.r.now()), 100*time.Millisecond)
	if res.RequeueAfter == 0 || after < res.RequeueAfter {
		res.RequeueAfter = after
	}
	return res
}

// membersOfPolicy maps a PoolPolicy to the deployments it selects (all of them: a change of
// the policy may release one as well as govern it).
func (r *Reconciler) membersOfPolicy(ctx context.Context, obj client.Object) []reconcile.Request {
	a, _, err := r.poolReader.Assign(ctx, obj.GetNamespace())
	if err != nil {
		return nil
	}
	var out []reconcile.Request
	for _, d := range a.Selected(obj.GetName()) {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(d)})
	}
	return out
}

// otherMembersOfSet maps a MachineSet to the other deployments of its deployment's pool: its
// change may free (or use) budget they wait for.
func (r *Reconciler) otherMembersOfSet(ctx context.Context, ms client.Object) []reconcile.Request {
	return r.otherMembers(ctx, ms.GetNamespace(), deploymentOfSet(ctx, ms))
}

// otherMembersOfMachine maps a machine to the other deployments of its deployment's pool: a
// terminating machine that goes frees a surge machine of the pool's budget, and its set's
// status may have changed before (it counts no terminating machine).
func (r *Reconciler) otherMembersOfMachine(ctx context.Context, m client.Object) []reconcile.Request {
	return r.otherMembers(ctx, m.GetNamespace(), r.deploymentOfMachine(ctx, m))
}

// machineFreesBudget passes the machine events that change a pool's budget use: a machine that
// goes, starts terminating or changes phase (Running frees the budget a surge machine held).
func machineFreesBudget() predicate.Funcs {
	return predicate.Funcs{
		CreateFunc: func(event.CreateEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			old, ok1 := e.ObjectOld.(*v1alpha1.Machine)
			cur, ok2 := e.ObjectNew.(*v1alpha1.Machine)
			return !ok1 || !ok2 || old.Status.CurrentStatus.Phase != cur.Status.CurrentStatus.Phase ||
				(old.DeletionTimestamp == nil) != (cur.DeletionTimestamp == nil)
		},
	}
}

func (r *Reconciler) otherMembers(ctx context.Context, namespace string, reqs []reconcile.Request) []reconcile.Request {
	if len(reqs) == 0 {
		return nil
	}
	a, _, err := r.poolReader.Assign(ctx, namespace)
	if err != nil {
		return nil
	}
	policy := a.Governing(reqs[0].Name)
	if policy == nil {
		return nil
	}
	var out []reconcile.Request
	for _, d := range a.Members(policy.Name) {
		if d.Name != reqs[0].Name {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(d)})
		}
	}
	return out
}

// policyChanged passes the PoolPolicy changes a member's decision reads: its spec, and the
// failures its controller recorded (they may halt the rollout).
func policyChanged() predicate.Funcs {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		old, ok1 := e.ObjectOld.(*machinistv1alpha1.PoolPolicy)
		cur, ok2 := e.ObjectNew.(*machinistv1alpha1.PoolPolicy)
		if !ok1 || !ok2 {
			return true
		}
		return old.Generation != cur.Generation || failures(old) != failures(cur)
	}}
}

func failures(p *machinistv1alpha1.PoolPolicy) int {
	if p.Status.Rollout == nil {
		return 0
	}
	return len(p.Status.Rollout.Failures)
}
