package autoscaler_test

import (
	"context"
	"fmt"
	"math"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/grpcbridge/autoscaler"
	pb "github.com/machinist-io/machinist/grpcbridge/proto/clusterautoscaler/cloudprovider/v1/externalgrpc"
)

// rawCodec sends and receives hand-encoded bytes, so the test speaks the wire exactly as an
// older Cluster Autoscaler built from its own proto would.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

const service = "/clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider/"

// serveRaw serves p without TLS on loopback and returns a connection that sends raw bytes.
func serveRaw(t *testing.T, p autoscaler.NodeGroupSource) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := autoscaler.NewGRPCServer(autoscaler.NewServer(autoscaler.Config{Source: p}))
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func call(t *testing.T, conn *grpc.ClientConn, method string, req []byte) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var resp []byte
	if err := conn.Invoke(ctx, service+method, &req, &resp); err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	return resp
}

// fields decodes one level of a message into field number -> raw values (bytes of
// length-delimited fields, varints as uint64, fixed64 as uint64).
func fields(t *testing.T, b []byte) map[protowire.Number][]any {
	t.Helper()
	out := map[protowire.Number][]any{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			t.Fatalf("bad tag: %v", protowire.ParseError(n))
		}
		b = b[n:]
		var v any
		switch typ {
		case protowire.BytesType:
			var x []byte
			x, n = protowire.ConsumeBytes(b)
			v = x
		case protowire.VarintType:
			var x uint64
			x, n = protowire.ConsumeVarint(b)
			v = x
		case protowire.Fixed64Type:
			var x uint64
			x, n = protowire.ConsumeFixed64(b)
			v = x
		default:
			t.Fatalf("unexpected wire type %d of field %d", typ, num)
		}
		if n < 0 {
			t.Fatalf("bad value of field %d: %v", num, protowire.ParseError(n))
		}
		b = b[n:]
		out[num] = append(out[num], v)
	}
	return out
}

func one(t *testing.T, f map[protowire.Number][]any, num protowire.Number) any {
	t.Helper()
	if len(f[num]) != 1 {
		t.Fatalf("field %d occurs %d times, want once", num, len(f[num]))
	}
	return f[num][0]
}

// metaDuration encodes k8s.io.apimachinery.pkg.apis.meta.v1.Duration {int64 duration = 1}.
func metaDuration(d time.Duration) []byte {
	return protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), uint64(d))
}

func bytesField(b []byte, num protowire.Number, v []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), v)
}

func doubleField(b []byte, num protowire.Number, v float64) []byte {
	return protowire.AppendFixed64(protowire.AppendTag(b, num, protowire.Fixed64Type), math.Float64bits(v))
}

func boolField(b []byte, num protowire.Number, v bool) []byte {
	return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), protowire.EncodeBool(v))
}

// TestLegacyGetOptions sends NodeGroupGetOptions as Cluster Autoscaler 1.33 encodes it (defaults with
// meta.v1.Duration at fields 3/4/5) and checks that the answer carries the durations at both
// the old numbers (nanoseconds, which Cluster Autoscaler 1.33 dereferences unchecked) and the new ones.
func TestLegacyGetOptions(t *testing.T) {
	conn := serveRaw(t, fakeSource{options: autoscaler.Options{ScaleDownUnreadyTime: ptr.To(30 * time.Minute)}})
	var defaults []byte
	defaults = doubleField(defaults, 1, 0.5)
	defaults = doubleField(defaults, 2, 0.6)
	defaults = bytesField(defaults, 3, metaDuration(10*time.Minute))
	defaults = bytesField(defaults, 4, metaDuration(20*time.Minute))
	defaults = bytesField(defaults, 5, metaDuration(15*time.Minute))
	defaults = boolField(defaults, 7, true)
	req := bytesField(bytesField(nil, 1, []byte("g")), 2, defaults)

	resp := fields(t, call(t, conn, "NodeGroupGetOptions", req))
	opts := fields(t, one(t, resp, 1).([]byte))
	if got := math.Float64frombits(one(t, opts, 1).(uint64)); got != 0.5 {
		t.Errorf("scaleDownUtilizationThreshold %v, want the default 0.5", got)
	}
	if got := math.Float64frombits(one(t, opts, 2).(uint64)); got != 0.6 {
		t.Errorf("scaleDownGpuUtilizationThreshold %v, want the default 0.6 (not mixed up with the CPU one)", got)
	}
	if got := one(t, opts, 7).(uint64); got != 1 {
		t.Errorf("ignoreDaemonSetsUtilization %v, want the default true", got)
	}
	for num, want := range map[protowire.Number]time.Duration{3: 10 * time.Minute, 4: 30 * time.Minute, 5: 15 * time.Minute} {
		legacy := fields(t, one(t, opts, num).([]byte))
		if got := time.Duration(one(t, legacy, 1).(uint64)); got != want {
			t.Errorf("old field %d = %v, want %v", num, got, want)
		}
		current := fields(t, one(t, opts, num+5).([]byte))
		seconds := one(t, current, 1).(uint64) // google.protobuf.Duration {int64 seconds = 1}
		if got := time.Duration(seconds) * time.Second; got != want {
			t.Errorf("new field %d = %v, want %v", num+5, got, want)
		}
	}
}

