package autoscaler_test

import (
	"errors"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/grpcbridge/autoscaler"
	"github.com/machinist-io/machinist/grpcbridge/autoscaler/clusterautoscaler"
)

func TestTemplateGroupID(t *testing.T) {
	cases := []struct {
		node autoscaler.Node
		id   string
		ok   bool
	}{
		{autoscaler.Node{Name: "template-node-for-shoot--dev.workers-5577006791947779410", Labels: map[string]string{autoscaler.LabelTemplateNode: "true"}}, "shoot--dev.workers", true},
		// Cluster Autoscaler before the template label, and group names ending in digits.
		{autoscaler.Node{Name: "template-node-for-ns.pool-1-8674665223082153551"}, "ns.pool-1", true},
		// Our annotation wins over the name.
		{autoscaler.Node{Name: "template-node-for-x-1", Annotations: map[string]string{autoscaler.AnnotationNodeGroup: "ns.real"}}, "ns.real", true},
		{autoscaler.Node{Name: "template-node-for-ns.pool"}, "", false},
		{autoscaler.Node{Name: "workers-abc12", ProviderID: "local:///workers-abc12"}, "", false},
		{autoscaler.Node{Name: "template-node-for--123"}, "", false},
	}
	for _, tc := range cases {
		id, ok := autoscaler.TemplateGroupID(tc.node)
		if id != tc.id || ok != tc.ok {
			t.Errorf("TemplateGroupID(%q) = %q, %v; want %q, %v", tc.node.Name, id, ok, tc.id, tc.ok)
		}
	}
}

func requests(cpu, memory string) corev1.ResourceRequirements {
	return corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(memory)}}
}

func TestPodRequests(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{
			{Name: "big-init", Resources: requests("3", "1Gi")},
			{Name: "sidecar", Resources: requests("100m", "128Mi"), RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)},
			{Name: "late-init", Resources: requests("500m", "3Gi")},
		},
		Containers: []corev1.Container{{Name: "a", Resources: requests("1", "1Gi")}, {Name: "b", Resources: requests("500m", "512Mi")}},
		Overhead:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
	}}
	cpu, memory := autoscaler.PodRequests(pod)
	// CPU: the first init container (3) beats the containers with the sidecar (1.6); memory:
	// the late init container with the sidecar started before it (3Gi + 128Mi) beats them (1.5Gi + 128Mi).
	if math.Abs(cpu-3.05) > 1e-9 || memory != float64(3<<30+128<<20+64<<20) {
		t.Errorf("PodRequests = %v cores, %v bytes", cpu, memory)
	}
}

func TestPodPricePerHour(t *testing.T) {
	groups := []autoscaler.GroupShape{
		{Price: autoscaler.Price{PerHour: 0.5}, CPU: 2, Memory: 4 << 30},
		{Price: autoscaler.Price{PerHour: 0.4}, CPU: 1, Memory: 2 << 30}, // dearer per core
		{Price: autoscaler.Price{PerHour: 0.1}},                          // no size: ignored
	}
	// Half the cheaper node (per unit) costs half its price.
	got, ok := autoscaler.PodPricePerHour(1, 2<<30, groups)
	if !ok || math.Abs(got-0.25) > 1e-12 {
		t.Errorf("PodPricePerHour = %v, %v; want 0.25", got, ok)
	}
	if _, ok := autoscaler.PodPricePerHour(1, 1<<30, groups[2:]); ok {
		t.Error("a price without a node size")
	}
	if got, _ := autoscaler.PodPricePerHour(0, 0, groups); got != 0 {
		t.Errorf("a pod without requests costs %v", got)
	}
}

