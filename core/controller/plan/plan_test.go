package plan_test

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
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	machinistv1alpha1 "github.com/machinist-io/machinist/core/apis/machinist/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/fallback"
	"github.com/machinist-io/machinist/core/controller/machinedeployment"
	"github.com/machinist-io/machinist/core/controller/plan"
	"github.com/machinist-io/machinist/core/controller/rollout"
	"github.com/machinist-io/machinist/harness/ctrltest"
	"github.com/machinist-io/machinist/harness/machinetest"
	"github.com/machinist-io/machinist/harness/testenv"
	"github.com/machinist-io/machinist/internal/eventually"
	_ "github.com/machinist-io/machinist/providers/local"
)

// End-to-end tests of the planner: machinist's controller manager on a real kube-apiserver with
// the local provider (machines become real Nodes); a plan is made of a change, then the change
// is applied and the controllers' writes are compared with the plan.

func TestMain(m *testing.M) { ctrltest.Main(m) }

type world struct {
	t   testing.TB
	ns  string
	cfg *rest.Config
	c   client.WithWatch
	ctx context.Context
}

func newWorld(t *testing.T) *world {
	e := ctrltest.NewEnv(t)
	c, err := client.NewWithWatch(e.Config, client.Options{Scheme: testenv.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	t.Cleanup(cancel)
	return &world{t: t, ns: e.NS, cfg: e.Config, c: c, ctx: ctx}
}

func (w *world) start() { ctrltest.RunProduct(w.t, ctrltest.ProductOptions(w.t, w.cfg, w.ns)) }

func (w *world) create(o client.Object) {
	w.t.Helper()
	o.SetNamespace(w.ns)
	if err := w.c.Create(w.ctx, o); err != nil {
		w.t.Fatalf("create %T %s: %v", o, o.GetName(), err)
	}
}

// class creates a local MachineClass; annotations may publish an exhausted mark.
func (w *world) class(name string, annotations map[string]string) {
	w.t.Helper()
	spec := fmt.Sprintf(`{"cluster":%q,"zone":"z","heartbeatInterval":"1s","nodeMonitorGracePeriod":"5s"}`, w.ns)
	w.create(&v1alpha1.MachineClass{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations},
		Provider: "local", ProviderSpec: runtime.RawExtension{Raw: []byte(spec)}})
}

func (w *world) deployment(name string) *v1alpha1.MachineDeployment {
	w.t.Helper()
	d := &v1alpha1.MachineDeployment{}
	if err := w.c.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: name}, d); err != nil {
		w.t.Fatal(err)
	}
	return d
}

func (w *world) reader() plan.Reader { return plan.Reader{Control: w.c, Target: w.c, Now: time.Now()} }

func (w *world) plan(manifest client.Object) plan.Result {
	w.t.Helper()
	r, err := w.reader().Object(w.ctx, manifest)
	if err != nil {
		w.t.Fatal(err)
	}
	return r
}

// machines are the live machines: name -> class/phase.
func (w *world) machines() map[string]string {
	w.t.Helper()
	var list v1alpha1.MachineList
	if err := w.c.List(w.ctx, &list, client.InNamespace(w.ns)); err != nil {
		w.t.Fatal(err)
	}
	out := map[string]string{}
	for _, m := range list.Items {
		out[m.Name] = m.Spec.Class.Name + "/" + string(m.Status.CurrentStatus.Phase)
		if m.DeletionTimestamp != nil {
			out[m.Name] += "/terminating"
		}
	}
	return out
}

// waitSettled waits until n machines of class are Running and nothing else is left, and the
// deployment's status says so.
func (w *world) waitSettled(name, class string, n int, timeout time.Duration) {
	w.t.Helper()
	eventually.Explained(w.t, timeout, fmt.Sprintf("%d machines Running on %s", n, class), func() (bool, string) {
		ms := w.machines()
		ok := len(ms) == n
		for _, v := range ms {
			ok = ok && v == class+"/Running"
		}
		d := w.deployment(name)
		ok = ok && d.Status.ObservedGeneration == d.Generation && d.Status.UpdatedReplicas == int32(n) && d.Status.AvailableReplicas == int32(n) && d.Status.Replicas == int32(n)
		return ok, fmt.Sprintf("%v; status %+v", ms, d.Status)
	})
}

// setSizes records the sizes of the namespace's MachineSets after every write, as a plan's
// steps show them.
type setSizes struct {
	w     watch.Interface
	sizes map[string]int32
	steps []string
}

