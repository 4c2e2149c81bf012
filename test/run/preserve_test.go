package run

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/harness/machinetest"
	"github.com/machinist-io/machinist/internal/eventually"
)

// Machine preservation end to end: `machinist run` with the local provider, whose machines are
// real Nodes of the test's API server. A machine fails the way MCM sees it fail: a node problem
// detector reports KernelDeadlock=True (one of the default --node-conditions) while the node's
// kubelet (the local agent) keeps running its pods, so the drain of a preserved node finishes.

// node reads a node; nil when it does not exist.
func (e *e2e) node(name string) *corev1.Node {
	e.t.Helper()
	n := &corev1.Node{}
	if err := e.c.Get(context.Background(), client.ObjectKey{Name: name}, n); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		e.t.Fatal(err)
	}
	return n
}

// machine reads a machine; nil when it does not exist.
func (e *e2e) machine(ns, name string) *v1alpha1.Machine {
	e.t.Helper()
	m := &v1alpha1.Machine{}
	if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, m); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		e.t.Fatal(err)
	}
	return m
}

// update applies change to a fresh copy of obj and writes it (the status too with status),
// retrying conflicts with the controllers.
func (e *e2e) update(obj client.Object, status bool, change func()) {
	e.t.Helper()
	ctx := context.Background()
	for range 50 {
		if err := e.c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			e.t.Fatal(err)
		}
		change()
		var err error
		if status {
			err = e.c.Status().Update(ctx, obj)
		} else {
			err = e.c.Update(ctx, obj)
		}
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) {
			e.t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.t.Fatalf("update %s: too many conflicts", obj.GetName())
}

// annotate sets (or with "" removes) an annotation of obj.
func (e *e2e) annotate(obj client.Object, key, value string) {
	e.t.Helper()
	e.update(obj, false, func() {
		a := obj.GetAnnotations()
		if a == nil {
			a = map[string]string{}
		}
		if value == "" {
			delete(a, key)
		} else {
			a[key] = value
		}
		obj.SetAnnotations(a)
	})
}

