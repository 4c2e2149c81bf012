package machine_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/registry"
	"github.com/machinist-io/machinist/providers/local"
)

// localProvider opens the local provider for a test: machines become real Nodes whose agents
// heartbeat every second and turn Unknown 3s after their heartbeat stops.
func localProvider(t *testing.T, e *env) *local.Driver {
	t.Helper()
	d, err := local.New(registry.Env{Target: e.cfg, StateDir: t.TempDir(), Log: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	e.drivers.set(local.ProviderName, d)
	e.class("local", local.ProviderName, map[string]string{
		"cluster": e.ns, "heartbeatInterval": "1s", "nodeMonitorGracePeriod": "3s",
	}, "")
	return d
}

func vmExists(t *testing.T, e *env, d driver.Driver, name string) bool {
	t.Helper()
	class := &v1alpha1.MachineClass{}
	if err := e.c.Get(context.Background(), keyOf(e, "local"), class); err != nil {
		t.Fatal(err)
	}
	_, err := d.GetMachineStatus(context.Background(), &driver.GetMachineStatusRequest{
		Machine: &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns}}, MachineClass: class, Secret: &corev1.Secret{}})
	if driver.IsCode(err, driver.NotFound) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return true
}

// TestUnhealthyMachinesReplacedOneAtATime: three machines of one MachineDeployment lose their
// heartbeat together (an outage). They go Unknown, and after the health timeout only one at a
// time is marked Failed: the next one only after the first is gone. A machine whose heartbeat
// comes back is Running again.
func TestUnhealthyMachinesReplacedOneAtATime(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	drv := localProvider(t, e)
	opts := fastOptions()
	opts.HealthTimeout = 2 * time.Second
	e.startControllers(opts, true, nil)

	names := []string{e.name("a"), e.name("b"), e.name("c")}
	for _, n := range names {
		e.machine(n, "local", func(m *v1alpha1.Machine) { m.Labels = map[string]string{v1alpha1.LabelMachineDeploymentName: "pool"} })
	}
	for _, n := range names {
		e.waitPhase(n, v1alpha1.MachineRunning, 60*time.Second)
	}

	// Watch continuously: never more than one machine Failed or Terminating.
	var maxReplacing atomic.Int32
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(30 * time.Millisecond):
			}
			var list v1alpha1.MachineList
			if err := e.c.List(ctx, &list, inNS(e)); err != nil {
				continue
			}
			n := int32(0)
			for _, m := range list.Items {
				if p := m.Status.CurrentStatus.Phase; p == v1alpha1.MachineFailed || p == v1alpha1.MachineTerminating || m.DeletionTimestamp != nil {
					n++
				}
			}
			if n > maxReplacing.Load() {
				maxReplacing.Store(n)
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	for _, n := range names {
		if err := drv.SetHeartbeat(ctx, n, false); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range names {
		e.waitPhase(n, v1alpha1.MachineUnknown, 30*time.Second)
	}
	first := waitOneFailed(t, e, names, 30*time.Second)
	time.Sleep(2 * time.Second) // two more health timeouts: the others must stay Unknown
	var others []string
	for _, n := range names {
		if n == first {
			continue
		}
		others = append(others, n)
		m := e.get(n)
		if m.Status.CurrentStatus.Phase != v1alpha1.MachineUnknown || !strings.Contains(m.Status.LastOperation.Description, "other machines are getting replaced") {
			t.Fatalf("while %s is replaced, %s: %s", first, n, describe(m))
		}
	}

	// The MachineSet would delete the Failed machine; once it is gone, the next may fail.
	e.deleteMachine(first)
	e.waitGone(first, 60*time.Second)
	if vmExists(t, e, drv, first) {
		t.Fatalf("VM of %s left behind", first)
	}
	second := waitOneFailed(t, e, others, 30*time.Second)
	var third string
	for _, n := range others {
		if n != second {
			third = n
		}
	}
	// The third one's heartbeat comes back: Running again.
	if err := drv.SetHeartbeat(ctx, third, true); err != nil {
		t.Fatal(err)
	}
	m := e.waitPhase(third, v1alpha1.MachineRunning, 30*time.Second)
	if !strings.Contains(m.Status.LastOperation.Description, "re-joined") {
		t.Fatalf("recovered machine: %s", describe(m))
	}
	if got := maxReplacing.Load(); got != 1 {
		t.Fatalf("up to %d machines were replaced at once, want 1", got)
	}
}

func waitOneFailed(t *testing.T, e *env, names []string, timeout time.Duration) string {
	t.Helper()
	var failed string
	eventuallyTrue(t, timeout, "a Failed machine", func() bool {
		for _, n := range names {
			if m := e.get(n); m != nil && m.Status.CurrentStatus.Phase == v1alpha1.MachineFailed {
				failed = n
				return true
			}
		}
		return false
	})
	m := e.get(failed)
	if m.Status.LastOperation.Type != v1alpha1.MachineOperationHealthCheck || !strings.Contains(m.Status.LastOperation.Description, "Changing status to Failed") {
		t.Fatalf("failed machine: %s", describe(m))
	}
	return failed
}

// TestDeletionDrainRespectsPDBAndResumesAfterRestart: deleting a machine drains its node; a
// budget that allows no disruption holds the drain (the machine, its VM and the protected pods
// stay), a controller restart in the middle resumes the same step, and once the budget allows
// it the deletion completes.
func TestDeletionDrainRespectsPDBAndResumesAfterRestart(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	drv := localProvider(t, e)
	e.startControllers(fastOptions(), true, nil)
	name := e.name("stateful")
	e.machine(name, "local")
	e.waitPhase(name, v1alpha1.MachineRunning, 60*time.Second)

	pod(t, e, name, "db-0", map[string]string{"app": "db"}, nil)
	pod(t, e, name, "db-1", map[string]string{"app": "db"}, nil)
	pod(t, e, name, "web", map[string]string{"app": "web"}, nil)
	pod(t, e, name, "agent", nil, func(p *corev1.Pod) {
		yes := true
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "agent", UID: "ds-uid", Controller: &yes}}
	})
	pdb := budget(t, e, "db", 2, policyv1.PodDisruptionBudgetStatus{ExpectedPods: 3, CurrentHealthy: 2, DesiredHealthy: 2})

	e.deleteMachine(name)
	m := e.waitMachine(name, 30*time.Second, "drain step", func(m *v1alpha1.Machine) bool {
		return m != nil && strings.Contains(m.Annotations["machinist.io/deletion"], `"step":"InitiateDrain"`)
	})
	stepBefore := m.Annotations["machinist.io/deletion"]
	eventuallyTrue(t, 20*time.Second, "web evicted", func() bool { return !contains(podNames(t, e), "web") })
	time.Sleep(time.Second)
	if left := podNames(t, e); !contains(left, "db-0") || !contains(left, "db-1") || !contains(left, "agent") {
		t.Fatalf("pods left while the budget allows nothing: %v", left)
	}
	if !vmExists(t, e, drv, name) {
		t.Fatal("VM deleted before the drain finished")
	}
	if m := e.get(name); m.Status.CurrentStatus.Phase != v1alpha1.MachineTerminating || !strings.Contains(m.Status.LastOperation.Description, "Initiate node drain") {
		t.Fatalf("draining machine: %s", describe(m))
	}
	node, err := e.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil || !node.Spec.Unschedulable || !hasCondition(node, v1alpha1.NodeConditionTerminating, v1alpha1.NodeTerminationReasonScaleDown) {
		t.Fatalf("node not cordoned or not marked Terminating: %v", err)
	}

	// A controller restart in the middle of the drain resumes the same step.
	e.stopControllers()
	e.startControllers(fastOptions(), true, nil)
	time.Sleep(time.Second)
	if m := e.get(name); m == nil || m.Annotations["machinist.io/deletion"] != stepBefore {
		t.Fatalf("after a restart the deletion state changed: was %s, now %s", stepBefore, describe(m))
	}

	setBudgetStatus(t, e, pdb, policyv1.PodDisruptionBudgetStatus{ExpectedPods: 3, CurrentHealthy: 3, DesiredHealthy: 2, DisruptionsAllowed: 2})
	e.waitGone(name, 60*time.Second)
	if vmExists(t, e, drv, name) {
		t.Fatal("VM left behind")
	}
	if left := podNames(t, e); len(left) != 1 || left[0] != "agent" {
		t.Fatalf("pods left after the drain: %v (only the DaemonSet pod may stay)", left)
	}
	eventuallyTrue(t, 10*time.Second, "node deleted", func() bool {
		_, err := e.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	if !contains(e.eventReasons(name), "Drained") {
		t.Fatalf("no Drained event: %v", e.eventReasons(name))
	}
}

// TestMisconfiguredPDBReportedThenForced: a budget that can never allow an eviction shows up in
// lastOperation at once (errorCode FailedPrecondition), and the force-deletion label gets the
// machine deleted anyway.
func TestMisconfiguredPDBReportedThenForced(t *testing.T) {
	e := newEnv(t)
	drv := localProvider(t, e)
	e.startControllers(fastOptions(), true, nil)
	name := e.name("blocked")
	e.machine(name, "local")
	e.waitPhase(name, v1alpha1.MachineRunning, 60*time.Second)
	pod(t, e, name, "db-0", map[string]string{"app": "db"}, nil)
	budget(t, e, "db", 1, policyv1.PodDisruptionBudgetStatus{ExpectedPods: 1, CurrentHealthy: 1, DesiredHealthy: 1})

	start := time.Now()
	e.deleteMachine(name)
	m := e.waitMachine(name, 20*time.Second, "misconfigured budget report", func(m *v1alpha1.Machine) bool {
		return m != nil && strings.Contains(m.Status.LastOperation.Description, "is misconfigured and requires zero voluntary evictions")
	})
	if m.Status.LastOperation.ErrorCode != "FailedPrecondition" || m.Status.LastOperation.State != v1alpha1.MachineStateFailed {
		t.Fatalf("misconfigured budget: %s", describe(m))
	}
	if took := time.Since(start); took > 15*time.Second {
		t.Fatalf("reported after %s", took)
	}
	if !vmExists(t, e, drv, name) {
		t.Fatal("VM deleted although the drain is blocked")
	}

	cur := e.get(name)
	cur.Labels[v1alpha1.LabelForceDeletion] = "True"
	if err := e.c.Update(context.Background(), cur); err != nil {
		t.Fatal(err)
	}
	e.waitGone(name, 60*time.Second)
	if vmExists(t, e, drv, name) {
		t.Fatal("VM left behind")
	}
	if contains(podNames(t, e), "db-0") {
		t.Fatal("force drain left the pod")
	}
}

// TestDeletingNodeDeletesMachine: a user deleting the Node gets the machine (and its VM) deleted.
func TestDeletingNodeDeletesMachine(t *testing.T) {
	e := newEnv(t)
	drv := localProvider(t, e)
	e.startControllers(fastOptions(), true, nil)
	name := e.name("n")
	e.machine(name, "local")
	e.waitPhase(name, v1alpha1.MachineRunning, 60*time.Second)
	if err := e.cs.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitGone(name, 60*time.Second)
	if vmExists(t, e, drv, name) {
		t.Fatal("VM left behind")
	}
	eventuallyTrue(t, 10*time.Second, "node gone", func() bool {
		_, err := e.cs.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}

func pod(t *testing.T, e *env, node, name string, labels map[string]string, mutate func(*corev1.Pod)) {
	t.Helper()
	ctx := context.Background()
	zero := int64(0)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns, Labels: labels},
		Spec:       corev1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: &zero, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}
	if mutate != nil {
		mutate(p)
	}
	p, err := e.cs.CoreV1().Pods(e.ns).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	if _, err := e.cs.CoreV1().Pods(e.ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func podNames(t *testing.T, e *env) []string {
	t.Helper()
	list, err := e.cs.CoreV1().Pods(e.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range list.Items {
		out = append(out, p.Name)
	}
	return out
}

// budget creates a PodDisruptionBudget over app=<app> and sets its status, playing the
// disruption controller this control plane does not run.
func budget(t *testing.T, e *env, app string, minAvailable int, st policyv1.PodDisruptionBudgetStatus) *policyv1.PodDisruptionBudget {
	t.Helper()
	mina := intstr.FromInt(minAvailable)
	pdb, err := e.cs.PolicyV1().PodDisruptionBudgets(e.ns).Create(context.Background(), &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: app},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: &mina, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	setBudgetStatus(t, e, pdb, st)
	return pdb
}

func setBudgetStatus(t *testing.T, e *env, pdb *policyv1.PodDisruptionBudget, st policyv1.PodDisruptionBudgetStatus) {
	t.Helper()
	ctx := context.Background()
	for range 10 {
		cur, err := e.cs.PolicyV1().PodDisruptionBudgets(e.ns).Get(ctx, pdb.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		st.ObservedGeneration = cur.Generation
		cur.Status = st
		if _, err = e.cs.PolicyV1().PodDisruptionBudgets(e.ns).UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err == nil {
			return
		} else if !apierrors.IsConflict(err) {
			t.Fatal(err)
		}
	}
	t.Fatal("could not set the budget's status")
}

func hasCondition(n *corev1.Node, t, reason string) bool {
	for _, c := range n.Status.Conditions {
		if string(c.Type) == t && c.Status == corev1.ConditionTrue && c.Reason == reason {
			return true
		}
	}
	return false
}
