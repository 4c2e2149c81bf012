package local

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/registry"
	"github.com/machinist-io/machinist/harness/testenv"
	"github.com/machinist-io/machinist/internal/eventually"
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
	eventually.Explained(t, timeout, fmt.Sprintf("node %s Ready=%s", name, want), func() (bool, string) {
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
		if _, err := cs.CoreV1().Nodes().Get(ctx, "ready-1", metav1.GetOptions{}); err != nil {
			t.Fatalf("no node when CreateMachine returned: %v", err)
		}
		node := waitReady(t, cs, "ready-1", corev1.ConditionTrue, 10*time.Second)
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
		eventually.Explained(t, 10*time.Second, "lease renewed", func() (bool, string) {
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
		// The restored agent renews its Lease first, with one patch, then reads its node and
		// Lease: no create that would find them there.
		var creates atomic.Int32
		var first atomic.Value
		cfg := rest.CopyConfig(env.Config)
		cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
			return roundTripFunc(func(r *http.Request) (*http.Response, error) {
				if r.Method == http.MethodPost && (strings.HasSuffix(r.URL.Path, "/nodes") || strings.HasSuffix(r.URL.Path, "/leases")) {
					creates.Add(1)
				}
				if strings.HasSuffix(r.URL.Path, "/restart-1") {
					first.CompareAndSwap(nil, r.Method+" "+r.URL.Path)
				}
				return rt.RoundTrip(r)
			})
		}
		d2 := open(t, registry.Env{Target: cfg, StateDir: dir})
		eventually.Explained(t, 10*time.Second, "restored agent renews the lease", func() (bool, string) {
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
		if n := creates.Load(); n != 0 {
			t.Fatalf("the restored agent sent %d creates of its existing node or Lease", n)
		}
		if got, want := first.Load(), "PATCH /apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/restart-1"; got != want {
			t.Fatalf("the restored agent's first request was %v, want %s", got, want)
		}
		// A node deleted behind the agent's back registers again while the machine exists.
		if err := cs.CoreV1().Nodes().Delete(ctx, "restart-1", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually.Explained(t, 10*time.Second, "node registered again", func() (bool, string) {
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
		eventually.Explained(t, 10*time.Second, "host deletes the node of a machine deleted elsewhere", func() (bool, string) {
			_, err := cs.CoreV1().Nodes().Get(ctx, "guest-1", metav1.GetOptions{})
			return apierrors.IsNotFound(err), fmt.Sprint(err)
		})
	})

	t.Run("restart while a process without a target holds the state dir", func(t *testing.T) {
		// The provider (a process with a target cluster) dies while another process without one
		// has the state dir open — a lister, a `machinist driver` from a shell — and takes the
		// free host lock. The restarted provider gets the node agents back, and every machine
		// keeps its agent until its VM is deleted.
		dir := t.TempDir()
		c := class(t, "small", fast(t, nil))
		d1 := open(t, registry.Env{Target: env.Config, StateDir: dir})
		names := []string{"handover-1", "handover-2", "handover-3"}
		for _, name := range names {
			if _, err := d1.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine(name), MachineClass: c}); err != nil {
				t.Fatal(err)
			}
			waitReady(t, cs, name, corev1.ConditionTrue, 10*time.Second)
		}
		lister := open(t, registry.Env{StateDir: dir})
		d1.Close()
		eventually.Explained(t, 10*time.Second, "the lister takes the free host lock", func() (bool, string) {
			return lister.IsHost(), "not host"
		})
		d2 := open(t, registry.Env{Target: env.Config, StateDir: dir})
		eventually.Explained(t, 10*time.Second, "the restarted provider hosts again", func() (bool, string) {
			return d2.IsHost() && !lister.IsHost(), fmt.Sprintf("provider host %v, lister host %v", d2.IsHost(), lister.IsHost())
		})
		renewed := func(names []string, after time.Time) {
			t.Helper()
			for _, name := range names {
				eventually.Explained(t, 10*time.Second, "node "+name+" renews its lease", func() (bool, string) {
					l, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{})
					if err != nil {
						return false, err.Error()
					}
					return l.Spec.RenewTime.After(after), l.Spec.RenewTime.String()
				})
				waitReady(t, cs, name, corev1.ConditionTrue, 10*time.Second)
			}
		}
		renewed(names, time.Now())
		for i, name := range names {
			if _, err := d2.DeleteMachine(ctx, &driver.DeleteMachineRequest{Machine: machine(name), MachineClass: c}); err != nil {
				t.Fatal(err)
			}
			assertGone(t, cs, name)
			renewed(names[i+1:], time.Now())
		}
		l, err := lister.ListMachines(ctx, &driver.ListMachinesRequest{MachineClass: c})
		if err != nil || len(l.MachineList) != 0 {
			t.Fatalf("VMs left: %v, %v", l, err)
		}
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

	t.Run("first registration carries the templates", func(t *testing.T) {
		// Watch from before the create: no event may show the node without its labels,
		// annotations, taints, capacity or pod CIDR (an autoscaler looking in between would
		// scale up a second time).
		w, err := cs.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=tmpl-1"})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		d := open(t, registry.Env{Target: env.Config, StateDir: t.TempDir()})
		c := class(t, "templated", fast(t, map[string]any{"cpu": "1", "memory": "1Gi", "zone": "spec-zone", "labels": map[string]string{"from-spec": "yes", "pool": "spec"}}))
		arch := "arm64"
		c.NodeTemplate = &v1alpha1.NodeTemplate{
			Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi"),
				"gpu": resource.MustParse("2"), corev1.ResourceEphemeralStorage: resource.MustParse("100Gi")},
			VirtualCapacity: corev1.ResourceList{"example.com/dongle": resource.MustParse("4")},
			InstanceType:    "m.xlarge", Region: "eu-local", Zone: "eu-local-2", Architecture: &arch,
		}
		m := machine("tmpl-1")
		m.Spec.NodeTemplateSpec = v1alpha1.NodeTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"pool": "gpu", "team": "ml"}, Annotations: map[string]string{"example.com/owner": "ml"}},
			Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: "gpu", Value: "true", Effect: corev1.TaintEffectNoSchedule}}},
		}
		if _, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: m, MachineClass: c}); err != nil {
			t.Fatal(err)
		}
		wantLabels := map[string]string{
			"pool": "gpu", "team": "ml", "from-spec": "yes", corev1.LabelHostname: "tmpl-1",
			corev1.LabelArchStable: "arm64", corev1.LabelOSStable: "linux", corev1.LabelInstanceTypeStable: "m.xlarge",
			corev1.LabelTopologyZone: "eu-local-2", corev1.LabelTopologyRegion: "eu-local", corev1.LabelFailureDomainBetaZone: "eu-local-2",
		}
		check := func(n *corev1.Node) string {
			for k, v := range wantLabels {
				if n.Labels[k] != v {
					return fmt.Sprintf("label %s=%q, want %q", k, n.Labels[k], v)
				}
			}
			if n.Annotations["example.com/owner"] != "ml" {
				return fmt.Sprintf("annotations %v", n.Annotations)
			}
			if !hasTaint(n, "gpu") {
				return fmt.Sprintf("taints %v", n.Spec.Taints)
			}
			a := n.Status.Allocatable
			if a.Cpu().String() != "8" || a.Memory().String() != "32Gi" || a.Pods().Value() != 110 || a.StorageEphemeral().String() != "100Gi" {
				return fmt.Sprintf("allocatable %v", a)
			}
			if q := a[resourceGPU]; q.Value() != 2 {
				return fmt.Sprintf("allocatable %v: want 2 %s", a, resourceGPU)
			}
			if q := n.Status.Capacity["example.com/dongle"]; q.Value() != 4 {
				return fmt.Sprintf("capacity %v: want the virtual capacity", n.Status.Capacity)
			}
			if n.Spec.PodCIDR == "" || !podNetwork.Contains(netip.MustParsePrefix(n.Spec.PodCIDR).Addr()) {
				return fmt.Sprintf("podCIDR %q", n.Spec.PodCIDR)
			}
			return ""
		}
		events := 0
		timeout := time.After(15 * time.Second)
		for events < 3 { // the create, then the status and taint updates
			select {
			case ev := <-w.ResultChan():
				n, ok := ev.Object.(*corev1.Node)
				if !ok {
					t.Fatalf("watch event %v: %v", ev.Type, ev.Object)
				}
				if problem := check(n); problem != "" {
					t.Fatalf("event %d (%s) shows the node without its template: %s", events+1, ev.Type, problem)
				}
				events++
			case <-timeout:
				t.Fatalf("only %d node events within 15s", events)
			}
		}
		waitReady(t, cs, "tmpl-1", corev1.ConditionTrue, 10*time.Second)

		// A template the API server would refuse is InvalidArgument naming the field.
		bad := machine("tmpl-bad")
		bad.Spec.NodeTemplateSpec.Labels = map[string]string{"pool": "not valid!"}
		_, err = d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: bad, MachineClass: c})
		if driver.CodeOf(err) != driver.InvalidArgument || !strings.Contains(err.Error(), "machine.spec.nodeTemplate.metadata.labels[pool]") {
			t.Fatalf("bad template label: %v, want InvalidArgument naming the field", err)
		}
		if _, err := cs.CoreV1().Nodes().Get(ctx, "tmpl-bad", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("a node exists for the refused machine: %v", err)
		}
	})

	t.Run("ready delay and a node that never becomes Ready", func(t *testing.T) {
		d := open(t, registry.Env{Target: env.Config})
		slow := class(t, "slow-ready", fast(t, map[string]any{"readyDelay": "1s"}))
		never := class(t, "never-ready", fast(t, map[string]any{"neverReady": true}))
		start := time.Now()
		if _, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine("ready-delay-1"), MachineClass: slow}); err != nil {
			t.Fatal(err)
		}
		if _, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine("never-1"), MachineClass: never}); err != nil {
			t.Fatal(err)
		}
		// Registered at once, NotReady and tainted not-ready until the delay has passed.
		if _, status, state := nodeState(cs, "ready-delay-1"); status != corev1.ConditionFalse && time.Since(start) < time.Second {
			t.Fatalf("node before its ready delay: %s", state)
		}
		waitReady(t, cs, "ready-delay-1", corev1.ConditionTrue, 10*time.Second)
		if took := time.Since(start); took < time.Second {
			t.Fatalf("Ready after %s, before the 1s ready delay", took)
		}
		// The never-ready node keeps beating (its lease is fresh) and stays NotReady.
		lease, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, "never-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		eventually.Explained(t, 10*time.Second, "never-ready node renews its lease", func() (bool, string) {
			l, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, "never-1", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return l.Spec.RenewTime.After(lease.Spec.RenewTime.Time), l.Spec.RenewTime.String()
		})
		n, status, state := nodeState(cs, "never-1")
		if status != corev1.ConditionFalse || !hasTaint(n, corev1.TaintNodeNotReady) {
			t.Fatalf("never-ready node: %s", state)
		}
		if c := findCondition(n.Status.Conditions, corev1.NodeReady); c.Reason != reasonKubeletNotReady {
			t.Fatalf("Ready reason %q, want %q", c.Reason, reasonKubeletNotReady)
		}
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
		eventually.Explained(t, 30*time.Second, "heartbeats resume after the outage", func() (bool, string) {
			l, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, "outage-1", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return l.Spec.RenewTime.After(stamp), l.Spec.RenewTime.String()
		})
		waitReady(t, cs, "outage-1", corev1.ConditionTrue, 10*time.Second)
	})
}