// setKernelDeadlock reports the node problem KernelDeadlock (True: the machine is unhealthy).
func (e *e2e) setKernelDeadlock(node string, deadlocked bool) {
	e.t.Helper()
	status, reason := corev1.ConditionFalse, "KernelHasNoDeadlock"
	if deadlocked {
		status, reason = corev1.ConditionTrue, "KernelDeadlock"
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
	e.update(n, true, func() {
		cond := corev1.NodeCondition{Type: "KernelDeadlock", Status: status, Reason: reason,
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}
		for i := range n.Status.Conditions {
			if n.Status.Conditions[i].Type == cond.Type {
				n.Status.Conditions[i] = cond
				return
			}
		}
		n.Status.Conditions = append(n.Status.Conditions, cond)
	})
}

func preservedCondition(n *corev1.Node) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == v1alpha1.NodeConditionPreserved {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

func hasPreservedTaint(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == v1alpha1.TaintPreserved && t.Effect == corev1.TaintEffectNoSchedule {
			return true
		}
	}
	return false
}

// caDisabled reports whether the node carries Cluster Autoscaler's scale-down-disabled
// annotation as the controller sets it (with the by-mcm marker).
func caDisabled(n *corev1.Node) bool {
	return n.Annotations[v1alpha1.AnnotationCAScaleDownDisabled] == "true" && n.Annotations[v1alpha1.AnnotationCAScaleDownDisabledByMCM] == "true"
}

// liveMachines are the machines of ns not being deleted, sorted by name.
func (e *e2e) liveMachines(ns string) []v1alpha1.Machine {
	var out []v1alpha1.Machine
	for _, m := range e.machines(ns) {
		if m.DeletionTimestamp == nil {
			out = append(out, m)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// waitEvent waits until an event with reason is recorded about the object named name. The
// controller writes events in the background, so one can arrive after the change it describes
// is visible.
func (e *e2e) waitEvent(ns, name, reason string) {
	e.t.Helper()
	eventually.Explained(e.t, 30*time.Second, reason+" event on "+name, func() (bool, string) {
		var evs corev1.EventList
		if err := e.c.List(context.Background(), &evs, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		var reasons []string
		for _, ev := range evs.Items {
			if ev.InvolvedObject.Name == name {
				if ev.Reason == reason {
					return true, ""
				}
				reasons = append(reasons, ev.Reason)
			}
		}
		return false, fmt.Sprintf("its events: %v", reasons)
	})
}

func (e *e2e) machineSetOf(ns, deployment string) *v1alpha1.MachineSet {
	e.t.Helper()
	var list v1alpha1.MachineSetList
	if err := e.c.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		e.t.Fatal(err)
	}
	for i := range list.Items {
		if ref := metav1.GetControllerOf(&list.Items[i]); ref != nil && ref.Name == deployment {
			return &list.Items[i]
		}
	}
	e.t.Fatalf("no MachineSet of %s", deployment)
	return nil
}

// TestRunPreserveRunningMachine: preserve=now on a Running machine's node preserves it (expiry
// time from --machine-preserve-timeout, Cluster Autoscaler's annotations, condition Preserved);
// a node's annotation wins over its machine's; a scale-down deletes preserved machines last;
// preserve=false ends preservation; deleting a preserved machine deletes it.
func TestRunPreserveRunningMachine(t *testing.T) {
	e := newE2E(t)
	e.startRun("--machine-preserve-timeout", "1h")
	e.localClass("default", "local", "e2e")
	e.newDeployment("default", "pool", "local", 3, 1, 0)
	e.waitRunning("default", 3, 90*time.Second, nil)
	ms := e.liveMachines("default")
	x, y := ms[0].Name, ms[1].Name // local nodes are named after their machines

	// y's node says false before its machine says now: the node wins, y is never preserved.
	w := machinetest.WatchMachines(t, e.c, "default", func(ms map[string]*v1alpha1.Machine) string {
		if m := ms[y]; m != nil && m.Status.CurrentStatus.PreserveExpiryTime != nil {
			return y + " was preserved although its node says " + v1alpha1.PreserveFalse
		}
		if m := ms[x]; m != nil && m.DeletionTimestamp != nil {
			return "preserved machine " + x + " deleted by a scale-down"
		}
		return ""
	})
	w.Arm()
	e.annotate(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: y}}, v1alpha1.AnnotationPreserve, v1alpha1.PreserveFalse)
	eventually.Explained(e.t, 30*time.Second, "the node's value recorded on "+y, func() (bool, string) {
		m := e.machine("default", y)
		return m.Annotations[v1alpha1.AnnotationLastAppliedNodePreserveValue] == v1alpha1.PreserveFalse, fmt.Sprint(m.Annotations)
	})
	e.annotate(&v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: y}}, v1alpha1.AnnotationPreserve, v1alpha1.PreserveNow)
	eventually.Explained(e.t, 30*time.Second, "the machine's own value removed from "+y, func() (bool, string) {
		m := e.machine("default", y)
		_, has := m.Annotations[v1alpha1.AnnotationPreserve]
		return !has, fmt.Sprint(m.Annotations)
	})

	before := time.Now()
	e.annotate(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: x}}, v1alpha1.AnnotationPreserve, v1alpha1.PreserveNow)
	eventually.Explained(e.t, 30*time.Second, x+" preserved", func() (bool, string) {
		m, n := e.machine("default", x), e.node(x)
		c := preservedCondition(n)
		ok := m.Status.CurrentStatus.PreserveExpiryTime != nil && caDisabled(n) && c != nil && c.Status == corev1.ConditionTrue &&
			m.Annotations[v1alpha1.AnnotationLastAppliedNodePreserveValue] == v1alpha1.PreserveNow
		return ok, fmt.Sprintf("expiry %v, node annotations %v, condition %+v", m.Status.CurrentStatus.PreserveExpiryTime, n.Annotations, c)
	})
	m, n := e.machine("default", x), e.node(x)
	exp := m.Status.CurrentStatus.PreserveExpiryTime.Time
	if exp.Before(before.Add(time.Hour-time.Minute)) || exp.After(time.Now().Add(time.Hour+time.Minute)) {
		t.Errorf("preserveExpiryTime %s is not --machine-preserve-timeout (1h) from now", exp)
	}
	c := preservedCondition(n)
	if c.Reason != v1alpha1.PreservedReasonByUser || !strings.HasPrefix(c.Message, v1alpha1.PreservedMessageUntil+" ") {
		t.Errorf("condition Preserved %+v: want reason %q and message %q…", c, v1alpha1.PreservedReasonByUser, v1alpha1.PreservedMessageUntil)
	}
	if hasPreservedTaint(n) || n.Spec.Unschedulable || m.Status.CurrentStatus.Phase != v1alpha1.MachineRunning {
		t.Errorf("a preserved Running machine keeps taking pods: taints %v, unschedulable %v, phase %s", n.Spec.Taints, n.Spec.Unschedulable, m.Status.CurrentStatus.Phase)
	}
	e.waitEvent("default", x, "Preserved")

	// Scale down to 1: the preserved machine is the one that stays.
	e.updateDeployment("default", "pool", func(d *v1alpha1.MachineDeployment) { d.Spec.Replicas = 1 })
	e.waitRunning("default", 1, 60*time.Second, nil)
	if got := e.liveMachines("default")[0].Name; got != x {
		t.Fatalf("survivor %s, want the preserved %s", got, x)
	}
	if v := w.Stop().Violations; len(v) > 0 {
		t.Fatal(v[0])
	}

	// preserve=false ends it: expiry time, annotations and condition.
	e.annotate(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: x}}, v1alpha1.AnnotationPreserve, v1alpha1.PreserveFalse)
	eventually.Explained(e.t, 30*time.Second, x+" no longer preserved", func() (bool, string) {
		m, n := e.machine("default", x), e.node(x)
		c := preservedCondition(n)
		_, ann := n.Annotations[v1alpha1.AnnotationCAScaleDownDisabled]
		ok := m.Status.CurrentStatus.PreserveExpiryTime == nil && !ann && c != nil && c.Status == corev1.ConditionFalse && c.Reason == v1alpha1.PreservedReasonStopped
		return ok, fmt.Sprintf("expiry %v, node annotations %v, condition %+v", m.Status.CurrentStatus.PreserveExpiryTime, n.Annotations, c)
	})
	if n := e.node(x); n.Annotations[v1alpha1.AnnotationPreserve] != v1alpha1.PreserveFalse {
		t.Errorf("preserve=false was removed from the node: %v (MCM keeps it, to stop auto-preservation)", n.Annotations)
	}

	// Deleting a preserved machine deletes it: explicit deletion always wins.
	e.annotate(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: x}}, v1alpha1.AnnotationPreserve, v1alpha1.PreserveNow)
	eventually.Explained(e.t, 30*time.Second, x+" preserved again", func() (bool, string) {
		m := e.machine("default", x)
		return m.Status.CurrentStatus.PreserveExpiryTime != nil, fmt.Sprint(m.Status.CurrentStatus)
	})
	if err := e.c.Delete(context.Background(), &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: x}}); err != nil {
		t.Fatal(err)
	}
	eventually.Explained(e.t, 60*time.Second, x+" deleted and replaced", func() (bool, string) {
		live := e.liveMachines("default")
		return e.machine("default", x) == nil && e.node(x) == nil && len(live) == 1 && live[0].Status.CurrentStatus.Phase == v1alpha1.MachineRunning,
			fmt.Sprintf("%d live machines", len(live))
	})
}

