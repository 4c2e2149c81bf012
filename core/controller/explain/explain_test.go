package explain_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/explain"
	"github.com/machinist-io/machinist/core/controller/machine"
	"github.com/machinist-io/machinist/core/controller/machineset"
	"github.com/machinist-io/machinist/core/controller/plan"
	"github.com/machinist-io/machinist/harness/ctrltest"
	"github.com/machinist-io/machinist/harness/machinetest"
	"github.com/machinist-io/machinist/harness/testenv"
	"github.com/machinist-io/machinist/internal/eventually"
	_ "github.com/machinist-io/machinist/providers/local"
)

func TestMain(m *testing.M) { ctrltest.Main(m) }

// newEnv is a test's namespace on the shared API server, a context bounded to 5 minutes and a
// client.
func newEnv(t *testing.T) (*ctrltest.Env, context.Context, client.Client) {
	t.Helper()
	e := ctrltest.NewEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	c, err := client.New(e.Config, client.Options{Scheme: testenv.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return e, ctx, c
}

// TestExplainNamesTheBudgetADrainWaitsFor: a machine being deleted whose node runs a pod under a
// budget that allows no disruption: explain names the budget and the pod; explain of its
// deployment says what the controller decides now.
func TestExplainNamesTheBudgetADrainWaitsFor(t *testing.T) {
	e, ctx, c := newEnv(t)
	create := func(o client.Object) {
		t.Helper()
		o.SetNamespace(e.NS)
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	spec := fmt.Sprintf(`{"cluster":%q,"zone":"z","heartbeatInterval":"1s","nodeMonitorGracePeriod":"5s"}`, e.NS)
	create(&v1alpha1.MachineClass{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Provider: "local", ProviderSpec: runtime.RawExtension{Raw: []byte(spec)}})
	create(machinetest.Deployment("", "pool", "a", 1, machinetest.Pool("pool"), 1, 0))
	ctrltest.RunProduct(t, ctrltest.ProductOptions(t, e.Config, e.NS))

	var m v1alpha1.Machine
	eventually.Explained(t, 3*time.Minute, "a Running machine with a node", func() (bool, string) {
		var list v1alpha1.MachineList
		if err := c.List(ctx, &list, client.InNamespace(e.NS)); err != nil || len(list.Items) != 1 {
			return false, fmt.Sprint(len(list.Items), err)
		}
		m = list.Items[0]
		return m.Status.CurrentStatus.Phase == v1alpha1.MachineRunning && m.Labels[v1alpha1.LabelNode] != "", string(m.Status.CurrentStatus.Phase)
	})
	node := m.Labels[v1alpha1.LabelNode]
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "db-0", Labels: map[string]string{"app": "db"}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "db", Image: "db"}}}}
	create(pod)
	setPodReady(t, ctx, c, pod)
	one := intstr.FromInt32(1)
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}}}
	create(pdb)
	pdb.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: pdb.Generation, ExpectedPods: 1, CurrentHealthy: 1, DesiredHealthy: 1}
	if err := c.Status().Update(ctx, pdb); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, &m); err != nil {
		t.Fatal(err)
	}

	r := explain.Reader{Reader: plan.Reader{Control: c, Target: c, Now: time.Now()}, ProblemConditions: machine.DefaultNodeConditions}
	eventually.Explained(t, 2*time.Minute, "explain names the budget the drain waits for", func() (bool, string) {
		w, err := r.Machine(ctx, e.NS, m.Name)
		if err != nil {
			return false, err.Error()
		}
		s := explain.Machine(w)
		text := s.String()
		return strings.Contains(text, "waits for PodDisruptionBudget "+e.NS+"/db") && strings.Contains(text, "pods "+e.NS+"/db-0") &&
			strings.Contains(text, "by MachineSet pool-"), text
	})

	// explain node NAME tells the story of the node's machine.
	if name, err := r.MachineOfNode(ctx, e.NS, node); err != nil || name != m.Name {
		t.Fatalf("MachineOfNode(%s) = %q, %v; want %s", node, name, err, m.Name)
	}
	if _, err := r.MachineOfNode(ctx, e.NS, "no-such-node"); err == nil || !strings.Contains(err.Error(), "node=no-such-node") {
		t.Fatalf("MachineOfNode of an unknown node: %v; want an error naming the label", err)
	}

	dw, err := r.Deployment(ctx, e.NS, "pool")
	if err != nil {
		t.Fatal(err)
	}
	if s := explain.Deployment(dw).String(); !strings.Contains(s, "MachineDeployment "+e.NS+"/pool") || !strings.Contains(s, "class a, strategy RollingUpdate") {
		t.Fatalf("deployment story:\n%s", s)
	}
}

