package local

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/registry"
	"github.com/machinist-io/machinist/harness/testenv"
	"github.com/machinist-io/machinist/internal/eventually"
)

// targets is a registry.UpdateTargets answering from a map, as the controllers answer from
// the machines' MachineDeployments.
type targets struct {
	mu      sync.Mutex
	classes map[string]*v1alpha1.MachineClass
}

func (t *targets) set(machine string, c *v1alpha1.MachineClass) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.classes[machine] = c
}

func (t *targets) UpdateTarget(_ context.Context, machine string) (*v1alpha1.MachineClass, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.classes[machine], nil
}

// readyForUpdateNode does to a node what the controllers do before the agent's turn: labels
// candidate-for-update and selected-for-update, cordon, condition InPlaceUpdate=ReadyForUpdate.
func readyForUpdateNode(t *testing.T, cs kubernetes.Interface, name string) {
	t.Helper()
	ctx := context.Background()
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"true",%q:"true"}},"spec":{"unschedulable":true}}`,
		v1alpha1.LabelNodeCandidateForUpdate, v1alpha1.LabelNodeSelectedForUpdate)
	if _, err := cs.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	cond, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{{
		Type: v1alpha1.NodeConditionInPlaceUpdate, Status: corev1.ConditionTrue, Reason: v1alpha1.ReasonReadyForUpdate,
		Message: "Node is ready for in-place update", LastTransitionTime: metav1.Now(),
	}}}})
	if _, err := cs.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, cond, metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
}

func waitResult(t *testing.T, cs kubernetes.Interface, name string) *corev1.Node {
	t.Helper()
	var node *corev1.Node
	eventually.Explained(t, 15*time.Second, "node "+name+" labelled update-result", func() (bool, string) {
		n, err := cs.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		node = n
		return n.Labels[v1alpha1.LabelNodeUpdateResult] != "", fmt.Sprint(n.Labels)
	})
	return node
}

// TestInPlaceUpdateAgent: the node agent updates a node drained for an in-place update to the
// class its machine's deployment names (labels, capacity, boot ID; not the labels the
// machine's nodeTemplate owns), deletes the pods left on it, reports update-result=successful
// and, once the controllers finished the node, lifts the critical-components-not-ready taint.
// updateError fails the update with its reason; a class of another cluster cannot be updated
// to; without UpdateTargets the node is only rebooted.
func TestInPlaceUpdateAgent(t *testing.T) {
	env := testenv.Start(t)
	cs := env.Clientset()
	ctx := context.Background()
	tg := &targets{classes: map[string]*v1alpha1.MachineClass{}}
	d := open(t, registry.Env{Target: env.Config, StateDir: t.TempDir(), UpdateTargets: tg})

	t.Run("successful", func(t *testing.T) {
		v1 := class(t, "v1", fast(t, map[string]any{"labels": map[string]string{"version": "1", "legacy": "x", "team": "a"}}))
		if _, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine("up-1"), MachineClass: v1}); err != nil {
			t.Fatal(err)
		}
		before := waitReady(t, cs, "up-1", corev1.ConditionTrue, 10*time.Second)
		// The machine controller applied a nodeTemplate label "team" (it wins over the class).
		tmpl := fmt.Sprintf(`{"metadata":{"labels":{"team":"tmpl"},"annotations":{%q:"{\"labels\":{\"team\":\"tmpl\"}}"}}}`, v1alpha1.AnnotationLastAppliedALT)
		if _, err := cs.CoreV1().Nodes().Patch(ctx, "up-1", types.MergePatchType, []byte(tmpl), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "ds-up-1", Namespace: "default"}, Spec: corev1.PodSpec{
			NodeName: "up-1", HostNetwork: true, Containers: []corev1.Container{{Name: "c", Image: "i"}},
		}}
		if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tg.set("up-1", class(t, "v2", fast(t, map[string]any{"cpu": "4", "labels": map[string]string{"version": "2", "team": "b"}, "updateDelay": "300ms"})))
		readyForUpdateNode(t, cs, "up-1")

		node := waitResult(t, cs, "up-1")
		if node.Labels[v1alpha1.LabelNodeUpdateResult] != v1alpha1.LabelValueNodeUpdateSuccessful {
			t.Fatalf("update-result %q, want successful", node.Labels[v1alpha1.LabelNodeUpdateResult])
		}
		if node.Labels["version"] != "2" || node.Labels["legacy"] != "" || node.Labels["team"] != "tmpl" {
			t.Fatalf("labels after the update %v: want version=2, no legacy, team=tmpl (the nodeTemplate's)", node.Labels)
		}
		if c := node.Status.Allocatable.Cpu().String(); c != "4" {
			t.Fatalf("allocatable cpu %s after the update, want 4", c)
		}
		if node.UID != before.UID || node.Status.NodeInfo.BootID == before.Status.NodeInfo.BootID {
			t.Fatalf("node uid %s→%s boot id %s→%s: want the same node, rebooted", before.UID, node.UID, before.Status.NodeInfo.BootID, node.Status.NodeInfo.BootID)
		}
		if p, err := cs.CoreV1().Pods("default").Get(ctx, "ds-up-1", metav1.GetOptions{}); err == nil && p.DeletionTimestamp == nil {
			t.Fatal("the pod left on the node was not deleted")
		} else if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		rec, err := d.store.get("up-1")
		if err != nil || rec.Class != "v2" || rec.Spec.Labels["version"] != "2" || rec.Spec.CPU.String() != "4" {
			t.Fatalf("record after the update: %+v (%v): want class v2 and its spec", rec, err)
		}

		// The MachineDeployment controller finishes the node: the agent lifts the taint.
		finish := fmt.Sprintf(`{"metadata":{"labels":{%q:null,%q:null,%q:null}},"spec":{"unschedulable":false,"taints":[{"key":%q,"effect":"NoSchedule"}]}}`,
			v1alpha1.LabelNodeCandidateForUpdate, v1alpha1.LabelNodeSelectedForUpdate, v1alpha1.LabelNodeUpdateResult, v1alpha1.TaintCriticalComponentsNotReady)
		if _, err := cs.CoreV1().Nodes().Patch(ctx, "up-1", types.MergePatchType, []byte(finish), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually.Explained(t, 10*time.Second, "taint lifted", func() (bool, string) {
			n, err := cs.CoreV1().Nodes().Get(ctx, "up-1", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return !hasTaint(n, v1alpha1.TaintCriticalComponentsNotReady), fmt.Sprint(n.Spec.Taints)
		})
	})

	t.Run("updateError fails the update with its reason", func(t *testing.T) {
		v1 := class(t, "v1", fast(t, map[string]any{"labels": map[string]string{"version": "1"}}))
		if _, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine("up-2"), MachineClass: v1}); err != nil {
			t.Fatal(err)
		}
		waitReady(t, cs, "up-2", corev1.ConditionTrue, 10*time.Second)
		tg.set("up-2", class(t, "broken", fast(t, map[string]any{"labels": map[string]string{"version": "2"}, "updateError": map[string]any{"reason": "disk full"}})))
		readyForUpdateNode(t, cs, "up-2")
		node := waitResult(t, cs, "up-2")
		if node.Labels[v1alpha1.LabelNodeUpdateResult] != v1alpha1.LabelValueNodeUpdateFailed || node.Annotations[v1alpha1.AnnotationUpdateFailedReason] != "disk full" {
			t.Fatalf("labels %v annotations %v: want update-result=failed, update-failed-reason=disk full", node.Labels, node.Annotations)
		}
		if node.Labels["version"] != "1" {
			t.Fatalf("a failed update changed the node: version=%s", node.Labels["version"])
		}
	})

	t.Run("another cluster's class is refused", func(t *testing.T) {
		v1 := class(t, "v1", fast(t, nil))
		if _, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine("up-3"), MachineClass: v1}); err != nil {
			t.Fatal(err)
		}
		waitReady(t, cs, "up-3", corev1.ConditionTrue, 10*time.Second)
		other := class(t, "elsewhere", fast(t, nil))
		other.ProviderSpec.Raw = []byte(strings.Replace(string(other.ProviderSpec.Raw), `"cluster":"dev"`, `"cluster":"prod"`, 1))
		tg.set("up-3", other)
		readyForUpdateNode(t, cs, "up-3")
		node := waitResult(t, cs, "up-3")
		if reason := node.Annotations[v1alpha1.AnnotationUpdateFailedReason]; node.Labels[v1alpha1.LabelNodeUpdateResult] != v1alpha1.LabelValueNodeUpdateFailed || !strings.Contains(reason, "providerSpec.cluster") {
			t.Fatalf("update-result %q reason %q: want failed, naming providerSpec.cluster", node.Labels[v1alpha1.LabelNodeUpdateResult], reason)
		}
	})

	t.Run("without update targets the node is rebooted", func(t *testing.T) {
		bare := open(t, registry.Env{Target: env.Config, StateDir: t.TempDir()})
		v1 := class(t, "v1", fast(t, map[string]any{"labels": map[string]string{"version": "1"}}))
		if _, err := bare.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine("up-4"), MachineClass: v1}); err != nil {
			t.Fatal(err)
		}
		before := waitReady(t, cs, "up-4", corev1.ConditionTrue, 10*time.Second)
		readyForUpdateNode(t, cs, "up-4")
		node := waitResult(t, cs, "up-4")
		if node.Labels[v1alpha1.LabelNodeUpdateResult] != v1alpha1.LabelValueNodeUpdateSuccessful || node.Labels["version"] != "1" ||
			node.Status.NodeInfo.BootID == before.Status.NodeInfo.BootID {
			t.Fatalf("labels %v boot id %s (was %s): want successful, unchanged labels, a new boot id", node.Labels, node.Status.NodeInfo.BootID, before.Status.NodeInfo.BootID)
		}
	})
}
