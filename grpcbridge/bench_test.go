package grpcbridge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
	corev1 "k8s.io/api/core/v1"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/grpcbridge"
	"github.com/machinist-io/machinist/grpcbridge/dialin"
	"github.com/machinist-io/machinist/grpcbridge/internal/fixture"
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
	return &driver.GetMachineStatusRequest{Machine: fixture.Machine("m-1"), MachineClass: fixture.Class("openstack"), Secret: fixture.Secret()}
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
	dialin  driver.Driver
	floor   func(ctx context.Context) error
}

func newBenchEnv(b *testing.B) *benchEnv {
	d := statusDriver{}
	env := &benchEnv{direct: d}

	// uds and floor share one server and one unix socket.
	req, resp := floorPayloads(b)
	conn := serveUnix(b, "bench.sock", func(srv *grpc.Server) {
		grpcbridge.NewServer(d).Register(srv)
		srv.RegisterService(&floorService, &floorServer{resp: resp})
	})
	env.uds = grpcbridge.NewClient(conn)
	env.floor = func(ctx context.Context) error {
		out := new(wrapperspb.BytesValue)
		return conn.Invoke(ctx, "/machinist.bench.Floor/Echo", req, out)
	}

	env.tcp = fixture.Serve(b, "127.0.0.1:0", fixture.Insecure, fixture.Insecure, d).Client
	env.tcpMTLS = fixture.ServeTCPMTLS(b, d).Client
	env.dialin = dialinDriver(b, d)
	return env
}

// serveUnix serves what register adds on a plain-text unix socket named name and returns a
// connection to it; both end with b.
func serveUnix(b *testing.B, name string, register func(*grpc.Server)) *grpc.ClientConn {
	addr := "unix://" + filepath.Join(fixture.SocketDir(b), name)
	lis, err := grpcbridge.Listen(addr)
	if err != nil {
		b.Fatal(err)
	}
	srv, err := grpcbridge.NewGRPCServer(fixture.Insecure)
	if err != nil {
		b.Fatal(err)
	}
	register(srv)
	go func() { _ = srv.Serve(lis) }()
	b.Cleanup(srv.Stop)
	conn, err := grpcbridge.Dial(addr, fixture.Insecure)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	return conn
}

// dialinDriver serves d by dial-in over a unix socket in plain text (the same transport as
// uds, so the two differ only by the protocol) and returns the controller-side driver.
func dialinDriver(b *testing.B, d driver.Driver) driver.Driver {
	addr := "unix://" + filepath.Join(fixture.SocketDir(b), "dialin.sock")
	lis, err := grpcbridge.Listen(addr)
	if err != nil {
		b.Fatal(err)
	}
	gs, err := grpcbridge.NewGRPCServer(fixture.Insecure)
	if err != nil {
		b.Fatal(err)
	}
	ds := dialin.NewServer(dialin.Options{Insecure: true, Log: quiet})
	ds.RegisterService(gs)
	go func() { _ = gs.Serve(lis) }()
	b.Cleanup(func() { ds.Close(); gs.Stop() })
	fixture.ConnectProvider(b, addr, fixture.Insecure, map[string]driver.Driver{"openstack": d},
		func(o *dialin.ConnectorOptions) { o.Log = quiet })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := ds.WaitFor(ctx, "openstack", 1); err != nil {
		b.Fatal(err)
	}
	remote, _ := ds.Driver("openstack")
	return remote
}

var quiet = slog.New(slog.DiscardHandler)

// callerContext is the context the benchmarks call with: one with a deadline, as the
// controllers always call drivers (each reconcile step bounds its driver calls), so gRPC carries
// the deadline and the bridge's client adds none. noDeadline is the secondary case of a caller
// without one, where the client adds its default bound (Timeouts).
type callerContext func(b *testing.B) context.Context

func withDeadline(b *testing.B) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	b.Cleanup(cancel)
	return ctx
}

func noDeadline(*testing.B) context.Context { return context.Background() }

func runStatus(b *testing.B, d driver.Driver) { runStatusIn(b, withDeadline, d) }

