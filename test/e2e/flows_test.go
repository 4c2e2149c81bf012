package e2e

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/internal/eventually"
	"github.com/machinist-io/machinist/providers/local"
)

// TestAutoscalerScalesTheLocalCluster: Cluster Autoscaler's loop on a node group that starts at
// zero. One pending pod whose nodeSelector names a template label makes exactly one node —
// never a second, however often the loop looks while the node registers; more pods make more
// nodes and run on them; without the workload the idle nodes are scaled down, their machines
// deleted and their drains complete without force (the pods still terminating there finish
// within their grace period).
func TestAutoscalerScalesTheLocalCluster(t *testing.T) {
	w := newWorld(t)
	w.localClass("small")
	w.machineDeployment("workers", "small", 0, 0, 4, nil)
	w.daemonSet("node-agent")
	a := newAutoscaler(t, w.startAutoscaler(), w.cs)
	nodes := w.watchNodes("workers", a.poke)
	stop := make(chan struct{})
	done := a.run(time.Second, stop)
	var once sync.Once
	stopLoop := func() { once.Do(func() { close(stop); <-done }) }
	t.Cleanup(stopLoop)

	// From zero: one pod, one node.
	sel := w.workload("work", "workers", 1, "900m", nil)
	pods := w.waitPodsReady(sel, 1, 3*time.Minute)
	if node := pods[0].Spec.NodeName; !strings.HasPrefix(node, "workers-") {
		t.Fatalf("the pod runs on %s, not on a node of the group", node)
	}
	a.waitLoops(3) // a late second scale-up would happen now
	if seen := nodes.names(); len(seen) != 1 || a.increasedTotal() != 1 {
		t.Fatalf("scale from zero made nodes %v with increases %s: want exactly one", seen, describeGroups(a))
	}
	if bad := nodes.withoutLabel(); len(bad) > 0 {
		t.Fatalf("a node of the group was visible without its template label pool=workers: %v", bad)
	}
	// The machine controller's node sync finds the template in place: it adds only its
	// machine-name label, once — no churn.
	if n := nodes.maxRelabels(); n > 1 {
		t.Fatalf("a node's labels changed %d times after registration, want at most once (the machine-name label)", n)
	}

	// Six pods of 900m on nodes of 2 CPUs: three nodes.
	w.scaleWorkload("work", 6)
	pods = w.waitPodsReady(sel, 6, 3*time.Minute)
	onNodes := map[string]int{}
	for _, p := range pods {
		onNodes[p.Spec.NodeName]++
	}
	if len(onNodes) != 3 || a.increasedTotal() != 3 {
		t.Fatalf("six pods run on %v after increases %s: want three nodes", onNodes, describeGroups(a))
	}
	w.waitMachinesRunning("workers", 3, time.Minute)

	// Without the workload the nodes are idle and go.
	if err := w.cs.AppsV1().Deployments(ns).Delete(w.ctx, "work", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually.Explained(w.t, 3*time.Minute, "the idle nodes scaled down", func() (bool, string) {
		ms := w.machines("workers")
		return len(ms) == 0 && len(a.deletedNodes()) == 3, fmt.Sprintf("%d machines; deleted nodes %v", len(ms), a.deletedNodes())
	})
	stopLoop()
	for _, n := range a.deletedNodes() {
		if !w.nodeGone(n) {
			t.Errorf("node %s of a deleted machine still exists", n)
		}
	}
	w.assertDrainedGracefully(a.deletedNodes())
	if seen := nodes.names(); len(seen) != 3 {
		t.Fatalf("nodes seen over the test: %v, want the three the autoscaler asked for", seen)
	}
	if bad := nodes.withoutLabel(); len(bad) > 0 {
		t.Fatalf("a node of the group was visible without its template label pool=workers: %v", bad)
	}
	if n := nodes.maxRelabels(); n > 1 {
		t.Fatalf("a node's labels changed %d times after registration, want at most once", n)
	}
}

// TestRollingUpdateKeepsTheBudget: a rolling update of a MachineDeployment under a Deployment
// with a PodDisruptionBudget (maxUnavailable 1): every old node is drained through evictions,
// the evicted pods finish and are rescheduled on the new nodes, the number of Ready pods never
// drops below what the budget allows, and the rollout completes with graceful drains only.
func TestRollingUpdateKeepsTheBudget(t *testing.T) {
	w := newWorld(t)
	w.localClass("small")
	// Two machines at a time, so two nodes drain at once and only the budget keeps the second
	// eviction waiting until the first pod runs again elsewhere.
	w.machineDeployment("pool", "small", 3, 0, 0, func(md *v1alpha1.MachineDeployment) {
		md.Spec.Strategy.RollingUpdate.MaxSurge = ptr.To(intstr.FromInt32(2))
	})
	old := w.waitMachinesRunning("pool", 3, 3*time.Minute)
	sel := w.workload("web", "pool", 3, "100m", func(d *appsv1.Deployment) {
		// A replacement takes a while to be Ready, as behind a readiness probe: long enough for
		// the second drain to want its eviction before the first pod runs again.
		d.Spec.Template.Annotations = map[string]string{local.AnnotationReadyAfter: "3s"}
		d.Spec.Template.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				TopologyKey: corev1.LabelHostname, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			}},
		}}
	})
	w.budget("web", sel, 1)
	w.waitPodsReady(sel, 3, 2*time.Minute)
	healthy := w.watchHealthy(sel)

	// A template annotation rolls out (a nodeTemplate label would be applied in place, as in MCM).
	w.updateMachineDeployment("pool", func(md *v1alpha1.MachineDeployment) {
		md.Spec.Template.Annotations = map[string]string{"example.com/revision": "2"}
	})
	oldNames := map[string]bool{}
	for _, m := range old {
		oldNames[m.Name] = true
	}
	eventually.Explained(w.t, 5*time.Minute, "the rollout replaced every machine", func() (bool, string) {
		ms := w.machines("pool")
		var states []string
		fresh := 0
		for _, m := range ms {
			if !oldNames[m.Name] && m.DeletionTimestamp == nil && m.Status.CurrentStatus.Phase == v1alpha1.MachineRunning {
				fresh++
			}
			states = append(states, m.Name+":"+string(m.Status.CurrentStatus.Phase))
		}
		return fresh == 3 && len(ms) == 3, strings.Join(states, " ")
	})
	pods := w.waitPodsReady(sel, 3, 2*time.Minute)
	for _, p := range pods {
		if oldNames[p.Spec.NodeName] {
			t.Errorf("pod %s still on old node %s", p.Name, p.Spec.NodeName)
		}
	}
	least, events := healthy.stop()
	t.Logf("fewest Ready pods during the rollout: %d of 3 (%d pod events)", least, events)
	if least < 2 {
		t.Fatalf("only %d Ready pods at one point of the rollout (budget: at most 1 of 3 unavailable); %d pod events", least, events)
	}
	if events == 0 {
		t.Fatal("no pod events during the rollout: the pods were never moved")
	}
	var drained []string
	for name := range oldNames {
		drained = append(drained, name)
	}
	w.assertDrainedGracefully(drained)
}

