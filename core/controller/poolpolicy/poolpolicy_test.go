package poolpolicy_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	machinistv1alpha1 "github.com/machinist-io/machinist/core/apis/machinist/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/machinedeployment"
	"github.com/machinist-io/machinist/core/controller/machineset"
	"github.com/machinist-io/machinist/core/controller/machineset/machinesettest"
	"github.com/machinist-io/machinist/core/controller/poolpolicy"
	"github.com/machinist-io/machinist/harness/ctrltest"
	"github.com/machinist-io/machinist/harness/machinetest"
	"github.com/machinist-io/machinist/harness/testenv"
	"github.com/machinist-io/machinist/internal/eventually"
)

// One control plane serves every test of the package; each test has its own namespace.
func TestMain(m *testing.M) { ctrltest.Main(m) }

var zones = []string{"zone-a", "zone-b", "zone-c"}

// env is one test's namespace, its client, a stand-in for the Machine controller and the
// MachineSet, MachineDeployment and PoolPolicy controllers.
type env struct {
	t    *testing.T
	ns   string
	c    client.WithWatch
	life *machinesettest.Lifecycle
}

func newEnv(t *testing.T) *env {
	t.Helper()
	ce := ctrltest.NewEnv(t)
	c, err := client.NewWithWatch(ce.Config, client.Options{Scheme: testenv.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, ns: ce.NS, c: c}
	e.life = machinesettest.Start(t, c, ce.NS, 150*time.Millisecond, 200*time.Millisecond)
	ce.StartManager(func(mgr manager.Manager) error {
		if err := machineset.Setup(mgr, machineset.Options{}); err != nil {
			return err
		}
		if err := machinedeployment.Setup(mgr, machinedeployment.Options{}); err != nil {
			return err
		}
		return poolpolicy.Setup(mgr, poolpolicy.Options{RollingResync: time.Second})
	})
	return e
}

// pool creates the policy "workers" selecting worker-pool=workers, then three zonal deployments
// of 2 on class-a with generous budgets of their own (2 surge, 1 unavailable) that the pool's
// replace, and waits for their 6 Running machines.
func (e *env) pool(change func(*machinistv1alpha1.PoolPolicy)) *machinistv1alpha1.PoolPolicy {
	e.t.Helper()
	p := &machinistv1alpha1.PoolPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "workers"},
		Spec: machinistv1alpha1.PoolPolicySpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"worker-pool": "workers"}},
			Rollout:  machinistv1alpha1.PoolRollout{MaxSurge: ptr.To(intstr.FromInt32(1)), MaxUnavailable: ptr.To(intstr.FromInt32(0))},
		},
	}
	if change != nil {
		change(p)
	}
	e.create(p)
	for _, z := range zones {
		d := machinetest.Deployment(e.ns, z, "class-a", 2, machinetest.Pool(z), 2, 1)
		d.Labels = map[string]string{"worker-pool": "workers"}
		e.create(d)
	}
	eventually.Explained(e.t, 30*time.Second, "6 Running machines of class-a", func() (bool, string) {
		all, run := e.count("class-a")
		return all == 6 && run == 6, fmt.Sprintf("%d machines, %d Running", all, run)
	})
	return p
}

func (e *env) create(obj client.Object) {
	e.t.Helper()
	if err := e.c.Create(context.Background(), obj); err != nil {
		e.t.Fatal(err)
	}
}

// update re-reads obj, applies change and writes it, retrying on conflicts.
func update[T client.Object](e *env, obj T, change func(T)) {
	e.t.Helper()
	for range 20 {
		if err := e.c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			e.t.Fatal(err)
		}
		change(obj)
		err := e.c.Update(context.Background(), obj)
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) {
			e.t.Fatal(err)
		}
	}
	e.t.Fatalf("update %s: too many conflicts", obj.GetName())
}

// changeClass moves every zonal deployment to class.
func (e *env) changeClass(class string) {
	for _, z := range zones {
		update(e, &v1alpha1.MachineDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: z}},
			func(d *v1alpha1.MachineDeployment) { d.Spec.Template.Spec.Class.Name = class })
	}
}

func (e *env) machines() []v1alpha1.Machine {
	e.t.Helper()
	var list v1alpha1.MachineList
	if err := e.c.List(context.Background(), &list, client.InNamespace(e.ns)); err != nil {
		e.t.Fatal(err)
	}
	return list.Items
}

