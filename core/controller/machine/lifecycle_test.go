package machine_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testclock "k8s.io/utils/clock/testing"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/drivertest/memdriver"
	"github.com/machinist-io/machinist/harness/ctrltest"
)

// TestCredentialsSecretOverlay: the driver gets the class's secretRef data overlaid by its
// credentialsSecretRef (the credentials secret wins).
func TestCredentialsSecretOverlay(t *testing.T) {
	e := ctrltest.NewEnv(t)
	cloud := memdriver.NewCloud()
	cloud.SetCredentials(map[string]string{"token": "right"})
	e.Drivers.Set(memdriver.ProviderName, memdriver.New(cloud))
	e.Secret("userdata", map[string]string{"userData": "hello", "token": "stale"})
	e.Secret("creds", map[string]string{"token": "right"})
	cl := e.Class("mem", "mem", memSpec(e), "userdata")
	cur := &v1alpha1.MachineClass{}
	if err := e.C.Get(context.Background(), e.Key(cl.Name), cur); err != nil {
		t.Fatal(err)
	}
	cur.CredentialsSecretRef = &corev1.SecretReference{Name: "creds"} // namespace defaults to the class's
	if err := e.C.Update(context.Background(), cur); err != nil {
		t.Fatal(err)
	}
	e.StartControllers(ctrltest.FastOptions(), false, nil)
	name := e.Name("m")
	e.Machine(name, "mem")
	e.WaitPhase(name, v1alpha1.MachineAvailable, 30*time.Second)
	if vms := cloud.VMs(); len(vms) != 1 || vms[0].UserData != "hello" {
		t.Fatalf("VMs %+v", vms)
	}
}

// TestPendingUntilCriticalComponentsReady: a healthy node that still carries the
// critical-components-not-ready taint keeps its machine Pending.
func TestPendingUntilCriticalComponentsReady(t *testing.T) {
	e := ctrltest.NewEnv(t)
	ctx := context.Background()
	cloud := memdriver.NewCloud()
	e.Drivers.Set(memdriver.ProviderName, memdriver.New(cloud))
	e.Class("mem", "mem", memSpec(e), "")
	e.StartControllers(ctrltest.FastOptions(), true, nil)
	name := e.Name("m")
	e.Machine(name, "mem")
	m := e.WaitPhase(name, v1alpha1.MachinePending, 30*time.Second)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{
		ProviderID: m.Spec.ProviderID,
		Taints:     []corev1.Taint{{Key: v1alpha1.TaintCriticalComponentsNotReady, Effect: corev1.TaintEffectNoSchedule}},
	}}
	if _, err := e.CS.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.ReadyNode(name, m.Spec.ProviderID, corev1.ConditionTrue)
	// The health check copies the node's conditions in the same write that would move the phase.
	m = e.WaitMachine(name, 30*time.Second, "the node's Ready condition copied", func(m *v1alpha1.Machine) bool {
		for _, c := range m.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return true
			}
		}
		return false
	})
	if p := m.Status.CurrentStatus.Phase; p != v1alpha1.MachinePending {
		t.Fatalf("phase %s with the critical-components taint on the node", p)
	}
	patchNode(t, e, name, func(n *corev1.Node) {
		var keep []corev1.Taint
		for _, tt := range n.Spec.Taints {
			if tt.Key != v1alpha1.TaintCriticalComponentsNotReady {
				keep = append(keep, tt)
			}
		}
		n.Spec.Taints = keep
	})
	e.WaitPhase(name, v1alpha1.MachineRunning, 30*time.Second)
}

// TestNeverJoinedIsNotDrained: deleting a machine whose node never registered skips the drain.
func TestNeverJoinedIsNotDrained(t *testing.T) {
	e := ctrltest.NewEnv(t)
	cloud := memdriver.NewCloud()
	e.Drivers.Set(memdriver.ProviderName, memdriver.New(cloud))
	e.Class("mem", "mem", memSpec(e), "")
	e.StartControllers(ctrltest.FastOptions(), true, nil)
	name := e.Name("m")
	e.Machine(name, "mem")
	e.WaitPhase(name, v1alpha1.MachinePending, 30*time.Second)
	e.DeleteMachine(name)
	e.WaitGone(name, 30*time.Second)
	if cloud.Count(name) != 0 {
		t.Fatal("VM left behind")
	}
	// VMDeleted is the deletion's last event: a drain would have come before it.
	if r := e.WaitEventReasons(name, 30*time.Second, "VMDeleted"); slices.Contains(r, "Drained") || slices.Contains(r, "ForceDrain") {
		t.Fatalf("events of a machine that never joined: %v", r)
	}
}

// TestNotReadyNodeDrainedForcefully: a node NotReady for longer than ForceDrainNotReadyAfter is
// drained forcefully, so a budget cannot hold the deletion of a dead node.
func TestNotReadyNodeDrainedForcefully(t *testing.T) {
	e := ctrltest.NewEnv(t)
	ctx := context.Background()
	drv := localProvider(t, e)
	clk := testclock.NewFakeClock(time.Now())
	opts := ctrltest.FastOptions()
	opts.Clock = clk
	opts.ForceDrainNotReadyAfter = 5 * time.Minute
	// Neither the drain timeout nor the health timeout may end the wait first.
	opts.DrainTimeout, opts.HealthTimeout = time.Hour, time.Hour
	e.StartControllers(opts, true, nil)
	name := e.Name("dead")
	e.Machine(name, "local")
	e.WaitPhase(name, v1alpha1.MachineRunning, 60*time.Second)
	pod(t, e, name, "db-0", map[string]string{"app": "db"}, nil)
	budget(t, e, "db", 2, policyv1.PodDisruptionBudgetStatus{ExpectedPods: 2, CurrentHealthy: 1, DesiredHealthy: 2})
	if err := drv.SetHeartbeat(ctx, name, false); err != nil {
		t.Fatal(err)
	}
	e.WaitPhase(name, v1alpha1.MachineUnknown, 30*time.Second)
	clk.SetTime(time.Now().Add(6 * time.Minute)) // NotReady for longer than 5m
	e.DeleteMachine(name)
	e.WaitGone(name, 60*time.Second)
	e.WaitEventReasons(name, 30*time.Second, "ForceDrain")
	if slices.Contains(podNames(t, e), "db-0") {
		t.Fatal("pod left on a deleted node")
	}
	for _, ev := range eventNotes(t, e, name, "ForceDrain") {
		if !strings.Contains(ev, "node not ready for") {
			t.Fatalf("force reason: %q", ev)
		}
	}
}

func eventNotes(t *testing.T, e *ctrltest.Env, name, reason string) []string {
	t.Helper()
	list, err := e.CS.EventsV1().Events(e.NS).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ev := range list.Items {
		if ev.Regarding.Name == name && ev.Reason == reason {
			out = append(out, ev.Note)
		}
	}
	return out
}

// TestMachineWithoutClassDeletes: a machine whose class never existed is not stuck in deletion.
func TestMachineWithoutClassDeletes(t *testing.T) {
	e := ctrltest.NewEnv(t)
	e.StartControllers(ctrltest.FastOptions(), true, nil)
	name := e.Name("typo")
	e.Machine(name, "no-such-class")
	m := e.WaitPhase(name, v1alpha1.MachineCrashLoopBackOff, 30*time.Second)
	if !strings.Contains(m.Status.LastOperation.Description, "MachineClass "+e.NS+"/no-such-class not found") {
		t.Fatalf("class problem: %s", ctrltest.Describe(m))
	}
	e.DeleteMachine(name)
	e.WaitGone(name, 30*time.Second)
}