func (w *world) watchSets() *setSizes {
	w.t.Helper()
	var list v1alpha1.MachineSetList
	if err := w.c.List(w.ctx, &list, client.InNamespace(w.ns)); err != nil {
		w.t.Fatal(err)
	}
	s := &setSizes{sizes: map[string]int32{}}
	for _, ms := range list.Items {
		s.sizes[ms.Name] = ms.Spec.Replicas
	}
	wi, err := w.c.Watch(w.ctx, &v1alpha1.MachineSetList{}, client.InNamespace(w.ns), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
	if err != nil {
		w.t.Fatal(err)
	}
	s.w = wi
	w.t.Cleanup(wi.Stop)
	return s
}

// until reads the watch until done says the world is where the test wants it.
func (s *setSizes) until(t testing.TB, done func() bool) []string {
	t.Helper()
	prev := plan.SizesString(s.sizes)
	for !done() {
		select {
		case ev, ok := <-s.w.ResultChan():
			if !ok {
				t.Fatal("MachineSet watch ended")
			}
			ms, isSet := ev.Object.(*v1alpha1.MachineSet)
			if !isSet {
				continue
			}
			if ev.Type == watch.Deleted {
				delete(s.sizes, ms.Name)
			} else {
				s.sizes[ms.Name] = ms.Spec.Replicas
			}
			if cur := plan.SizesString(s.sizes); cur != prev {
				s.steps = append(s.steps, cur)
				prev = cur
			}
		case <-time.After(5 * time.Second):
			// no write for a while: check done again
		}
	}
	return s.steps
}

func contains(blocks []rollout.Block, reason rollout.BlockReason, text string) bool {
	for _, b := range blocks {
		if b.Reason == reason && strings.Contains(b.Message, text) {
			return true
		}
	}
	return false
}

// TestNodeTemplateLabelPlansInPlaceAndReplacesNothing: a label of the node template plans
// InPlace, naming the field and the nodes; applied, the nodes get the label and every machine
// stays.
func TestNodeTemplateLabelPlansInPlaceAndReplacesNothing(t *testing.T) {
	w := newWorld(t)
	w.class("a", nil)
	w.create(machinetest.Deployment("", "pool", "a", 2, machinetest.Pool("pool"), 1, 0))
	w.start()
	w.waitSettled("pool", "a", 2, 3*time.Minute)
	before := w.machines()

	d := w.deployment("pool")
	d.Spec.Template.Spec.NodeTemplateSpec.Labels = map[string]string{"tier": "gold"}
	p := w.plan(d)
	if p.Action != rollout.InPlace || p.MachinesReplaced != 0 || len(p.Fields) != 1 ||
		p.Fields[0].Path != "spec.template.spec.nodeTemplate.metadata.labels.tier" || p.Fields[0].Reaches != "nodes" || len(p.Nodes) != 2 {
		t.Fatalf("plan %+v, want InPlace of the tier label reaching 2 nodes", p)
	}
	if err := w.c.Update(w.ctx, d); err != nil {
		t.Fatal(err)
	}
	eventually.Explained(t, 2*time.Minute, "both nodes labelled tier=gold", func() (bool, string) {
		var nodes corev1.NodeList
		if err := w.c.List(w.ctx, &nodes); err != nil {
			return false, err.Error()
		}
		n := 0
		for _, node := range nodes.Items {
			if _, ours := before[node.Name]; ours && node.Labels["tier"] == "gold" {
				n++
			}
		}
		return n == 2, fmt.Sprintf("%d labelled", n)
	})
	if after := w.machines(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("machines changed: before %v, after %v", before, after)
	}
}

// TestClassChangePlansRolloutOneAtATime: a class change of a deployment of 3 with maxSurge 1
// and maxUnavailable 0 plans a Rollout replacing 3 machines one at a time, and the controller
// then makes exactly the planned writes, in order.
func TestClassChangePlansRolloutOneAtATime(t *testing.T) {
	w := newWorld(t)
	w.class("a", nil)
	w.class("b", nil)
	w.create(machinetest.Deployment("", "pool", "a", 3, machinetest.Pool("pool"), 1, 0))
	w.start()
	w.waitSettled("pool", "a", 3, 3*time.Minute)

	d := w.deployment("pool")
	d.Spec.Template.Spec.Class.Name = "b"
	p := w.plan(d)
	if p.Action != rollout.Rollout || p.MachinesReplaced != 3 || p.MaxSurge != 1 || p.MaxUnavailable != 0 ||
		len(p.Drains) != 3 || p.NewMachineClass != "b" || p.Estimate == "" {
		t.Fatalf("plan %+v, want a Rollout of 3 with maxSurge 1, maxUnavailable 0, 3 drains, class b and an estimate", p)
	}
	if p.Estimate == "" {
		t.Fatalf("no estimate: %s", p.EstimateBasis)
	}
	for i, s := range p.Steps {
		// one at a time: never more than replicas + 1 machines, never fewer than 3
		if total := sumSizes(s); total < 3 || total > 4 {
			t.Fatalf("step %d %q holds %d machines, want 3 or 4", i+1, s, total)
		}
	}
	executed := applyAndRecord(w, d, "pool", "b", 3)
	t.Logf("planned steps: %q; estimate %s (%s)", p.Steps, p.Estimate, p.EstimateBasis)
	if strings.Join(executed, "\n") != strings.Join(p.Steps, "\n") {
		t.Fatalf("executed steps differ from the plan:\nplanned:\n  %s\nexecuted:\n  %s", strings.Join(p.Steps, "\n  "), strings.Join(executed, "\n  "))
	}
}

// applyAndRecord applies d and records the sets' sizes until n machines of class run.
func applyAndRecord(w *world, d *v1alpha1.MachineDeployment, name, class string, n int) []string {
	w.t.Helper()
	sizes := w.watchSets()
	if err := w.c.Update(w.ctx, d); err != nil {
		w.t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Minute)
	steps := sizes.until(w.t, func() bool {
		if time.Now().After(deadline) {
			w.t.Fatalf("the rollout did not finish in 5 minutes: %v", w.machines())
		}
		ms := w.machines()
		ok := len(ms) == n
		for _, v := range ms {
			ok = ok && v == class+"/Running"
		}
		return ok && sumSizes(plan.SizesString(sizes.sizes)) == int32(n) && len(strings.Fields(plan.SizesString(sizes.sizes))) == 1
	})
	return steps
}

func sumSizes(step string) int32 {
	var n int32
	for _, f := range strings.Fields(step) {
		var v int32
		_, _ = fmt.Sscanf(f[strings.LastIndex(f, "=")+1:], "%d", &v)
		n += v
	}
	return n
}

// TestPDBThatAllowsNoDisruptionPlansBlocked: a machine to be replaced runs a pod whose budget
// allows no disruption: the plan is Blocked and names the budget; nothing is changed.
func TestPDBThatAllowsNoDisruptionPlansBlocked(t *testing.T) {
	w := newWorld(t)
	w.class("a", nil)
	w.class("b", nil)
	w.create(machinetest.Deployment("", "pool", "a", 1, machinetest.Pool("pool"), 1, 0))
	w.start()
	w.waitSettled("pool", "a", 1, 3*time.Minute)
	var node string
	for name := range w.machines() {
		node = name // the local provider names a machine's node after it
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "db-0", Labels: map[string]string{"app": "db"}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "db", Image: "db"}}}}
	w.create(pod)
	setPodReady(t, w.ctx, w.c, pod)
	one := intstr.FromInt32(1)
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}}}
	w.create(pdb)
	pdb.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: pdb.Generation, ExpectedPods: 1, CurrentHealthy: 1, DesiredHealthy: 1}
	if err := w.c.Status().Update(w.ctx, pdb); err != nil {
		t.Fatal(err)
	}

	d := w.deployment("pool")
	d.Spec.Template.Spec.Class.Name = "b"
	p := w.plan(d)
	if p.Action != rollout.Blocked || !contains(p.BlockedBy, plan.BlockedByPodDisruptionBudget, "PodDisruptionBudget "+w.ns+"/db") {
		t.Fatalf("plan %+v, want Blocked by PodDisruptionBudget %s/db", p, w.ns)
	}
	if len(p.Drains) != 1 || len(p.Drains[0].Blockers) != 1 || p.Drains[0].Node != node {
		t.Fatalf("drains %+v, want the drain of node %s held by db", p.Drains, node)
	}
	if now := w.deployment("pool"); now.Spec.Template.Spec.Class.Name != "a" || now.ResourceVersion != d.ResourceVersion {
		t.Fatal("plan changed the deployment")
	}
}

