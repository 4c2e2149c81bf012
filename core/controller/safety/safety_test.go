package safety_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	testclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/safety"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/drivertest/memdriver"
	"github.com/machinist-io/machinist/core/registry"
	"github.com/machinist-io/machinist/harness/ctrltest"
	"github.com/machinist-io/machinist/internal/eventually"
	"github.com/machinist-io/machinist/providers/local"
)

func TestMain(m *testing.M) { ctrltest.Main(m) }

func fastSafety() safety.Options {
	o := safety.DefaultOptions()
	o.OrphanPeriod = 300 * time.Millisecond
	o.OrphanGracePeriod = 2 * time.Second
	o.OrphanMinInterval = 200 * time.Millisecond
	o.OvershootingPeriod = 300 * time.Millisecond
	o.APIServerStatusCheckPeriod = 300 * time.Millisecond
	o.APIServerStatusCheckTimeout = time.Second
	return o
}

// clockedSafety are the safety controller's defaults (orphan passes every 15m, a 10m grace
// period, API servers probed every minute, frozen after 30s unreachable) on a fake clock.
func clockedSafety() (safety.Options, *testclock.FakeClock) {
	clk := testclock.NewFakeClock(time.Now())
	o := safety.DefaultOptions()
	o.OvershootingPeriod = 300 * time.Millisecond
	o.Clock = clk
	return o, clk
}

// loopsWaiting waits until both loops of the safety controller, the API-server probe and the
// orphan collector, wait on the clock: a step then reaches both, and a pass that began has ended.
func loopsWaiting(t *testing.T, clk *testclock.FakeClock) {
	t.Helper()
	eventually.True(t, 30*time.Second, "the safety controller's loops waiting on the clock", func() bool { return clk.Waiters() >= 2 })
}

// orphanPass steps the clock by d once the loops wait, and waits until the orphan pass that
// follows (it lists the class's VMs) has ended.
func orphanPass(t *testing.T, clk *testclock.FakeClock, cloud *memdriver.Cloud, d time.Duration) {
	t.Helper()
	loopsWaiting(t, clk)
	lists := cloud.Calls(memdriver.MethodList)
	clk.Step(d)
	eventually.True(t, 30*time.Second, "an orphan pass", func() bool { return cloud.Calls(memdriver.MethodList) > lists })
	loopsWaiting(t, clk)
}

func memClass(e *ctrltest.Env, cloud *memdriver.Cloud) {
	e.Drivers.Set(memdriver.ProviderName, memdriver.New(cloud))
	e.Class("mem", memdriver.ProviderName, map[string]string{"cluster": e.NS, "role": "worker"}, "")
}

// TestOrphanVMsCollectedAfterGrace: a VM made straight in the cloud (no Machine) is deleted once
// the grace period has passed since a pass first saw it; the machine's own VM, the VM of a
// machine still being created and a VM of another cluster are never touched; a second VM
// carrying a live machine's name is reported on the machine, not deleted (deleting by that name
// could take the machine's VM).
func TestOrphanVMsCollectedAfterGrace(t *testing.T) {
	e := ctrltest.NewEnv(t)
	cloud := memdriver.NewCloud()
	memClass(e, cloud)

	kept := e.Name("kept")
	creating := e.Name("creating")
	// The machine being created: its VM exists (a create whose answer has not been recorded
	// yet), but GetMachineStatus keeps failing, so the machine has no providerID.
	cloud.Inject(memdriver.MethodStatus, memdriver.Fault{Code: driver.Unavailable, Machine: creating})
	cloud.Add(memdriver.VM{MachineName: creating, Cluster: e.NS, Role: "worker"})

	so, clk := clockedSafety()
	so.OrphanPeriod = 5 * time.Minute
	e.StartControllers(ctrltest.FastOptions(), false, &so)
	e.Machine(kept, "mem")
	m := e.WaitPhase(kept, v1alpha1.MachineAvailable, 30*time.Second)
	e.Machine(creating, "mem")
	e.WaitMachine(creating, 30*time.Second, "failing creation", func(m *v1alpha1.Machine) bool {
		return m != nil && m.Status.CurrentStatus.Phase == v1alpha1.MachineCrashLoopBackOff && cloud.Count(creating) == 1
	})

	loopsWaiting(t, clk) // the first pass, at the start, is over
	ghost := cloud.Add(memdriver.VM{MachineName: e.Name("ghost"), Cluster: e.NS, Role: "worker"})
	duplicate := cloud.Add(memdriver.VM{MachineName: kept, Cluster: e.NS, Role: "worker"})
	foreign := cloud.Add(memdriver.VM{MachineName: e.Name("ghost"), Cluster: "other-cluster", Role: "worker"})

	orphanPass(t, clk, cloud, so.OrphanPeriod) // sees the orphan
	orphanPass(t, clk, cloud, so.OrphanPeriod) // 5 of the 10 minutes of grace
	if _, ok := cloud.VM(ghost.ID); !ok {
		t.Fatal("orphan deleted within its grace period")
	}
	orphanPass(t, clk, cloud, so.OrphanPeriod) // the grace period is over
	if _, ok := cloud.VM(ghost.ID); ok {
		t.Fatal("orphan kept after its grace period")
	}
	eventually.True(t, 10*time.Second, "DuplicateVM event", func() bool { return slices.Contains(e.EventReasons(kept), "DuplicateVM") })
	if _, ok := cloud.VM(duplicate.ID); !ok {
		t.Fatal("the duplicate VM of a live machine was deleted")
	}
	if _, ok := cloud.VM(foreign.ID); !ok {
		t.Fatal("a VM of another cluster was deleted")
	}
	own := m.Spec.ProviderID[strings.LastIndex(m.Spec.ProviderID, "/")+1:]
	if _, ok := cloud.VM(own); !ok {
		t.Fatal("the machine's own VM was deleted")
	}
	if cloud.Count(creating) != 1 {
		t.Fatal("the VM of a machine still being created was deleted")
	}
	eventually.True(t, 10*time.Second, "OrphanVMDeleted event", func() bool {
		return slices.Contains(e.EventReasons("mem"), "OrphanVMDeleted")
	})
}

