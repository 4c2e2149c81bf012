package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/internal/eventually"
)

// The InPlaceUpdate strategy end to end: `machinist run` orchestrates as MCM does, the local
// provider's node agent performs the updates (it applies the providerSpec of the class the
// MachineDeployment names now) and reports them with the update-result label.

// TestInPlaceUpdateAuto: every machine is updated in place — same machines, same nodes, same
// VMs, no CreateMachine — at most maxUnavailable nodes selected or cordoned at once, and the
// nodes end with the new class's labels, schedulable, without update labels or taints.
func TestInPlaceUpdateAuto(t *testing.T) {
	w := newWorld(t)
	w.inPlaceClass("v1", `"labels":{"version":"1"}`)
	w.inPlaceClass("v2", `"labels":{"version":"2"},"updateDelay":"1s"`)
	w.inPlaceDeployment("auto", "v1", 4, 2, v1alpha1.OrchestrationTypeAuto)
	w.daemonSet("node-agent")
	sel := w.workload("work", "auto", 2, "200m", nil)
	before := w.waitMachinesRunning("auto", 4, 2*time.Minute)
	w.waitPodsReady(sel, 2, 2*time.Minute)
	vms := w.vmsOf(before)
	creates := w.createCalls()
	busy := w.watchUpdating("auto")

	w.updateMachineDeployment("auto", func(md *v1alpha1.MachineDeployment) { md.Spec.Template.Spec.Class.Name = "v2" })
	w.waitInPlaceDone("auto", 4, "2", 4*time.Minute)

	after := w.machines("auto")
	w.assertSameVMs(vms, after)
	if n := w.createCalls() - creates; n != 0 {
		t.Errorf("the in-place update called CreateMachine %d times, want 0", n)
	}
	// Four replicas with maxUnavailable 2: the first pass selects two nodes at once, never more.
	if most, seen := busy.stop(); most != 2 {
		t.Errorf("at most %d nodes were selected or cordoned at once (%v), want exactly maxUnavailable=2", most, seen)
	}
	for _, m := range after {
		if c := machineCondition(&m, v1alpha1.NodeConditionInPlaceUpdate); c == nil || c.Reason != v1alpha1.ReasonUpdateSuccessful {
			t.Errorf("machine %s: condition InPlaceUpdate %v, want reason UpdateSuccessful", m.Name, c)
		}
		if m.Spec.Class.Name != "v1" {
			t.Errorf("machine %s has class %s: MCM moves machines without changing spec.class", m.Name, m.Spec.Class.Name)
		}
	}
	w.waitPodsReady(sel, 2, 2*time.Minute)
}

// TestInPlaceUpdateSurge: with maxSurge 1 the new set starts with one fresh machine (one
// CreateMachine); old machines are then updated in place until the new set has every replica,
// and the old machine left over is deleted without an update, as MCM does.
func TestInPlaceUpdateSurge(t *testing.T) {
	w := newWorld(t)
	w.inPlaceClass("v1", `"labels":{"version":"1"}`)
	w.inPlaceClass("v2", `"labels":{"version":"2"}`)
	w.inPlaceDeployment("surge", "v1", 3, 1, v1alpha1.OrchestrationTypeAuto, func(md *v1alpha1.MachineDeployment) {
		md.Spec.Strategy.InPlaceUpdate.MaxSurge = ptr.To(intstr.FromInt32(1))
	})
	before := w.vmsOf(w.waitMachinesRunning("surge", 3, 2*time.Minute))
	creates := w.createCalls()

	w.updateMachineDeployment("surge", func(md *v1alpha1.MachineDeployment) { md.Spec.Template.Spec.Class.Name = "v2" })
	w.waitInPlaceDone("surge", 3, "2", 4*time.Minute)

	if n := w.createCalls() - creates; n != 1 {
		t.Errorf("%d CreateMachine calls, want 1 (maxSurge)", n)
	}
	after := w.vmsOf(w.machines("surge"))
	kept, fresh := 0, 0
	for name, v := range after {
		if b, ok := before[name]; ok {
			if b != v {
				t.Errorf("machine %s: %+v before, %+v after: an updated machine keeps its VM and node", name, b, v)
			}
			kept++
		} else {
			fresh++
		}
	}
	if kept != 2 || fresh != 1 {
		t.Errorf("machines %v after (before: %v): want 2 updated in place and 1 fresh", keys(after), keys(before))
	}
}

