package static_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/drivertest/memdriver"
	"github.com/machinist-io/machinist/core/registry"
	"github.com/machinist-io/machinist/grpcbridge"
	"github.com/machinist-io/machinist/grpcbridge/autoscaler"
	"github.com/machinist-io/machinist/grpcbridge/autoscaler/clusterautoscaler"
	"github.com/machinist-io/machinist/grpcbridge/autoscaler/internal/autoscalertest"
	"github.com/machinist-io/machinist/grpcbridge/autoscaler/static"
	"github.com/machinist-io/machinist/harness/testenv"
	"github.com/machinist-io/machinist/internal/eventually"
	_ "github.com/machinist-io/machinist/providers/local"
)

// cloud is the mem provider's backend, registered once for the whole package.
var cloud = memdriver.NewCloud()

func TestMain(m *testing.M) {
	registry.Register(cloud.Registration())
	os.Exit(m.Run())
}

const config = `
groups:
- name: workers
  minSize: 0
  maxSize: 4
  machineClassFile: workers-class.yaml
  secret:
    stringData:
      userData: "#!/bin/sh\necho <<MACHINE_NAME>>\n"
  nodeLabels: {pool: workers}
  nodeTaints: [{key: dedicated, value: workers, effect: NoSchedule}]
  options: {scale-down-unneeded-time: 7m}
- name: stockout
  minSize: 0
  maxSize: 2
  pricePerHour: "0.05"
  machineClass:
    provider: local
    providerSpec:
      cluster: static
      createError: {code: ResourceExhausted, message: "no capacity for local in zone local-1"}
- name: slow
  minSize: 1
  maxSize: 3
  machineClass:
    provider: mem
    providerSpec: {cluster: static, role: slow}
- name: tokens
  minSize: 0
  maxSize: 1
  machineClass:
    provider: mem
    providerSpec: {cluster: static, role: tokens}
  secret:
    stringData:
      userData: "kubeadm join --token <<BOOTSTRAP_TOKEN>> --node-name <<MACHINE_NAME>>"
`

const workersClass = `
metadata:
  annotations: {machinist.io/price-per-hour: "0.10"}
provider: local
providerSpec: {cluster: static, cpu: 2, memory: 4Gi}
nodeTemplate:
  capacity: {cpu: "2", memory: 4Gi, gpu: "0"}
  instanceType: local
  region: local
  zone: local-1
`

type setup struct {
	env      *testenv.Env
	stateDir string
	groups   []static.Group
	certs    autoscalertest.Certs
}

func newSetup(t *testing.T) *setup {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "workers-class.yaml"), []byte(workersClass), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "groups.yaml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	groups, err := static.LoadFile(filepath.Join(dir, "groups.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return &setup{env: testenv.Start(t), stateDir: t.TempDir(), groups: groups, certs: autoscalertest.NewCerts(t)}
}

// start opens fresh drivers over the same state and a provider over them, as a restarted
// process does, and connects a Cluster Autoscaler-like client. stop ends that process.
func (s *setup) start(t *testing.T) (scaler *clusterautoscaler.Client, p *static.Source, stop func()) {
	t.Helper()
	resolver := &registry.Resolver{Env: registry.Env{Target: s.env.Config, StateDir: s.stateDir, Log: slog.New(slog.DiscardHandler)}}
	p, err := static.New(static.Config{
		Groups: s.groups, Drivers: resolver, Target: s.env.Clientset(), GPULabel: "machinist.io/gpu",
		Resync: time.Second, Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	addr := autoscalertest.Serve(t, p, s.certs)
	scaler = autoscalertest.Connect(t, addr, s.certs, clusterautoscaler.Current)
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			p.Wait()
			_ = resolver.Close()
		}
	}
	t.Cleanup(stop)
	return scaler, p, stop
}

func nodesOf(t *testing.T, cs kubernetes.Interface) map[string]corev1.Node {
	t.Helper()
	list, err := cs.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]corev1.Node{}
	for _, n := range list.Items {
		out[n.Spec.ProviderID] = n
	}
	return out
}