// TestOrphanDryRunAndCap: dry run reports and deletes nothing; the cap bounds a pass, and the
// rest goes in the passes that follow, OrphanMinInterval apart.
func TestOrphanDryRunAndCap(t *testing.T) {
	e := ctrltest.NewEnv(t)
	cloud := memdriver.NewCloud()
	memClass(e, cloud)
	var ids []string
	for i := range 3 {
		ids = append(ids, cloud.Add(memdriver.VM{MachineName: e.Name("ghost-" + string(rune('a'+i))), Cluster: e.NS, Role: "worker"}).ID)
	}
	so, clk := clockedSafety()
	so.OrphanGracePeriod = 0
	so.OrphanDryRun = true
	e.StartControllers(ctrltest.FastOptions(), false, &so)
	loopsWaiting(t, clk) // the first pass, at the start
	eventually.True(t, 30*time.Second, "OrphanVM report", func() bool { return slices.Contains(e.EventReasons("mem"), "OrphanVM") })
	orphanPass(t, clk, cloud, so.OrphanPeriod)
	for _, id := range ids {
		if _, ok := cloud.VM(id); !ok {
			t.Fatal("dry run deleted a VM")
		}
	}
	e.StopControllers()

	so.OrphanDryRun = false
	so.OrphanMaxDeletesPerPass = 1
	e.StartControllers(ctrltest.FastOptions(), false, &so)
	loopsWaiting(t, clk) // the first pass, capped
	if n := len(cloud.VMs()); n != 2 {
		t.Fatalf("%d VMs left after the first capped pass, want 2", n)
	}
	orphanPass(t, clk, cloud, so.OrphanMinInterval) // a capped pass is followed soon
	if n := len(cloud.VMs()); n != 1 {
		t.Fatalf("%d VMs left after the second capped pass, want 1", n)
	}
	orphanPass(t, clk, cloud, so.OrphanMinInterval)
	if n := len(cloud.VMs()); n != 0 {
		t.Fatalf("%d VMs left after the third capped pass, want 0", n)
	}
}

