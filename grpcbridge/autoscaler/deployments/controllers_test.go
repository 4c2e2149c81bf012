package deployments_test

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	machinistv1alpha1 "github.com/machinist-io/machinist/core/apis/machinist/v1alpha1"
	"github.com/machinist-io/machinist/grpcbridge/autoscaler"
	"github.com/machinist-io/machinist/grpcbridge/autoscaler/clusterautoscaler"
	"github.com/machinist-io/machinist/grpcbridge/autoscaler/internal/autoscalertest"
	"github.com/machinist-io/machinist/harness/ctrltest"
	"github.com/machinist-io/machinist/internal/eventually"
	_ "github.com/machinist-io/machinist/providers/local"
)

// startControllers runs machinist's controller manager (Machine, MachineSet,
// MachineDeployment) on the world's control plane, with the local provider making machines
// real Nodes of the same cluster.
func (w *world) startControllers() {
	w.t.Helper()
	opts := ctrltest.ProductOptions(w.t, w.env.Config, ns)
	opts.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	ctrltest.RunProduct(w.t, opts)
}

// localClass creates a local MachineClass with a node template and its userData secret.
func (w *world) localClass(name, extraSpec string) {
	w.t.Helper()
	w.create(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Data:       map[string][]byte{"userData": []byte("#!/bin/sh\necho <<MACHINE_NAME>>\n")},
	})
	spec := `{"cluster":"e2e","heartbeatInterval":"1s","nodeMonitorGracePeriod":"5s"` + extraSpec + `}`
	w.create(&v1alpha1.MachineClass{
		ObjectMeta:   metav1.ObjectMeta{Name: name, Namespace: ns},
		Provider:     "local",
		ProviderSpec: runtime.RawExtension{Raw: []byte(spec)},
		SecretRef:    &corev1.SecretReference{Name: name, Namespace: ns},
		NodeTemplate: &v1alpha1.NodeTemplate{
			Capacity:     corev1.ResourceList{corev1.ResourceCPU: mustQ("2"), corev1.ResourceMemory: mustQ("4Gi"), "gpu": mustQ("0")},
			InstanceType: "local", Region: "local", Zone: "local-1",
		},
	})
}

// poolDeployment creates a MachineDeployment for the controllers (no MachineSet of its own).
func (w *world) poolDeployment(name, class string, lo, hi int) {
	w.t.Helper()
	labels := map[string]string{"pool": name}
	w.create(&v1alpha1.MachineDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: sizeAnnotations(lo, hi)},
		Spec: v1alpha1.MachineDeploymentSpec{
			Replicas: 0,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Strategy: v1alpha1.MachineDeploymentStrategy{Type: v1alpha1.RollingUpdateMachineDeploymentStrategyType},
			Template: v1alpha1.MachineTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: v1alpha1.MachineSpec{
					Class:            v1alpha1.ClassSpec{Kind: "MachineClass", Name: class},
					NodeTemplateSpec: v1alpha1.NodeTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"pool": name}}},
				},
			},
		},
	})
}

func (w *world) machinesOf(pool string) []v1alpha1.Machine {
	w.t.Helper()
	var list v1alpha1.MachineList
	if err := w.c.List(w.ctx, &list, client.InNamespace(ns), client.MatchingLabels{"pool": pool}); err != nil {
		w.t.Fatal(err)
	}
	return list.Items
}

