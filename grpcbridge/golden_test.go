package grpcbridge_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/diff"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/grpcbridge"
	"github.com/machinist-io/machinist/grpcbridge/internal/fixture"
	driverv1 "github.com/machinist-io/machinist/grpcbridge/proto/machinist/driver/v1"
)

// testdata/wire holds bytes the bridge put on the wire before its codec moved to the generated
// code: the request each client method sends and the response the server answers, for the
// realistic objects of internal/fixture, and Machine and MachineClass messages of objects
// filled at random (every field). They were written by the hand-written codec at 225cd61
// (grpcbridge/wire.go and request.go there). The tests below hold every later version to them:
// a client must send exactly these bytes, a server must decode them into the same objects, and
// a Machine or MachineClass decoded from them must encode to the same bytes again. Equal class
// bytes also keep dial-in's digests (the SHA-256 of the class's encoding) and the server's
// decoded-object cache working across versions.
//
// MACHINIST_WRITE_WIRE_GOLDEN=1 writes only files that are missing: a file once written is the
// contract and is never rewritten by a test.
const wireGoldenEnv = "MACHINIST_WRITE_WIRE_GOLDEN"

var wireDir = filepath.Join("testdata", "wire")

// goldenCall is one driver method with the request the client sends and the answer the driver
// gives.
type goldenCall struct {
	method string
	call   func(context.Context, driver.Driver) (any, error)
	answer any
}

var goldenAddresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.250.0.17"}, {Type: corev1.NodeHostName, Address: "m-1"}}

func goldenCalls() []goldenCall {
	m, c, s := fixture.Machine("m-1"), fixture.Class("openstack"), fixture.Secret()
	return []goldenCall{
		{"CreateMachine", func(ctx context.Context, d driver.Driver) (any, error) {
			return d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: m, MachineClass: c, Secret: s})
		}, &driver.CreateMachineResponse{ProviderID: "openstack:///RegionOne/1", NodeName: "m-1", LastKnownState: "created\xff", Addresses: goldenAddresses}},
		{"InitializeMachine", func(ctx context.Context, d driver.Driver) (any, error) {
			return d.InitializeMachine(ctx, &driver.InitializeMachineRequest{Machine: m, MachineClass: c, Secret: s})
		}, &driver.InitializeMachineResponse{ProviderID: "openstack:///RegionOne/1", NodeName: "m-1", Addresses: goldenAddresses}},
		{"DeleteMachine", func(ctx context.Context, d driver.Driver) (any, error) {
			return d.DeleteMachine(ctx, &driver.DeleteMachineRequest{Machine: m, MachineClass: c, Secret: s})
		}, &driver.DeleteMachineResponse{LastKnownState: "deleted"}},
		{"GetMachineStatus", func(ctx context.Context, d driver.Driver) (any, error) {
			return d.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: m, MachineClass: c, Secret: s})
		}, &driver.GetMachineStatusResponse{ProviderID: "openstack:///RegionOne/1", NodeName: "m-1", Addresses: goldenAddresses}},
		{"ListMachines", func(ctx context.Context, d driver.Driver) (any, error) {
			return d.ListMachines(ctx, &driver.ListMachinesRequest{MachineClass: c, Secret: s})
		}, &driver.ListMachinesResponse{MachineList: map[string]string{"openstack:///RegionOne/1": "m-1"}}},
		{"GetVolumeIDs", func(ctx context.Context, d driver.Driver) (any, error) {
			return d.GetVolumeIDs(ctx, &driver.GetVolumeIDsRequest{PVSpecs: []*corev1.PersistentVolumeSpec{fixture.CSIVolume("cinder.csi.openstack.org", "vol-1"), nil}})
		}, &driver.GetVolumeIDsResponse{VolumeIDs: []string{"vol-1"}}},
	}
}

// readGolden returns the golden file, writing got there first when it is missing and
// MACHINIST_WRITE_WIRE_GOLDEN is set.
func readGolden(t *testing.T, name string, got []byte) []byte {
	t.Helper()
	path := filepath.Join(wireDir, name)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) && os.Getenv(wireGoldenEnv) != "" {
		if err := os.MkdirAll(wireDir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return got
	}
	if err != nil {
		t.Fatalf("%v (the golden wire bytes; %s=1 writes missing ones)", err, wireGoldenEnv)
	}
	return b
}

// TestClientSendsGoldenRequests: each client method sends exactly the golden request bytes and
// decodes the golden response into what the driver answered.
func TestClientSendsGoldenRequests(t *testing.T) {
	calls := goldenCalls()
	var mu sync.Mutex
	sent := map[string][]byte{}
	answers := map[string][]byte{}
	for _, gc := range calls {
		answers["/machinist.driver.v1.DriverService/"+gc.method] = goldenResponse(t, gc)
	}
	// A server that knows no service: every call lands in the handler with its raw bytes.
	srv := grpc.NewServer(grpc.ForceServerCodec(rawCodec{}), grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
		method, _ := grpc.MethodFromServerStream(stream)
		var in []byte
		if err := stream.RecvMsg(&in); err != nil {
			return err
		}
		mu.Lock()
		sent[method] = in
		mu.Unlock()
		out := answers[method]
		return stream.SendMsg(&out)
	}))
	addr := "unix://" + filepath.Join(fixture.SocketDir(t), "capture.sock")
	lis, err := grpcbridge.Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpcbridge.Dial(addr, fixture.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	client := grpcbridge.NewClient(conn, grpcbridge.WithProvider("openstack"))

	for _, gc := range calls {
		t.Run(gc.method, func(t *testing.T) {
			got, err := gc.call(context.Background(), client)
			if err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			req := sent["/machinist.driver.v1.DriverService/"+gc.method]
			mu.Unlock()
			if want := readGolden(t, gc.method+".request", req); !bytes.Equal(req, want) {
				t.Fatalf("the client sent %d bytes that differ from the golden %d", len(req), len(want))
			}
			if !equality.Semantic.DeepEqual(gc.answer, got) {
				t.Fatalf("the golden response decoded differently:\n%s", diff.Diff(gc.answer, got))
			}
		})
	}
}