// TestInPlaceUpdateManual: with orchestration Manual nothing is selected, drained or moved until
// the user labels a node selected-for-update; then exactly that node is updated.
func TestInPlaceUpdateManual(t *testing.T) {
	w := newWorld(t)
	w.inPlaceClass("v1", `"labels":{"version":"1"}`)
	w.inPlaceClass("v2", `"labels":{"version":"2"}`)
	w.inPlaceDeployment("manual", "v1", 2, 1, v1alpha1.OrchestrationTypeManual)
	before := w.waitMachinesRunning("manual", 2, 2*time.Minute)
	vms := w.vmsOf(before)
	creates := w.createCalls()

	w.updateMachineDeployment("manual", func(md *v1alpha1.MachineDeployment) { md.Spec.Template.Spec.Class.Name = "v2" })
	// Every node becomes a candidate, and stays just that.
	eventually.Explained(w.t, time.Minute, "every node a candidate", func() (bool, string) {
		var states []string
		ok := true
		for _, n := range w.poolNodes("manual") {
			c := nodeCondition(&n, v1alpha1.NodeConditionInPlaceUpdate)
			states = append(states, fmt.Sprintf("%s:%v", n.Name, c))
			ok = ok && n.Labels[v1alpha1.LabelNodeCandidateForUpdate] == "true" && c != nil && c.Reason == v1alpha1.ReasonCandidateForUpdate
		}
		return ok, strings.Join(states, " ")
	})
	busy := w.watchUpdating("manual")
	time.Sleep(5 * time.Second) // Auto would have selected a node by now
	if most, seen := busy.stop(); most != 0 {
		t.Fatalf("nodes were selected or cordoned without the user: %v", seen)
	}
	newSet, oldSets := w.inPlaceSets("manual")
	if newSet.Spec.Replicas != 0 || len(oldSets) != 1 || oldSets[0].Spec.Replicas != 2 {
		t.Fatalf("machines moved without the user: new set %d replicas, old sets %v", newSet.Spec.Replicas, describeSets(oldSets))
	}

	// The user picks one node.
	first := before[0].Labels[v1alpha1.LabelNode]
	w.labelNode(first, v1alpha1.LabelNodeSelectedForUpdate, "true")
	eventually.Explained(w.t, 2*time.Minute, "the selected node updated and its machine moved", func() (bool, string) {
		newSet, oldSets := w.inPlaceSets("manual")
		n := w.node(first)
		return newSet.Spec.Replicas == 1 && len(oldSets) == 1 && oldSets[0].Spec.Replicas == 1 && n.Labels["version"] == "2" && updateLabelsGone(n),
			fmt.Sprintf("new set %d, old sets %v, node %s labels %v", newSet.Spec.Replicas, describeSets(oldSets), first, n.Labels)
	})
	second := w.node(before[1].Labels[v1alpha1.LabelNode])
	if second.Labels["version"] != "1" || second.Spec.Unschedulable || second.Labels[v1alpha1.LabelNodeSelectedForUpdate] != "" {
		t.Fatalf("the node the user did not pick changed: labels %v, unschedulable %v", second.Labels, second.Spec.Unschedulable)
	}

	w.labelNode(second.Name, v1alpha1.LabelNodeSelectedForUpdate, "true")
	w.waitInPlaceDone("manual", 2, "2", 2*time.Minute)
	w.assertSameVMs(vms, w.machines("manual"))
	if n := w.createCalls() - creates; n != 0 {
		t.Errorf("the in-place update called CreateMachine %d times, want 0", n)
	}
}

