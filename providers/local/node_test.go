package local

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/registry"
	"github.com/machinist-io/machinist/core/testenv"
)

// fast is a class whose nodes beat every 100ms and go Unknown after 2s of silence.
func fast(t testing.TB, extra map[string]any) map[string]any {
	spec := map[string]any{"cluster": "dev", "heartbeatInterval": "100ms", "nodeMonitorGracePeriod": "2s"}
	for k, v := range extra {
		spec[k] = v
	}
	return spec
}

func nodeState(cs kubernetes.Interface, name string) (*corev1.Node, corev1.ConditionStatus, string) {
	node, err := cs.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return nil, "", err.Error()
	}
	c := findCondition(node.Status.Conditions, corev1.NodeReady)
	if c == nil {
		return node, "", "no Ready condition"
	}
	return node, c.Status, fmt.Sprintf("Ready=%s reason=%s taints=%v", c.Status, c.Reason, node.Spec.Taints)
}

func hasTaint(n *corev1.Node, key string) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}

func waitReady(t *testing.T, cs kubernetes.Interface, name string, want corev1.ConditionStatus, timeout time.Duration) *corev1.Node {
	t.Helper()
	var node *corev1.Node
	eventually(t, timeout, fmt.Sprintf("node %s Ready=%s", name, want), func() (bool, string) {
		n, status, state := nodeState(cs, name)
		node = n
		ok := status == want
		switch {
		case ok && want == corev1.ConditionTrue:
			ok = !hasTaint(n, corev1.TaintNodeNotReady) && !hasTaint(n, corev1.TaintNodeUnreachable)
		case ok && want == corev1.ConditionUnknown:
			// The lifecycle posts the status first, then taints the node.
			ok = hasTaint(n, corev1.TaintNodeUnreachable)
		}
		return ok, state
	})
	return node
}