// TestExplainNamesTheFailedHealthConditionAndTheMachineReplaced: a node problem detector reports
// KernelDeadlock=True on a machine's node; the health check fails the machine, its MachineSet
// replaces it, and explain of the new machine names the machine it replaced and the failed
// condition; explain of the old machine names its replacement.
func TestExplainNamesTheFailedHealthConditionAndTheMachineReplaced(t *testing.T) {
	e, ctx, c := newEnv(t)
	spec := fmt.Sprintf(`{"cluster":%q,"zone":"z","heartbeatInterval":"1s","nodeMonitorGracePeriod":"5s"}`, e.NS)
	for _, o := range []client.Object{
		&v1alpha1.MachineClass{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Provider: "local", ProviderSpec: runtime.RawExtension{Raw: []byte(spec)}},
		machinetest.Deployment("", "pool", "a", 1, machinetest.Pool("pool"), 1, 0),
	} {
		o.SetNamespace(e.NS)
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	opts := ctrltest.ProductOptions(t, e.Config, e.NS)
	opts.Machine.HealthTimeout = 2 * time.Second
	ctrltest.RunProduct(t, opts)

	old := runningMachines(t, ctx, c, e.NS, 1)[0]
	node := old.Labels[v1alpha1.LabelNode]
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n := &corev1.Node{}
		if err := c.Get(ctx, client.ObjectKey{Name: node}, n); err != nil {
			return err
		}
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: "KernelDeadlock", Status: corev1.ConditionTrue,
			Reason: "DockerHung", Message: "task docker blocked for more than 120 seconds", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()})
		return c.Status().Update(ctx, n)
	})
	if err != nil {
		t.Fatal(err)
	}

	r := explain.Reader{Reader: plan.Reader{Control: c, Target: c, Now: time.Now()}, ProblemConditions: machine.DefaultNodeConditions}
	var replacement, story string
	eventually.Explained(t, 3*time.Minute, "explain of the replacement names the failed condition and the machine it replaced", func() (bool, string) {
		var list v1alpha1.MachineList
		if err := c.List(ctx, &list, client.InNamespace(e.NS)); err != nil {
			return false, err.Error()
		}
		for _, m := range list.Items {
			if m.Name == old.Name {
				continue
			}
			w, err := r.Machine(ctx, e.NS, m.Name)
			if err != nil {
				return false, err.Error()
			}
			text := explain.Machine(w).String()
			replacement, story = m.Name, text
			return strings.Contains(text, "created to replace machine "+old.Name+", which failed its health check: Machine "+old.Name+" health checks failing for") &&
				strings.Contains(text, "KernelDeadlock=True (DockerHung)"), text
		}
		return false, fmt.Sprintf("%d machines, none new", len(list.Items))
	})

	t.Logf("the replacement's story:\n%s", story)

	// The failed machine's story (while it terminates, and once it is gone) names its replacement.
	eventually.Explained(t, time.Minute, "explain of the replaced machine names its replacement", func() (bool, string) {
		w, err := r.Machine(ctx, e.NS, old.Name)
		if err != nil {
			return false, err.Error()
		}
		text := explain.Machine(w).String()
		return strings.Contains(text, "Machine "+replacement+" Normal Replacement: Created to replace failed machine "+old.Name) &&
			strings.Contains(text, "Machine Warning Failed"), text
	})
	if m := e.Get(replacement); m.Annotations[machineset.AnnotationReplaces] != old.Name {
		t.Fatalf("replacement %s annotations %v; want %s=%s", replacement, m.Annotations, machineset.AnnotationReplaces, old.Name)
	}
}

