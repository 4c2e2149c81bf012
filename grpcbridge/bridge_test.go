package grpcbridge_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/grpcbridge"
	"github.com/machinist-io/machinist/grpcbridge/internal/fixture"
	driverv1 "github.com/machinist-io/machinist/grpcbridge/proto/machinist/driver/v1"
)

// TestObjectsArriveEqual checks, for every method, that the driver behind the bridge receives
// what the caller sent and the caller receives what the driver answered.
func TestObjectsArriveEqual(t *testing.T) {
	m, c, s := fixture.Machine("m-1"), fixture.Class("mem"), fixture.Secret()
	pv := &corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "x", VolumeHandle: "v"}}}
	addrs := []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.7"}, {Type: corev1.NodeHostName, Address: "m-1"}}
	var got any
	d := &fixture.FuncDriver{Handle: func(_ context.Context, method string, req any) (any, error) {
		got = req
		switch method {
		case "CreateMachine":
			return &driver.CreateMachineResponse{ProviderID: "p", NodeName: "n", LastKnownState: "s", Addresses: addrs}, nil
		case "InitializeMachine":
			return &driver.InitializeMachineResponse{ProviderID: "p", NodeName: "n", Addresses: addrs}, nil
		case "DeleteMachine":
			return &driver.DeleteMachineResponse{LastKnownState: "gone"}, nil
		case "GetMachineStatus":
			return &driver.GetMachineStatusResponse{ProviderID: "p", NodeName: "n", Addresses: addrs}, nil
		case "ListMachines":
			return &driver.ListMachinesResponse{MachineList: map[string]string{"p1": "m1", "p2": "m2"}}, nil
		}
		return &driver.GetVolumeIDsResponse{VolumeIDs: []string{"v"}}, nil
	}}
	cl := fixture.ServeUnix(t, d).Client
	ctx := t.Context()

	cr, err := cl.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: m, MachineClass: c, Secret: s})
	mustOK(t, err)
	mustEqual(t, "create request", &driver.CreateMachineRequest{Machine: m, MachineClass: c, Secret: s}, got)
	mustEqual(t, "create response", &driver.CreateMachineResponse{ProviderID: "p", NodeName: "n", LastKnownState: "s", Addresses: addrs}, cr)

	ir, err := cl.InitializeMachine(ctx, &driver.InitializeMachineRequest{Machine: m, MachineClass: c, Secret: s})
	mustOK(t, err)
	mustEqual(t, "initialize request", &driver.InitializeMachineRequest{Machine: m, MachineClass: c, Secret: s}, got)
	mustEqual(t, "initialize response", &driver.InitializeMachineResponse{ProviderID: "p", NodeName: "n", Addresses: addrs}, ir)

	dr, err := cl.DeleteMachine(ctx, &driver.DeleteMachineRequest{Machine: m, MachineClass: c, Secret: s})
	mustOK(t, err)
	mustEqual(t, "delete request", &driver.DeleteMachineRequest{Machine: m, MachineClass: c, Secret: s}, got)
	mustEqual(t, "delete response", &driver.DeleteMachineResponse{LastKnownState: "gone"}, dr)

	sr, err := cl.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: m, MachineClass: c, Secret: s})
	mustOK(t, err)
	mustEqual(t, "status request", &driver.GetMachineStatusRequest{Machine: m, MachineClass: c, Secret: s}, got)
	mustEqual(t, "status response", &driver.GetMachineStatusResponse{ProviderID: "p", NodeName: "n", Addresses: addrs}, sr)

	lr, err := cl.ListMachines(ctx, &driver.ListMachinesRequest{MachineClass: c, Secret: s})
	mustOK(t, err)
	mustEqual(t, "list request", &driver.ListMachinesRequest{MachineClass: c, Secret: s}, got)
	mustEqual(t, "list response", &driver.ListMachinesResponse{MachineList: map[string]string{"p1": "m1", "p2": "m2"}}, lr)

	vr, err := cl.GetVolumeIDs(ctx, &driver.GetVolumeIDsRequest{PVSpecs: []*corev1.PersistentVolumeSpec{pv, nil}})
	mustOK(t, err)
	mustEqual(t, "volumes request", &driver.GetVolumeIDsRequest{PVSpecs: []*corev1.PersistentVolumeSpec{pv, nil}}, got)
	mustEqual(t, "volumes response", &driver.GetVolumeIDsResponse{VolumeIDs: []string{"v"}}, vr)

	// A request without class or secret arrives without them.
	_, err = cl.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: m})
	mustOK(t, err)
	if r := got.(*driver.GetMachineStatusRequest); r.MachineClass != nil || r.Secret != nil {
		t.Fatalf("absent objects arrived as %+v", r)
	}
}