// running waits until the group has n instances, all Running with real ids, and returns them.
func running(t *testing.T, scaler *clusterautoscaler.Client, id string, n int) []clusterautoscaler.Instance {
	t.Helper()
	var out []clusterautoscaler.Instance
	eventually.Explained(t, 30*time.Second, fmt.Sprintf("%d running instances in %s", n, id), func() (bool, string) {
		in, err := scaler.Nodes(id)
		if err != nil || len(in) != n {
			return false, fmt.Sprint(in, err)
		}
		for _, i := range in {
			if i.Status == nil || i.Status.State != clusterautoscaler.InstanceRunning || strings.HasPrefix(i.ID, autoscaler.PlaceholderScheme) {
				return false, fmt.Sprintf("%+v", in)
			}
		}
		out = in
		return true, ""
	})
	return out
}

// TestStaticGroups drives every RPC the way Cluster Autoscaler does against static groups of the local
// provider (real Nodes in a real kube-apiserver) and of the mem driver (slow and failing
// creates on demand).
func TestStaticGroups(t *testing.T) {
	// The cloud outlives a run of this test (go test -count=N): start from an empty one.
	for _, vm := range cloud.VMs() {
		cloud.Remove(vm.ID)
	}
	cloud.ClearFaults()
	cloud.ResetCalls()
	s := newSetup(t)
	scaler, _, stop := s.start(t)
	cs := s.env.Clientset()
	if err := scaler.Refresh(); err != nil {
		t.Fatal(err)
	}

	t.Run("groups", func(t *testing.T) {
		groups, err := scaler.NodeGroups()
		if err != nil || len(groups) != 4 {
			t.Fatalf("groups %v, %v", groups, err)
		}
		got := fmt.Sprintf("%s %d:%d", groups[3].GetId(), groups[3].GetMinSize(), groups[3].GetMaxSize())
		if got != "workers 0:4" || !strings.Contains(groups[3].GetDebug(), "provider local") {
			t.Fatalf("workers group %q, debug %q", got, groups[3].GetDebug())
		}
	})

	var first []clusterautoscaler.Instance
	t.Run("scale up from 0 with a template, then 1 to 3", func(t *testing.T) {
		if n, err := scaler.TargetSize("workers"); err != nil || n != 0 {
			t.Fatalf("target %d, %v", n, err)
		}
		node, err := scaler.TemplateNodeInfo("workers")
		if err != nil {
			t.Fatal(err)
		}
		if node.Status.Allocatable.Cpu().String() != "2" || node.Labels["pool"] != "workers" || len(node.Spec.Taints) != 1 {
			t.Fatalf("template node %+v", node)
		}
		if _, err := scaler.TemplateNodeInfo("slow"); !errors.Is(err, clusterautoscaler.ErrNotImplemented) {
			t.Fatalf("template of a class without nodeTemplate: %v", err)
		}
		if err := scaler.IncreaseSize("workers", 1); err != nil {
			t.Fatal(err)
		}
		if n, _ := scaler.TargetSize("workers"); n != 1 {
			t.Fatalf("target %d right after IncreaseSize(1)", n)
		}
		first = running(t, scaler, "workers", 1)
		if err := scaler.IncreaseSize("workers", 2); err != nil {
			t.Fatal(err)
		}
		if n, _ := scaler.TargetSize("workers"); n != 3 {
			t.Fatalf("target %d right after IncreaseSize(2)", n)
		}
		in := running(t, scaler, "workers", 3)
		nodes := nodesOf(t, cs)
		for _, i := range in {
			n, ok := nodes[i.ID]
			if !ok {
				t.Fatalf("instance %s has no Node with that providerID", i.ID)
			}
			g, err := scaler.NodeGroupForNode(&n)
			if err != nil || g.GetId() != "workers" || g.GetMaxSize() != 4 {
				t.Fatalf("NodeGroupForNode(%s) = %v, %v", n.Name, g, err)
			}
		}
		if err := scaler.IncreaseSize("workers", 2); status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("IncreaseSize past max: %v", err)
		}
	})

	t.Run("delete a specific node", func(t *testing.T) {
		victim := nodesOf(t, cs)[first[0].ID]
		if err := scaler.DeleteNodes("slow", &victim); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("deleting a workers node through slow: %v", err)
		}
		if err := scaler.DeleteNodes("workers", &victim); err != nil {
			t.Fatal(err)
		}
		if n, _ := scaler.TargetSize("workers"); n != 2 {
			t.Fatalf("target %d right after deleting 1 of 3", n)
		}
		running(t, scaler, "workers", 2)
		eventually.Explained(t, 30*time.Second, "node of the deleted machine gone", func() (bool, string) {
			_, err := cs.CoreV1().Nodes().Get(context.Background(), victim.Name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), fmt.Sprint(err)
		})
		for _, i := range running(t, scaler, "workers", 2) {
			if i.ID == victim.Spec.ProviderID {
				t.Fatalf("deleted instance %s still listed", i.ID)
			}
		}
	})

	t.Run("failed create is error info", func(t *testing.T) {
		if err := scaler.IncreaseSize("stockout", 1); err != nil {
			t.Fatal(err)
		}
		var failed clusterautoscaler.Instance
		eventually.Explained(t, 30*time.Second, "error info", func() (bool, string) {
			in, err := scaler.Nodes("stockout")
			if err != nil || len(in) != 1 || in[0].Status == nil || in[0].Status.ErrorInfo == nil {
				return false, fmt.Sprint(in, err)
			}
			failed = in[0]
			return true, ""
		})
		e := failed.Status.ErrorInfo
		if failed.Status.State != clusterautoscaler.InstanceCreating || e.ErrorClass != 1 || e.ErrorCode != "ResourceExhausted" || !strings.Contains(e.ErrorMessage, "no capacity") {
			t.Fatalf("instance %s: state %d, error %+v", failed.ID, failed.Status.State, e)
		}
		// Cluster Autoscaler resolves its fake node and deletes the instance.
		fake := clusterautoscaler.FakeNode(failed.ID, "create-error")
		if g, err := scaler.NodeGroupForNode(fake); err != nil || g.GetId() != "stockout" {
			t.Fatalf("fake node of the failed instance: %v, %v", g, err)
		}
		if err := scaler.DeleteNodes("stockout", fake); err != nil {
			t.Fatal(err)
		}
		if n, _ := scaler.TargetSize("stockout"); n != 0 {
			t.Fatalf("target %d after deleting the failed instance", n)
		}
	})

	t.Run("placeholders and decrease of an unfulfilled target", func(t *testing.T) {
		// slow has min 1: one machine first, then two whose creates hang.
		if err := scaler.IncreaseSize("slow", 1); err != nil {
			t.Fatal(err)
		}
		running(t, scaler, "slow", 1)
		cloud.Inject(memdriver.MethodCreate, memdriver.Fault{Delay: time.Hour})
		defer cloud.ClearFaults()
		if err := scaler.IncreaseSize("slow", 2); err != nil {
			t.Fatal(err)
		}
		in, err := scaler.Nodes("slow")
		if err != nil || len(in) != 3 {
			t.Fatalf("instances %v, %v", in, err)
		}
		var placeholders []string
		for _, i := range in {
			if strings.HasPrefix(i.ID, autoscaler.PlaceholderScheme) {
				placeholders = append(placeholders, i.ID)
				if i.Status.State != clusterautoscaler.InstanceCreating {
					t.Fatalf("placeholder %s state %d", i.ID, i.Status.State)
				}
			}
		}
		if len(placeholders) != 2 {
			t.Fatalf("placeholders %v in %+v", placeholders, in)
		}
		g, err := scaler.NodeGroupForNode(clusterautoscaler.FakeNode(placeholders[0], "unregistered"))
		if err != nil || g.GetId() != "slow" || g.GetMinSize() != 1 {
			t.Fatalf("placeholder resolved to %v, %v", g, err)
		}
		if err := scaler.DecreaseTargetSize("slow", -3); status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("decreasing past the pending requests: %v", err)
		}
		if err := scaler.DecreaseTargetSize("slow", -2); err != nil {
			t.Fatal(err)
		}
		if n, _ := scaler.TargetSize("slow"); n != 1 {
			t.Fatalf("target %d after dropping the two pending creates", n)
		}
		running(t, scaler, "slow", 1)
		if vms := cloud.VMs(); len(vms) != 1 {
			t.Fatalf("mem cloud holds %d VMs, want only the running one", len(vms))
		}
		if err := scaler.DeleteNodes("slow", clusterautoscaler.FakeNode(running(t, scaler, "slow", 1)[0].ID, "unregistered")); status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("deleting below min 1: %v", err)
		}
	})

	t.Run("node objects go with their machines", func(t *testing.T) {
		// The mem driver, unlike the local one, leaves Nodes alone: deleting them is ours.
		before := running(t, scaler, "slow", 1)[0].ID
		if err := scaler.IncreaseSize("slow", 2); err != nil {
			t.Fatal(err)
		}
		var fresh []memdriver.VM
		for _, i := range running(t, scaler, "slow", 3) {
			for _, v := range cloud.VMs() {
				if i.ID != before && v.ProviderID() == i.ID {
					fresh = append(fresh, v)
				}
			}
		}
		if len(fresh) != 2 {
			t.Fatalf("new VMs %v", fresh)
		}
		ctx := context.Background()
		// A Node named like the first machine but of another VM (a reused name) must survive.
		decoy := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fresh[0].MachineName}, Spec: corev1.NodeSpec{ProviderID: "mem:///elsewhere/vm-x"}}
		realNode := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fresh[1].MachineName}, Spec: corev1.NodeSpec{ProviderID: fresh[1].ProviderID()}}
		for _, n := range []*corev1.Node{decoy, realNode} {
			if _, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if err := scaler.DeleteNodes("slow", clusterautoscaler.FakeNode(fresh[0].ProviderID(), "unregistered"), realNode); err != nil {
			t.Fatal(err)
		}
		eventually.Explained(t, 30*time.Second, "both VMs and the real node deleted", func() (bool, string) {
			_, err := cs.CoreV1().Nodes().Get(ctx, realNode.Name, metav1.GetOptions{})
			_, vm0 := cloud.VM(fresh[0].ID)
			_, vm1 := cloud.VM(fresh[1].ID)
			return apierrors.IsNotFound(err) && !vm0 && !vm1, fmt.Sprint(err, vm0, vm1)
		})
		running(t, scaler, "slow", 1)
		if _, err := cs.CoreV1().Nodes().Get(ctx, decoy.Name, metav1.GetOptions{}); err != nil {
			t.Fatalf("the node of another VM that shares a deleted machine's name: %v", err)
		}
	})

	t.Run("userData gets the machine name and a bootstrap token", func(t *testing.T) {
		if err := scaler.IncreaseSize("tokens", 1); err != nil {
			t.Fatal(err)
		}
		in := running(t, scaler, "tokens", 1)
		var vm memdriver.VM
		for _, v := range cloud.VMs() {
			if v.ProviderID() == in[0].ID {
				vm = v
			}
		}
		m := regexp.MustCompile(`^kubeadm join --token ([a-z0-9]{6})\.([a-z0-9]{16}) --node-name (tokens-[a-z0-9]{5})$`).FindStringSubmatch(vm.UserData)
		if m == nil || m[3] != vm.MachineName {
			t.Fatalf("userData %q", vm.UserData)
		}
		secret, err := cs.CoreV1().Secrets("kube-system").Get(context.Background(), "bootstrap-token-"+m[1], metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if secret.Type != corev1.SecretTypeBootstrapToken || string(secret.Data["token-secret"]) != m[2] || string(secret.Data["usage-bootstrap-authentication"]) != "true" {
			t.Fatalf("bootstrap token secret %+v", secret)
		}
		if exp, err := time.Parse(time.RFC3339, string(secret.Data["expiration"])); err != nil || exp.Before(time.Now().Add(10*time.Minute)) {
			t.Fatalf("expiration %q, %v", secret.Data["expiration"], err)
		}
	})

	t.Run("options and misc", func(t *testing.T) {
		o, err := scaler.GetOptions("workers", clusterautoscaler.Options{ScaleDownUtilizationThreshold: 0.5, ScaleDownUnneededTime: time.Minute, MaxNodeProvisionTime: 15 * time.Minute})
		if err != nil || o == nil || o.ScaleDownUnneededTime != 7*time.Minute || o.ScaleDownUtilizationThreshold != 0.5 || o.MaxNodeProvisionTime != 15*time.Minute {
			t.Fatalf("options %+v, %v", o, err)
		}
		if _, err := scaler.TargetSize("nope"); status.Code(err) != codes.NotFound {
			t.Fatalf("unknown group: %v", err)
		}
		if o, err := scaler.GetOptions("slow", clusterautoscaler.Options{ScaleDownUtilizationThreshold: 0.5}); err != nil || o != nil {
			t.Fatalf("a group without options: %+v, %v; want none", o, err)
		}
		if l := scaler.GPULabel(); l != "machinist.io/gpu" {
			t.Errorf("GPU label %q", l)
		}
		if types := scaler.GetAvailableGPUTypes(); len(types) != 0 {
			t.Errorf("GPU types %v, want none (no group labels its nodes with the GPU label)", types)
		}
		// Prices: the class's annotation (workers), the group's pricePerHour (stockout), none (slow).
		now := time.Now()
		for group, want := range map[string]float64{"workers": 0.20, "stockout": 0.10} {
			tmpl := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "template-node-for-" + group + "-77", Labels: map[string]string{autoscaler.LabelTemplateNode: "true"}}}
			if got, err := scaler.NodePrice(tmpl, now, now.Add(2*time.Hour)); err != nil || math.Abs(got-want) > 1e-9 {
				t.Errorf("price of %s's template for 2h: %v, %v; want %v", group, got, err, want)
			}
		}
		slow := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "template-node-for-slow-77", Labels: map[string]string{autoscaler.LabelTemplateNode: "true"}}}
		if _, err := scaler.NodePrice(slow, now, now.Add(time.Hour)); !errors.Is(err, clusterautoscaler.ErrNotImplemented) {
			t.Errorf("price of a group without one: %v, want not implemented", err)
		}
		if _, err := scaler.NodePrice(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "stranger"}, Spec: corev1.NodeSpec{ProviderID: "aws:///i-1"}}, now, now.Add(time.Hour)); status.Code(err) != codes.NotFound {
			t.Errorf("price of a foreign node: %v, want NotFound", err)
		}
		pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("2Gi")}}}}}}
		if got, err := scaler.PodPrice(pod, now, now.Add(time.Hour)); err != nil || math.Abs(got-0.05) > 1e-9 {
			t.Errorf("PodPrice: %v, %v; want half of workers' 0.10", got, err)
		}
		if g, err := scaler.NodeGroupForNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "stranger"}, Spec: corev1.NodeSpec{ProviderID: "aws:///i-1"}}); err != nil || g != nil {
			t.Errorf("a foreign node resolved to %v, %v", g, err)
		}
		if err := scaler.Cleanup(); err != nil {
			t.Error(err)
		}
	})

	t.Run("a restart loses nothing", func(t *testing.T) {
		before := running(t, scaler, "workers", 2)
		stop()
		ca2, _, _ := s.start(t)
		after := running(t, ca2, "workers", 2)
		if ids(before) != ids(after) {
			t.Fatalf("instances before the restart %v, after %v", before, after)
		}
		if n, _ := ca2.TargetSize("workers"); n != 2 {
			t.Fatalf("target %d after the restart", n)
		}
		if n, _ := ca2.TargetSize("slow"); n != 1 {
			t.Fatalf("slow target %d after the restart", n)
		}
	})
}