// TestDeadNodeIsReplaced: a machine whose heartbeat stops goes Unknown (kube-controller-manager's
// node lifecycle controller), its pods are evicted by the taint and rescheduled on the live node,
// and the machine controller replaces the machine after its health timeout.
func TestDeadNodeIsReplaced(t *testing.T) {
	w := newWorld(t)
	w.localClass("small")
	w.machineDeployment("pool", "small", 2, 0, 0, func(md *v1alpha1.MachineDeployment) {
		md.Spec.Template.Spec.MachineConfiguration = &v1alpha1.MachineConfiguration{
			MachineHealthTimeout: &metav1.Duration{Duration: 10 * time.Second},
			MachineDrainTimeout:  &metav1.Duration{Duration: 15 * time.Second},
		}
	})
	w.waitMachinesRunning("pool", 2, 3*time.Minute)
	sel := w.workload("web", "pool", 2, "100m", func(d *appsv1.Deployment) {
		d.Spec.Template.Spec.Tolerations = []corev1.Toleration{
			{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](2)},
			{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](2)},
		}
	})
	pods := w.waitPodsReady(sel, 2, 2*time.Minute)
	dead := pods[0].Spec.NodeName
	if err := local.SetHeartbeat(w.stateDir, dead, false); err != nil {
		t.Fatal(err)
	}
	eventually.Explained(w.t, 3*time.Minute, "the pods rescheduled off the dead node "+dead, func() (bool, string) {
		var states []string
		ready := 0
		for _, p := range w.pods(sel) {
			if podReady(&p) && p.Spec.NodeName != dead {
				ready++
			}
			states = append(states, fmt.Sprintf("%s:%s@%s deleting=%v", p.Name, p.Status.Phase, p.Spec.NodeName, p.DeletionTimestamp != nil))
		}
		return ready == 2, strings.Join(states, " ")
	})
	eventually.Explained(w.t, 4*time.Minute, "the dead machine replaced", func() (bool, string) {
		var states []string
		running := 0
		for _, m := range w.machines("pool") {
			if m.Name != dead && m.DeletionTimestamp == nil && m.Status.CurrentStatus.Phase == v1alpha1.MachineRunning {
				running++
			}
			states = append(states, m.Name+":"+string(m.Status.CurrentStatus.Phase))
		}
		return running == 2 && len(states) == 2 && w.nodeGone(dead), strings.Join(states, " ")
	})
}