// TestLegacyTemplateNodeInfo checks that the template node travels in field 1 (read by Cluster Autoscaler up to
// 1.34.1 as a k8s.io.api.core.v1.Node message) and field 2 (1.34.2+), with identical bytes that
// decode as a Node.
func TestLegacyTemplateNodeInfo(t *testing.T) {
	conn := serveRaw(t, fakeSource{})
	resp := fields(t, call(t, conn, "NodeGroupTemplateNodeInfo", bytesField(nil, 1, []byte("g"))))
	old, current := one(t, resp, 1).([]byte), one(t, resp, 2).([]byte)
	if string(old) != string(current) || len(old) == 0 {
		t.Fatalf("nodeInfo (%d bytes) and nodeBytes (%d bytes) differ or are empty", len(old), len(current))
	}
	node := &corev1.Node{}
	if err := node.Unmarshal(old); err != nil {
		t.Fatal(err)
	}
	if node.Status.Allocatable.Cpu().String() != "2" {
		t.Fatalf("decoded template node has allocatable %v", node.Status.Allocatable)
	}
}

// TestLegacyRequestsDecode decodes pricing requests built with the pre-1.35 field numbers
// (meta.v1.Time at 2/3, the Pod message at 1) into the generated types.
func TestLegacyRequestsDecode(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	metaTime := func(ts time.Time) []byte {
		b := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), uint64(ts.Unix()))
		return protowire.AppendVarint(protowire.AppendTag(b, 2, protowire.VarintType), uint64(ts.Nanosecond()))
	}
	node := bytesField(bytesField(nil, 1, []byte("local:///n1")), 2, []byte("n1"))
	raw := bytesField(bytesField(bytesField(nil, 1, node), 2, metaTime(start)), 3, metaTime(start.Add(time.Hour)))
	var nodeReq pb.PricingNodePriceRequest
	if err := proto.Unmarshal(raw, &nodeReq); err != nil {
		t.Fatal(err)
	}
	if nodeReq.GetNode().GetProviderID() != "local:///n1" || !nodeReq.GetStartTime().AsTime().Equal(start) || !nodeReq.GetEndTime().AsTime().Equal(start.Add(time.Hour)) {
		t.Fatalf("decoded %v", &nodeReq)
	}

	pod := &corev1.Pod{}
	pod.Name = "p"
	podBytes, err := pod.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	var podReq pb.PricingPodPriceRequest
	if err := proto.Unmarshal(bytesField(bytesField(nil, 1, podBytes), 2, metaTime(start)), &podReq); err != nil {
		t.Fatal(err)
	}
	decoded := &corev1.Pod{}
	if err := decoded.Unmarshal(podReq.GetPod()); err != nil || decoded.Name != "p" || !podReq.GetStartTime().AsTime().Equal(start) {
		t.Fatalf("decoded pod %v, %v", decoded.Name, err)
	}
}

