package grpcbridge_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/grpcbridge"
	"github.com/machinist-io/machinist/grpcbridge/internal/fixture"
	"github.com/machinist-io/machinist/grpcbridge/mtls/mtlstest"
	driverv1 "github.com/machinist-io/machinist/grpcbridge/proto/machinist/driver/v1"
)

// TestServerKilledMidOperation stops the server while a call is inside the driver: the caller
// gets Unavailable at once instead of waiting for its deadline, and later calls fail the same way.
func TestServerKilledMidOperation(t *testing.T) {
	entered := make(chan struct{})
	d := &fixture.FuncDriver{Handle: func(ctx context.Context, _ string, _ any) (any, error) {
		close(entered)
		<-ctx.Done()
		return nil, ctx.Err()
	}}
	served := fixture.ServeUnix(t, d)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- fixture.CallMethod(ctx, served.Client, "CreateMachine") }()
	<-entered
	start := time.Now()
	served.GRPC.Stop()
	err := <-errc
	if !driver.IsCode(err, driver.Unavailable) || time.Since(start) > 5*time.Second {
		t.Fatalf("in-flight call after the server died: %v after %v", err, time.Since(start))
	}
	err = fixture.CallMethod(ctx, served.Client, "GetMachineStatus")
	if !driver.IsCode(err, driver.Unavailable) || !strings.Contains(driver.MessageOf(err), "unavailable") {
		t.Fatalf("call to a dead server: %v", err)
	}
}

// rawCodec sends bytes as they are, to put garbage on the wire.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

func TestGarbageMessages(t *testing.T) {
	called := false
	d := &fixture.FuncDriver{Handle: func(context.Context, string, any) (any, error) {
		called = true
		return nil, nil
	}}
	served := fixture.ServeUnix(t, d)

	// Bytes that are not a protobuf message at all.
	for _, garbage := range [][]byte{{0xff, 0xff, 0xff}, bytes.Repeat([]byte{0x0a}, 64), []byte("hello, driver")} {
		var out []byte
		err := served.Conn.Invoke(t.Context(), driverv1.DriverService_CreateMachine_FullMethodName, &garbage, &out, grpc.ForceCodec(rawCodec{}))
		if status.Code(err) == codes.OK {
			t.Fatalf("garbage %q accepted", garbage)
		}
	}

	// A well-formed message whose embedded Kubernetes encoding is garbage: InvalidArgument naming
	// the field, and the driver is never called.
	raw := driverv1.NewDriverServiceClient(served.Conn)
	badMeta, _ := proto.Marshal(&driverv1.Machine{Metadata: []byte{0xff, 0x01, 0x02}})
	_, err := raw.CreateMachine(t.Context(), &driverv1.CreateMachineRequest{Machine: badMeta})
	got := grpcbridge.FromGRPCStatus(t.Context(), err)
	if !driver.IsCode(got, driver.InvalidArgument) || !strings.Contains(driver.MessageOf(got), "machine.metadata") {
		t.Fatalf("bad metadata: %v", got)
	}
	badClass, _ := proto.Marshal(&driverv1.MachineClass{NodeTemplate: &driverv1.NodeTemplate{Capacity: map[string]string{"cpu": "four"}}})
	_, err = raw.CreateMachine(t.Context(), &driverv1.CreateMachineRequest{MachineClass: badClass})
	got = grpcbridge.FromGRPCStatus(t.Context(), err)
	if !driver.IsCode(got, driver.InvalidArgument) || !strings.Contains(driver.MessageOf(got), "capacity[cpu]") {
		t.Fatalf("bad quantity: %v", got)
	}
	_, err = raw.CreateMachine(t.Context(), &driverv1.CreateMachineRequest{Secret: []byte{0x0a, 0xff}})
	got = grpcbridge.FromGRPCStatus(t.Context(), err)
	if !driver.IsCode(got, driver.InvalidArgument) || !strings.Contains(driver.MessageOf(got), "decode secret") {
		t.Fatalf("bad secret: %v", got)
	}
	if called {
		t.Fatal("the driver was called with an undecodable request")
	}
	// The server still works.
	if err := fixture.CallMethod(t.Context(), served.Client, "GetMachineStatus"); err != nil {
		t.Fatal(err)
	}
}