func mustOK(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestEveryCodeRoundTrips sends each of the 18 codes with a message from the driver to the
// caller, for every method, over both transports.
func TestEveryCodeRoundTrips(t *testing.T) {
	var mu sync.Mutex
	var next error
	d := &fixture.FuncDriver{Handle: func(context.Context, string, any) (any, error) {
		mu.Lock()
		defer mu.Unlock()
		return nil, next
	}}
	for _, served := range []*fixture.Served{fixture.ServeUnix(t, d), fixture.ServeTCPMTLS(t, d)} {
		for code := driver.Code(1); code < driver.NumCodes; code++ {
			msg := fmt.Sprintf("%s: the cloud said [%d] — ünïcode ok, \xff not UTF-8, 100%% sure", code, code)
			mu.Lock()
			next = driver.Error(code, msg)
			mu.Unlock()
			for _, method := range fixture.Methods {
				err := fixture.CallMethod(t.Context(), served.Client, method)
				var st *driver.Status
				if !errors.As(err, &st) {
					t.Fatalf("%s %s: error %v is not a *driver.Status", method, code, err)
				}
				if want := strings.ToValidUTF8(msg, "\uFFFD"); st.Code() != code || st.Message() != want {
					t.Fatalf("%s: sent %s %q, got %s %q", method, code, msg, st.Code(), st.Message())
				}
			}
		}
	}
}

func TestErrorsWithoutStatus(t *testing.T) {
	var mu sync.Mutex
	var next error
	d := &fixture.FuncDriver{Handle: func(context.Context, string, any) (any, error) {
		mu.Lock()
		defer mu.Unlock()
		if next == nil {
			panic("cloud client exploded")
		}
		return nil, next
	}}
	cl := fixture.ServeUnix(t, d).Client
	set := func(err error) {
		mu.Lock()
		next = err
		mu.Unlock()
	}
	cases := []struct {
		err  error
		code driver.Code
		msg  string
	}{
		{errors.New("plain failure"), driver.Unknown, "plain failure"},
		{fmt.Errorf("openstack: create server: %w", driver.Error(driver.ResourceExhausted, "quota exceeded for cores")), driver.ResourceExhausted, "openstack: create server: quota exceeded for cores"},
		{driver.NewStatus(driver.OK, "confused"), driver.Unknown, "driver returned an error with code OK: confused"},
		{context.DeadlineExceeded, driver.DeadlineExceeded, "context deadline exceeded"},
		{nil, driver.Internal, "driver panicked in GetMachineStatus: cloud client exploded"},
	}
	for _, tc := range cases {
		set(tc.err)
		err := fixture.CallMethod(t.Context(), cl, "GetMachineStatus")
		if driver.CodeOf(err) != tc.code || driver.MessageOf(err) != tc.msg {
			t.Errorf("driver error %v arrived as %s %q, want %s %q", tc.err, driver.CodeOf(err), driver.MessageOf(err), tc.code, tc.msg)
		}
	}
	// A peer claiming code OK in the detail of a failed call still fails.
	st, _ := status.New(codes.Internal, "odd").WithDetails(&driverv1.ErrorInfo{MachineCode: 0})
	if err := grpcbridge.FromGRPCStatus(t.Context(), st.Err()); !driver.IsCode(err, driver.Unknown) {
		t.Fatalf("ErrorInfo with code OK: %v", err)
	}
	// The server survived the panic.
	set(driver.Error(driver.NotFound, "no VM"))
	if err := fixture.CallMethod(t.Context(), cl, "GetMachineStatus"); !driver.IsCode(err, driver.NotFound) {
		t.Fatalf("after a panic: %v", err)
	}
}

// TestDeadlineAndCancellationReachTheDriver checks that the caller's deadline arrives (not the
// default), that the default applies only without one, that a cancellation reaches the driver
// and that a slow driver cannot hold the caller past its deadline.
func TestDeadlineAndCancellationReachTheDriver(t *testing.T) {
	type seen struct {
		deadline time.Time
		has      bool
	}
	seenc := make(chan seen, 1)
	cancelled := make(chan struct{}, 1)
	var mode string
	var mu sync.Mutex
	d := &fixture.FuncDriver{Handle: func(ctx context.Context, method string, req any) (any, error) {
		dl, ok := ctx.Deadline()
		seenc <- seen{dl, ok}
		mu.Lock()
		m := mode
		mu.Unlock()
		switch m {
		case "block":
			<-ctx.Done()
			cancelled <- struct{}{}
			return nil, driver.StatusOf(ctx.Err())
		case "ignore":
			time.Sleep(2 * time.Second) // a driver that does not look at its context
		}
		return nil, nil
	}}
	setMode := func(m string) { mu.Lock(); mode = m; mu.Unlock() }
	served := fixture.ServeUnix(t, d, grpcbridge.WithServerTimeouts(grpcbridge.Timeouts{Mutating: 7 * time.Minute, Reading: 3 * time.Minute}))
	within := func(got, want time.Time, what string) {
		t.Helper()
		if diff := got.Sub(want); diff < -2*time.Second || diff > 2*time.Second {
			t.Fatalf("%s: driver saw deadline %v, want about %v", what, got, want)
		}
	}

	// The caller's deadline, shorter and longer than the defaults, is the driver's.
	for _, d := range []time.Duration{5 * time.Second, time.Hour} {
		ctx, cancel := context.WithTimeout(t.Context(), d)
		want, _ := ctx.Deadline()
		mustOK(t, fixture.CallMethod(ctx, served.Client, "CreateMachine"))
		cancel()
		s := <-seenc
		if !s.has {
			t.Fatal("driver saw no deadline")
		}
		within(s.deadline, want, fmt.Sprintf("caller deadline %v", d))
	}

	// Without a deadline the client's default applies (reading vs mutating).
	cl := grpcbridge.NewClient(served.Conn, grpcbridge.WithTimeouts(grpcbridge.Timeouts{Mutating: 20 * time.Minute, Reading: 90 * time.Second}))
	start := time.Now()
	mustOK(t, fixture.CallMethod(context.Background(), cl, "GetMachineStatus"))
	within((<-seenc).deadline, start.Add(90*time.Second), "client default (reading)")
	mustOK(t, fixture.CallMethod(context.Background(), cl, "DeleteMachine"))
	within((<-seenc).deadline, start.Add(20*time.Minute), "client default (mutating)")

	// A peer that sends no deadline at all gets the server's default.
	raw := driverv1.NewDriverServiceClient(served.Conn)
	start = time.Now()
	if _, err := raw.CreateMachine(context.Background(), &driverv1.CreateMachineRequest{}); err != nil {
		t.Fatal(err)
	}
	within((<-seenc).deadline, start.Add(7*time.Minute), "server default")

	// Cancellation reaches the driver, and the caller gets Canceled at once.
	setMode("block")
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- fixture.CallMethod(ctx, served.Client, "CreateMachine") }()
	<-seenc
	cancel()
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the driver never saw the cancellation")
	}
	if err := <-errc; !driver.IsCode(err, driver.Canceled) {
		t.Fatalf("cancelled call: %v", err)
	}

	// A driver that honours its context answers DeadlineExceeded at the deadline.
	ctx, cancel = context.WithTimeout(t.Context(), 200*time.Millisecond)
	err := fixture.CallMethod(ctx, served.Client, "GetMachineStatus")
	cancel()
	<-seenc
	<-cancelled
	if !driver.IsCode(err, driver.DeadlineExceeded) {
		t.Fatalf("slow driver: %v", err)
	}

	// A driver that ignores its context cannot hold the caller past the deadline.
	setMode("ignore")
	ctx, cancel = context.WithTimeout(t.Context(), 200*time.Millisecond)
	start = time.Now()
	err = fixture.CallMethod(ctx, served.Client, "GetMachineStatus")
	cancel()
	<-seenc
	if !driver.IsCode(err, driver.DeadlineExceeded) || time.Since(start) > 1500*time.Millisecond {
		t.Fatalf("driver ignoring its deadline: %v after %v", err, time.Since(start))
	}
	if !strings.Contains(driver.MessageOf(err), "deadline") {
		t.Fatalf("message does not say what happened: %q", driver.MessageOf(err))
	}
}