// TestAPIServerOutage: while the API server is stopped nothing is deleted and nothing fails.
// An orphan known before the outage survives it, however long past its grace period, and goes
// once the API server is back; a machine that was Unknown when the outage began is not Failed
// by a health timeout that ran during the outage: the safety controller resets it (MCM's text)
// and its health timeout starts afresh. The controllers share one fake clock.
func TestAPIServerOutage(t *testing.T) {
	e := ctrltest.NewEnv(t)
	ctx := context.Background()
	d, err := local.New(registry.Env{Target: e.Config, StateDir: t.TempDir(), Log: ctrltest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	e.Drivers.Set(local.ProviderName, d)
	e.Class("local", local.ProviderName, map[string]string{"cluster": e.NS, "heartbeatInterval": "1s", "nodeMonitorGracePeriod": "3s"}, "")
	cloud := memdriver.NewCloud()
	memClass(e, cloud)
	so, clk := clockedSafety()
	so.OrphanPeriod = time.Minute
	opts := ctrltest.FastOptions()
	opts.HealthTimeout = 30 * time.Minute
	opts.Clock = clk
	e.StartControllers(opts, true, &so)

	name := e.Name("m")
	e.Machine(name, "local")
	e.WaitPhase(name, v1alpha1.MachineRunning, 60*time.Second)
	if err := d.SetHeartbeat(ctx, name, false); err != nil {
		t.Fatal(err)
	}
	e.WaitPhase(name, v1alpha1.MachineUnknown, 30*time.Second)
	loopsWaiting(t, clk) // the first pass, at the start, is over
	ghost := cloud.Add(memdriver.VM{MachineName: e.Name("ghost"), Cluster: e.NS, Role: "worker"})
	orphanPass(t, clk, cloud, so.OrphanPeriod) // sees the orphan

	if err := ctrltest.ControlPlane.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	restarted := false
	defer func() {
		if !restarted {
			_ = ctrltest.ControlPlane.StartAPIServer(context.Background())
		}
	}()
	// While an API server does not answer, the probe runs every timeout/5.
	probe := func() {
		if clk.Waiters() >= 2 {
			clk.Step(so.APIServerStatusCheckTimeout / 5)
		}
	}
	eventually.True(t, time.Minute, "frozen", func() bool { probe(); return e.Safety.Frozen() })
	// Longer than the health timeout and four times the grace period.
	loopsWaiting(t, clk)
	clk.Step(opts.HealthTimeout + 4*so.OrphanGracePeriod)
	loopsWaiting(t, clk)
	if _, ok := cloud.VM(ghost.ID); !ok {
		t.Fatal("an orphan was deleted while the API server was unreachable")
	}
	if !e.Safety.Frozen() {
		t.Fatal("the machine controller is not frozen while the API server is down")
	}
	sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if err := ctrltest.ControlPlane.StartAPIServer(sctx); err != nil {
		t.Fatal(err)
	}
	restarted = true

	eventually.True(t, 90*time.Second, "unfrozen", func() bool { probe(); return !e.Safety.Frozen() })
	eventually.True(t, 30*time.Second, "HealthTimeoutReset event", func() bool {
		return slices.Contains(e.EventReasons(name), "HealthTimeoutReset")
	})
	if m := e.Get(name); m.Status.CurrentStatus.Phase == v1alpha1.MachineFailed {
		t.Fatalf("machine failed by a health timeout that ran while the API server was down: %s", ctrltest.Describe(m))
	}
	orphanPass(t, clk, cloud, so.OrphanPeriod)
	if _, ok := cloud.VM(ghost.ID); ok {
		t.Fatal("orphan kept after the API server came back")
	}
	// Still unhealthy: Unknown again, and after a fresh health timeout it is replaced after all.
	e.Touch(name)
	e.WaitPhase(name, v1alpha1.MachineUnknown, 30*time.Second)
	clk.Step(opts.HealthTimeout + time.Minute)
	e.Touch(name)
	e.WaitPhase(name, v1alpha1.MachineFailed, 60*time.Second)
}

// TestOvershootFreeze: a MachineSet with too many machines is frozen (label and condition, also
// on its deployment), unfrozen once back under the limit, and a manual unfreeze holds until the
// set grows further.
func TestOvershootFreeze(t *testing.T) {
	e := ctrltest.NewEnv(t)
	cloud := memdriver.NewCloud()
	memClass(e, cloud)
	e.StartControllers(ctrltest.FastOptions(), false, ptr.To(fastSafety()))
	ctx := context.Background()

	// Standalone set of 1: limit 2×1 + safety-up 2 = 4, unfreeze at ≤ 3.
	ms := &v1alpha1.MachineSet{ObjectMeta: metav1.ObjectMeta{Name: "solo"}, Spec: v1alpha1.MachineSetSpec{Replicas: 1}}
	e.Create(ms)
	for i := range 4 {
		ownedMachine(e, ms, e.Name("solo-"+string(rune('a'+i))))
	}
	waitFrozen(t, e, "solo", true, safety.ReasonOvershooting)
	eventually.True(t, 10*time.Second, "FrozeMachineSet event", func() bool { return slices.Contains(e.EventReasons("solo"), "FrozeMachineSet") })

	e.DeleteMachine(e.Name("solo-a"))
	e.DeleteMachine(e.Name("solo-b"))
	waitFrozen(t, e, "solo", false, safety.ReasonUndershooting)

	// Frozen again, then unfrozen by hand: it stays unfrozen at that size.
	ownedMachine(e, ms, e.Name("solo-e"))
	ownedMachine(e, ms, e.Name("solo-f"))
	waitFrozen(t, e, "solo", true, safety.ReasonOvershooting)
	cur := &v1alpha1.MachineSet{}
	if err := e.C.Get(ctx, e.Key("solo"), cur); err != nil {
		t.Fatal(err)
	}
	cur.Annotations = map[string]string{v1alpha1.AnnotationUnfreeze: "true"}
	if err := e.C.Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
	waitFrozen(t, e, "solo", false, safety.ReasonUnfrozen)
	time.Sleep(time.Second)
	if err := e.C.Get(ctx, e.Key("solo"), cur); err != nil {
		t.Fatal(err)
	}
	if safetyFrozen(cur) || cur.Annotations[v1alpha1.AnnotationUnfreeze] != "" {
		t.Fatalf("manual unfreeze did not hold or its annotation stayed: labels %v annotations %v", cur.Labels, cur.Annotations)
	}
	ownedMachine(e, ms, e.Name("solo-g"))
	waitFrozen(t, e, "solo", true, safety.ReasonOvershooting)

	// A set of a deployment (replicas 2, maxSurge 1): limit 2 + 1 + 2 = 5; the deployment is
	// labelled too, and an unfreeze on the deployment unfreezes its sets.
	surge := intstr.FromInt32(1)
	mcd := &v1alpha1.MachineDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: "pool"},
		Spec: v1alpha1.MachineDeploymentSpec{Replicas: 2, Strategy: v1alpha1.MachineDeploymentStrategy{
			RollingUpdate: &v1alpha1.RollingUpdateMachineDeployment{UpdateConfiguration: v1alpha1.UpdateConfiguration{MaxSurge: &surge}}}},
	}
	e.Create(mcd)
	yes := true
	owned := &v1alpha1.MachineSet{ObjectMeta: metav1.ObjectMeta{Name: "pool-abc", OwnerReferences: []metav1.OwnerReference{{
		APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "MachineDeployment", Name: mcd.Name, UID: mcd.UID, Controller: &yes}}},
		Spec: v1alpha1.MachineSetSpec{Replicas: 2}}
	e.Create(owned)
	for i := range 4 {
		ownedMachine(e, owned, e.Name("pool-"+string(rune('a'+i))))
	}
	time.Sleep(time.Second)
	if err := e.C.Get(ctx, e.Key("pool-abc"), cur); err != nil {
		t.Fatal(err)
	}
	if safetyFrozen(cur) {
		t.Fatal("4 machines froze a set whose limit is 5")
	}
	ownedMachine(e, owned, e.Name("pool-e"))
	waitFrozen(t, e, "pool-abc", true, safety.ReasonOvershooting)
	d := &v1alpha1.MachineDeployment{}
	eventually.True(t, 10*time.Second, "deployment labelled", func() bool {
		return e.C.Get(ctx, e.Key("pool"), d) == nil && d.Labels[v1alpha1.LabelFreeze] == "True"
	})
	d.Annotations = map[string]string{v1alpha1.AnnotationUnfreeze: "true"}
	if err := e.C.Update(ctx, d); err != nil {
		t.Fatal(err)
	}
	waitFrozen(t, e, "pool-abc", false, safety.ReasonUnfrozen)
	eventually.True(t, 10*time.Second, "deployment unlabelled", func() bool {
		return e.C.Get(ctx, e.Key("pool"), d) == nil && d.Labels[v1alpha1.LabelFreeze] == "" && d.Annotations[v1alpha1.AnnotationUnfreeze] == ""
	})
}