// One control plane serves every node test; each subtest uses its own machines.
func TestNodesOnRealAPIServer(t *testing.T) {
	env := testenv.Start(t)
	cs := env.Clientset()
	ctx := context.Background()

	t.Run("created machine is a Ready node", func(t *testing.T) {
		d := open(t, registry.Env{Target: env.Config, StateDir: t.TempDir()})
		c := class(t, "small", fast(t, map[string]any{"cpu": "4", "memory": "8Gi", "pods": 50, "zone": "zone-b",
			"instanceType": "l.large", "labels": map[string]string{"pool": "workers"}}))
		resp, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine("ready-1"), MachineClass: c})
		if err != nil {
			t.Fatal(err)
		}
		// bootDelay 0: registered before CreateMachine returned.
		node, err := cs.CoreV1().Nodes().Get(ctx, "ready-1", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("no node when CreateMachine returned: %v", err)
		}
		node = waitReady(t, cs, "ready-1", corev1.ConditionTrue, 10*time.Second)
		if node.Spec.ProviderID != resp.ProviderID || resp.ProviderID != "local:///ready-1" {
			t.Fatalf("providerID node %q response %q", node.Spec.ProviderID, resp.ProviderID)
		}
		alloc := node.Status.Allocatable
		if alloc.Cpu().String() != "4" || alloc.Memory().String() != "8Gi" || alloc.Pods().Value() != 50 {
			t.Fatalf("allocatable %v", alloc)
		}
		for k, v := range map[string]string{
			corev1.LabelHostname: "ready-1", corev1.LabelTopologyZone: "zone-b",
			corev1.LabelInstanceTypeStable: "l.large", "pool": "workers", corev1.LabelOSStable: "linux",
		} {
			if node.Labels[k] != v {
				t.Fatalf("label %s=%q, want %q (labels %v)", k, node.Labels[k], v, node.Labels)
			}
		}
		// The lease is renewed.
		lease, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, "ready-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		first := lease.Spec.RenewTime.Time
		eventually(t, 10*time.Second, "lease renewed", func() (bool, string) {
			l, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, "ready-1", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return l.Spec.RenewTime.After(first), l.Spec.RenewTime.String()
		})
	})

	t.Run("stopped heartbeat turns Unknown and back", func(t *testing.T) {
		dir := t.TempDir()
		d := open(t, registry.Env{Target: env.Config, StateDir: dir})
		c := class(t, "small", fast(t, nil))
		if _, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine("hb-1"), MachineClass: c}); err != nil {
			t.Fatal(err)
		}
		waitReady(t, cs, "hb-1", corev1.ConditionTrue, 10*time.Second)
		// A condition someone else posts (a node problem detector) is left alone throughout.
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			n, err := cs.CoreV1().Nodes().Get(ctx, "hb-1", metav1.GetOptions{})
			if err != nil {
				return err
			}
			n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: "KernelDeadlock", Status: corev1.ConditionFalse, Reason: "KernelHasNoDeadlock"})
			_, err = cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		// Flipped from "another process": the state dir switch, as the CLI does.
		stoppedAt := time.Now()
		if err := SetHeartbeat(dir, "hb-1", false); err != nil {
			t.Fatal(err)
		}
		node := waitReady(t, cs, "hb-1", corev1.ConditionUnknown, 15*time.Second)
		// The grace period runs from the last heartbeat, at most one 100ms interval before the stop.
		if took := time.Since(stoppedAt); took < 1500*time.Millisecond {
			t.Fatalf("Unknown %s after the stop, well before the 2s grace period", took)
		}
		ready := findCondition(node.Status.Conditions, corev1.NodeReady)
		if ready.Reason != "NodeStatusUnknown" || !hasTaint(node, corev1.TaintNodeUnreachable) {
			t.Fatalf("unknown node: reason %q taints %v", ready.Reason, node.Spec.Taints)
		}
		if c := findCondition(node.Status.Conditions, corev1.NodeMemoryPressure); c == nil || c.Status != corev1.ConditionUnknown {
			t.Fatalf("MemoryPressure %+v, want Unknown like every kubelet condition", c)
		}
		if c := findCondition(node.Status.Conditions, "KernelDeadlock"); c == nil || c.Status != corev1.ConditionFalse {
			t.Fatalf("another component's condition changed: %+v", c)
		}
		if err := d.SetHeartbeat(ctx, "hb-1", true); err != nil {
			t.Fatal(err)
		}
		node = waitReady(t, cs, "hb-1", corev1.ConditionTrue, 10*time.Second)
		if c := findCondition(node.Status.Conditions, "KernelDeadlock"); c == nil || c.Status != corev1.ConditionFalse {
			t.Fatalf("another component's condition lost after resume: %+v", c)
		}
	})

	t.Run("stopHeartbeat in the spec", func(t *testing.T) {
		d := open(t, registry.Env{Target: env.Config})
		c := class(t, "dead", fast(t, map[string]any{"stopHeartbeat": true}))
		if _, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine("dead-1"), MachineClass: c}); err != nil {
			t.Fatal(err)
		}
		waitReady(t, cs, "dead-1", corev1.ConditionUnknown, 15*time.Second)
		if err := d.SetHeartbeat(ctx, "dead-1", true); err != nil {
			t.Fatal(err)
		}
		waitReady(t, cs, "dead-1", corev1.ConditionTrue, 10*time.Second)
	})

	t.Run("boot delay", func(t *testing.T) {
		d := open(t, registry.Env{Target: env.Config})
		c := class(t, "slow", fast(t, map[string]any{"bootDelay": "1s"}))
		start := time.Now()
		if _, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine("boot-1"), MachineClass: c}); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.CoreV1().Nodes().Get(ctx, "boot-1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("node registered before its boot delay: %v", err)
		}
		waitReady(t, cs, "boot-1", corev1.ConditionTrue, 10*time.Second)
		if took := time.Since(start); took < time.Second {
			t.Fatalf("node ready after %s, before the 1s boot delay", took)
		}
	})

	t.Run("restart resumes agents", func(t *testing.T) {
		dir := t.TempDir()
		c := class(t, "small", fast(t, nil))
		d1 := open(t, registry.Env{Target: env.Config, StateDir: dir})
		if _, err := d1.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine("restart-1"), MachineClass: c}); err != nil {
			t.Fatal(err)
		}
		before := waitReady(t, cs, "restart-1", corev1.ConditionTrue, 10*time.Second)
		d1.Close()
		// The process is gone: the lease goes stale.
		time.Sleep(300 * time.Millisecond)
		stale, _ := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, "restart-1", metav1.GetOptions{})
		d2 := open(t, registry.Env{Target: env.Config, StateDir: dir})
		eventually(t, 10*time.Second, "restored agent renews the lease", func() (bool, string) {
			l, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, "restart-1", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return l.Spec.RenewTime.After(stale.Spec.RenewTime.Time), l.Spec.RenewTime.String()
		})
		after := waitReady(t, cs, "restart-1", corev1.ConditionTrue, 10*time.Second)
		if after.UID != before.UID {
			t.Fatal("the restored agent registered a new node instead of adopting its own")
		}
		// A node deleted behind the agent's back registers again while the machine exists.
		if err := cs.CoreV1().Nodes().Delete(ctx, "restart-1", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, 10*time.Second, "node registered again", func() (bool, string) {
			n, err := cs.CoreV1().Nodes().Get(ctx, "restart-1", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return n.UID != before.UID, "same node"
		})
		if _, err := d2.DeleteMachine(ctx, &driver.DeleteMachineRequest{Machine: machine("restart-1"), MachineClass: c}); err != nil {
			t.Fatal(err)
		}
		assertGone(t, cs, "restart-1")
	})

	t.Run("delete from another process", func(t *testing.T) {
		dir := t.TempDir()
		c := class(t, "small", fast(t, nil))
		host := open(t, registry.Env{Target: env.Config, StateDir: dir})
		guest := open(t, registry.Env{StateDir: dir}) // no target: it cannot touch nodes itself
		if _, err := guest.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine("guest-1"), MachineClass: c}); err != nil {
			t.Fatal(err)
		}
		waitReady(t, cs, "guest-1", corev1.ConditionTrue, 10*time.Second)
		if !host.IsHost() || guest.IsHost() {
			t.Fatal("hosting is not where expected")
		}
		if _, err := guest.DeleteMachine(ctx, &driver.DeleteMachineRequest{Machine: machine("guest-1"), MachineClass: c}); err != nil {
			t.Fatal(err)
		}
		eventually(t, 10*time.Second, "host deletes the node of a machine deleted elsewhere", func() (bool, string) {
			_, err := cs.CoreV1().Nodes().Get(ctx, "guest-1", metav1.GetOptions{})
			return apierrors.IsNotFound(err), fmt.Sprint(err)
		})
	})

	t.Run("kubeconfig in the secret", func(t *testing.T) {
		kc, err := os.ReadFile(env.KubeconfigPath)
		if err != nil {
			t.Fatal(err)
		}
		d := open(t, registry.Env{StateDir: t.TempDir()}) // no process target
		c := class(t, "small", fast(t, nil))
		if _, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine("kc-1"), MachineClass: c,
			Secret: secret(map[string]string{SecretKeyKubeconfig: string(kc)})}); err != nil {
			t.Fatal(err)
		}
		waitReady(t, cs, "kc-1", corev1.ConditionTrue, 10*time.Second)
		_, err = d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine("kc-2"), MachineClass: c,
			Secret: secret(map[string]string{SecretKeyKubeconfig: "not: [a kubeconfig"})})
		if driver.CodeOf(err) != driver.InvalidArgument || !strings.Contains(err.Error(), "kubeconfig") {
			t.Fatalf("bad kubeconfig: %v, want InvalidArgument naming the key", err)
		}
		if _, err := d.DeleteMachine(ctx, &driver.DeleteMachineRequest{Machine: machine("kc-1"), MachineClass: c}); err != nil {
			t.Fatal(err)
		}
		assertGone(t, cs, "kc-1")
	})

	t.Run("API server outage", func(t *testing.T) {
		d := open(t, registry.Env{Target: env.Config})
		c := class(t, "small", fast(t, nil))
		if _, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine("outage-1"), MachineClass: c}); err != nil {
			t.Fatal(err)
		}
		waitReady(t, cs, "outage-1", corev1.ConditionTrue, 10*time.Second)
		env.StopAPIServer()
		time.Sleep(500 * time.Millisecond) // beats fail meanwhile
		env.StartAPIServer()
		stamp := time.Now()
		eventually(t, 30*time.Second, "heartbeats resume after the outage", func() (bool, string) {
			l, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, "outage-1", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return l.Spec.RenewTime.After(stamp), l.Spec.RenewTime.String()
		})
		waitReady(t, cs, "outage-1", corev1.ConditionTrue, 10*time.Second)
	})
}

func assertGone(t *testing.T, cs kubernetes.Interface, name string) {
	t.Helper()
	if _, err := cs.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("node %s still there after delete: %v", name, err)
	}
	if _, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(context.Background(), name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("lease %s still there after delete: %v", name, err)
	}
}