// nodeWatch records every node of a pool seen since it started (by name: <pool>-…), and every
// event that showed one without the pool's template label.
type nodeWatch struct {
	mu        sync.Mutex
	seen      map[string]bool
	unlabeled []string
	labels    map[string]map[string]string // last labels seen per node
	relabeled map[string]int               // label changes per node after its registration
}

// watchNodes watches every node from now on; added is called when a node of the pool appears
// (the moment an autoscaler looking at it would be misled by missing labels).
func (w *world) watchNodes(pool string, added func()) *nodeWatch {
	w.t.Helper()
	nw := &nodeWatch{seen: map[string]bool{}, labels: map[string]map[string]string{}, relabeled: map[string]int{}}
	ctx, cancel := context.WithCancel(context.Background())
	wi, err := w.cs.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range wi.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			if !ok || !strings.HasPrefix(n.Name, pool+"-") {
				continue
			}
			nw.mu.Lock()
			nw.seen[n.Name] = true
			if n.Labels["pool"] != pool {
				nw.unlabeled = append(nw.unlabeled, fmt.Sprintf("%s %s", ev.Type, n.Name))
			}
			if last, ok := nw.labels[n.Name]; ok && !maps.Equal(last, n.Labels) {
				nw.relabeled[n.Name]++
			}
			nw.labels[n.Name] = n.Labels
			nw.mu.Unlock()
			if ev.Type == watch.Added {
				added()
			}
		}
	}()
	w.t.Cleanup(func() { cancel(); wi.Stop(); <-done })
	return nw
}

func (nw *nodeWatch) names() []string {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	var out []string
	for n := range nw.seen {
		out = append(out, n)
	}
	return out
}

// maxRelabels is the most label changes any node of the pool had after its registration.
func (nw *nodeWatch) maxRelabels() int {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	most := 0
	for _, n := range nw.relabeled {
		most = max(most, n)
	}
	return most
}

// withoutLabel lists the events that showed a node of the pool without its template label.
func (nw *nodeWatch) withoutLabel() []string {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	return append([]string(nil), nw.unlabeled...)
}

// healthyWatch tracks the fewest Ready pods (Running, Ready, not being deleted) of a selector
// at any event since it started.
type healthyWatch struct {
	cancel context.CancelFunc
	done   chan struct{}
	least  int
	events int
}

func (w *world) watchHealthy(selector string) *healthyWatch {
	w.t.Helper()
	list, err := w.cs.CoreV1().Pods(ns).List(w.ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		w.t.Fatal(err)
	}
	pods := map[string]bool{}
	for _, p := range list.Items {
		pods[p.Name] = podReady(&p)
	}
	count := func() int {
		n := 0
		for _, ok := range pods {
			if ok {
				n++
			}
		}
		return n
	}
	ctx, cancel := context.WithCancel(context.Background())
	wi, err := w.cs.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: selector, ResourceVersion: list.ResourceVersion})
	if err != nil {
		w.t.Fatal(err)
	}
	h := &healthyWatch{cancel: cancel, done: make(chan struct{}), least: count()}
	go func() {
		defer close(h.done)
		defer wi.Stop()
		for ev := range wi.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			if ev.Type == watch.Deleted {
				delete(pods, p.Name)
			} else {
				pods[p.Name] = podReady(p)
			}
			h.events++
			h.least = min(h.least, count())
		}
	}()
	w.t.Cleanup(func() { h.stop() })
	return h
}

// stop ends the watch and returns the fewest Ready pods seen and the number of events.
func (h *healthyWatch) stop() (int, int) {
	h.cancel()
	<-h.done
	return h.least, h.events
}

func (w *world) scaleWorkload(name string, replicas int32) {
	w.t.Helper()
	s, err := w.cs.AppsV1().Deployments(ns).GetScale(w.ctx, name, metav1.GetOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	s.Spec.Replicas = replicas
	if _, err := w.cs.AppsV1().Deployments(ns).UpdateScale(w.ctx, name, s, metav1.UpdateOptions{}); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) updateMachineDeployment(name string, change func(*v1alpha1.MachineDeployment)) {
	w.t.Helper()
	for range 20 {
		md := &v1alpha1.MachineDeployment{}
		if err := w.c.Get(w.ctx, clientKey(name), md); err != nil {
			w.t.Fatal(err)
		}
		change(md)
		if err := w.c.Update(w.ctx, md); err == nil {
			return
		}
	}
	w.t.Fatalf("update machine deployment %s: too many conflicts", name)
}
