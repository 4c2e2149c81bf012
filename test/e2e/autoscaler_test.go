package e2e

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/machinist-io/machinist/grpcbridge/autoscaler/clusterautoscaler"
	"github.com/machinist-io/machinist/harness/machinetest"
)

// autoscaler is Cluster Autoscaler's main loop, reduced to what these flows need, driving
// `machinist autoscaler` through the Cluster Autoscaler-like client:
//
//   - scale-up: pods the scheduler found unschedulable are first fitted onto the registered
//     nodes (by their real labels, taints and free capacity; a node that is still starting is
//     counted, as Cluster Autoscaler does) and onto the group's upcoming nodes (target size minus registered
//     nodes, as template nodes); pods that fit nowhere make the first group whose template fits
//     them grow. A node registered without the labels its group's template promises makes Cluster Autoscaler
//     scale up a second time — which is what the flows check never happens;
//   - scale-down: a node whose only pods are DaemonSet pods or pods being deleted is unneeded;
//     after two loops in a row it is deleted (DeleteNodes), down to the group's minimum.
type autoscaler struct {
	t      *testing.T
	scaler *clusterautoscaler.Client
	cs     kubernetes.Interface

	mu        sync.Mutex
	increases map[string]int // nodes asked for, per group
	deleted   []string       // nodes deleted
	unneeded  map[string]int // loops in a row a node was unneeded
	loops     int            // loops completed
	wake      chan struct{}  // runs the next loop at once
}

func newAutoscaler(t *testing.T, scaler *clusterautoscaler.Client, cs kubernetes.Interface) *autoscaler {
	return &autoscaler{t: t, scaler: scaler, cs: cs, increases: map[string]int{}, unneeded: map[string]int{}, wake: make(chan struct{}, 1)}
}

// run loops every interval until stop is closed; failures of a loop are logged and retried,
// as Cluster Autoscaler does.
func (a *autoscaler) run(interval time.Duration, stop <-chan struct{}) (done <-chan struct{}) {
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		for {
			if err := a.runOnce(); err != nil {
				a.t.Logf("autoscaler loop: %v", err)
			}
			a.mu.Lock()
			a.loops++
			a.mu.Unlock()
			select {
			case <-stop:
				return
			case <-a.wake:
			case <-time.After(interval):
			}
		}
	}()
	return ch
}

// poke runs the next loop at once: the flows call it when a node registers, the moment a
// node without its template labels would mislead the loop into a second scale-up.
func (a *autoscaler) poke() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// increasedTotal is how many nodes the loop asked for, over every group.
func (a *autoscaler) increasedTotal() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	total := 0
	for _, n := range a.increases {
		total += n
	}
	return total
}