func runStatusIn(b *testing.B, caller callerContext, d driver.Driver) {
	req := benchRequest()
	ctx := caller(b)
	b.ReportAllocs()
	defer cpuPerOp(b)()
	for b.Loop() {
		if _, err := d.GetMachineStatus(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// runStatusNewMachines is runStatus with a new version of the machine on every call (more
// versions than the server's decoded-machine cache holds), as most calls of a controller are:
// only the class and secret repeat.
func runStatusNewMachines(b *testing.B, d driver.Driver) {
	reqs := make([]*driver.GetMachineStatusRequest, 1024)
	for i := range reqs {
		reqs[i] = benchRequest()
		reqs[i].Machine.ResourceVersion = strconv.Itoa(2000000 + i)
	}
	ctx := withDeadline(b)
	b.ReportAllocs()
	defer cpuPerOp(b)()
	i := 0
	for b.Loop() {
		if _, err := d.GetMachineStatus(ctx, reqs[i%len(reqs)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func runFloor(b *testing.B, floor func(context.Context) error) { runFloorIn(b, withDeadline, floor) }

func runFloorIn(b *testing.B, caller callerContext, floor func(context.Context) error) {
	ctx := caller(b)
	b.ReportAllocs()
	defer cpuPerOp(b)()
	for b.Loop() {
		if err := floor(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// cpuPerOp reports the process's CPU time (user + system, both sides of the call when the server
// runs in this process) per operation as cpu-ns/op. On a shared machine wall time also counts
// waiting for a CPU; CPU time is the work done, so its ratios are the stable ones.
func cpuPerOp(b *testing.B) func() {
	start := processCPU()
	return func() {
		b.ReportMetric(float64(processCPU()-start)/float64(b.N), "cpu-ns/op")
	}
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkGetMachineStatus measures one GetMachineStatus call with a realistic Machine, class
// and secret: in process (direct), as bare gRPC with payloads of the same size (floor), and
// through the bridge over a unix socket, TCP, TCP with mutual TLS and dial-in, each called with
// a deadline as the controllers call. Every case but uds-new-machine repeats one machine
// version, as the controller does within a reconcile (GetMachineStatus, then CreateMachine);
// uds-new-machine sends a new one each time. floor-no-deadline and uds-no-deadline are a caller
// without a deadline, for which the bridge's client sets its default bound.
func BenchmarkGetMachineStatus(b *testing.B) {
	env := newBenchEnv(b)
	b.Run("direct", func(b *testing.B) { runStatus(b, env.direct) })
	b.Run("floor", func(b *testing.B) { runFloor(b, env.floor) })
	b.Run("uds", func(b *testing.B) { runStatus(b, env.uds) })
	b.Run("uds-new-machine", func(b *testing.B) { runStatusNewMachines(b, env.uds) })
	b.Run("tcp", func(b *testing.B) { runStatus(b, env.tcp) })
	b.Run("tcp-mtls", func(b *testing.B) { runStatus(b, env.tcpMTLS) })
	b.Run("dialin", func(b *testing.B) { runStatus(b, env.dialin) })
	b.Run("floor-no-deadline", func(b *testing.B) { runFloorIn(b, noDeadline, env.floor) })
	b.Run("uds-no-deadline", func(b *testing.B) { runStatusIn(b, noDeadline, env.uds) })
}

// BenchmarkGetMachineStatusParallel is the same with concurrent callers (b.RunParallel), as
// controller workers call, with a deadline.
func BenchmarkGetMachineStatusParallel(b *testing.B) {
	env := newBenchEnv(b)
	ctx := withDeadline(b)
	b.Run("floor", func(b *testing.B) {
		b.ReportAllocs()
		defer cpuPerOp(b)()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := env.floor(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	for _, bc := range []struct {
		name string
		d    driver.Driver
	}{{"uds", env.uds}, {"dialin", env.dialin}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			defer cpuPerOp(b)()
			b.RunParallel(func(pb *testing.PB) {
				req := benchRequest()
				for pb.Next() {
					if _, err := bc.d.GetMachineStatus(ctx, req); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// serverEnv makes the test binary a driver server in its own process (see TestMain).
const serverEnv = "GRPCBRIDGE_BENCH_SERVE"

func TestMain(m *testing.M) {
	servePluginIfStarted()
	if addr := os.Getenv(serverEnv); addr != "" {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
		err := grpcbridge.Serve(ctx, grpcbridge.ServeOptions{Listen: addr, Transport: grpcbridge.Transport{Insecure: true},
			Drivers: map[string]driver.Driver{"openstack": statusDriver{}}, Log: quiet})
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// BenchmarkGetMachineStatusSeparateProcess calls a driver server running in its own process, as
// in production (process), next to the in-process server of the uds case over the same kind of
// socket.
func BenchmarkGetMachineStatusSeparateProcess(b *testing.B) {
	env := newBenchEnv(b)
	self, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	addr := "unix://" + filepath.Join(fixture.SocketDir(b), "process.sock")
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(os.Environ(), serverEnv+"="+addr)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() })
	conn, err := grpcbridge.Dial(addr, fixture.Insecure)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	process := grpcbridge.NewClient(conn)
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := process.GetMachineStatus(context.Background(), benchRequest())
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("driver server process not ready: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.Run("uds", func(b *testing.B) { runStatus(b, env.uds) })
	b.Run("process", func(b *testing.B) { runStatus(b, process) })
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

// BenchmarkObjectEncoding compares ways to carry a request's three objects (encode on one side,
// decode on the other): the bridge's (the generated message types, with Kubernetes protobuf
// inside) and the JSON the API server speaks. It is the measurement behind the wire format
// (docs/grpc-bridge.md).
func BenchmarkObjectEncoding(b *testing.B) {
	req := benchRequest()
	b.Run("bridge", func(b *testing.B) {
		b.ReportAllocs()
		var size int
		for b.Loop() {
			m, _ := grpcbridge.EncodeMachine(req.Machine)
			c, _ := grpcbridge.EncodeMachineClass(req.MachineClass)
			s, _ := grpcbridge.EncodeSecret(req.Secret)
			size = len(m) + len(c) + len(s)
			if _, err := grpcbridge.DecodeMachine(m); err != nil {
				b.Fatal(err)
			}
			if _, err := grpcbridge.DecodeMachineClass(c); err != nil {
				b.Fatal(err)
			}
			if _, err := grpcbridge.DecodeSecret(s); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(size), "wire-bytes")
	})
	b.Run("json", func(b *testing.B) {
		b.ReportAllocs()
		var size int
		for b.Loop() {
			m, _ := json.Marshal(req.Machine)
			c, _ := json.Marshal(req.MachineClass)
			s, _ := json.Marshal(req.Secret)
			size = len(m) + len(c) + len(s)
			var dm v1alpha1.Machine
			var dc v1alpha1.MachineClass
			var ds corev1.Secret
			if err := json.Unmarshal(m, &dm); err != nil {
				b.Fatal(err)
			}
			if err := json.Unmarshal(c, &dc); err != nil {
				b.Fatal(err)
			}
			if err := json.Unmarshal(s, &ds); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(size), "wire-bytes")
	})
}

// breakdownServer is the real DriverService with the bridge's work switched off piece by piece:
// it converts the response per call only when asked to (else it answers one converted once),
// and decodes the machine only when asked to.
type breakdownServer struct {
	driverv1.UnimplementedDriverServiceServer
	convert       bool
	decodeMachine bool
	resp          *driverv1.GetMachineStatusResponse
}

func (s *breakdownServer) GetMachineStatus(_ context.Context, req *driverv1.GetMachineStatusRequest) (*driverv1.GetMachineStatusResponse, error) {
	if s.decodeMachine {
		if _, err := grpcbridge.DecodeMachine(req.Machine); err != nil {
			return nil, err
		}
	}
	if s.convert {
		return grpcbridge.StatusResponseToProto(statusResponse), nil
	}
	return s.resp, nil
}

// BenchmarkGetMachineStatusBreakdown splits the distance between floor and uds (same request
// bytes, same socket kind, same run, every call with the caller's deadline):
//   - no-deadline: floor without a deadline, to show what a deadline costs gRPC itself (a
//     timer and its context on each side);
//   - messages: the generated request and response types over the real method, pre-encoded
//     once, no conversion at all;
//   - machine: as messages, but the Machine is encoded per call and the response converted on
//     both sides; the server does not decode the Machine, as uds finds it in its Decoder;
//   - machine-decoded: as machine, and the server decodes the Machine, as uds-new-machine must;
//   - uds: the whole bridge (the class and secret from the client's Encoder, all three objects
//     found in the server's Decoder by content and handed to the driver as they are).
func BenchmarkGetMachineStatusBreakdown(b *testing.B) {
	env := newBenchEnv(b)
	open := func(b *testing.B, srv *breakdownServer) driverv1.DriverServiceClient {
		srv.resp = grpcbridge.StatusResponseToProto(statusResponse)
		return driverv1.NewDriverServiceClient(serveUnix(b, "breakdown.sock", func(s *grpc.Server) {
			driverv1.RegisterDriverServiceServer(s, srv)
		}))
	}
	r := benchRequest()
	pre := &driverv1.GetMachineStatusRequest{
		Machine:      must(grpcbridge.EncodeMachine(r.Machine)),
		MachineClass: must(grpcbridge.EncodeMachineClass(r.MachineClass)),
		Secret:       must(grpcbridge.EncodeSecret(r.Secret)),
	}
	// encodeMachine calls with the Machine encoded per call and converts the response back.
	encodeMachine := func(rpc driverv1.DriverServiceClient) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			req := &driverv1.GetMachineStatusRequest{MachineClass: pre.MachineClass, Secret: pre.Secret}
			var err error
			if req.Machine, err = grpcbridge.EncodeMachine(r.Machine); err != nil {
				return err
			}
			resp, err := rpc.GetMachineStatus(ctx, req)
			if err != nil {
				return err
			}
			grpcbridge.StatusResponseFromProto(resp)
			return nil
		}
	}
	b.Run("floor", func(b *testing.B) { runFloor(b, env.floor) })
	b.Run("no-deadline", func(b *testing.B) { runFloorIn(b, noDeadline, env.floor) })
	b.Run("messages", func(b *testing.B) {
		rpc := open(b, &breakdownServer{})
		runFloor(b, func(ctx context.Context) error {
			_, err := rpc.GetMachineStatus(ctx, pre)
			return err
		})
	})
	b.Run("machine", func(b *testing.B) { runFloor(b, encodeMachine(open(b, &breakdownServer{convert: true}))) })
	b.Run("machine-decoded", func(b *testing.B) {
		runFloor(b, encodeMachine(open(b, &breakdownServer{convert: true, decodeMachine: true})))
	})
	b.Run("uds", func(b *testing.B) { runStatus(b, env.uds) })
}