// TestRunPreserveFailedMachine: a machine whose node says when-failed fails and is preserved:
// it stays Failed and is not replaced, its node is tainted (not cordoned) and drained but keeps
// its DaemonSet pod, the condition Preserved says so, the statuses count it; when the node
// recovers the machine is Running again and preservation ends (when-failed). Then
// autoPreserveFailedMachineMax auto-preserves a failing machine, and lowering it to 0 lets the
// machine go.
func TestRunPreserveFailedMachine(t *testing.T) {
	e := newE2E(t)
	e.startRun("--machine-preserve-timeout", "1h", "--machine-health-timeout", "2s")
	ctx := context.Background()
	e.localClass("default", "local", "e2e")
	e.newDeployment("default", "pool", "local", 2, 1, 0)
	e.waitRunning("default", 2, 90*time.Second, nil)
	ms := e.liveMachines("default")
	x, z := ms[0].Name, ms[1].Name

	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "agent"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "agent"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "agent"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "agent"}}},
			},
		},
	}
	if err := e.c.Create(ctx, ds); err != nil {
		t.Fatal(err)
	}
	pod := func(name string, owner *metav1.OwnerReference) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec: corev1.PodSpec{NodeName: x, TerminationGracePeriodSeconds: ptr.To[int64](1),
				Containers: []corev1.Container{{Name: "c", Image: name}}},
		}
		if owner != nil {
			p.OwnerReferences = []metav1.OwnerReference{*owner}
		}
		if err := e.c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	pod("app", nil)
	pod("agent-x", &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds.Name, UID: ds.UID, Controller: ptr.To(true)})
	eventually.Explained(e.t, 30*time.Second, "pods running on "+x, func() (bool, string) {
		var pods corev1.PodList
		if err := e.c.List(ctx, &pods, client.InNamespace("default")); err != nil {
			return false, err.Error()
		}
		running := 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return running == 2, fmt.Sprintf("%d running", running)
	})

	e.annotate(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: x}}, v1alpha1.AnnotationPreserve, v1alpha1.PreserveWhenFailed)
	eventually.Explained(e.t, 30*time.Second, "the node's value recorded on "+x, func() (bool, string) {
		m := e.machine("default", x)
		return m.Annotations[v1alpha1.AnnotationLastAppliedNodePreserveValue] == v1alpha1.PreserveWhenFailed, fmt.Sprint(m.Annotations)
	})
	if m := e.machine("default", x); m.Status.CurrentStatus.PreserveExpiryTime != nil {
		t.Fatalf("when-failed preserved Running machine %s", x)
	}
	w := machinetest.WatchMachines(t, e.c, "default", func(ms map[string]*v1alpha1.Machine) string {
		if m := ms[x]; m == nil || m.DeletionTimestamp != nil {
			return "preserved Failed machine " + x + " deleted"
		}
		if len(ms) > 2 {
			return "a replacement was created for the preserved machine: " + machinetest.Describe(ms)
		}
		return ""
	})
	w.Arm()

	e.setKernelDeadlock(x, true)
	eventually.Explained(e.t, 60*time.Second, x+" Failed, preserved and drained", func() (bool, string) {
		m, n := e.machine("default", x), e.node(x)
		c := preservedCondition(n)
		ok := m.Status.CurrentStatus.Phase == v1alpha1.MachineFailed && m.Status.CurrentStatus.PreserveExpiryTime != nil &&
			hasPreservedTaint(n) && caDisabled(n) && c != nil && c.Status == corev1.ConditionTrue
		return ok, fmt.Sprintf("phase %s, expiry %v, taints %v, annotations %v, condition %+v",
			m.Status.CurrentStatus.Phase, m.Status.CurrentStatus.PreserveExpiryTime, n.Spec.Taints, n.Annotations, c)
	})
	n := e.node(x)
	if c := preservedCondition(n); c.Reason != v1alpha1.PreservedReasonByUser || !strings.HasPrefix(c.Message, v1alpha1.PreservedMessageDrained+" "+v1alpha1.PreservedMessageUntil) {
		t.Errorf("condition Preserved %+v: want reason %q, message %q…", c, v1alpha1.PreservedReasonByUser, v1alpha1.PreservedMessageDrained)
	}
	if n.Spec.Unschedulable {
		t.Error("the preserved node was cordoned: MCM only taints it, so an operator's cordon survives preservation")
	}
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "app"}, &corev1.Pod{}); !apierrors.IsNotFound(err) {
		t.Errorf("pod app still on the preserved node (err %v)", err)
	}
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "agent-x"}, &corev1.Pod{}); err != nil {
		t.Errorf("the DaemonSet pod left the preserved node: %v", err)
	}
	eventually.Explained(e.t, 30*time.Second, "statuses count the preserved Failed machine", func() (bool, string) {
		ms, d := e.machineSetOf("default", "pool"), e.deployment("default", "pool")
		avail := false
		for _, c := range d.Status.Conditions {
			avail = avail || (c.Type == v1alpha1.MachineDeploymentAvailable && c.Status == v1alpha1.ConditionTrue)
		}
		failedListed := ms.Status.FailedMachines != nil && len(*ms.Status.FailedMachines) > 0
		return ms.Status.PreservedFailedReplicas == 1 && d.Status.PreservedFailedReplicas == 1 && avail && !failedListed,
			fmt.Sprintf("set %+v, deployment preserved %d conditions %+v", ms.Status, d.Status.PreservedFailedReplicas, d.Status.Conditions)
	})

	// The node recovers: Running again, taint gone, when-failed preservation over (the
	// annotation stays for the next failure).
	e.setKernelDeadlock(x, false)
	eventually.Explained(e.t, 60*time.Second, x+" Running again and released", func() (bool, string) {
		m, n := e.machine("default", x), e.node(x)
		c := preservedCondition(n)
		ok := m.Status.CurrentStatus.Phase == v1alpha1.MachineRunning && m.Status.CurrentStatus.PreserveExpiryTime == nil &&
			!hasPreservedTaint(n) && !caDisabled(n) && c != nil && c.Status == corev1.ConditionFalse && c.Reason == v1alpha1.PreservedReasonStopped
		return ok, fmt.Sprintf("phase %s, expiry %v, taints %v, annotations %v, condition %+v",
			m.Status.CurrentStatus.Phase, m.Status.CurrentStatus.PreserveExpiryTime, n.Spec.Taints, n.Annotations, c)
	})
	if n := e.node(x); n.Annotations[v1alpha1.AnnotationPreserve] != v1alpha1.PreserveWhenFailed {
		t.Errorf("when-failed removed from the node on recovery: %v", n.Annotations)
	}
	if v := w.Stop().Violations; len(v) > 0 {
		t.Fatal(v[0])
	}

	// autoPreserveFailedMachineMax 1: z fails, is auto-preserved; the maximum lowered to 0 lets
	// it go and it is replaced.
	e.updateDeployment("default", "pool", func(d *v1alpha1.MachineDeployment) { d.Spec.AutoPreserveFailedMachineMax = 1 })
	eventually.Explained(e.t, 30*time.Second, "the set's autoPreserveFailedMachineMax", func() (bool, string) {
		ms := e.machineSetOf("default", "pool")
		return ms.Spec.AutoPreserveFailedMachineMax == 1, fmt.Sprint(ms.Spec.AutoPreserveFailedMachineMax)
	})
	e.setKernelDeadlock(z, true)
	eventually.Explained(e.t, 60*time.Second, z+" auto-preserved", func() (bool, string) {
		m, n := e.machine("default", z), e.node(z)
		if m == nil || n == nil {
			return false, z + " gone"
		}
		c := preservedCondition(n)
		ok := m.Annotations[v1alpha1.AnnotationPreserve] == v1alpha1.PreserveAuto && m.Status.CurrentStatus.PreserveExpiryTime != nil &&
			c != nil && c.Status == corev1.ConditionTrue && c.Reason == v1alpha1.PreservedReasonByMCM
		return ok, fmt.Sprintf("annotations %v, status %+v, condition %+v", m.Annotations, m.Status.CurrentStatus, c)
	})
	eventually.Explained(e.t, 30*time.Second, "autoPreserveFailedMachineCount 1", func() (bool, string) {
		ms := e.machineSetOf("default", "pool")
		return ms.Status.AutoPreserveFailedMachineCount == 1, fmt.Sprintf("%+v", ms.Status)
	})
	e.waitEvent("default", e.machineSetOf("default", "pool").Name, "AutoPreserved")
	e.updateDeployment("default", "pool", func(d *v1alpha1.MachineDeployment) { d.Spec.AutoPreserveFailedMachineMax = 0 })
	eventually.Explained(e.t, 90*time.Second, z+" replaced", func() (bool, string) {
		live := e.liveMachines("default")
		names := []string{}
		for _, m := range live {
			names = append(names, m.Name+"="+string(m.Status.CurrentStatus.Phase))
		}
		ok := len(live) == 2 && live[0].Status.CurrentStatus.Phase == v1alpha1.MachineRunning && live[1].Status.CurrentStatus.Phase == v1alpha1.MachineRunning
		for _, m := range live {
			ok = ok && m.Name != z
		}
		return ok, strings.Join(names, " ")
	})
	e.waitEvent("default", e.machineSetOf("default", "pool").Name, "AutoPreservationStopped")
}