// TestEveryFallbackClassExhaustedPlansBlocked: a new deployment whose class and every fallback
// class are marked out of capacity plans Blocked, naming the marks.
func TestEveryFallbackClassExhaustedPlansBlocked(t *testing.T) {
	w := newWorld(t)
	mark := map[string]string{fallback.AnnotationExhausted: fallback.Mark{Until: time.Now().Add(time.Hour), Message: "zone has no capacity"}.Encode()}
	w.class("a", mark)
	w.class("b", mark)
	d := machinetest.Deployment(w.ns, "pool", "a", 2, machinetest.Pool("pool"), 1, 0)
	d.Annotations = map[string]string{fallback.AnnotationClasses: "b"}
	p := w.plan(d)
	if p.Action != rollout.Blocked || !contains(p.BlockedBy, plan.BlockedByCapacity, "a (out of capacity until") || !contains(p.BlockedBy, plan.BlockedByCapacity, "b (out of capacity until") {
		t.Fatalf("plan %+v, want Blocked with every class out of capacity", p)
	}

	// One class back: the plan scales up on it.
	w.class("c", nil)
	d.Annotations[fallback.AnnotationClasses] = "b,c"
	if p := w.plan(d); p.Action != rollout.Scale || p.NewMachineClass != "c" || len(p.BlockedBy) > 0 {
		t.Fatalf("plan %+v, want Scale on class c", p)
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

// TestPausedRolloutPlansBlockedAndSaysSoInStatus: a class change of a paused deployment plans
// Blocked (Paused); applied, the deployment's Rollout condition says what the rollout waits for,
// and explain says it too.
func TestPausedRolloutPlansBlockedAndSaysSoInStatus(t *testing.T) {
	w := newWorld(t)
	w.class("a", nil)
	w.class("b", nil)
	w.create(machinetest.Deployment("", "pool", "a", 1, machinetest.Pool("pool"), 1, 0))
	w.start()
	w.waitSettled("pool", "a", 1, 3*time.Minute)

	d := w.deployment("pool")
	d.Spec.Paused = true
	d.Spec.Template.Spec.Class.Name = "b"
	if p := w.plan(d); p.Action != rollout.Blocked || !contains(p.BlockedBy, rollout.BlockedPaused, "spec.paused") {
		t.Fatalf("plan %+v, want Blocked by Paused", p)
	}
	if err := w.c.Update(w.ctx, d); err != nil {
		t.Fatal(err)
	}
	eventually.Explained(t, time.Minute, "the Rollout condition says the rollout waits for spec.paused", func() (bool, string) {
		d := w.deployment("pool")
		for _, c := range d.Status.Conditions {
			if c.Type == machinedeployment.ConditionRollout {
				return c.Status == v1alpha1.ConditionTrue && c.Reason == string(rollout.BlockedPaused) && strings.Contains(c.Message, "spec.paused"), fmt.Sprintf("%+v", c)
			}
		}
		return false, fmt.Sprintf("%+v", d.Status.Conditions)
	})
	if ms := w.machines(); len(ms) != 1 {
		t.Fatalf("machines %v: a paused rollout replaced one", ms)
	}
}

// TestPoolPolicyBudgetIsPlanned: a deployment a PoolPolicy governs is planned with its share of
// the pool's budget (as the controller decides it), not with its own maxSurge.
func TestPoolPolicyBudgetIsPlanned(t *testing.T) {
	w := newWorld(t)
	w.class("a", nil)
	w.class("b", nil)
	w.create(&machinistv1alpha1.PoolPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "workers"},
		Spec: machinistv1alpha1.PoolPolicySpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"worker-pool": "workers"}},
			Rollout:  machinistv1alpha1.PoolRollout{MaxSurge: ptr.To(intstr.FromInt32(1)), MaxUnavailable: ptr.To(intstr.FromInt32(0))},
		},
	})
	for _, z := range []string{"zone-a", "zone-b"} {
		d := machinetest.Deployment("", z, "a", 1, machinetest.Pool(z), 3, 0)
		d.Labels = map[string]string{"worker-pool": "workers"}
		w.create(d)
	}
	w.start()
	eventually.Explained(w.t, 3*time.Minute, "2 machines Running on a, both deployments settled", func() (bool, string) {
		ms := w.machines()
		ok := len(ms) == 2
		for _, v := range ms {
			ok = ok && v == "a/Running"
		}
		for _, z := range []string{"zone-a", "zone-b"} {
			d := w.deployment(z)
			ok = ok && d.Status.ObservedGeneration == d.Generation && d.Status.UpdatedReplicas == 1 && d.Status.AvailableReplicas == 1
		}
		return ok, fmt.Sprintf("%v", ms)
	})

	d := w.deployment("zone-a")
	d.Spec.Template.Spec.Class.Name = "b"
	p := w.plan(d)
	if p.Action != rollout.Rollout || p.MaxSurge != 1 || p.BudgetFrom != "PoolPolicy "+w.ns+"/workers" {
		t.Fatalf("plan %+v; want a Rollout with the pool's maxSurge 1 from PoolPolicy %s/workers (the deployment's own is 3)", p, w.ns)
	}
}