// TestLifecycleLeftToControllerManager: where a kube-controller-manager runs (its leader lease
// is fresh), a silent node is the node lifecycle controller's business: the agent does not mark
// it Unknown and does not touch the lifecycle taints. The controller manager here is only its
// lease, so nothing else marks the node either.
func TestLifecycleLeftToControllerManager(t *testing.T) {
	env := testenv.Start(t)
	cs := env.Clientset()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	holder := "kcm-test"
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: controllerManagerLease, Namespace: metav1.NamespaceSystem},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: ptr.To[int32](15),
			RenewTime: &metav1.MicroTime{Time: time.Now()}},
	}
	if _, err := cs.CoordinationV1().Leases(metav1.NamespaceSystem).Create(ctx, lease, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	renewed := make(chan struct{})
	go func() { // renew like a running controller manager
		defer close(renewed)
		for ctx.Err() == nil {
			_ = retry.RetryOnConflict(retry.DefaultRetry, func() error {
				l, err := cs.CoordinationV1().Leases(metav1.NamespaceSystem).Get(ctx, controllerManagerLease, metav1.GetOptions{})
				if err != nil {
					return err
				}
				l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
				_, err = cs.CoordinationV1().Leases(metav1.NamespaceSystem).Update(ctx, l, metav1.UpdateOptions{})
				return err
			})
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
	defer func() { cancel(); <-renewed }()

	d := open(t, registry.Env{Target: env.Config})
	c := class(t, "small", fast(t, nil))
	if _, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine("kcm-1"), MachineClass: c}); err != nil {
		t.Fatal(err)
	}
	// The not-ready taint of the admission plugin is the lifecycle controller's to remove.
	if n, _, state := nodeState(cs, "kcm-1"); n == nil || !hasTaint(n, corev1.TaintNodeNotReady) {
		t.Fatalf("the agent removed the not-ready taint although a lifecycle controller runs: %s", state)
	}
	if err := d.SetHeartbeat(ctx, "kcm-1", false); err != nil {
		t.Fatal(err)
	}
	// Wait until the lease is older than the 2s grace period by a margin, as seen by the API.
	var stale time.Time
	eventually.Explained(t, 30*time.Second, "the node's lease goes stale", func() (bool, string) {
		l, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, "kcm-1", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		stale = l.Spec.RenewTime.Time
		return time.Since(stale) > 4*time.Second, fmt.Sprintf("renewed %s ago", time.Since(stale))
	})
	n, status, state := nodeState(cs, "kcm-1")
	if status != corev1.ConditionTrue || hasTaint(n, corev1.TaintNodeUnreachable) {
		t.Fatalf("the agent played the lifecycle controller although one runs: %s", state)
	}
	// Resumed, the kubelet reports again at once.
	if err := d.SetHeartbeat(ctx, "kcm-1", true); err != nil {
		t.Fatal(err)
	}
	eventually.Explained(t, 10*time.Second, "status reported after the resume", func() (bool, string) {
		n, _, state := nodeState(cs, "kcm-1")
		if n == nil {
			return false, state
		}
		hb := findCondition(n.Status.Conditions, corev1.NodeReady).LastHeartbeatTime.Time
		return hb.After(stale), state
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

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