// TestInPlaceUpdateFailure: the agent fails the update (the target class's updateError). The
// machine is InPlaceUpdateFailed with the reason, its node keeps its selection so the rollout
// stops there (maxUnavailable 1), the deployment lists the machine in failedMachines; after
// the health timeout the machine is Failed and replaced by a new machine of the new set, and
// the rollout goes on with the next node, as MCM does.
func TestInPlaceUpdateFailure(t *testing.T) {
	w := newWorld(t)
	w.inPlaceClass("v1", `"labels":{"version":"1"}`)
	w.inPlaceClass("broken", `"labels":{"version":"2"},"updateError":{"reason":"disk full"}`)
	w.inPlaceDeployment("fail", "v1", 3, 1, v1alpha1.OrchestrationTypeAuto, func(md *v1alpha1.MachineDeployment) {
		md.Spec.Template.Spec.MachineConfiguration = &v1alpha1.MachineConfiguration{MachineHealthTimeout: &metav1.Duration{Duration: 30 * time.Second}}
	})
	w.waitMachinesRunning("fail", 3, 2*time.Minute)
	creates := w.createCalls()
	busy := w.watchUpdating("fail")

	w.updateMachineDeployment("fail", func(md *v1alpha1.MachineDeployment) { md.Spec.Template.Spec.Class.Name = "broken" })
	var failed v1alpha1.Machine
	eventually.Explained(w.t, 2*time.Minute, "a machine InPlaceUpdateFailed", func() (bool, string) {
		var states []string
		for _, m := range w.machines("fail") {
			states = append(states, m.Name+":"+string(m.Status.CurrentStatus.Phase))
			if m.Status.CurrentStatus.Phase == v1alpha1.MachineInPlaceUpdateFailed {
				failed = m
				return true, ""
			}
		}
		return false, strings.Join(states, " ")
	})
	if d := failed.Status.LastOperation.Description; !strings.Contains(d, "disk full") || failed.Status.LastOperation.State != v1alpha1.MachineStateFailed {
		t.Errorf("machine %s lastOperation %+v: want state Failed naming the reason", failed.Name, failed.Status.LastOperation)
	}
	node := w.node(failed.Labels[v1alpha1.LabelNode])
	if node.Labels[v1alpha1.LabelNodeUpdateResult] != v1alpha1.LabelValueNodeUpdateFailed || node.Annotations[v1alpha1.AnnotationUpdateFailedReason] != "disk full" {
		t.Errorf("node %s: labels %v annotations %v, want update-result=failed and update-failed-reason=disk full", node.Name, node.Labels, node.Annotations)
	}
	eventually.Explained(w.t, 30*time.Second, "condition UpdateFailed and the deployment's failedMachines", func() (bool, string) {
		node = w.node(node.Name)
		c := nodeCondition(&node, v1alpha1.NodeConditionInPlaceUpdate)
		md := &v1alpha1.MachineDeployment{}
		if err := w.c.Get(w.ctx, clientKey("fail"), md); err != nil {
			return false, err.Error()
		}
		listed := false
		for _, f := range md.Status.FailedMachines {
			listed = listed || (f.Name == failed.Name && strings.Contains(f.LastOperation.Description, "disk full"))
		}
		return c != nil && c.Reason == v1alpha1.ReasonUpdateFailed && c.Message == "Node in-place update failed: disk full" && listed,
			fmt.Sprintf("condition %v, failedMachines %d", c, len(md.Status.FailedMachines))
	})
	// The rollout stops: nothing else is selected and nothing moves while the machine is not
	// replaced (its health timeout is 30s).
	newSet, _ := w.inPlaceSets("fail")
	if selected := w.selectedNodes("fail"); len(selected) != 1 || newSet.Spec.Replicas != 0 {
		t.Fatalf("after the failure: selected nodes %v, new set replicas %d; want only the failed node, nothing moved", selected, newSet.Spec.Replicas)
	}

	// After the health timeout the machine is replaced by a fresh machine of the new set, and
	// the next node is selected.
	eventually.Explained(w.t, 3*time.Minute, "the failed machine replaced in the new set, the next node selected", func() (bool, string) {
		newSet, _ := w.inPlaceSets("fail")
		var states []string
		gone := true
		for _, m := range w.machines("fail") {
			states = append(states, m.Name+":"+string(m.Status.CurrentStatus.Phase))
			gone = gone && m.Name != failed.Name
		}
		selected := w.selectedNodes("fail")
		return gone && newSet.Status.ReadyReplicas >= 1 && len(selected) == 1 && selected[0] != failed.Labels[v1alpha1.LabelNode],
			fmt.Sprintf("machines %v, new set ready %d, selected %v", states, newSet.Status.ReadyReplicas, selected)
	})
	if n := w.createCalls() - creates; n < 1 {
		t.Errorf("the failed machine was replaced with %d CreateMachine calls, want a new VM", n)
	}
	if most, seen := busy.stop(); most > 1 {
		t.Errorf("%d nodes were selected or cordoned at once (%v), want at most maxUnavailable=1", most, seen)
	}
}

// inPlaceClass creates a local MachineClass of the e2e cluster with more providerSpec fields.
func (w *world) inPlaceClass(name, fields string) {
	w.t.Helper()
	w.create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, StringData: map[string]string{"userData": "#!/bin/sh\n"}})
	w.create(&v1alpha1.MachineClass{
		ObjectMeta:   metav1.ObjectMeta{Name: name, Namespace: ns},
		Provider:     "local",
		ProviderSpec: runtime.RawExtension{Raw: []byte(`{"cluster":"e2e","heartbeatInterval":"1s",` + fields + `}`)},
		SecretRef:    &corev1.SecretReference{Name: name, Namespace: ns},
		NodeTemplate: &v1alpha1.NodeTemplate{
			Capacity:     corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi")},
			InstanceType: "local", Region: "local", Zone: "local-1",
		},
	})
}