// TestNodeGroupNodesWire checks the instance encoding Cluster Autoscaler reads: a state always set, error info
// with code, message and class.
func TestNodeGroupNodesWire(t *testing.T) {
	conn := serveRaw(t, fakeSource{})
	resp := fields(t, call(t, conn, "NodeGroupNodes", bytesField(nil, 1, []byte("g"))))
	if len(resp[1]) != 2 {
		t.Fatalf("%d instances, want 2", len(resp[1]))
	}
	failed := fields(t, resp[1][1].([]byte))
	if string(one(t, failed, 1).([]byte)) != autoscaler.Placeholder("g", "m2") {
		t.Fatalf("instance id %q", one(t, failed, 1))
	}
	st := fields(t, one(t, failed, 2).([]byte))
	if one(t, st, 1).(uint64) != 2 {
		t.Fatalf("state %v, want instanceCreating (2)", one(t, st, 1))
	}
	ei := fields(t, one(t, st, 2).([]byte))
	if string(one(t, ei, 1).([]byte)) != "ResourceExhausted" || one(t, ei, 3).(uint64) != 1 || string(one(t, ei, 2).([]byte)) != "quota" {
		t.Fatalf("error info %v", ei)
	}
}

// fakeSource is one group "g" with two instances and a template, priced 0.5 per hour unless
// noPrice.
type fakeSource struct {
	options autoscaler.Options
	noPrice bool
}

func (f fakeSource) NodeGroups() []autoscaler.NodeGroup {
	return []autoscaler.NodeGroup{{ID: "g", MinSize: 0, MaxSize: 3, Debug: "fake"}}
}
func (f fakeSource) NodeGroupForNode(n autoscaler.Node) (autoscaler.NodeGroup, bool, error) {
	return f.NodeGroups()[0], n.ProviderID == "fake:///m1", nil
}
func (f fakeSource) TargetSize(context.Context, string) (int, error)              { return 2, nil }
func (f fakeSource) IncreaseSize(context.Context, string, int) error              { return nil }
func (f fakeSource) DeleteNodes(context.Context, string, []autoscaler.Node) error { return nil }
func (f fakeSource) DecreaseTargetSize(context.Context, string, int) error        { return nil }
func (f fakeSource) Nodes(context.Context, string) ([]autoscaler.Instance, error) {
	return []autoscaler.Instance{
		{ID: "fake:///m1", State: autoscaler.StateRunning},
		{ID: autoscaler.Placeholder("g", "m2"), State: autoscaler.StateCreating, Error: &autoscaler.InstanceError{Code: "ResourceExhausted", Message: "quota", Class: autoscaler.ErrorClassOutOfResources}},
	}, nil
}
func (f fakeSource) TemplateNode(context.Context, string) (*corev1.Node, error) {
	return autoscaler.BuildTemplateNode(autoscaler.TemplateSpec{GroupID: "g", ClassName: "c", NodeTemplate: &v1alpha1.NodeTemplate{
		Capacity:     corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi")},
		InstanceType: "t", Region: "r", Zone: "z",
	}})
}
func (f fakeSource) Options(context.Context, string) (autoscaler.Options, error) {
	return f.options, nil
}
func (f fakeSource) GPUTypes() []string            { return nil }
func (f fakeSource) Refresh(context.Context) error { return nil }
func (f fakeSource) GroupPrice(id string) (autoscaler.Price, error) {
	if id != "g" {
		return autoscaler.Price{}, driver.Errorf(driver.NotFound, "node group %q not found", id)
	}
	if f.noPrice {
		return autoscaler.Price{}, fmt.Errorf("group g has no price: %w", autoscaler.ErrNoPrice)
	}
	return autoscaler.Price{PerHour: 0.5, From: "fake"}, nil
}
func (f fakeSource) NodePrice(n autoscaler.Node) (autoscaler.Price, error) {
	if _, ok, _ := f.NodeGroupForNode(n); !ok {
		return autoscaler.Price{}, driver.Errorf(driver.NotFound, "node %q is not a machine of any node group", n.Name)
	}
	return f.GroupPrice("g")
}
func (f fakeSource) GroupShapes() []autoscaler.GroupShape {
	if f.noPrice {
		return nil
	}
	return []autoscaler.GroupShape{{Price: autoscaler.Price{PerHour: 0.5, From: "fake"}, CPU: 2, Memory: 4 << 30}}
}