func TestConfigErrors(t *testing.T) {
	for name, tc := range map[string]struct{ yaml, want string }{
		"no groups":      {"groups: []", "defines no groups"},
		"bad name":       {"groups: [{name: Workers_1, maxSize: 1, machineClass: {provider: x, providerSpec: {a: 1}}}]", `name "Workers_1"`},
		"min above max":  {"groups: [{name: w, minSize: 3, maxSize: 1, machineClass: {provider: x, providerSpec: {a: 1}}}]", "minSize 3, maxSize 1"},
		"no class":       {"groups: [{name: w, maxSize: 1}]", "no machineClass"},
		"two classes":    {"groups: [{name: w, maxSize: 1, machineClass: {provider: x, providerSpec: {a: 1}}, machineClassFile: c.yaml}]", "both set"},
		"unknown field":  {"groups: [{name: w, maxSize: 1, maxsize: 2}]", `unknown field "groups[0].maxsize"`},
		"unknown option": {"groups: [{name: w, maxSize: 1, machineClass: {provider: x, providerSpec: {a: 1}}, options: {scale-down-time: 1m}}]", "unknown option scale-down-time"},
		"bad option":     {"groups: [{name: w, maxSize: 1, machineClass: {provider: x, providerSpec: {a: 1}}, options: {scale-down-unneeded-time: soon}}]", "scale-down-unneeded-time"},
		"duplicate":      {"groups: [{name: w, maxSize: 1, machineClass: {provider: x, providerSpec: {a: 1}}}, {name: w, maxSize: 1, machineClass: {provider: x, providerSpec: {a: 1}}}]", "used twice"},
		"missing file":   {"groups: [{name: w, maxSize: 1, machineClassFile: nope.yaml}]", "nope.yaml"},
		"bad price":      {"groups: [{name: w, maxSize: 1, pricePerHour: '1,5', machineClass: {provider: x, providerSpec: {a: 1}}}]", `pricePerHour "1,5": want a non-negative decimal`},
		"bad class price": {"groups: [{name: w, maxSize: 1, machineClass: {metadata: {annotations: {machinist.io/price-per-hour: '-1'}}, provider: x, providerSpec: {a: 1}}}]",
			`machineClass.metadata.annotations: machinist.io/price-per-hour="-1" is not a price`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := static.Load([]byte(tc.yaml), t.TempDir())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to say %q", err, tc.want)
			}
		})
	}
}