// TestOversizedMessages: a request over MaxMessageSize is refused before it is sent, a response
// over it is refused by the client; neither hangs or takes the server down.
func TestOversizedMessages(t *testing.T) {
	big := bytes.Repeat([]byte("x"), grpcbridge.MaxMessageSize+1)
	d := &fixture.FuncDriver{Handle: func(_ context.Context, method string, _ any) (any, error) {
		if method == "ListMachines" {
			list := map[string]string{}
			for i := range 5 {
				list[strings.Repeat(string(rune('a'+i)), 1<<20)] = "m"
			}
			return &driver.ListMachinesResponse{MachineList: list}, nil
		}
		return nil, nil
	}}
	served := fixture.ServeUnix(t, d)
	s := fixture.Secret()
	s.Data["userData"] = big
	_, err := served.Client.CreateMachine(t.Context(), &driver.CreateMachineRequest{Machine: fixture.Machine("m"), MachineClass: fixture.Class("mem"), Secret: s})
	if !driver.IsCode(err, driver.ResourceExhausted) || !strings.Contains(driver.MessageOf(err), "larger than max") {
		t.Fatalf("oversized request: %v", err)
	}
	_, err = served.Client.ListMachines(t.Context(), &driver.ListMachinesRequest{MachineClass: fixture.Class("mem")})
	if !driver.IsCode(err, driver.ResourceExhausted) {
		t.Fatalf("oversized response: %v", err)
	}
	if err := fixture.CallMethod(t.Context(), served.Client, "GetMachineStatus"); err != nil {
		t.Fatal(err)
	}
}

// TestUnauthorizedClientCertificate: a client whose certificate another CA signed, an expired
// client certificate and a plain-text client are all refused by an mTLS driver server.
func TestUnauthorizedClientCertificate(t *testing.T) {
	d := &fixture.FuncDriver{Handle: func(context.Context, string, any) (any, error) { return nil, nil }}
	certs := fixture.NewCerts(t)
	st, ct := certs.Transports(t)
	served := fixture.Serve(t, "127.0.0.1:0", st, ct, d)
	mustOK(t, fixture.CallMethod(t.Context(), served.Client, "GetMachineStatus"))

	other := mtlstest.NewCA(t, "other")
	intruder := fixture.Certs{Client: other.IssueFiles(t, mtlstest.Leaf{CommonName: "intruder"}, certs.CA.PEM), Server: certs.Server}
	_, badClient := intruder.Transports(t)
	expired := fixture.Certs{Client: certs.CA.IssueFiles(t, mtlstest.Leaf{CommonName: "old", NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)}, nil), Server: certs.Server}
	_, expiredClient := expired.Transports(t)
	for name, tr := range map[string]grpcbridge.Transport{"other CA": badClient, "expired": expiredClient, "plain text": fixture.Insecure} {
		conn, err := grpcbridge.Dial(served.Addr, tr)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		err = fixture.CallMethod(ctx, grpcbridge.NewClient(conn), "GetMachineStatus")
		cancel()
		conn.Close()
		if !driver.IsCode(err, driver.Unavailable) {
			t.Errorf("%s client: %v, want Unavailable (handshake refused)", name, err)
		}
	}
}

func TestTransportRequiresAChoice(t *testing.T) {
	if _, err := grpcbridge.Dial("127.0.0.1:1", grpcbridge.Transport{}); !errors.Is(err, grpcbridge.ErrNoTransportSecurity) {
		t.Fatalf("dial without TLS or insecure: %v", err)
	}
	if _, err := grpcbridge.NewGRPCServer(grpcbridge.Transport{}); !errors.Is(err, grpcbridge.ErrNoTransportSecurity) {
		t.Fatalf("server without TLS or insecure: %v", err)
	}
	for _, bad := range []string{"", "unix://", "no-port", "unix:"} {
		if _, err := grpcbridge.Target(bad); err == nil {
			t.Errorf("address %q accepted", bad)
		}
	}
	for addr, want := range map[string]string{"unix:///run/d.sock": "unix:///run/d.sock", "localhost:5000": "dns:///localhost:5000", "[::1]:5000": "dns:///[::1]:5000"} {
		if got, err := grpcbridge.Target(addr); err != nil || got != want {
			t.Errorf("Target(%q) = %q, %v", addr, got, err)
		}
	}
}

func TestListenReplacesStaleSocket(t *testing.T) {
	addr := "unix://" + fixture.SocketDir(t) + "/d.sock"
	l, err := grpcbridge.Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := grpcbridge.Listen(addr); err == nil || !strings.Contains(err.Error(), "another process") {
		t.Fatalf("second listener on a live socket: %v", err)
	}
	// A listener that dies without cleaning up leaves the file behind.
	l.(interface{ SetUnlinkOnClose(bool) }).SetUnlinkOnClose(false)
	l.Close()
	l2, err := grpcbridge.Listen(addr)
	if err != nil {
		t.Fatalf("stale socket not replaced: %v", err)
	}
	l2.Close()
}