// TestRunAutoPreserveAndExpiry: two machines of a deployment with autoPreserveFailedMachineMax 1
// fail together. The replacement rate limit lets one fail first; the MachineSet auto-preserves
// it, which frees the limit for the second, which is replaced (the maximum is reached). When the
// preservation expires the preserved machine is replaced too. A standalone machine's own
// spec.machinePreserveTimeout wins over the flag: its preservation expires, the annotation goes,
// and the (Running) machine stays.
func TestRunAutoPreserveAndExpiry(t *testing.T) {
	e := newE2E(t)
	e.startRun("--machine-preserve-timeout", "20s", "--machine-health-timeout", "2s")
	e.localClass("default", "local", "e2e")
	e.newDeployment("default", "pool", "local", 3, 1, 0)
	e.updateDeployment("default", "pool", func(d *v1alpha1.MachineDeployment) { d.Spec.AutoPreserveFailedMachineMax = 1 })
	e.waitRunning("default", 3, 90*time.Second, nil)
	ms := e.liveMachines("default")
	a, b := ms[0].Name, ms[1].Name

	e.setKernelDeadlock(a, true)
	e.setKernelDeadlock(b, true)
	var kept, replaced string
	eventually.Explained(e.t, 90*time.Second, "one auto-preserved, the other replaced", func() (bool, string) {
		live := e.liveMachines("default")
		var preserved []string
		for _, m := range live {
			if m.Annotations[v1alpha1.AnnotationPreserve] == v1alpha1.PreserveAuto && m.Status.CurrentStatus.PreserveExpiryTime != nil &&
				m.Status.CurrentStatus.Phase == v1alpha1.MachineFailed {
				preserved = append(preserved, m.Name)
			}
		}
		gone := 0
		for _, name := range []string{a, b} {
			if m := e.machine("default", name); m == nil || m.DeletionTimestamp != nil {
				gone++
				replaced = name
			}
		}
		if len(preserved) == 1 {
			kept = preserved[0]
		}
		return len(preserved) == 1 && gone == 1 && len(live) == 3, fmt.Sprintf("preserved %v, %d of %s %s gone, %d live", preserved, gone, a, b, len(live))
	})
	if kept == replaced || (kept != a && kept != b) {
		t.Fatalf("kept %s, replaced %s: want one of %s and %s each", kept, replaced, a, b)
	}
	if st := e.machineSetOf("default", "pool").Status; st.AutoPreserveFailedMachineCount != 1 {
		t.Errorf("autoPreserveFailedMachineCount %d, want 1", st.AutoPreserveFailedMachineCount)
	}

	// A standalone machine with its own timeout, preserved while Running.
	m := &v1alpha1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "solo",
			Annotations: map[string]string{v1alpha1.AnnotationPreserve: v1alpha1.PreserveNow}},
		Spec: v1alpha1.MachineSpec{
			Class:                v1alpha1.ClassSpec{Kind: "MachineClass", Name: "local"},
			MachineConfiguration: &v1alpha1.MachineConfiguration{MachinePreserveTimeout: &metav1.Duration{Duration: 3 * time.Second}},
		},
	}
	if err := e.c.Create(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	soloPreserved := machinetest.WatchMachines(t, e.c, "default", func(ms map[string]*v1alpha1.Machine) string {
		if m := ms["solo"]; m != nil && m.Status.CurrentStatus.PreserveExpiryTime != nil {
			if d := m.Status.CurrentStatus.PreserveExpiryTime.Sub(m.CreationTimestamp.Time); d > time.Minute {
				return fmt.Sprintf("solo preserved for %s: its spec.machinePreserveTimeout 3s must win over the flag", d)
			}
			return "preserved"
		}
		return ""
	})
	soloPreserved.Arm()

	// The auto-preserved machine's preservation expires (20s): it is replaced.
	eventually.Explained(e.t, 90*time.Second, kept+" replaced after its preservation expired", func() (bool, string) {
		if m := e.machine("default", kept); m != nil && m.DeletionTimestamp == nil {
			return false, fmt.Sprintf("%s: %+v", kept, m.Status.CurrentStatus)
		}
		running := 0
		for _, m := range e.liveMachines("default") {
			if m.Labels["pool"] == "pool" && m.Status.CurrentStatus.Phase == v1alpha1.MachineRunning {
				running++
			}
		}
		return running == 3, fmt.Sprintf("%d Running in the pool", running)
	})
	e.waitEvent("default", kept, "PreservationExpired")

	eventually.Explained(e.t, 60*time.Second, "solo's preservation over", func() (bool, string) {
		m, n := e.machine("default", "solo"), e.node("solo")
		if n == nil {
			return false, "no node yet"
		}
		c := preservedCondition(n)
		_, ann := m.Annotations[v1alpha1.AnnotationPreserve]
		ok := m.Status.CurrentStatus.Phase == v1alpha1.MachineRunning && m.Status.CurrentStatus.PreserveExpiryTime == nil && !ann &&
			!caDisabled(n) && c != nil && c.Reason == v1alpha1.PreservedReasonStopped
		return ok, fmt.Sprintf("annotations %v, status %+v, node annotations %v, condition %+v", m.Annotations, m.Status.CurrentStatus, n.Annotations, c)
	})
	v := soloPreserved.Stop().Violations
	if len(v) == 0 {
		t.Fatal("solo was never preserved")
	}
	for _, s := range v {
		if s != "preserved" {
			t.Fatal(s)
		}
	}
}