// waitLoops waits until n more loops have completed.
func (a *autoscaler) waitLoops(n int) {
	a.t.Helper()
	a.mu.Lock()
	want := a.loops + n
	a.mu.Unlock()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		a.mu.Lock()
		got := a.loops
		a.mu.Unlock()
		if got >= want {
			return
		}
		if time.Now().After(deadline) {
			a.t.Fatalf("the autoscaler loop stalled at %d loops, want %d", got, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (a *autoscaler) deletedNodes() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.deleted...)
}

// simNode is a node in the loop's scheduling simulation.
type simNode struct {
	name   string
	group  string
	labels map[string]string
	taints []corev1.Taint
	free   corev1.ResourceList
}

func (a *autoscaler) runOnce() error {
	ctx := a.t.Context()
	if err := a.scaler.Refresh(); err != nil {
		return err
	}
	groups, err := a.scaler.NodeGroups()
	if err != nil {
		return err
	}
	nodes, err := a.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	pods, err := a.cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	podsOn := map[string][]corev1.Pod{}
	var pending []corev1.Pod
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if p.Spec.NodeName != "" {
			podsOn[p.Spec.NodeName] = append(podsOn[p.Spec.NodeName], p)
		} else if p.DeletionTimestamp == nil && unschedulable(&p) {
			pending = append(pending, p)
		}
	}

	registered := map[string]int{}
	var sim []*simNode
	groupNodes := map[string][]corev1.Node{}
	for _, n := range nodes.Items {
		g, err := a.scaler.NodeGroupForNode(&n)
		if err != nil {
			return err
		}
		id := ""
		if g != nil {
			id = g.GetId()
			registered[id]++
			groupNodes[id] = append(groupNodes[id], n)
		}
		if n.Spec.Unschedulable || n.DeletionTimestamp != nil {
			continue
		}
		free := n.Status.Allocatable.DeepCopy()
		for _, p := range podsOn[n.Name] {
			subtract(free, requests(&p))
		}
		sim = append(sim, &simNode{name: n.Name, group: id, labels: n.Labels, taints: n.Spec.Taints, free: free})
	}
	targets := map[string]int{}
	templates := map[string]*corev1.Node{}
	for _, g := range groups {
		target, err := a.scaler.TargetSize(g.GetId())
		if err != nil {
			return err
		}
		targets[g.GetId()] = target
		tmpl, err := a.scaler.TemplateNodeInfo(g.GetId())
		if err != nil {
			continue // no template: the group cannot grow from the simulation
		}
		templates[g.GetId()] = tmpl
		for i := registered[g.GetId()]; i < target; i++ {
			sim = append(sim, templateNode(g.GetId(), tmpl, fmt.Sprintf("upcoming-%d", i)))
		}
	}

	// Scale-up.
	added := map[string]int{}
	for i := range pending {
		p := &pending[i]
		if place(sim, p) {
			continue
		}
		for _, g := range groups {
			tmpl := templates[g.GetId()]
			if tmpl == nil || targets[g.GetId()]+added[g.GetId()] >= int(g.GetMaxSize()) {
				continue
			}
			n := templateNode(g.GetId(), tmpl, fmt.Sprintf("new-%d", added[g.GetId()]))
			if !fits(n, p) {
				continue
			}
			subtract(n.free, requests(p))
			sim = append(sim, n)
			added[g.GetId()]++
			break
		}
	}
	for id, delta := range added {
		if err := a.scaler.IncreaseSize(id, delta); err != nil {
			return fmt.Errorf("increase %s by %d: %w", id, delta, err)
		}
		a.mu.Lock()
		a.increases[id] += delta
		a.mu.Unlock()
		a.t.Logf("autoscaler: scale up %s by %d for %d pending pods", id, delta, len(pending))
	}
	if len(pending) > 0 {
		return nil // no scale-down while pods wait
	}

	// Scale-down.
	for _, g := range groups {
		id := g.GetId()
		members := groupNodes[id]
		sort.Slice(members, func(i, j int) bool { return members[i].Name < members[j].Name })
		for _, n := range members {
			if !machinetest.NodeReady(&n) || !idle(podsOn[n.Name]) {
				delete(a.unneeded, n.Name)
				continue
			}
			a.unneeded[n.Name]++
			if a.unneeded[n.Name] < 2 || targets[id] <= int(g.GetMinSize()) {
				continue
			}
			if err := a.scaler.DeleteNodes(id, &n); err != nil {
				return fmt.Errorf("delete node %s of %s: %w", n.Name, id, err)
			}
			targets[id]--
			delete(a.unneeded, n.Name)
			a.mu.Lock()
			a.deleted = append(a.deleted, n.Name)
			a.mu.Unlock()
			a.t.Logf("autoscaler: scale down %s: node %s", id, n.Name)
		}
	}
	return nil
}

func templateNode(group string, tmpl *corev1.Node, name string) *simNode {
	return &simNode{name: name, group: group, labels: tmpl.Labels, taints: tmpl.Spec.Taints, free: tmpl.Status.Allocatable.DeepCopy()}
}

// place puts the pod on the first simulated node it fits and reports whether it found one.
func place(sim []*simNode, p *corev1.Pod) bool {
	for _, n := range sim {
		if fits(n, p) {
			subtract(n.free, requests(p))
			return true
		}
	}
	return false
}

// fits: the node has the pod's nodeSelector labels, the pod tolerates its taints (except the
// ones of a node that is still starting) and its requests fit the free capacity.
func fits(n *simNode, p *corev1.Pod) bool {
	for k, v := range p.Spec.NodeSelector {
		if n.labels[k] != v {
			return false
		}
	}
	for _, t := range n.taints {
		if t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable || t.Effect == corev1.TaintEffectPreferNoSchedule {
			continue
		}
		tolerated := false
		for _, tol := range p.Spec.Tolerations {
			tolerated = tolerated || tol.ToleratesTaint(klog.Background(), &t, false)
		}
		if !tolerated {
			return false
		}
	}
	for name, q := range requests(p) {
		free, ok := n.free[name]
		if !ok || free.Cmp(q) < 0 {
			return false
		}
	}
	return true
}

// requests are the pod's resource requests, counting itself as one pod.
func requests(p *corev1.Pod) corev1.ResourceList {
	out := corev1.ResourceList{corev1.ResourcePods: resource.MustParse("1")}
	for _, c := range p.Spec.Containers {
		for name, q := range c.Resources.Requests {
			sum := out[name]
			sum.Add(q)
			out[name] = sum
		}
	}
	return out
}

func subtract(free, used corev1.ResourceList) {
	for name, q := range used {
		if f, ok := free[name]; ok {
			f.Sub(q)
			free[name] = f
		}
	}
}

func unschedulable(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return true
		}
	}
	return false
}

// idle: only DaemonSet pods and pods being deleted are left on the node.
func idle(pods []corev1.Pod) bool {
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			continue
		}
		if c := metav1.GetControllerOf(&p); c != nil && c.Kind == "DaemonSet" {
			continue
		}
		return false
	}
	return true
}

func describeGroups(a *autoscaler) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var parts []string
	for id, n := range a.increases {
		parts = append(parts, fmt.Sprintf("%s+%d", id, n))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}
