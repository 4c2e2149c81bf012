package deployments_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/grpcbridge/autoscaler"
	"github.com/machinist-io/machinist/grpcbridge/autoscaler/clusterautoscaler"
	"github.com/machinist-io/machinist/grpcbridge/autoscaler/deployments"
	"github.com/machinist-io/machinist/grpcbridge/autoscaler/internal/autoscalertest"
	"github.com/machinist-io/machinist/harness/testenv"
	"github.com/machinist-io/machinist/internal/eventually"
)

func sizeAnnotations(lo, hi int) map[string]string {
	return map[string]string{deployments.AnnotationMinSize: fmt.Sprint(lo), deployments.AnnotationMaxSize: fmt.Sprint(hi)}
}

func realNode(name, providerID string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
		Spec:       corev1.NodeSpec{ProviderID: providerID},
	}
}

func wantCode(t *testing.T, err error, code codes.Code, contains string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("error %v: want code %s", err, code)
	}
	if !strings.Contains(status.Convert(err).Message(), contains) {
		t.Fatalf("error %q does not say %q", status.Convert(err).Message(), contains)
	}
}

// TestAgainstAPIServer drives every RPC the way Cluster Autoscaler does against MachineDeployments in a real
// kube-apiserver. The test writes machines and their status itself, in the controllers' stead,
// so every answer can be checked against a known state.
func TestAgainstAPIServer(t *testing.T) {
	w := newWorld(t)
	w.class("small", true)
	w.class("bare", false)
	_, workersSet := w.deployment("workers", "small", 0, sizeAnnotations(0, 5))
	_, otherSet := w.deployment("other", "small", 2, map[string]string{
		deployments.CAPIAnnotationMinSize: "2", deployments.CAPIAnnotationMaxSize: "4",
		autoscaler.OptionsPrefix + autoscaler.OptionScaleDownUnneededTime:                 "3m",
		autoscaler.GardenerOptionsPrefix + autoscaler.OptionScaleDownUtilizationThreshold: "0.7",
		autoscaler.OptionsPrefix + autoscaler.OptionZeroOrMaxNodeScaling:                  "not-a-bool",
	})
	w.deployment("plain", "small", 1, nil)
	w.deployment("bare", "bare", 0, nil)
	w.deployment("half", "small", 0, map[string]string{deployments.AnnotationMinSize: "1"})

	p := w.provider(
		deployments.FlagGroup{MachineDeployment: key("bare"), Bounds: deployments.Bounds{Min: 0, Max: 2}},
		deployments.FlagGroup{MachineDeployment: key("missing"), Bounds: deployments.Bounds{Min: 0, Max: 2}},
	)
	certs := autoscalertest.NewCerts(t)
	addr := autoscalertest.Serve(t, p, certs)
	scaler := autoscalertest.Connect(t, addr, certs, clusterautoscaler.Current)
	legacy := autoscalertest.Connect(t, addr, certs, clusterautoscaler.Legacy)

	const workers, other, bare = ns + ".workers", ns + ".other", ns + ".bare"

	t.Run("node groups", func(t *testing.T) {
		if err := scaler.Refresh(); err != nil {
			t.Fatal(err)
		}
		groups, err := scaler.NodeGroups()
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, g := range groups {
			got = append(got, fmt.Sprintf("%s %d:%d", g.GetId(), g.GetMinSize(), g.GetMaxSize()))
			if !strings.Contains(g.GetDebug(), "MachineDeployment "+ns+"/") {
				t.Errorf("debug of %s is %q", g.GetId(), g.GetDebug())
			}
		}
		want := []string{bare + " 0:2", other + " 2:4", workers + " 0:5"}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("groups %v, want %v (plain has no annotations, half only one, missing does not exist)", got, want)
		}
	})

	t.Run("scale up from zero with a template", func(t *testing.T) {
		if n, err := scaler.TargetSize(workers); err != nil || n != 0 {
			t.Fatalf("target %d, %v; want 0", n, err)
		}
		node, err := scaler.TemplateNodeInfo(workers)
		if err != nil {
			t.Fatal(err)
		}
		for name, want := range map[corev1.ResourceName]string{
			corev1.ResourceCPU: "4", corev1.ResourceMemory: "16Gi", corev1.ResourcePods: "110",
			corev1.ResourceEphemeralStorage: autoscaler.DefaultEphemeralStorage, autoscaler.ResourceGPU: "1",
		} {
			for kind, list := range map[string]corev1.ResourceList{"capacity": node.Status.Capacity, "allocatable": node.Status.Allocatable} {
				if q, ok := list[name]; !ok || q.Cmp(resource.MustParse(want)) != 0 {
					t.Errorf("%s %s = %v, want %s", kind, name, list[name], want)
				}
			}
		}
		for k, want := range map[string]string{
			"kubernetes.io/arch": "arm64", "kubernetes.io/os": "linux", "node.kubernetes.io/instance-type": "m5.xlarge",
			"topology.kubernetes.io/region": "eu-1", "topology.kubernetes.io/zone": "eu-1a", "pool": "workers",
		} {
			if node.Labels[k] != want {
				t.Errorf("label %s = %q, want %q", k, node.Labels[k], want)
			}
		}
		if len(node.Spec.Taints) != 1 || node.Spec.Taints[0].Key != "dedicated" {
			t.Errorf("taints %v, want the deployment's dedicated taint", node.Spec.Taints)
		}
		ready := false
		for _, c := range node.Status.Conditions {
			ready = ready || (c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue)
		}
		if !ready {
			t.Errorf("template node is not Ready: %v", node.Status.Conditions)
		}
		// Cluster Autoscaler 1.29-1.34 reads the same node from the old field.
		old, err := legacy.TemplateNodeInfo(workers)
		if err != nil || old.Status.Capacity.Cpu().String() != "4" {
			t.Fatalf("legacy template: %v, %v", old, err)
		}
		// A template node is never managed.
		tmpl := node.DeepCopy()
		tmpl.Name = "template-node-for-" + workers + "-1234"
		tmpl.Labels[autoscaler.LabelTemplateNode] = "true"
		if g, err := scaler.NodeGroupForNode(tmpl); err != nil || g != nil {
			t.Fatalf("template node resolved to %v, %v", g, err)
		}

		if err := scaler.IncreaseSize(workers, 1); err != nil {
			t.Fatal(err)
		}
		if got := w.getMD("workers").Spec.Replicas; got != 1 {
			t.Fatalf("replicas %d after IncreaseSize(1) from 0", got)
		}
		if n, err := scaler.TargetSize(workers); err != nil || n != 1 {
			t.Fatalf("target %d, %v right after IncreaseSize; want 1", n, err)
		}
	})

	t.Run("no template", func(t *testing.T) {
		if _, err := scaler.TemplateNodeInfo(bare); !errors.Is(err, clusterautoscaler.ErrNotImplemented) {
			t.Fatalf("template of a class without nodeTemplate: %v, want ErrNotImplemented", err)
		}
	})

	var m1, m2, m3 *v1alpha1.Machine
	t.Run("scale up 1 to 3 with placeholders", func(t *testing.T) {
		// The machine set created the first machine; its VM is not there yet.
		m1 = w.machine(workersSet, "workers-m1", "", creating())
		eventually.Explained(t, 30*time.Second, "placeholder for workers-m1", func() (bool, string) {
			in, err := scaler.Nodes(workers)
			return err == nil && len(in) == 1 && in[0].ID == autoscaler.Placeholder(ns, "workers-m1") &&
				in[0].Status != nil && in[0].Status.State == clusterautoscaler.InstanceCreating && in[0].Status.ErrorInfo == nil, fmt.Sprint(in, err)
		})
		if err := scaler.IncreaseSize(workers, 2); err != nil {
			t.Fatal(err)
		}
		if got := w.getMD("workers").Spec.Replicas; got != 3 {
			t.Fatalf("replicas %d after IncreaseSize(2) from 1", got)
		}
		m2 = w.machine(workersSet, "workers-m2", "local:///workers-m2", running())
		m3 = w.machine(workersSet, "workers-m3", "", creating())
		eventually.Explained(t, 30*time.Second, "three instances", func() (bool, string) {
			in, err := scaler.Nodes(workers)
			return err == nil && len(in) == 3, fmt.Sprint(in, err)
		})
		// Cluster Autoscaler asks about its fake node for the placeholder and about the real node.
		for _, n := range []*corev1.Node{clusterautoscaler.FakeNode(autoscaler.Placeholder(ns, "workers-m1"), "unregistered"), realNode("workers-m2", "local:///workers-m2")} {
			g, err := scaler.NodeGroupForNode(n)
			if err != nil || g == nil || g.GetId() != workers || g.GetMaxSize() != 5 || g.GetDebug() == "" {
				t.Fatalf("NodeGroupForNode(%s) = %v, %v; want %s with min/max/debug", n.Name, g, err, workers)
			}
		}
		if g, err := scaler.NodeGroupForNode(realNode("foreign", "aws:///i-123")); err != nil || g != nil {
			t.Fatalf("foreign node resolved to %v, %v", g, err)
		}
		if err := scaler.IncreaseSize(workers, 3); status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("IncreaseSize past max: %v", err)
		}
		if got := w.getMD("workers").Spec.Replicas; got != 3 {
			t.Fatalf("replicas %d after a refused IncreaseSize", got)
		}
	})

	t.Run("failed create is error info", func(t *testing.T) {
		w.setStatus(m3, createFailed("ResourceExhausted", "quota exceeded for cores in eu-1a"))
		eventually.Explained(t, 30*time.Second, "error info on workers-m3", func() (bool, string) {
			in, err := scaler.Nodes(workers)
			for _, i := range in {
				if i.ID == autoscaler.Placeholder(ns, "workers-m3") && i.Status != nil && i.Status.ErrorInfo != nil {
					e := i.Status.ErrorInfo
					return i.Status.State == clusterautoscaler.InstanceCreating && e.ErrorClass == 1 && e.ErrorCode == "ResourceExhausted" &&
						strings.Contains(e.ErrorMessage, "quota"), fmt.Sprintf("%+v", e)
				}
			}
			return false, fmt.Sprint(in, err)
		})
		bad := w.machine(otherSet, "other-bad", "", createFailed("InvalidArgument", "providerSpec.image: unknown image"))
		eventually.Explained(t, 30*time.Second, "class 99 for InvalidArgument", func() (bool, string) {
			in, _ := scaler.Nodes(other)
			for _, i := range in {
				if i.ID == autoscaler.Placeholder(ns, bad.Name) && i.Status != nil && i.Status.ErrorInfo != nil {
					return i.Status.ErrorInfo.ErrorClass == 99 && i.Status.ErrorInfo.ErrorCode == "InvalidArgument", fmt.Sprintf("%+v", i.Status.ErrorInfo)
				}
			}
			return false, fmt.Sprint(in)
		})
	})

	t.Run("delete a specific node", func(t *testing.T) {
		// Refused before anything changes: a node of another group in the same request.
		w.machine(otherSet, "other-1", "local:///other-1", running())
		eventually.Explained(t, 30*time.Second, "other-1 indexed", func() (bool, string) {
			g, err := scaler.NodeGroupForNode(realNode("other-1", "local:///other-1"))
			return err == nil && g != nil, fmt.Sprint(g, err)
		})
		err := scaler.DeleteNodes(workers, realNode("workers-m2", "local:///workers-m2"), realNode("other-1", "local:///other-1"))
		wantCode(t, err, codes.InvalidArgument, "belongs to node group "+other)
		err = scaler.DeleteNodes(workers, realNode("stranger", "aws:///i-9"))
		wantCode(t, err, codes.NotFound, "not a machine of any node group")
		if md := w.getMD("workers"); md.Spec.Replicas != 3 || md.Annotations[v1alpha1.AnnotationTriggerDeletionByMCM] != "" {
			t.Fatalf("refused DeleteNodes changed the deployment: replicas %d, annotations %v", md.Spec.Replicas, md.Annotations)
		}

		// A preserved machine's node is refused (Cluster Autoscaler should not have picked it: the node carries
		// the scale-down-disabled annotation), and so is a node annotated preserve=now whose
		// preservation has not started yet; nothing changes.
		preservedStatus := running()
		preservedStatus.CurrentStatus.PreserveExpiryTime = &metav1.Time{Time: time.Now().Add(time.Hour)}
		w.setStatus(m2, preservedStatus)
		eventually.Explained(t, 30*time.Second, "workers-m2 preserved in the index", func() (bool, string) {
			// The stranger after it makes the probe harmless until the index has caught up:
			// NotFound, nothing deleted, instead of deleting workers-m2.
			err := scaler.DeleteNodes(workers, realNode("workers-m2", "local:///workers-m2"), realNode("stranger", "aws:///i-9"))
			return status.Code(err) == codes.FailedPrecondition, fmt.Sprint(err)
		})
		err = scaler.DeleteNodes(workers, realNode("workers-m2", "local:///workers-m2"))
		wantCode(t, err, codes.FailedPrecondition, "is preserved until")
		w.setStatus(m2, running())
		annotatedNow := realNode("workers-m2", "local:///workers-m2")
		annotatedNow.Annotations = map[string]string{v1alpha1.AnnotationPreserve: v1alpha1.PreserveNow}
		eventually.Explained(t, 30*time.Second, "workers-m2 no longer preserved in the index", func() (bool, string) {
			err := scaler.DeleteNodes(workers, annotatedNow)
			return err != nil && strings.Contains(err.Error(), v1alpha1.AnnotationPreserve+"="+v1alpha1.PreserveNow), fmt.Sprint(err)
		})
		wantCode(t, scaler.DeleteNodes(workers, annotatedNow), codes.FailedPrecondition, "remove annotation "+v1alpha1.AnnotationPreserve)
		if md := w.getMD("workers"); md.Spec.Replicas != 3 || md.Annotations[v1alpha1.AnnotationTriggerDeletionByMCM] != "" {
			t.Fatalf("refused DeleteNodes of a preserved node changed the deployment: replicas %d, annotations %v", md.Spec.Replicas, md.Annotations)
		}

		// Cluster Autoscaler deletes the failed placeholder and a real node in one call.
		before := time.Now().UTC().Add(-time.Second)
		if err := scaler.DeleteNodes(workers, clusterautoscaler.FakeNode(autoscaler.Placeholder(ns, "workers-m3"), "create-error"), realNode("workers-m2", "local:///workers-m2")); err != nil {
			t.Fatal(err)
		}
		md := w.getMD("workers")
		if md.Spec.Replicas != 1 {
			t.Fatalf("replicas %d after deleting 2 of 3", md.Spec.Replicas)
		}
		entries := strings.Split(md.Annotations[v1alpha1.AnnotationTriggerDeletionByMCM], ",")
		if len(entries) != 2 || !strings.HasPrefix(entries[0], "workers-m2~") || !strings.HasPrefix(entries[1], "workers-m3~") {
			t.Fatalf("trigger-deletion annotation %q, want workers-m2~<time>,workers-m3~<time>", md.Annotations[v1alpha1.AnnotationTriggerDeletionByMCM])
		}
		for _, e := range entries {
			ts, err := time.Parse(time.RFC3339, strings.SplitN(e, "~", 2)[1])
			if err != nil || ts.Before(before) {
				t.Fatalf("entry %q: time %v, %v", e, ts, err)
			}
		}
		if md.Annotations[v1alpha1.AnnotationLastReplicaChangeByScaler] == "" {
			t.Errorf("no %s annotation", v1alpha1.AnnotationLastReplicaChangeByScaler)
		}
		// Marked machines are already out of the target: Cluster Autoscaler sees them Deleting at once.
		in, err := scaler.Nodes(workers)
		if err != nil {
			t.Fatal(err)
		}
		for _, i := range in {
			marked := i.ID == "local:///workers-m2" || i.ID == autoscaler.Placeholder(ns, "workers-m3")
			if deleting := i.Status != nil && i.Status.State == clusterautoscaler.InstanceDeleting; marked != deleting {
				t.Errorf("instance %s: state %+v, marked for deletion %v", i.ID, i.Status, marked)
			}
		}
		// Cluster Autoscaler retries the same deletion: already marked, replicas stay.
		if err := scaler.DeleteNodes(workers, realNode("workers-m2", "local:///workers-m2")); err != nil {
			t.Fatal(err)
		}
		if got := w.getMD("workers").Spec.Replicas; got != 1 {
			t.Fatalf("replicas %d after repeating a deletion", got)
		}
		// A machine already terminating is skipped.
		w.setStatus(m1, v1alpha1.MachineStatus{CurrentStatus: v1alpha1.CurrentStatus{Phase: v1alpha1.MachineTerminating}})
		eventually.Explained(t, 30*time.Second, "workers-m1 Deleting", func() (bool, string) {
			in, _ := scaler.Nodes(workers)
			for _, i := range in {
				if i.ID == autoscaler.Placeholder(ns, "workers-m1") {
					return i.Status != nil && i.Status.State == clusterautoscaler.InstanceDeleting, fmt.Sprint(i.Status)
				}
			}
			return false, fmt.Sprint(in)
		})
		if err := scaler.DeleteNodes(workers, clusterautoscaler.FakeNode(autoscaler.Placeholder(ns, "workers-m1"), "unregistered")); err != nil {
			t.Fatal(err)
		}
		if got := w.getMD("workers").Spec.Replicas; got != 1 {
			t.Fatalf("replicas %d after deleting a terminating machine", got)
		}
		// Below the minimum: other has min 2 and 2 replicas.
		err = scaler.DeleteNodes(other, realNode("other-1", "local:///other-1"))
		wantCode(t, err, codes.FailedPrecondition, "below the minimum 2")
		if got := w.getMD("other").Spec.Replicas; got != 2 {
			t.Fatalf("replicas of other %d after a refused deletion", got)
		}
	})

	t.Run("deleted machine keeps resolving", func(t *testing.T) {
		if err := w.c.Delete(w.ctx, m2); err != nil {
			t.Fatal(err)
		}
		eventually.Explained(t, 30*time.Second, "workers-m2 gone from the group", func() (bool, string) {
			in, _ := scaler.Nodes(workers)
			for _, i := range in {
				if i.ID == "local:///workers-m2" {
					return false, fmt.Sprint(in)
				}
			}
			return true, ""
		})
		if err := scaler.Refresh(); err != nil {
			t.Fatal(err)
		}
		g, err := scaler.NodeGroupForNode(realNode("workers-m2", "local:///workers-m2"))
		if err != nil || g.GetId() != workers {
			t.Fatalf("node of a just-deleted machine resolved to %v, %v; want %s while the Node lingers", g, err, workers)
		}
	})

	t.Run("decrease an unfulfilled target", func(t *testing.T) {
		_, set := w.deployment("grow", "small", 3, sizeAnnotations(0, 10))
		w.machine(set, "grow-1", "local:///grow-1", running())
		w.machine(set, "grow-2", "", creating())
		w.machine(set, "grow-3", "local:///grow-3", v1alpha1.MachineStatus{CurrentStatus: v1alpha1.CurrentStatus{Phase: v1alpha1.MachinePending}})
		const grow = ns + ".grow"
		eventually.Explained(t, 30*time.Second, "grow indexed", func() (bool, string) {
			in, err := scaler.Nodes(grow)
			return err == nil && len(in) == 3, fmt.Sprint(in, err)
		})
		err := scaler.DecreaseTargetSize(grow, -3)
		wantCode(t, err, codes.FailedPrecondition, "1 registered")
		if err := scaler.DecreaseTargetSize(grow, -2); err != nil {
			t.Fatal(err)
		}
		if got := w.getMD("grow").Spec.Replicas; got != 1 {
			t.Fatalf("replicas %d after dropping 2 unfulfilled of 3", got)
		}
		if err := scaler.DecreaseTargetSize(grow, 1); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("positive delta: %v", err)
		}
	})

	t.Run("options", func(t *testing.T) {
		defaults := clusterautoscaler.Options{
			ScaleDownUtilizationThreshold: 0.5, ScaleDownGpuUtilizationThreshold: 0.6,
			ScaleDownUnneededTime: 10 * time.Minute, ScaleDownUnreadyTime: 20 * time.Minute,
			MaxNodeProvisionTime: 15 * time.Minute, IgnoreDaemonSetsUtilization: true,
		}
		if o, err := scaler.GetOptions(workers, defaults); err != nil || o != nil {
			t.Fatalf("options of a group without overrides: %+v, %v; want none (Cluster Autoscaler keeps every default)", o, err)
		}
		want := defaults
		want.ScaleDownUnneededTime = 3 * time.Minute
		want.ScaleDownUtilizationThreshold = 0.7
		for name, c := range map[string]*clusterautoscaler.Client{"1.35": scaler, "1.34": legacy} {
			o, err := c.GetOptions(other, defaults)
			if err != nil || o == nil || *o != want {
				t.Errorf("Cluster Autoscaler %s: options %+v, %v; want %+v (invalid zero-or-max annotation ignored)", name, o, err, want)
			}
		}
	})

	t.Run("concurrent increases", func(t *testing.T) {
		w.deployment("burst", "small", 0, sizeAnnotations(0, 50))
		const burst = ns + ".burst"
		eventually.Explained(t, 30*time.Second, "burst indexed", func() (bool, string) {
			_, err := scaler.TargetSize(burst)
			return err == nil, fmt.Sprint(err)
		})
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for range 8 {
			wg.Go(func() { errs <- scaler.IncreaseSize(burst, 2) })
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		if got := w.getMD("burst").Spec.Replicas; got != 16 {
			t.Fatalf("replicas %d after 8 concurrent +2: an update was lost", got)
		}
	})

	t.Run("misc RPCs", func(t *testing.T) {
		if l := scaler.GPULabel(); l != "machinist.io/gpu" {
			t.Errorf("GPU label %q", l)
		}
		if types := scaler.GetAvailableGPUTypes(); len(types) != 1 {
			t.Errorf("GPU types %v, want [tesla]", types)
		}
		if _, err := scaler.NodePrice(realNode("x", "y"), time.Now(), time.Now().Add(time.Hour)); status.Code(err) != codes.NotFound {
			t.Errorf("NodePrice of a node of no group: %v, want NotFound", err)
		}
		if _, err := scaler.PodPrice(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}}, time.Now(), time.Now()); !errors.Is(err, clusterautoscaler.ErrNotImplemented) {
			t.Errorf("PodPrice: %v", err)
		}
		if _, err := scaler.TargetSize("nope.nope"); status.Code(err) != codes.NotFound {
			t.Errorf("TargetSize of an unknown group: %v", err)
		}
		if err := scaler.Cleanup(); err != nil {
			t.Error(err)
		}
	})

	t.Run("refresh rides out an API server outage", func(t *testing.T) {
		w.env.StopAPIServer()
		for range 3 {
			if err := scaler.Refresh(); err != nil {
				t.Fatalf("Refresh during the outage: %v", err)
			}
			if groups, err := scaler.NodeGroups(); err != nil || len(groups) == 0 {
				t.Fatalf("groups during the outage: %v, %v", groups, err)
			}
		}
		if err := scaler.IncreaseSize(workers, 1); status.Code(err) != codes.Unavailable {
			t.Errorf("IncreaseSize during the outage: %v, want Unavailable", err)
		}
		w.env.StartAPIServer()
		eventually.Explained(t, 30*time.Second, "writes work again", func() (bool, string) {
			err := scaler.IncreaseSize(workers, 1)
			return err == nil, fmt.Sprint(err)
		})
	})
}

func key(name string) types.NamespacedName { return types.NamespacedName{Namespace: ns, Name: name} }

// TestMissingCRDs: without the machine.sapcloud.io CRDs the provider does not start, and says
// what to install.
func TestMissingCRDs(t *testing.T) {
	env := testenv.Start(t, testenv.WithCRDDirs())
	p, err := deployments.New(deployments.Config{Control: env.Config, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = p.Start(ctx)
	if err == nil || !strings.Contains(err.Error(), "CRDs") {
		t.Fatalf("Start without CRDs: %v", err)
	}
	if p.Ready() {
		t.Fatal("ready without CRDs")
	}
}
