package machine_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	testclock "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/registry"
	"github.com/machinist-io/machinist/harness/ctrltest"
	"github.com/machinist-io/machinist/internal/eventually"
	"github.com/machinist-io/machinist/providers/local"
)

// localProvider opens the local provider for a test: machines become real Nodes whose agents
// heartbeat every second and turn Unknown 3s after their heartbeat stops.
func localProvider(t *testing.T, e *ctrltest.Env) *local.Driver {
	t.Helper()
	d, err := local.New(registry.Env{Target: e.Config, StateDir: t.TempDir(), Log: ctrltest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	e.Drivers.Set(local.ProviderName, d)
	e.Class("local", local.ProviderName, map[string]string{
		"cluster": e.NS, "heartbeatInterval": "1s", "nodeMonitorGracePeriod": "3s",
	}, "")
	return d
}

func vmExists(t *testing.T, e *ctrltest.Env, d driver.Driver, name string) bool {
	t.Helper()
	class := &v1alpha1.MachineClass{}
	if err := e.C.Get(context.Background(), e.Key("local"), class); err != nil {
		t.Fatal(err)
	}
	_, err := d.GetMachineStatus(context.Background(), &driver.GetMachineStatusRequest{
		Machine: &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.NS}}, MachineClass: class, Secret: &corev1.Secret{}})
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
	e := ctrltest.NewEnv(t)
	ctx := context.Background()
	drv := localProvider(t, e)
	clk := testclock.NewFakeClock(time.Now())
	opts := ctrltest.FastOptions()
	opts.HealthTimeout = 10 * time.Minute
	opts.Clock = clk
	e.StartControllers(opts, true, nil)

	names := []string{e.Name("a"), e.Name("b"), e.Name("c")}
	for _, n := range names {
		e.Machine(n, "local", func(m *v1alpha1.Machine) { m.Labels = map[string]string{v1alpha1.LabelMachineDeploymentName: "pool"} })
	}
	for _, n := range names {
		e.WaitPhase(n, v1alpha1.MachineRunning, 60*time.Second)
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
			if err := e.C.List(ctx, &list, client.InNamespace(e.NS)); err != nil {
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
		e.WaitPhase(n, v1alpha1.MachineUnknown, 30*time.Second)
	}
	clk.Step(11 * time.Minute) // past the health timeout of all three
	for _, n := range names {
		e.Touch(n)
	}
	first := waitOneFailed(t, e, names, 30*time.Second)
	var others []string
	for _, n := range names {
		if n != first {
			others = append(others, n)
		}
	}
	waitHeldBack(t, e, first, others)

	// The MachineSet would delete the Failed machine; once it is gone, the next may fail.
	e.DeleteMachine(first)
	e.WaitGone(first, 60*time.Second)
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
	m := e.WaitPhase(third, v1alpha1.MachineRunning, 30*time.Second)
	if !strings.Contains(m.Status.LastOperation.Description, "re-joined") {
		t.Fatalf("recovered machine: %s", ctrltest.Describe(m))
	}
	if got := maxReplacing.Load(); got != 1 {
		t.Fatalf("up to %d machines were replaced at once, want 1", got)
	}
}

// waitHeldBack waits until each of others, past its health timeout like first, reports that it
// stays Unknown while other machines of its deployment are replaced.
func waitHeldBack(t *testing.T, e *ctrltest.Env, first string, others []string) {
	t.Helper()
	for _, n := range others {
		m := e.WaitMachine(n, 30*time.Second, "held back while "+first+" is replaced", func(m *v1alpha1.Machine) bool {
			return m != nil && (m.Status.CurrentStatus.Phase != v1alpha1.MachineUnknown || strings.Contains(m.Status.LastOperation.Description, "other machines are getting replaced"))
		})
		if m.Status.CurrentStatus.Phase != v1alpha1.MachineUnknown {
			t.Fatalf("while %s is replaced, %s: %s", first, n, ctrltest.Describe(m))
		}
	}
}

func waitOneFailed(t *testing.T, e *ctrltest.Env, names []string, timeout time.Duration) string {
	t.Helper()
	var failed string
	eventually.True(t, timeout, "a Failed machine", func() bool {
		for _, n := range names {
			if m := e.Get(n); m != nil && m.Status.CurrentStatus.Phase == v1alpha1.MachineFailed {
				failed = n
				return true
			}
		}
		return false
	})
	m := e.Get(failed)
	if m.Status.LastOperation.Type != v1alpha1.MachineOperationHealthCheck || !strings.Contains(m.Status.LastOperation.Description, "Changing status to Failed") {
		t.Fatalf("failed machine: %s", ctrltest.Describe(m))
	}
	return failed
}

// TestDeletionDrainRespectsPDBAndResumesAfterRestart: deleting a machine drains its node; a
// budget that allows no disruption holds the drain (the machine, its VM and the protected pods
// stay), a controller restart in the middle resumes the same step, and once the budget allows
// it the deletion completes.
func TestDeletionDrainRespectsPDBAndResumesAfterRestart(t *testing.T) {
	e := ctrltest.NewEnv(t)
	ctx := context.Background()
	drv := localProvider(t, e)
	e.StartControllers(ctrltest.FastOptions(), true, nil)
	name := e.Name("stateful")
	e.Machine(name, "local")
	e.WaitPhase(name, v1alpha1.MachineRunning, 60*time.Second)

	pod(t, e, name, "db-0", map[string]string{"app": "db"}, nil)
	pod(t, e, name, "db-1", map[string]string{"app": "db"}, nil)
	pod(t, e, name, "web", map[string]string{"app": "web"}, nil)
	pod(t, e, name, "agent", nil, func(p *corev1.Pod) {
		yes := true
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "agent", UID: "ds-uid", Controller: &yes}}
	})
	pdb := budget(t, e, "db", 2, policyv1.PodDisruptionBudgetStatus{ExpectedPods: 3, CurrentHealthy: 2, DesiredHealthy: 2})

	e.DeleteMachine(name)
	m := e.WaitMachine(name, 30*time.Second, "drain step", func(m *v1alpha1.Machine) bool {
		return m != nil && strings.Contains(m.Annotations["machinist.io/deletion"], `"step":"InitiateDrain"`)
	})
	stepBefore := m.Annotations["machinist.io/deletion"]
	eventually.True(t, 20*time.Second, "web evicted", func() bool { return !slices.Contains(podNames(t, e), "web") })
	e.WaitMachine(name, 30*time.Second, "the drain reporting the budget", func(m *v1alpha1.Machine) bool {
		return m != nil && strings.Contains(m.Status.LastOperation.Description, "Drain waiting - eviction of pod "+e.NS+"/db-")
	})
	if left := podNames(t, e); !slices.Contains(left, "db-0") || !slices.Contains(left, "db-1") || !slices.Contains(left, "agent") {
		t.Fatalf("pods left while the budget allows nothing: %v", left)
	}
	if !vmExists(t, e, drv, name) {
		t.Fatal("VM deleted before the drain finished")
	}
	if m := e.Get(name); m.Status.CurrentStatus.Phase != v1alpha1.MachineTerminating || !strings.HasSuffix(m.Status.LastOperation.Description, "Initiate node drain") ||
		!strings.Contains(m.Status.LastOperation.Description, "Drain waiting - eviction of pod "+e.NS+"/db-") || m.Status.LastOperation.State != v1alpha1.MachineStateProcessing {
		t.Fatalf("draining machine does not say what it waits for: %s", ctrltest.Describe(m))
	}
	node, err := e.CS.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil || !node.Spec.Unschedulable || !hasCondition(node, v1alpha1.NodeConditionTerminating, v1alpha1.NodeTerminationReasonScaleDown) {
		t.Fatalf("node not cordoned or not marked Terminating: %v", err)
	}

	// A controller restart in the middle of the drain resumes the same step.
	e.StopControllers()
	e.StartControllers(ctrltest.FastOptions(), true, nil)
	time.Sleep(time.Second)
	if m := e.Get(name); m == nil || m.Annotations["machinist.io/deletion"] != stepBefore {
		t.Fatalf("after a restart the deletion state changed: was %s, now %s", stepBefore, ctrltest.Describe(m))
	}

	setBudgetStatus(t, e, pdb, policyv1.PodDisruptionBudgetStatus{ExpectedPods: 3, CurrentHealthy: 3, DesiredHealthy: 2, DisruptionsAllowed: 2})
	e.WaitGone(name, 60*time.Second)
	if vmExists(t, e, drv, name) {
		t.Fatal("VM left behind")
	}
	if left := podNames(t, e); len(left) != 1 || left[0] != "agent" {
		t.Fatalf("pods left after the drain: %v (only the DaemonSet pod may stay)", left)
	}
	eventually.True(t, 10*time.Second, "node deleted", func() bool {
		_, err := e.CS.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	e.WaitEventReasons(name, 30*time.Second, "Drained")
}

// TestMisconfiguredPDBReportedThenForced: a budget that can never allow an eviction shows up in
// lastOperation at once (errorCode FailedPrecondition), and the force-deletion label gets the
// machine deleted anyway.
func TestMisconfiguredPDBReportedThenForced(t *testing.T) {
	e := ctrltest.NewEnv(t)
	drv := localProvider(t, e)
	e.StartControllers(ctrltest.FastOptions(), true, nil)
	name := e.Name("blocked")
	e.Machine(name, "local")
	e.WaitPhase(name, v1alpha1.MachineRunning, 60*time.Second)
	pod(t, e, name, "db-0", map[string]string{"app": "db"}, nil)
	budget(t, e, "db", 1, policyv1.PodDisruptionBudgetStatus{ExpectedPods: 1, CurrentHealthy: 1, DesiredHealthy: 1})

	start := time.Now()
	e.DeleteMachine(name)
	m := e.WaitMachine(name, 20*time.Second, "misconfigured budget report", func(m *v1alpha1.Machine) bool {
		return m != nil && strings.Contains(m.Status.LastOperation.Description, "is misconfigured and requires zero voluntary evictions")
	})
	if m.Status.LastOperation.ErrorCode != "FailedPrecondition" || m.Status.LastOperation.State != v1alpha1.MachineStateFailed {
		t.Fatalf("misconfigured budget: %s", ctrltest.Describe(m))
	}
	if took := time.Since(start); took > 15*time.Second {
		t.Fatalf("reported after %s", took)
	}
	if !vmExists(t, e, drv, name) {
		t.Fatal("VM deleted although the drain is blocked")
	}

	// As `kubectl label` does: a patch of the label alone (the controller writes the machine
	// meanwhile, so an update of the object read before would conflict).
	patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:"True"}}}`, v1alpha1.LabelForceDeletion)
	if err := e.C.Patch(context.Background(), e.Get(name), client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	e.WaitGone(name, 60*time.Second)
	if vmExists(t, e, drv, name) {
		t.Fatal("VM left behind")
	}
	if slices.Contains(podNames(t, e), "db-0") {
		t.Fatal("force drain left the pod")
	}
}

// TestDeletingNodeDeletesMachine: a user deleting the Node gets the machine (and its VM) deleted.
func TestDeletingNodeDeletesMachine(t *testing.T) {
	e := ctrltest.NewEnv(t)
	drv := localProvider(t, e)
	e.StartControllers(ctrltest.FastOptions(), true, nil)
	name := e.Name("n")
	e.Machine(name, "local")
	e.WaitPhase(name, v1alpha1.MachineRunning, 60*time.Second)
	if err := e.CS.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.WaitGone(name, 60*time.Second)
	if vmExists(t, e, drv, name) {
		t.Fatal("VM left behind")
	}
	eventually.True(t, 10*time.Second, "node gone", func() bool {
		_, err := e.CS.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}

func pod(t *testing.T, e *ctrltest.Env, node, name string, labels map[string]string, mutate func(*corev1.Pod)) {
	t.Helper()
	ctx := context.Background()
	zero := int64(0)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.NS, Labels: labels},
		Spec:       corev1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: &zero, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}
	if mutate != nil {
		mutate(p)
	}
	if _, err := e.CS.CoreV1().Pods(e.NS).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The local provider's node agent runs the pod too and may write its status first.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := e.CS.CoreV1().Pods(e.NS).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Status.Phase = corev1.PodRunning
		cur.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		_, err = e.CS.CoreV1().Pods(e.NS).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

func podNames(t *testing.T, e *ctrltest.Env) []string {
	t.Helper()
	list, err := e.CS.CoreV1().Pods(e.NS).List(context.Background(), metav1.ListOptions{})
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
func budget(t *testing.T, e *ctrltest.Env, app string, minAvailable int, st policyv1.PodDisruptionBudgetStatus) *policyv1.PodDisruptionBudget {
	t.Helper()
	mina := intstr.FromInt(minAvailable)
	pdb, err := e.CS.PolicyV1().PodDisruptionBudgets(e.NS).Create(context.Background(), &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: app},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: &mina, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	setBudgetStatus(t, e, pdb, st)
	return pdb
}

func setBudgetStatus(t *testing.T, e *ctrltest.Env, pdb *policyv1.PodDisruptionBudget, st policyv1.PodDisruptionBudgetStatus) {
	t.Helper()
	ctx := context.Background()
	for range 10 {
		cur, err := e.CS.PolicyV1().PodDisruptionBudgets(e.NS).Get(ctx, pdb.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		st.ObservedGeneration = cur.Generation
		cur.Status = st
		if _, err = e.CS.PolicyV1().PodDisruptionBudgets(e.NS).UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err == nil {
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
