package poolpolicy_test

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	machinistv1alpha1 "github.com/machinist-io/machinist/core/apis/machinist/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/manager"
	"github.com/machinist-io/machinist/internal/eventually"
)

// TestCordonLeavesAnUndrainableNodeAndFinishesTheRest: the product's controllers with the local
// provider, a pool under `undrainable: Cordon` of one deployment of 2 and a drain timeout of 3 s.
// One node runs a pod whose PodDisruptionBudget allows no eviction. A class change replaces both
// machines: the blocked one is never drained by force — its node stays cordoned with the pod,
// the machine stays (terminating) marked machinist.io/undrainable naming the budget's block —
// and the rollout finishes with two Running machines of the new class.
func TestCordonLeavesAnUndrainableNodeAndFinishesTheRest(t *testing.T) {
	e := newProduct(t)
	e.localClass("a", nil)
	e.localClass("b", nil)
	e.policy(func(r *machinistv1alpha1.PoolRollout) { r.Undrainable = machinistv1alpha1.UndrainableCordon })
	d := e.member("pool", "a", 2, nil)
	e.run(func(o *manager.Options) { o.Machine.DrainTimeout = 3 * time.Second })
	ctx, c, create := e.ctx, e.c, e.create

	var blocked v1alpha1.Machine
	eventually.Explained(t, 3*time.Minute, "2 Running machines with nodes", func() (bool, string) {
		var list v1alpha1.MachineList
		if err := c.List(ctx, &list, client.InNamespace(e.env.NS)); err != nil {
			return false, err.Error()
		}
		n, states := 0, ""
		for _, m := range list.Items {
			states += fmt.Sprintf(" %s=%s (%s)", m.Name, m.Status.CurrentStatus.Phase, m.Status.LastOperation.Description)
			if m.Status.CurrentStatus.Phase == v1alpha1.MachineRunning && m.Labels[v1alpha1.LabelNode] != "" {
				n++
				blocked = m
			}
		}
		return n == 2, fmt.Sprintf("%d of %d Running with a node:%s", n, len(list.Items), states)
	})
	node := blocked.Labels[v1alpha1.LabelNode]
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "db-0", Labels: map[string]string{"app": "db"}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "db", Image: "db"}}}}
	create(pod)
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return err
		}
		pod.Status.Phase = corev1.PodRunning
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		return c.Status().Update(ctx, pod)
	}); err != nil {
		t.Fatal(err)
	}
	one := intstr.FromInt32(1)
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}}}
	create(pdb)
	pdb.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: pdb.Generation, ExpectedPods: 1, CurrentHealthy: 1, DesiredHealthy: 1}
	if err := c.Status().Update(ctx, pdb); err != nil {
		t.Fatal(err)
	}

	e.setClass(d, "b")

	eventually.Explained(t, 3*time.Minute, "the blocked machine parked, the rest replaced", func() (bool, string) {
		var list v1alpha1.MachineList
		if err := c.List(ctx, &list, client.InNamespace(e.env.NS)); err != nil {
			return false, err.Error()
		}
		parked, otherOld, newRunning, seen := false, 0, 0, "gone"
		for _, m := range list.Items {
			switch {
			case m.Name == blocked.Name:
				seen = fmt.Sprintf("%s deleting=%v annotations=%v last=%q", m.Status.CurrentStatus.Phase, m.DeletionTimestamp != nil, m.Annotations, m.Status.LastOperation.Description)
				_, marked := m.Annotations[machinistv1alpha1.AnnotationUndrainable]
				parked = marked && m.DeletionTimestamp != nil
			case m.Spec.Class.Name == "a":
				otherOld++
			case m.DeletionTimestamp == nil && m.Status.CurrentStatus.Phase == v1alpha1.MachineRunning:
				newRunning++
			}
		}
		return parked && otherOld == 0 && newRunning == 2, fmt.Sprintf("blocked machine parked %v (%s), other old machines %d, new Running %d", parked, seen, otherOld, newRunning)
	})

	var m v1alpha1.Machine
	if err := c.Get(ctx, client.ObjectKeyFromObject(&blocked), &m); err != nil {
		t.Fatalf("the undrainable machine is gone (%v): it must stay until its node drains", err)
	}
	n := &corev1.Node{}
	if err := c.Get(ctx, client.ObjectKey{Name: node}, n); err != nil || !n.Spec.Unschedulable {
		t.Fatalf("node %s: %v, unschedulable %v; want it kept and cordoned", node, err, n.Spec.Unschedulable)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil || pod.DeletionTimestamp != nil {
		t.Fatalf("pod db-0: %v, deleting %v; want it left running under its budget (never forced)", err, pod.DeletionTimestamp)
	}
	t.Logf("%s: %s", machinistv1alpha1.AnnotationUndrainable, m.Annotations[machinistv1alpha1.AnnotationUndrainable])
}