// TestRunPreserveDuringRollout: a rollout does not stop at a preserved machine (MCM: preservation
// does not hold a rolling update back): the old MachineSet is scaled down to zero, deleting its
// preserved machine last, and the deployment ends with every machine on the new template.
func TestRunPreserveDuringRollout(t *testing.T) {
	e := newE2E(t)
	e.startRun("--machine-preserve-timeout", "1h")
	e.localClass("default", "class-a", "e2e")
	e.localClass("default", "class-b", "e2e")
	e.newDeployment("default", "pool", "class-a", 3, 1, 0)
	e.waitRunning("default", 3, 90*time.Second, nil)
	x := e.liveMachines("default")[1].Name
	e.annotate(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: x}}, v1alpha1.AnnotationPreserve, v1alpha1.PreserveNow)
	eventually.Explained(e.t, 30*time.Second, x+" preserved", func() (bool, string) {
		m := e.machine("default", x)
		return m.Status.CurrentStatus.PreserveExpiryTime != nil, fmt.Sprint(m.Status.CurrentStatus)
	})

	w := machinetest.WatchMachines(t, e.c, "default", func(ms map[string]*v1alpha1.Machine) string {
		m := ms[x]
		if m == nil || m.DeletionTimestamp == nil {
			return ""
		}
		for name, o := range ms {
			if name != x && o.Spec.Class.Name == "class-a" && o.DeletionTimestamp == nil {
				return fmt.Sprintf("preserved %s deleted before %s of the old set", x, name)
			}
		}
		return ""
	})
	w.Arm()
	e.updateDeployment("default", "pool", func(d *v1alpha1.MachineDeployment) { d.Spec.Template.Spec.Class.Name = "class-b" })
	onB := func(m *v1alpha1.Machine) bool { return m.Spec.Class.Name == "class-b" }
	e.waitRunning("default", 3, 180*time.Second, onB)
	e.waitRunning("default", 3, 60*time.Second, nil)
	if v := w.Stop().Violations; len(v) > 0 {
		t.Fatal(v[0])
	}
	if e.machine("default", x) != nil {
		t.Fatalf("preserved %s of the old set outlived the rollout", x)
	}
}