// pricingClient serves src on loopback (plain text) to a client that speaks as Cluster Autoscaler
// of the given release does.
func pricingClient(t *testing.T, src autoscaler.NodeGroupSource, release clusterautoscaler.Release) *clusterautoscaler.Client {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := autoscaler.NewGRPCServer(autoscaler.NewServer(autoscaler.Config{Source: src}))
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	c, err := clusterautoscaler.Dial(clusterautoscaler.CloudConfig{Address: lis.Addr().String()}, release)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestPricingAnswers: node and pod prices for the interval asked, in the 1.35 fields and the
// pre-1.35 ones; Unimplemented (Cluster Autoscaler's "not implemented", which its price expander
// takes as "leave this option out") for a group without a price; NotFound for a node of no
// group; InvalidArgument for an interval that ends before it starts.
func TestPricingAnswers(t *testing.T) {
	start := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	template := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "template-node-for-g-1234", Labels: map[string]string{autoscaler.LabelTemplateNode: "true"}}}
	member := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "m1"}, Spec: corev1.NodeSpec{ProviderID: "fake:///m1"}}
	foreign := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "other"}, Spec: corev1.NodeSpec{ProviderID: "gce://p/z/other"}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: requests("1", "2Gi")}}}}
	for _, release := range []clusterautoscaler.Release{clusterautoscaler.Current, clusterautoscaler.Legacy} {
		c := pricingClient(t, fakeSource{}, release)
		for _, tc := range []struct {
			node *corev1.Node
			end  time.Duration
			want float64
		}{{template, time.Hour, 0.5}, {template, 30 * time.Minute, 0.25}, {member, 2 * time.Hour, 1}} {
			got, err := c.NodePrice(tc.node, start, start.Add(tc.end))
			if err != nil || math.Abs(got-tc.want) > 1e-12 {
				t.Errorf("release %d: NodePrice(%s, %v) = %v, %v; want %v", release, tc.node.Name, tc.end, got, err, tc.want)
			}
		}
		if _, err := c.NodePrice(foreign, start, start.Add(time.Hour)); status.Code(err) != codes.NotFound {
			t.Errorf("release %d: a foreign node's price: %v, want NotFound", release, err)
		}
		if _, err := c.NodePrice(template, start, start.Add(-time.Minute)); status.Code(err) != codes.InvalidArgument {
			t.Errorf("release %d: an interval ending before it starts: %v, want InvalidArgument", release, err)
		}
		got, err := c.PodPrice(pod, start, start.Add(time.Hour))
		if err != nil || math.Abs(got-0.25) > 1e-12 {
			t.Errorf("release %d: PodPrice = %v, %v; want 0.25 (half the node of 2 CPU, 4Gi)", release, got, err)
		}
	}

	c := pricingClient(t, fakeSource{noPrice: true}, clusterautoscaler.Current)
	if _, err := c.NodePrice(template, start, start.Add(time.Hour)); !errors.Is(err, clusterautoscaler.ErrNotImplemented) {
		t.Errorf("a group without a price: %v, want Cluster Autoscaler's not implemented", err)
	}
	_, err := c.PodPrice(pod, start, start.Add(time.Hour))
	if !errors.Is(err, clusterautoscaler.ErrNotImplemented) {
		t.Errorf("pod price without priced groups: %v, want not implemented", err)
	}
}

var templateWithSize = v1alpha1.NodeTemplate{
	Capacity:     corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi")},
	InstanceType: "t", Region: "r", Zone: "z",
}

func TestTemplateNodeNamesItsGroup(t *testing.T) {
	node, err := autoscaler.BuildTemplateNode(autoscaler.TemplateSpec{GroupID: "ns.pool", ClassName: "c",
		NodeTemplate: &templateWithSize,
		Annotations:  map[string]string{"example.com/owner": "team-a", autoscaler.AnnotationNodeGroup: "spoofed"}})
	if err != nil {
		t.Fatal(err)
	}
	if node.Annotations[autoscaler.AnnotationNodeGroup] != "ns.pool" || node.Annotations["example.com/owner"] != "team-a" {
		t.Errorf("template annotations %v: want the group's own and the group id", node.Annotations)
	}
	if id, ok := autoscaler.TemplateGroupID(autoscaler.Node{Name: "template-node-for-x-1", Annotations: node.Annotations}); !ok || id != "ns.pool" {
		t.Errorf("the template's group: %q %v", id, ok)
	}
	if !strings.HasPrefix(node.Name, "template-node-for-ns.pool") {
		t.Errorf("template name %q", node.Name)
	}
}
