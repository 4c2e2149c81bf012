package poolpolicy_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	machinistv1alpha1 "github.com/machinist-io/machinist/core/apis/machinist/v1alpha1"
	"github.com/machinist-io/machinist/harness/ctrltest"
	"github.com/machinist-io/machinist/harness/machinetest"
	"github.com/machinist-io/machinist/harness/testenv"
	"github.com/machinist-io/machinist/internal/eventually"
	_ "github.com/machinist-io/machinist/providers/local"
)

// TestManualApprovalReplacesExactlyTheLabelledNodes: the product's controllers with the local
// provider, a pool under `approval: Manual` of one deployment of 3. A class change replaces
// nothing until a node carries MCM's selected-for-update label; then exactly that node's machine
// is replaced, and the two unlabelled ones stay on the old class.
func TestManualApprovalReplacesExactlyTheLabelledNodes(t *testing.T) {
	e := ctrltest.NewEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := client.New(e.Config, client.Options{Scheme: testenv.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	create := func(o client.Object) {
		t.Helper()
		o.SetNamespace(e.NS)
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	spec := fmt.Sprintf(`{"cluster":%q,"zone":"z","heartbeatInterval":"1s","nodeMonitorGracePeriod":"30s"}`, e.NS)
	for _, name := range []string{"a", "b"} {
		create(&v1alpha1.MachineClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provider: "local", ProviderSpec: runtime.RawExtension{Raw: []byte(spec)}})
	}
	create(&machinistv1alpha1.PoolPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "workers"},
		Spec: machinistv1alpha1.PoolPolicySpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"worker-pool": "workers"}},
			Rollout: machinistv1alpha1.PoolRollout{MaxSurge: ptr.To(intstr.FromInt32(1)), MaxUnavailable: ptr.To(intstr.FromInt32(0)),
				Approval: machinistv1alpha1.ApprovalManual},
		},
	})
	d := machinetest.Deployment("", "pool", "a", 3, machinetest.Pool("pool"), 1, 0)
	d.Labels = map[string]string{"worker-pool": "workers"}
	create(d)
	ctrltest.RunProduct(t, ctrltest.ProductOptions(t, e.Config, e.NS))

	machines := func() []v1alpha1.Machine {
		var list v1alpha1.MachineList
		if err := c.List(ctx, &list, client.InNamespace(e.NS)); err != nil {
			t.Fatal(err)
		}
		return list.Items
	}
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
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(d), d); err != nil {
			return err
		}
		d.Spec.Template.Spec.Class.Name = "b"
		return c.Update(ctx, d)
	}); err != nil {
		t.Fatal(err)
	}
	eventually.Explained(t, time.Minute, "the pool waiting for approval", func() (bool, string) {
		p := &machinistv1alpha1.PoolPolicy{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: e.NS, Name: "workers"}, p); err != nil {
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
		_ = c.List(context.Background(), &sets, client.InNamespace(e.NS))
		for _, ms := range sets.Items {
			t.Logf("set %s class %s replicas %d status %+v", ms.Name, ms.Spec.Template.Spec.Class.Name, ms.Spec.Replicas, ms.Status)
		}
		var ml v1alpha1.MachineList
		_ = c.List(context.Background(), &ml, client.InNamespace(e.NS))
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