// TestWithControllers is Cluster Autoscaler's whole cycle against the real controllers and the local provider:
// scale up from zero with the template, scale 1 to 3, delete one specific node, a failed create
// reported and deleted, and an unfulfilled target dropped.
func TestWithControllers(t *testing.T) {
	w := newWorld(t)
	w.localClass("small", "")
	w.localClass("stockout", `,"createError":{"code":"ResourceExhausted","message":"no local capacity left in local-1"}`)
	w.localClass("slow", `,"bootDelay":"1h"`)
	w.poolDeployment("workers", "small", 0, 3)
	w.poolDeployment("stockout", "stockout", 0, 2)
	w.poolDeployment("slow", "slow", 0, 2)
	w.startControllers()
	p := w.provider()
	certs := autoscalertest.NewCerts(t)
	scaler := autoscalertest.Connect(t, autoscalertest.Serve(t, p, certs), certs, clusterautoscaler.Current)
	const workers, stockout, slow = ns + ".workers", ns + ".stockout", ns + ".slow"

	// running waits for n Running instances of a group whose nodes exist.
	running := func(t *testing.T, id string, n int) []clusterautoscaler.Instance {
		t.Helper()
		var in []clusterautoscaler.Instance
		eventually.Explained(t, 2*time.Minute, fmt.Sprintf("%d running instances of %s", n, id), func() (bool, string) {
			if err := scaler.Refresh(); err != nil {
				t.Fatal(err)
			}
			var err error
			in, err = scaler.Nodes(id)
			ok := err == nil && len(in) == n
			for _, i := range in {
				ok = ok && i.Status != nil && i.Status.State == clusterautoscaler.InstanceRunning && strings.HasPrefix(i.ID, "local:///")
			}
			return ok, fmt.Sprintf("%+v (%v)", in, err)
		})
		return in
	}

	t.Run("scale up from zero", func(t *testing.T) {
		if err := scaler.Refresh(); err != nil {
			t.Fatal(err)
		}
		if n, err := scaler.TargetSize(workers); err != nil || n != 0 {
			t.Fatalf("target %d, %v", n, err)
		}
		if node, err := scaler.TemplateNodeInfo(workers); err != nil || node.Labels["pool"] != "workers" {
			t.Fatalf("template %v, %v", node, err)
		}
		if err := scaler.IncreaseSize(workers, 1); err != nil {
			t.Fatal(err)
		}
		in := running(t, workers, 1)
		node, err := w.env.Clientset().CoreV1().Nodes().List(w.ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, n := range node.Items {
			if n.Spec.ProviderID == in[0].ID {
				found = true
				g, err := scaler.NodeGroupForNode(&n)
				if err != nil || g.GetId() != workers || g.GetMaxSize() != 3 {
					t.Fatalf("NodeGroupForNode(%s) = %v, %v", n.Name, g, err)
				}
			}
		}
		if !found {
			t.Fatalf("no Node carries providerID %s", in[0].ID)
		}
	})

	t.Run("scale up 1 to 3", func(t *testing.T) {
		if err := scaler.IncreaseSize(workers, 2); err != nil {
			t.Fatal(err)
		}
		if n, _ := scaler.TargetSize(workers); n != 3 {
			t.Fatalf("target %d right after IncreaseSize(2)", n)
		}
		running(t, workers, 3)
	})

	t.Run("delete a specific node", func(t *testing.T) {
		in := running(t, workers, 3)
		victimID := in[1].ID
		nodes, err := w.env.Clientset().CoreV1().Nodes().List(w.ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var victim *corev1.Node
		for i := range nodes.Items {
			if nodes.Items[i].Spec.ProviderID == victimID {
				victim = &nodes.Items[i]
			}
		}
		if victim == nil {
			t.Fatalf("no node for %s", victimID)
		}
		if err := scaler.DeleteNodes(workers, victim); err != nil {
			t.Fatal(err)
		}
		after := running(t, workers, 2)
		for _, i := range after {
			if i.ID == victimID {
				t.Fatalf("the deleted node's instance %s survived; the MachineSet deleted another machine", victimID)
			}
		}
		survivors := map[string]bool{in[0].ID: true, in[2].ID: true}
		for _, i := range after {
			if !survivors[i.ID] {
				t.Fatalf("instances after the deletion %v, want exactly the two others %v", after, survivors)
			}
		}
		eventually.True(t, time.Minute, "node "+victim.Name+" gone", func() bool {
			_, err := w.env.Clientset().CoreV1().Nodes().Get(w.ctx, victim.Name, metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		})
		if got := w.getMD("workers").Spec.Replicas; got != 2 {
			t.Fatalf("replicas %d", got)
		}
	})

	// During a pool's rollout (a PoolPolicy governs the deployment: scale-down stays enabled), a
	// DeleteNodes of an old node removes exactly that machine and lowers replicas; the rollout
	// creates no replacement of it. The new class never boots, so the rollout stays in flight.
	t.Run("failed create is reported and deleted", func(t *testing.T) {
		if err := scaler.IncreaseSize(stockout, 1); err != nil {
			t.Fatal(err)
		}
		var failed clusterautoscaler.Instance
		eventually.Explained(t, 2*time.Minute, "error info on "+stockout, func() (bool, string) {
			if in, err := scaler.Nodes(stockout); err == nil && len(in) == 1 {
				failed = in[0]
			}
			return failed.Status != nil && failed.Status.ErrorInfo != nil, fmt.Sprintf("%+v", failed)
		})
		e := failed.Status.ErrorInfo
		if failed.Status.State != clusterautoscaler.InstanceCreating || e.ErrorClass != 1 || e.ErrorCode != "ResourceExhausted" || !strings.HasPrefix(failed.ID, autoscaler.PlaceholderScheme) {
			t.Fatalf("failed instance %s state %d error %+v", failed.ID, failed.Status.State, e)
		}
		fake := clusterautoscaler.FakeNode(failed.ID, "create-error")
		if g, err := scaler.NodeGroupForNode(fake); err != nil || g.GetId() != stockout {
			t.Fatalf("fake node resolved to %v, %v", g, err)
		}
		if err := scaler.DeleteNodes(stockout, fake); err != nil {
			t.Fatal(err)
		}
		eventually.True(t, 2*time.Minute, "the failed machine deleted", func() bool { return len(w.machinesOf("stockout")) == 0 })
		if got := w.getMD("stockout").Spec.Replicas; got != 0 {
			t.Fatalf("replicas %d", got)
		}
	})

	t.Run("decrease an unfulfilled target", func(t *testing.T) {
		if err := scaler.IncreaseSize(slow, 2); err != nil {
			t.Fatal(err)
		}
		eventually.True(t, 2*time.Minute, "two slow machines with VMs", func() bool {
			in, err := scaler.Nodes(slow)
			if err != nil || len(in) != 2 {
				return false
			}
			for _, i := range in {
				if i.Status == nil || i.Status.State != clusterautoscaler.InstanceCreating {
					return false
				}
			}
			return true
		})
		if err := scaler.DecreaseTargetSize(slow, -2); err != nil {
			t.Fatal(err)
		}
		eventually.True(t, 2*time.Minute, "the unfulfilled machines dropped", func() bool { return len(w.machinesOf("slow")) == 0 })
		if err := scaler.DecreaseTargetSize(workers, -1); status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("decreasing below the registered nodes: %v", err)
		}
		running(t, workers, 2)
	})

	t.Run("delete a node during a pool rollout", func(t *testing.T) {
		const rolling = ns + ".rolling"
		w.poolDeployment("rolling", "small", 0, 3)
		eventually.Explained(t, time.Minute, "node group "+rolling, func() (bool, string) {
			if err := scaler.Refresh(); err != nil {
				t.Fatal(err)
			}
			n, err := scaler.TargetSize(rolling)
			return err == nil && n == 0, fmt.Sprintf("target %d, %v", n, err)
		})
		if err := scaler.IncreaseSize(rolling, 2); err != nil {
			t.Fatal(err)
		}
		in := running(t, rolling, 2)
		w.create(&machinistv1alpha1.PoolPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "rolling", Namespace: ns},
			Spec: machinistv1alpha1.PoolPolicySpec{
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"worker-pool": "rolling"}},
				Rollout:  machinistv1alpha1.PoolRollout{MaxSurge: ptr.To(intstr.FromInt32(1)), MaxUnavailable: ptr.To(intstr.FromInt32(0))},
			},
		})
		w.updateMD("rolling", func(md *v1alpha1.MachineDeployment) {
			md.Labels = map[string]string{"worker-pool": "rolling"}
			md.Spec.Template.Spec.Class.Name = "slow"
		})
		eventually.Explained(t, time.Minute, "the rollout's surge machine on class slow", func() (bool, string) {
			n := 0
			for _, m := range w.machinesOf("rolling") {
				if m.Spec.Class.Name == "slow" {
					n++
				}
			}
			return n == 1, fmt.Sprintf("%d machines of class slow", n)
		})
		victim := w.nodeOf(in[0].ID)
		if err := scaler.DeleteNodes(rolling, victim); err != nil {
			t.Fatal(err)
		}
		eventually.Explained(t, 2*time.Minute, "the named machine gone, the other old one and the surge machine kept", func() (bool, string) {
			var small, slowClass []string
			kept := false
			for _, m := range w.machinesOf("rolling") {
				if m.Spec.ProviderID == in[0].ID {
					return false, "the named machine " + m.Name + " is still there"
				}
				if m.Spec.Class.Name == "slow" {
					slowClass = append(slowClass, m.Name)
				} else if m.DeletionTimestamp == nil {
					small = append(small, m.Name)
					kept = m.Spec.ProviderID == in[1].ID
				}
			}
			return kept && len(small) == 1 && len(slowClass) == 1 && w.getMD("rolling").Spec.Replicas == 1,
				fmt.Sprintf("old %v, new %v, replicas %d", small, slowClass, w.getMD("rolling").Spec.Replicas)
		})
		if err := w.c.Delete(w.ctx, &machinistv1alpha1.PoolPolicy{ObjectMeta: metav1.ObjectMeta{Name: "rolling", Namespace: ns}}); err != nil {
			t.Fatal(err)
		}
	})
}

func mustQ(s string) resource.Quantity { return resource.MustParse(s) }

// nodeOf returns the Node with a providerID.
func (w *world) nodeOf(providerID string) *corev1.Node {
	w.t.Helper()
	nodes, err := w.env.Clientset().CoreV1().Nodes().List(w.ctx, metav1.ListOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	for i := range nodes.Items {
		if nodes.Items[i].Spec.ProviderID == providerID {
			return &nodes.Items[i]
		}
	}
	w.t.Fatalf("no node for %s", providerID)
	return nil
}

// updateMD re-reads a MachineDeployment, changes it and writes it, retrying on conflicts.
func (w *world) updateMD(name string, change func(*v1alpha1.MachineDeployment)) {
	w.t.Helper()
	for range 20 {
		md := w.getMD(name)
		change(md)
		err := w.c.Update(w.ctx, md)
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) {
			w.t.Fatal(err)
		}
	}
	w.t.Fatalf("update MachineDeployment %s: too many conflicts", name)
}