// inPlaceDeployment creates a MachineDeployment with the InPlaceUpdate strategy (maxSurge 0).
func (w *world) inPlaceDeployment(name, class string, replicas int32, maxUnavailable int32, orchestration v1alpha1.OrchestrationType, change ...func(*v1alpha1.MachineDeployment)) {
	w.machineDeployment(name, class, replicas, 0, 0, func(md *v1alpha1.MachineDeployment) {
		md.Spec.Strategy = v1alpha1.MachineDeploymentStrategy{
			Type: v1alpha1.InPlaceUpdateMachineDeploymentStrategyType,
			InPlaceUpdate: &v1alpha1.InPlaceUpdateMachineDeployment{
				UpdateConfiguration: v1alpha1.UpdateConfiguration{MaxSurge: ptr.To(intstr.FromInt32(0)), MaxUnavailable: ptr.To(intstr.FromInt32(maxUnavailable))},
				OrchestrationType:   orchestration,
			},
		}
		for _, c := range change {
			c(md)
		}
	})
}

// vm identifies a machine's VM and node: what an in-place update must keep.
type vm struct {
	providerID, node string
	nodeUID          types.UID
}

func (w *world) vmsOf(ms []v1alpha1.Machine) map[string]vm {
	w.t.Helper()
	out := map[string]vm{}
	for _, m := range ms {
		n := w.node(m.Labels[v1alpha1.LabelNode])
		out[m.Name] = vm{providerID: m.Spec.ProviderID, node: n.Name, nodeUID: n.UID}
	}
	return out
}