func TestBootstrapTokenNeedsTarget(t *testing.T) {
	groups, err := static.Load([]byte(`groups: [{name: w, maxSize: 1, machineClass: {provider: mem, providerSpec: {cluster: c, role: r}}, secret: {stringData: {userData: "join <<BOOTSTRAP_TOKEN>>"}}}]`), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	_, err = static.New(static.Config{Groups: groups, Drivers: &registry.Resolver{}})
	if err == nil || !strings.Contains(err.Error(), "--target-kubeconfig") {
		t.Fatalf("error %v, want it to ask for --target-kubeconfig", err)
	}
}

func TestListMachinesRequired(t *testing.T) {
	groups, err := static.Load([]byte(`groups: [{name: w, maxSize: 1, machineClass: {provider: nolist, providerSpec: {a: 1}}}]`), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p, err := static.New(static.Config{Groups: groups, Drivers: noList{}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Start(ctx); err == nil || !strings.Contains(err.Error(), "cannot list machines") {
		t.Fatalf("Start: %v", err)
	}
}

type noList struct{ driver.UnimplementedDriver }

func (n noList) ForClass(*v1alpha1.MachineClass) (driver.Driver, error) { return n, nil }

func ids(in []clusterautoscaler.Instance) string {
	var out []string
	for _, i := range in {
		out = append(out, fmt.Sprintf("%s/%d", i.ID, i.Status.State))
	}
	return strings.Join(out, ",")
}

// TestStaticGroupThroughBridge serves a static group whose driver sits behind the gRPC driver
// bridge (machinist serve), as --driver-endpoint configures it.
func TestStaticGroupThroughBridge(t *testing.T) {
	bridged := memdriver.NewCloud()
	gs, err := grpcbridge.NewGRPCServer(grpcbridge.Transport{Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	grpcbridge.NewServer(memdriver.New(bridged), grpcbridge.WithProviders(memdriver.ProviderName)).Register(gs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	conn, err := grpcbridge.Dial(lis.Addr().String(), grpcbridge.Transport{Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	resolver := &registry.Resolver{Endpoints: grpcbridge.NewRouter(map[string]driver.Driver{
		memdriver.ProviderName: grpcbridge.NewClient(conn, grpcbridge.WithProvider(memdriver.ProviderName)),
	})}

	groups, err := static.Load([]byte(`groups: [{name: bridged, maxSize: 3, machineClass: {provider: mem, providerSpec: {cluster: bridge, role: worker}}}]`), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p, err := static.New(static.Config{Groups: groups, Drivers: resolver, Resync: time.Second, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); p.Wait() })
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	certs := autoscalertest.NewCerts(t)
	scaler := autoscalertest.Connect(t, autoscalertest.Serve(t, p, certs), certs, clusterautoscaler.Current)
	if err := scaler.IncreaseSize("bridged", 2); err != nil {
		t.Fatal(err)
	}
	in := running(t, scaler, "bridged", 2)
	if n := len(bridged.VMs()); n != 2 {
		t.Fatalf("the bridged cloud holds %d VMs, want 2", n)
	}
	for _, vm := range cloud.VMs() {
		if vm.Cluster == "bridge" {
			t.Fatalf("VM %s was created by the compiled-in mem driver, not through the bridge", vm.ID)
		}
	}
	if err := scaler.DeleteNodes("bridged", clusterautoscaler.FakeNode(in[0].ID, "unregistered")); err != nil {
		t.Fatal(err)
	}
	eventually.Explained(t, 30*time.Second, "one VM left behind the bridge", func() (bool, string) {
		return len(bridged.VMs()) == 1, fmt.Sprint(bridged.VMs())
	})
}
