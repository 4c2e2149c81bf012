package grpcbridge_test

import (
	"context"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
	corev1 "k8s.io/api/core/v1"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/grpcbridge"
	"github.com/machinist-io/machinist/grpcbridge/internal/bridgetest"
	driverv1 "github.com/machinist-io/machinist/grpcbridge/proto/machinist/driver/v1"
)

// statusDriver answers GetMachineStatus at once: the benchmarks measure the bridge, not a cloud.
type statusDriver struct{ driver.UnimplementedDriver }

var statusResponse = &driver.GetMachineStatusResponse{
	ProviderID: "openstack:///RegionOne/0f6b1d3e-4c2a-4a8e-9a51-00000000m-1",
	NodeName:   "m-1",
	Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.250.0.17"}, {Type: corev1.NodeHostName, Address: "m-1"}},
}

func (statusDriver) GetMachineStatus(context.Context, *driver.GetMachineStatusRequest) (*driver.GetMachineStatusResponse, error) {
	return statusResponse, nil
}

func benchRequest() *driver.GetMachineStatusRequest {
	return &driver.GetMachineStatusRequest{Machine: bridgetest.Machine("m-1"), MachineClass: bridgetest.Class("openstack"), Secret: bridgetest.Secret()}
}

// floorService is a bare unary gRPC method that receives and returns opaque bytes of the sizes
// of a real GetMachineStatus request and response: the cost of gRPC itself, without the bridge.
var floorService = grpc.ServiceDesc{
	ServiceName: "machinist.bench.Floor",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Echo",
		Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.BytesValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			return srv.(*floorServer).resp, nil
		},
	}},
}

type floorServer struct{ resp *wrapperspb.BytesValue }

// floorPayloads returns messages whose encoded sizes equal the bridge's request and response.
func floorPayloads(b *testing.B) (req, resp *wrapperspb.BytesValue) {
	r := benchRequest()
	m, _ := grpcbridge.EncodeMachine(r.Machine)
	c, _ := grpcbridge.EncodeMachineClass(r.MachineClass)
	s, _ := grpcbridge.EncodeSecret(r.Secret)
	reqSize := proto.Size(&driverv1.GetMachineStatusRequest{Machine: m, MachineClass: c, Secret: s})
	respSize := proto.Size(grpcbridge.StatusResponseToProto(statusResponse))
	sized := func(n int) *wrapperspb.BytesValue {
		// A BytesValue of k bytes encodes to 1 + len(varint(k)) + k bytes.
		for k := n - 2; k > 0; k-- {
			v := &wrapperspb.BytesValue{Value: make([]byte, k)}
			if proto.Size(v) == n {
				return v
			}
		}
		b.Fatalf("no BytesValue of size %d", n)
		return nil
	}
	req, resp = sized(reqSize), sized(respSize)
	b.ReportMetric(float64(reqSize), "req-bytes")
	return req, resp
}

type benchEnv struct {
	direct  driver.Driver
	uds     driver.Driver
	tcp     driver.Driver
	tcpMTLS driver.Driver
	floor   func(ctx context.Context) error
}

func newBenchEnv(b *testing.B) *benchEnv {
	d := statusDriver{}
	env := &benchEnv{direct: d}

	// uds and floor share one server and one unix socket.
	addr := "unix://" + filepath.Join(bridgetest.SocketDir(b), "bench.sock")
	lis, err := grpcbridge.Listen(addr)
	if err != nil {
		b.Fatal(err)
	}
	srv, err := grpcbridge.NewGRPCServer(bridgetest.Insecure)
	if err != nil {
		b.Fatal(err)
	}
	grpcbridge.NewServer(d).Register(srv)
	req, resp := floorPayloads(b)
	srv.RegisterService(&floorService, &floorServer{resp: resp})
	go srv.Serve(lis)
	b.Cleanup(srv.Stop)
	conn, err := grpcbridge.Dial(addr, bridgetest.Insecure)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	env.uds = grpcbridge.NewClient(conn)
	env.floor = func(ctx context.Context) error {
		out := new(wrapperspb.BytesValue)
		return conn.Invoke(ctx, "/machinist.bench.Floor/Echo", req, out)
	}

	env.tcp = bridgetest.Serve(b, "127.0.0.1:0", bridgetest.Insecure, bridgetest.Insecure, d).Client
	env.tcpMTLS = bridgetest.ServeTCPMTLS(b, d).Client
	return env
}

func runStatus(b *testing.B, d driver.Driver) {
	req := benchRequest()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := d.GetMachineStatus(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

func runFloor(b *testing.B, floor func(context.Context) error) {
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := floor(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGetMachineStatus measures one GetMachineStatus call with a realistic Machine, class
// and secret: in process (direct), as bare gRPC with payloads of the same size (floor), and
// through the bridge over a unix socket, TCP, TCP with mutual TLS and dial-in.
func BenchmarkGetMachineStatus(b *testing.B) {
	env := newBenchEnv(b)
	b.Run("direct", func(b *testing.B) { runStatus(b, env.direct) })
	b.Run("floor", func(b *testing.B) { runFloor(b, env.floor) })
	b.Run("uds", func(b *testing.B) { runStatus(b, env.uds) })
	b.Run("tcp", func(b *testing.B) { runStatus(b, env.tcp) })
	b.Run("tcp-mtls", func(b *testing.B) { runStatus(b, env.tcpMTLS) })
}

// BenchmarkGetMachineStatusParallel is the same with concurrent callers (b.RunParallel), as
// controller workers call.
func BenchmarkGetMachineStatusParallel(b *testing.B) {
	env := newBenchEnv(b)
	b.Run("floor", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := env.floor(context.Background()); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("uds", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			req := benchRequest()
			for pb.Next() {
				if _, err := env.uds.GetMachineStatus(context.Background(), req); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkConvert is the bridge's own work per GetMachineStatus call, without gRPC: the client
// converts and marshals the request, the server unmarshals and converts it back, and the same
// for the response.
func BenchmarkConvert(b *testing.B) {
	req := benchRequest()
	b.ReportAllocs()
	for b.Loop() {
		m, _ := grpcbridge.EncodeMachine(req.Machine)
		c, _ := grpcbridge.EncodeMachineClass(req.MachineClass)
		s, _ := grpcbridge.EncodeSecret(req.Secret)
		wire, err := proto.Marshal(&driverv1.GetMachineStatusRequest{Machine: m, MachineClass: c, Secret: s})
		if err != nil {
			b.Fatal(err)
		}
		var in driverv1.GetMachineStatusRequest
		if err := proto.Unmarshal(wire, &in); err != nil {
			b.Fatal(err)
		}
		if _, err := grpcbridge.DecodeMachine(in.Machine); err != nil {
			b.Fatal(err)
		}
		if _, err := grpcbridge.DecodeMachineClass(in.MachineClass); err != nil {
			b.Fatal(err)
		}
		if _, err := grpcbridge.DecodeSecret(in.Secret); err != nil {
			b.Fatal(err)
		}
		out, _ := proto.Marshal(grpcbridge.StatusResponseToProto(statusResponse))
		var resp driverv1.GetMachineStatusResponse
		_ = proto.Unmarshal(out, &resp)
		grpcbridge.StatusResponseFromProto(&resp)
	}
}