// goldenResponse is the golden response of a call; when it is missing (and may be written), the
// real server's answer is written first.
func goldenResponse(t *testing.T, gc goldenCall) []byte {
	t.Helper()
	if _, err := os.Stat(filepath.Join(wireDir, gc.method+".response")); err == nil || os.Getenv(wireGoldenEnv) == "" {
		return readGolden(t, gc.method+".response", nil)
	}
	d := &fixture.FuncDriver{Handle: func(context.Context, string, any) (any, error) { return gc.answer, nil }}
	conn := fixture.ServeUnix(t, d).Conn
	var req []byte
	switch gc.method {
	case "GetVolumeIDs":
		req = must(proto.Marshal(&driverv1.GetVolumeIDsRequest{Provider: "openstack"}))
	case "ListMachines":
		req = must(proto.Marshal(&driverv1.ListMachinesRequest{}))
	}
	var out []byte
	if err := conn.Invoke(context.Background(), "/machinist.driver.v1.DriverService/"+gc.method, &req, &out, grpc.ForceCodec(rawCodec{})); err != nil {
		t.Fatal(err)
	}
	return readGolden(t, gc.method+".response", out)
}

// TestServerDecodesGoldenRequests: the server hands the driver the fixture's objects for each
// golden request, and answers with the golden response bytes.
func TestServerDecodesGoldenRequests(t *testing.T) {
	for _, gc := range goldenCalls() {
		t.Run(gc.method, func(t *testing.T) {
			// What the driver must receive is what the same call made in process passes it.
			var want any
			record := &fixture.FuncDriver{Handle: func(_ context.Context, _ string, req any) (any, error) {
				want = req
				return gc.answer, nil
			}}
			if _, err := gc.call(context.Background(), record); err != nil {
				t.Fatal(err)
			}
			var got any
			d := &fixture.FuncDriver{Handle: func(_ context.Context, _ string, req any) (any, error) {
				got = req
				return gc.answer, nil
			}}
			conn := fixture.ServeUnix(t, d).Conn
			req := readGolden(t, gc.method+".request", nil)
			var out []byte
			if err := conn.Invoke(context.Background(), "/machinist.driver.v1.DriverService/"+gc.method, &req, &out, grpc.ForceCodec(rawCodec{})); err != nil {
				t.Fatal(err)
			}
			if !equality.Semantic.DeepEqual(want, got) {
				t.Fatalf("the driver received other objects:\n%s", diff.Diff(want, got))
			}
			// Responses are compared as messages: the proto codec writes a map's entries
			// (ListMachines) in any order.
			wantResp, gotResp := responseMessage(gc.method), responseMessage(gc.method)
			if err := proto.Unmarshal(readGolden(t, gc.method+".response", nil), wantResp); err != nil {
				t.Fatal(err)
			}
			if err := proto.Unmarshal(out, gotResp); err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(wantResp, gotResp) {
				t.Fatalf("the server answered %v, golden %v", gotResp, wantResp)
			}
		})
	}
}

func responseMessage(method string) proto.Message {
	switch method {
	case "CreateMachine":
		return &driverv1.CreateMachineResponse{}
	case "InitializeMachine":
		return &driverv1.InitializeMachineResponse{}
	case "DeleteMachine":
		return &driverv1.DeleteMachineResponse{}
	case "GetMachineStatus":
		return &driverv1.GetMachineStatusResponse{}
	case "ListMachines":
		return &driverv1.ListMachinesResponse{}
	default:
		return &driverv1.GetVolumeIDsResponse{}
	}
}

// TestGoldenRandomObjects: Machine and MachineClass messages of randomly filled objects (every
// field, nil and set pointers, negative durations, any bytes in strings) decode, and encode to
// the same bytes again.
func TestGoldenRandomObjects(t *testing.T) {
	f := objectFiller(t, 2024)
	for i := range 8 {
		var m v1alpha1.Machine
		var c v1alpha1.MachineClass
		f.Fill(&m)
		f.Fill(&c)
		c.Status = v1alpha1.MachineClassStatus{}

		gotM := readGolden(t, fmt.Sprintf("random-machine-%d", i), must(grpcbridge.EncodeMachine(&m)))
		dm, err := grpcbridge.DecodeMachine(gotM)
		if err != nil {
			t.Fatalf("random-machine-%d: %v", i, err)
		}
		if again := must(grpcbridge.EncodeMachine(dm)); !bytes.Equal(again, gotM) {
			t.Fatalf("random-machine-%d encodes to other bytes after decoding", i)
		}

		gotC := readGolden(t, fmt.Sprintf("random-class-%d", i), must(grpcbridge.EncodeMachineClass(&c)))
		dc, err := grpcbridge.DecodeMachineClass(gotC)
		if err != nil {
			t.Fatalf("random-class-%d: %v", i, err)
		}
		if again := must(grpcbridge.EncodeMachineClass(dc)); !bytes.Equal(again, gotC) {
			t.Fatalf("random-class-%d encodes to other bytes after decoding", i)
		}
	}
}