// assertSameVMs fails unless the machines are the ones of before, with their VMs and nodes.
func (w *world) assertSameVMs(before map[string]vm, after []v1alpha1.Machine) {
	w.t.Helper()
	now := w.vmsOf(after)
	if len(now) != len(before) {
		w.t.Errorf("machines %v after the update, %v before: want the same", keys(now), keys(before))
	}
	for name, b := range before {
		if a, ok := now[name]; !ok || a != b {
			w.t.Errorf("machine %s: %+v before the update, %+v after: want the same VM and node", name, b, now[name])
		}
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// waitInPlaceDone waits until the deployment's n machines all belong to the new set, Running
// and available, and their nodes carry version=<version> and no trace of the update.
func (w *world) waitInPlaceDone(pool string, n int32, version string, timeout time.Duration) {
	w.t.Helper()
	eventually.Explained(w.t, timeout, "the in-place update of "+pool+" complete", func() (bool, string) {
		md := &v1alpha1.MachineDeployment{}
		if err := w.c.Get(w.ctx, clientKey(pool), md); err != nil {
			return false, err.Error()
		}
		st := md.Status
		if st.UpdatedReplicas != n || st.Replicas != n || st.AvailableReplicas != n {
			return false, fmt.Sprintf("status replicas %d updated %d available %d", st.Replicas, st.UpdatedReplicas, st.AvailableReplicas)
		}
		newSet, oldSets := w.inPlaceSets(pool)
		for _, ms := range oldSets {
			if ms.Spec.Replicas != 0 {
				return false, "old sets " + describeSets(oldSets)
			}
		}
		for _, m := range w.machines(pool) {
			if ref := metav1.GetControllerOf(&m); ref == nil || ref.UID != newSet.UID || m.Status.CurrentStatus.Phase != v1alpha1.MachineRunning {
				return false, fmt.Sprintf("machine %s %s of %v", m.Name, m.Status.CurrentStatus.Phase, ref)
			}
			if _, ok := m.Labels[v1alpha1.LabelNodeUpdateResult]; ok {
				return false, "machine " + m.Name + " still has the update-result label"
			}
		}
		for _, node := range w.poolNodes(pool) {
			if node.Labels["version"] != version || !updateLabelsGone(node) {
				return false, fmt.Sprintf("node %s labels %v unschedulable %v taints %v", node.Name, node.Labels, node.Spec.Unschedulable, node.Spec.Taints)
			}
		}
		return true, ""
	})
}

// updateLabelsGone: the node is schedulable, without update labels and without the taints of
// the rollout.
func updateLabelsGone(n corev1.Node) bool {
	for _, l := range []string{v1alpha1.LabelNodeCandidateForUpdate, v1alpha1.LabelNodeSelectedForUpdate, v1alpha1.LabelNodeUpdateResult} {
		if _, ok := n.Labels[l]; ok {
			return false
		}
	}
	for _, t := range n.Spec.Taints {
		if t.Key == v1alpha1.TaintCriticalComponentsNotReady || t.Key == v1alpha1.TaintPreferNoSchedule {
			return false
		}
	}
	return !n.Spec.Unschedulable
}

// inPlaceSets returns the deployment's MachineSet of the current class and the others.
func (w *world) inPlaceSets(pool string) (newSet v1alpha1.MachineSet, old []v1alpha1.MachineSet) {
	w.t.Helper()
	md := &v1alpha1.MachineDeployment{}
	if err := w.c.Get(w.ctx, clientKey(pool), md); err != nil {
		w.t.Fatal(err)
	}
	var list v1alpha1.MachineSetList
	if err := w.c.List(w.ctx, &list); err != nil {
		w.t.Fatal(err)
	}
	for _, ms := range list.Items {
		if ref := metav1.GetControllerOf(&ms); ref == nil || ref.UID != md.UID {
			continue
		}
		if ms.Spec.Template.Spec.Class.Name == md.Spec.Template.Spec.Class.Name {
			newSet = ms
		} else {
			old = append(old, ms)
		}
	}
	return newSet, old
}

func describeSets(sets []v1alpha1.MachineSet) string {
	var parts []string
	for _, ms := range sets {
		parts = append(parts, fmt.Sprintf("%s:%d", ms.Name, ms.Spec.Replicas))
	}
	return strings.Join(parts, " ")
}

func (w *world) node(name string) corev1.Node {
	w.t.Helper()
	n, err := w.cs.CoreV1().Nodes().Get(w.ctx, name, metav1.GetOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	return *n
}

func (w *world) poolNodes(pool string) []corev1.Node {
	w.t.Helper()
	list, err := w.cs.CoreV1().Nodes().List(w.ctx, metav1.ListOptions{LabelSelector: "pool=" + pool})
	if err != nil {
		w.t.Fatal(err)
	}
	return list.Items
}

func (w *world) selectedNodes(pool string) []string {
	var out []string
	for _, n := range w.poolNodes(pool) {
		if _, ok := n.Labels[v1alpha1.LabelNodeSelectedForUpdate]; ok {
			out = append(out, n.Name)
		}
	}
	sort.Strings(out)
	return out
}

// labelNode sets a label on a node, as a user with kubectl label does.
func (w *world) labelNode(name, key, value string) {
	w.t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, key, value)
	if _, err := w.cs.CoreV1().Nodes().Patch(w.ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		w.t.Fatal(err)
	}
}

func nodeCondition(n *corev1.Node, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == t {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

func machineCondition(m *v1alpha1.Machine, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range m.Status.Conditions {
		if m.Status.Conditions[i].Type == t {
			return &m.Status.Conditions[i]
		}
	}
	return nil
}

// updatingWatch follows the pool's nodes and remembers the most that were selected for update
// or cordoned at the same time.
type updatingWatch struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	busy    map[string]bool
	most    int
	mostSet []string
}

func (w *world) watchUpdating(pool string) *updatingWatch {
	w.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	wi, err := w.cs.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{LabelSelector: "pool=" + pool})
	if err != nil {
		w.t.Fatal(err)
	}
	u := &updatingWatch{cancel: cancel, done: make(chan struct{}), busy: map[string]bool{}}
	go func() {
		defer close(u.done)
		for ev := range wi.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			if !ok {
				continue
			}
			_, selected := n.Labels[v1alpha1.LabelNodeSelectedForUpdate]
			u.mu.Lock()
			u.busy[n.Name] = ev.Type != watch.Deleted && (selected || n.Spec.Unschedulable)
			var now []string
			for name, b := range u.busy {
				if b {
					now = append(now, name)
				}
			}
			if len(now) > u.most {
				sort.Strings(now)
				u.most, u.mostSet = len(now), now
			}
			u.mu.Unlock()
		}
	}()
	w.t.Cleanup(func() { u.stop() })
	return u
}

// stop ends the watch and returns the most nodes busy at once, and which.
func (u *updatingWatch) stop() (int, []string) {
	u.cancel()
	<-u.done
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.most, u.mostSet
}

// createCalls scrapes how many CreateMachine calls `machinist run` made.
func (w *world) createCalls() int {
	w.t.Helper()
	var total int
	eventually.Explained(w.t, 30*time.Second, "the metrics of machinist run", func() (bool, string) {
		resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(w.metricsPort) + "/metrics")
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		total = 0
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if !strings.HasPrefix(line, "machinist_driver_calls_total{") || !strings.Contains(line, `method="CreateMachine"`) {
				continue
			}
			f := strings.Fields(line)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err != nil {
				return false, line
			}
			total += int(v)
		}
		return sc.Err() == nil, fmt.Sprint(sc.Err())
	})
	return total
}