func ownedMachine(e *ctrltest.Env, ms *v1alpha1.MachineSet, name string) {
	yes := true
	e.Machine(name, "mem", func(m *v1alpha1.Machine) {
		m.OwnerReferences = []metav1.OwnerReference{{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "MachineSet", Name: ms.Name, UID: ms.UID, Controller: &yes}}
	})
}

func safetyFrozen(ms *v1alpha1.MachineSet) bool {
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

func waitFrozen(t *testing.T, e *ctrltest.Env, name string, frozen bool, reason string) {
	t.Helper()
	waitFrozenWithin(t, e, 20*time.Second, name, frozen, reason)
}

func waitFrozenWithin(t *testing.T, e *ctrltest.Env, timeout time.Duration, name string, frozen bool, reason string) {
	t.Helper()
	ms := &v1alpha1.MachineSet{}
	eventually.True(t, timeout, name+" frozen="+map[bool]string{true: "true", false: "false"}[frozen], func() bool {
		if err := e.C.Get(context.Background(), e.Key(name), ms); err != nil {
			return false
		}
		if safetyFrozen(ms) != frozen {
			return false
		}
		for _, c := range ms.Status.Conditions {
			if c.Type == v1alpha1.MachineSetFrozen {
				want := v1alpha1.ConditionFalse
				if frozen {
					want = v1alpha1.ConditionTrue
				}
				return c.Status == want && c.Reason == reason && (ms.Labels[v1alpha1.LabelFreeze] == "True") == frozen
			}
		}
		return false
	})
}