// runningMachines waits for n Running machines with a node in ns and returns them.
func runningMachines(t *testing.T, ctx context.Context, c client.Client, ns string, n int) []v1alpha1.Machine {
	t.Helper()
	var list v1alpha1.MachineList
	eventually.Explained(t, 3*time.Minute, fmt.Sprintf("%d Running machines with a node", n), func() (bool, string) {
		if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil || len(list.Items) != n {
			return false, fmt.Sprint(len(list.Items), err)
		}
		for _, m := range list.Items {
			if m.Status.CurrentStatus.Phase != v1alpha1.MachineRunning || m.Labels[v1alpha1.LabelNode] == "" {
				return false, m.Name + " " + string(m.Status.CurrentStatus.Phase)
			}
		}
		return true, ""
	})
	return list.Items
}

// TestFailedHealthConditions: Ready not True and a problem condition True are named with their
// reason; healthy conditions are not.
func TestFailedHealthConditions(t *testing.T) {
	conds := []corev1.NodeCondition{
		{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "NodeStatusUnknown", Message: "Kubelet stopped posting node status."},
		{Type: "KernelDeadlock", Status: corev1.ConditionTrue, Reason: "DockerHung", Message: "task docker blocked"},
		{Type: "DiskPressure", Status: corev1.ConditionFalse},
		{Type: "Custom", Status: corev1.ConditionTrue},
	}
	got := explain.FailedHealthConditions(conds, machine.DefaultNodeConditions)
	if len(got) != 2 || !strings.Contains(got[0], "Ready=Unknown") || !strings.Contains(got[0], "Kubelet stopped posting node status.") ||
		!strings.Contains(got[1], "KernelDeadlock=True") || !strings.Contains(got[1], "DockerHung") {
		t.Fatalf("failed conditions %q", got)
	}
}

// TestGoneMachineKeepsItsEvents: the story of a machine that is gone is its events, in order.
func TestGoneMachineKeepsItsEvents(t *testing.T) {
	s := explain.Machine(explain.MachineWorld{Namespace: "ns", Name: "m"})
	if len(s.Now) != 1 || !strings.Contains(s.Now[0], "gone") {
		t.Fatalf("story %+v", s)
	}
}

// setPodReady makes a pod Running and Ready (the local provider's node agent may be updating it
// too: a conflict is retried on the latest version).
func setPodReady(t *testing.T, ctx context.Context, c client.Client, pod *corev1.Pod) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return err
		}
		pod.Status.Phase = corev1.PodRunning
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		return c.Status().Update(ctx, pod)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestOriginOfAReplacement: a machine its set paired with a failed one says which and how it
// failed; a machine without the pairing (created before the set recorded it) says nothing of a
// replacement.
func TestOriginOfAReplacement(t *testing.T) {
	m := &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "new", Annotations: map[string]string{
		machineset.AnnotationReplaces:       "old",
		machineset.AnnotationReplacesReason: "failed its health check: Machine old health checks failing for 12s (timeout 10s). Changing status to Failed. Node conditions: Ready=Unknown (NodeStatusUnknown).",
	}}}
	origin := strings.Join(explain.Machine(explain.MachineWorld{Namespace: "ns", Name: "new", Machine: m}).Origin, "\n")
	if !strings.Contains(origin, "created to replace machine old, which failed its health check: Machine old health checks failing for 12s") ||
		!strings.Contains(origin, "Ready=Unknown (NodeStatusUnknown)") {
		t.Fatalf("origin:\n%s", origin)
	}
	delete(m.Annotations, machineset.AnnotationReplacesReason)
	if origin := strings.Join(explain.Machine(explain.MachineWorld{Namespace: "ns", Name: "new", Machine: m}).Origin, "\n"); !strings.Contains(origin, "created to replace machine old, which had failed") {
		t.Fatalf("origin without a reason:\n%s", origin)
	}
	m.Annotations = nil
	if origin := strings.Join(explain.Machine(explain.MachineWorld{Namespace: "ns", Name: "new", Machine: m}).Origin, "\n"); strings.Contains(origin, "replace") {
		t.Fatalf("origin of a machine without a pairing:\n%s", origin)
	}
}