// count counts the machines of class: all (terminating included) and Running, not terminating.
func (e *env) count(class string) (all, running int) {
	for _, m := range e.machines() {
		if m.Spec.Class.Name != class {
			continue
		}
		all++
		if m.DeletionTimestamp == nil && m.Status.CurrentStatus.Phase == v1alpha1.MachineRunning {
			running++
		}
	}
	return all, running
}

func (e *env) policy(p *machinistv1alpha1.PoolPolicy) *machinistv1alpha1.PoolPolicy {
	e.t.Helper()
	got := &machinistv1alpha1.PoolPolicy{}
	if err := e.c.Get(context.Background(), client.ObjectKeyFromObject(p), got); err != nil {
		e.t.Fatal(err)
	}
	return got
}

// progress describes the policy's status for failure messages.
func (e *env) progress(p *machinistv1alpha1.PoolPolicy) string {
	st := e.policy(p).Status
	out := fmt.Sprintf("budget %+v", st.Budget)
	for _, d := range st.Deployments {
		out += fmt.Sprintf("; %s %s %s", d.Name, d.State, d.Message)
	}
	if c := meta.FindStatusCondition(st.Conditions, machinistv1alpha1.PoolProgressing); c != nil {
		out += "; Progressing " + c.Reason + ": " + c.Message
	}
	return out
}

// waitCondition waits for the policy's condition t to have reason (and a message containing
// each of contains), and returns it.
func (e *env) waitCondition(p *machinistv1alpha1.PoolPolicy, t, reason string, contains ...string) metav1.Condition {
	e.t.Helper()
	var out metav1.Condition
	eventually.Explained(e.t, 60*time.Second, fmt.Sprintf("condition %s with reason %s", t, reason), func() (bool, string) {
		c := meta.FindStatusCondition(e.policy(p).Status.Conditions, t)
		if c == nil {
			return false, "no condition " + t
		}
		out = *c
		for _, s := range contains {
			if !strings.Contains(c.Message, s) {
				return false, fmt.Sprintf("%s %s: %s (want %q in it)", c.Status, c.Reason, c.Message, s)
			}
		}
		return c.Reason == reason, fmt.Sprintf("%s %s: %s", c.Status, c.Reason, c.Message)
	})
	return out
}

// TestPoolSurgeIsOneMachineAcrossZones: a pool of three zonal deployments of 2 with maxSurge 1
// and maxUnavailable 0 (the deployments' own budgets would allow 2 and 1 each) changes class:
// at every watch event there are at most 7 machines and at least 6 Running, and all end on the
// new class; the policy's status then says so.
func TestPoolSurgeIsOneMachineAcrossZones(t *testing.T) {
	e := newEnv(t)
	p := e.pool(nil)
	w := machinetest.WatchMachines(t, e.c, e.ns, func(ms map[string]*v1alpha1.Machine) string {
		c := machinetest.Count(ms)
		switch {
		case c.All > 7:
			return fmt.Sprintf("%d machines > the pool's 6 + maxSurge 1: %s", c.All, machinetest.Describe(ms))
		case c.Running < 6:
			return fmt.Sprintf("%d Running < the pool's 6 - maxUnavailable 0: %s", c.Running, machinetest.Describe(ms))
		}
		return ""
	})
	w.Arm()
	e.changeClass("class-b")
	eventually.Explained(t, 120*time.Second, "every machine replaced by a Running class-b machine", func() (bool, string) {
		allA, _ := e.count("class-a")
		allB, runB := e.count("class-b")
		return allA == 0 && allB == 6 && runB == 6, fmt.Sprintf("class-a %d, class-b %d (%d Running); %s", allA, allB, runB, e.progress(p))
	})
	r := w.Stop()
	if len(r.Violations) > 0 {
		t.Fatalf("the pool's budget was exceeded %d times, first: %s", len(r.Violations), r.Violations[0])
	}
	if r.MaxAll != 7 {
		t.Errorf("at most %d machines during the rollout: want the one surge machine the pool allows (7)", r.MaxAll)
	}
	t.Logf("during the rollout: at most %d machines, at least %d Running", r.MaxAll, r.MinRunning)

	e.waitCondition(p, machinistv1alpha1.PoolProgressing, "Complete", "all 6 machines")
	st := e.policy(p).Status
	if st.Budget.MaxSurge != 1 || st.Budget.MaxUnavailable != 0 || st.UpdatedReplicas != 6 || len(st.Deployments) != 3 {
		t.Errorf("status %+v: want budgets 1 and 0, 6 updated, 3 deployments", st)
	}
	if c := meta.FindStatusCondition(st.Conditions, machinistv1alpha1.PoolAccepted); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Accepted %+v: want True", c)
	}
}

