package poolpolicy_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	machinistv1alpha1 "github.com/machinist-io/machinist/core/apis/machinist/v1alpha1"
	"github.com/machinist-io/machinist/internal/eventually"
)

// TestManualApprovalReplacesExactlyTheLabelledNodes: the product's controllers with the local
// provider, a pool under `approval: Manual` of one deployment of 3. A class change replaces
// nothing until a node carries MCM's selected-for-update label; then exactly that node's machine
// is replaced, and the two unlabelled ones stay on the old class.
func TestManualApprovalReplacesExactlyTheLabelledNodes(t *testing.T) {
	e := newProduct(t)
	e.localClass("a", nil)
	e.localClass("b", nil)
	e.policy(func(r *machinistv1alpha1.PoolRollout) { r.Approval = machinistv1alpha1.ApprovalManual })
	d := e.member("pool", "a", 3, nil)
	e.run(nil)
	ctx, c, machines := e.ctx, e.c, e.machines

	var old []v1alpha1.Machine
	eventually.Explained(t, 3*time.Minute, "3 Running machines with nodes", func() (bool, string) {
		old = old[:0]
		for _, m := range machines() {
			if m.Status.CurrentStatus.Phase == v1alpha1.MachineRunning && m.Labels[v1alpha1.LabelNode] != "" {
				old = append(old, m)
			}
		}
		return len(old) == 3, fmt.Sprintf("%d Running with a node", len(old))
	})
	e.setClass(d, "b")
	eventually.Explained(t, time.Minute, "the pool waiting for approval", func() (bool, string) {
		p := &machinistv1alpha1.PoolPolicy{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: e.env.NS, Name: "workers"}, p); err != nil {
			return false, err.Error()
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == machinistv1alpha1.PoolWaitingForApproval && cond.Status == metav1.ConditionTrue {
				return true, ""
			}
		}
		return false, fmt.Sprintf("conditions %+v", p.Status.Conditions)
	})
	for _, m := range machines() {
		if m.Spec.Class.Name == "b" {
			t.Fatalf("machine %s of the new class before any node was selected for update", m.Name)
		}
	}

	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		var sets v1alpha1.MachineSetList
		_ = c.List(context.Background(), &sets, client.InNamespace(e.env.NS))
		for _, ms := range sets.Items {
			t.Logf("set %s class %s replicas %d status %+v", ms.Name, ms.Spec.Template.Spec.Class.Name, ms.Spec.Replicas, ms.Status)
		}
		var ml v1alpha1.MachineList
		_ = c.List(context.Background(), &ml, client.InNamespace(e.env.NS))
		for _, m := range ml.Items {
			t.Logf("machine %s class %s node %s annotations %v deleting %v", m.Name, m.Spec.Class.Name, m.Labels[v1alpha1.LabelNode], m.Annotations, m.DeletionTimestamp)
		}
		dd := &v1alpha1.MachineDeployment{}
		_ = c.Get(context.Background(), client.ObjectKeyFromObject(d), dd)
		t.Logf("deployment status %+v", dd.Status)
	})
	chosen := old[0]
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n := &corev1.Node{}
		if err := c.Get(ctx, client.ObjectKey{Name: chosen.Labels[v1alpha1.LabelNode]}, n); err != nil {
			return err
		}
		metav1.SetMetaDataLabel(&n.ObjectMeta, v1alpha1.LabelNodeSelectedForUpdate, "true")
		return c.Update(ctx, n)
	}); err != nil {
		t.Fatal(err)
	}
	eventually.Explained(t, 2*time.Minute, "the selected machine replaced by a Running one of class b", func() (bool, string) {
		chosenLeft, oldLeft, newRunning := false, 0, 0
		for _, m := range machines() {
			switch {
			case m.Name == chosen.Name:
				chosenLeft = true
			case m.Spec.Class.Name == "a":
				oldLeft++
			case m.DeletionTimestamp == nil && m.Status.CurrentStatus.Phase == v1alpha1.MachineRunning:
				newRunning++
			}
		}
		return !chosenLeft && oldLeft == 2 && newRunning == 1, fmt.Sprintf("selected machine left %v, other old %d, new Running %d", chosenLeft, oldLeft, newRunning)
	})
	for _, m := range old[1:] {
		got := &v1alpha1.Machine{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(&m), got); err != nil || got.DeletionTimestamp != nil {
			t.Errorf("unselected machine %s: %v, deleting %v; want it kept", m.Name, err, got.DeletionTimestamp)
		}
	}
}