// TestPausedPoolStartsNothingAndResumes: a class change under a paused policy starts no new
// machine once every deployment decided on its new template; unpausing finishes the rollout.
func TestPausedPoolStartsNothingAndResumes(t *testing.T) {
	e := newEnv(t)
	p := e.pool(func(p *machinistv1alpha1.PoolPolicy) { p.Spec.Rollout.Paused = true })
	e.changeClass("class-b")
	eventually.Explained(t, 30*time.Second, "every deployment decided on its new template", func() (bool, string) {
		for _, z := range zones {
			d := &v1alpha1.MachineDeployment{}
			if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: z}, d); err != nil {
				return false, err.Error()
			}
			if d.Status.ObservedGeneration != d.Generation {
				return false, fmt.Sprintf("%s observed generation %d of %d", z, d.Status.ObservedGeneration, d.Generation)
			}
		}
		return true, ""
	})
	e.waitCondition(p, machinistv1alpha1.PoolProgressing, "Paused", "paused")
	if all, _ := e.count("class-b"); all != 0 {
		t.Fatalf("%d class-b machines while the pool is paused: want none", all)
	}
	if all, run := e.count("class-a"); all != 6 || run != 6 {
		t.Fatalf("class-a %d machines, %d Running while paused: want the 6 untouched", all, run)
	}
	update(e, p, func(p *machinistv1alpha1.PoolPolicy) { p.Spec.Rollout.Paused = false })
	eventually.Explained(t, 120*time.Second, "the rollout resumed and finished", func() (bool, string) {
		allA, _ := e.count("class-a")
		allB, runB := e.count("class-b")
		return allA == 0 && allB == 6 && runB == 6, fmt.Sprintf("class-a %d, class-b %d (%d Running)", allA, allB, runB)
	})
}

// TestHaltAfterFailuresKeepsTheOldMachines: with haltAfterFailures 2 and a class whose machines
// never join (the test fails each new machine, as the health timeout would), the rollout stops
// after 2 failures with a condition naming them, and the 6 old machines stay Running.
func TestHaltAfterFailuresKeepsTheOldMachines(t *testing.T) {
	e := newEnv(t)
	p := e.pool(func(p *machinistv1alpha1.PoolPolicy) { p.Spec.Rollout.HaltAfterFailures = 2 })
	e.life.Stuck("class-broken")
	var failed []string
	e.changeClass("class-broken")
	eventually.Explained(t, 60*time.Second, "2 new machines failed", func() (bool, string) {
		for _, m := range e.machines() {
			if m.Spec.Class.Name != "class-broken" || m.DeletionTimestamp != nil || m.Status.CurrentStatus.Phase != v1alpha1.MachinePending {
				continue
			}
			if len(failed) < 2 && !slices.Contains(failed, m.Name) {
				m.Status.CurrentStatus = v1alpha1.CurrentStatus{Phase: v1alpha1.MachineFailed, LastUpdateTime: metav1.Now()}
				m.Status.LastOperation.Description = "did not join within the health timeout"
				if err := e.c.Status().Update(context.Background(), &m); err == nil {
					failed = append(failed, m.Name)
				}
			}
		}
		return len(failed) == 2, fmt.Sprintf("failed %v", failed)
	})
	c := e.waitCondition(p, machinistv1alpha1.PoolProgressing, "Halted", append([]string{"haltAfterFailures"}, failed...)...)
	if c.Status != metav1.ConditionFalse {
		t.Errorf("Progressing %s: want False while halted", c.Status)
	}
	eventually.Explained(t, 60*time.Second, "no live machine of the broken class, the 6 old ones Running", func() (bool, string) {
		live := 0
		for _, m := range e.machines() {
			if m.Spec.Class.Name == "class-broken" && m.DeletionTimestamp == nil {
				live++
			}
		}
		all, run := e.count("class-a")
		return live == 0 && all == 6 && run == 6, fmt.Sprintf("%d live class-broken, class-a %d (%d Running)", live, all, run)
	})
	if got := len(e.policy(p).Status.Rollout.Failures); got != 2 {
		t.Errorf("status records %d failures: want 2", got)
	}
}
