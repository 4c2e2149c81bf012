package dialin_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/grpcbridge"
	"github.com/machinist-io/machinist/grpcbridge/dialin"
	"github.com/machinist-io/machinist/grpcbridge/internal/fixture"
	"github.com/machinist-io/machinist/grpcbridge/mtls"
	"github.com/machinist-io/machinist/grpcbridge/mtls/mtlstest"
	dialinv1 "github.com/machinist-io/machinist/grpcbridge/proto/machinist/dialin/v1"
	"github.com/machinist-io/machinist/internal/syncbuf"
)

const (
	pullClass  = dialinv1.ControllerService_GetMachineClass_FullMethodName
	pullSecret = dialinv1.ControllerService_GetSecret_FullMethodName
)

func okDriver() *fixture.FuncDriver {
	return &fixture.FuncDriver{Handle: func(context.Context, string, any) (any, error) {
		return &driver.GetMachineStatusResponse{NodeName: "n"}, nil
	}}
}

func status(ctx context.Context, d driver.Driver, class string, secret *corev1.Secret) error {
	c := fixture.Class("mem")
	c.Name = class
	c.UID = types.UID("uid-of-" + class) // another class, as the API server makes it
	_, err := d.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: fixture.Machine("m"), MachineClass: c, Secret: secret})
	return err
}

// TestPullsOncePerVersion: many operations with the same class and secret pull each once; a
// changed class is pulled once more; a secret with per-machine content is pulled per content.
func TestPullsOncePerVersion(t *testing.T) {
	var received sync.Map
	d := &fixture.FuncDriver{Handle: func(_ context.Context, _ string, req any) (any, error) {
		r := req.(*driver.GetMachineStatusRequest)
		received.Store(r.MachineClass.Name+"/"+string(r.Secret.Data["userData"]), r)
		return &driver.GetMachineStatusResponse{}, nil
	}}
	remote, ctrl, p := dialled(t, "mem", d)
	ctx := t.Context()
	secret := fixture.Secret()

	var wg sync.WaitGroup
	for range 30 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := status(ctx, remote, "worker-a", secret); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if c, s := ctrl.Calls.Get(pullClass), ctrl.Calls.Get(pullSecret); c != 1 || s != 1 {
		t.Fatalf("30 operations of one class pulled %d classes and %d secrets, want 1 and 1", c, s)
	}

	// A new class version: one more class pull, no secret pull.
	for range 5 {
		mustOK(t, status(ctx, remote, "worker-b", secret))
	}
	if c, s := ctrl.Calls.Get(pullClass), ctrl.Calls.Get(pullSecret); c != 2 || s != 1 {
		t.Fatalf("after a class change: %d class and %d secret pulls, want 2 and 1", c, s)
	}

	// A secret rendered per machine (userData) is a new version per content.
	for i := range 3 {
		s := secret.DeepCopy()
		s.Data["userData"] = []byte(fmt.Sprintf("#cloud-config for m-%d", i))
		mustOK(t, status(ctx, remote, "worker-b", s))
		mustOK(t, status(ctx, remote, "worker-b", s)) // same content again: cached
	}
	if s := ctrl.Calls.Get(pullSecret); s != 4 {
		t.Fatalf("3 rendered secrets: %d secret pulls in all, want 4", s)
	}
	if c, s := p.Connector.Pulls(); c != 2 || s != 4 {
		t.Fatalf("provider counted %d/%d pulls", c, s)
	}
	// And the driver got each version right.
	v, ok := received.Load("worker-b/#cloud-config for m-2")
	if !ok || v.(*driver.GetMachineStatusRequest).Secret.Data["password"] == nil {
		t.Fatal("the driver did not receive the rendered secret")
	}
}

// TestReplicasShareLoad: operations spread over the connected replicas of a provider.
func TestReplicasShareLoad(t *testing.T) {
	certs := fixture.NewCerts(t)
	ctrl := fixture.ServeController(t, dialin.Options{}, fixture.ServerTransport(t, certs))
	var counts [3]atomic.Int64
	for i := range counts {
		d := &fixture.FuncDriver{Handle: func(context.Context, string, any) (any, error) {
			counts[i].Add(1)
			time.Sleep(5 * time.Millisecond)
			return &driver.GetMachineStatusResponse{}, nil
		}}
		fixture.ConnectProvider(t, ctrl.Addr, fixture.ProviderCerts(t, certs, "mem"), map[string]driver.Driver{"mem": d})
	}
	waitFor(t, ctrl.Server, "mem", 3)
	remote, _ := ctrl.Server.Driver("mem")
	var wg sync.WaitGroup
	for range 60 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mustOK(t, status(t.Context(), remote, "c", fixture.Secret()))
		}()
	}
	wg.Wait()
	for i := range counts {
		if n := counts[i].Load(); n < 5 {
			t.Errorf("replica %d served %d of 60 operations", i, n)
		}
	}
	if got := ctrl.Server.Providers(); got["mem"] != 3 {
		t.Fatalf("Providers() = %v", got)
	}
}

// TestDisconnectFailsInFlightAtOnce: a provider that goes away fails its operations in flight
// with Unavailable immediately, leaves no goroutine behind, and reconnecting serves again.
func TestDisconnectFailsInFlightAtOnce(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	entered := make(chan struct{}, 10)
	d := &fixture.FuncDriver{Handle: func(ctx context.Context, _ string, _ any) (any, error) {
		entered <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	}}
	certs := fixture.NewCerts(t)
	ctrl := fixture.ServeController(t, dialin.Options{}, fixture.ServerTransport(t, certs))
	p := fixture.ConnectProvider(t, ctrl.Addr, fixture.ProviderCerts(t, certs, "mem"), map[string]driver.Driver{"mem": d})
	waitFor(t, ctrl.Server, "mem", 1)
	remote, _ := ctrl.Server.Driver("mem")

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	errs := make(chan error, 5)
	for range 5 {
		go func() { errs <- status(ctx, remote, "c", fixture.Secret()) }()
	}
	for range 5 {
		<-entered
	}
	start := time.Now()
	p.Stop()
	for range 5 {
		err := <-errs
		if !driver.IsCode(err, driver.Unavailable) || !strings.Contains(driver.MessageOf(err), "disconnected") {
			t.Fatalf("in-flight operation after disconnect: %v", err)
		}
	}
	if time.Since(start) > 5*time.Second {
		t.Fatalf("in-flight operations took %v to fail", time.Since(start))
	}
	if _, ok := ctrl.Server.Driver("mem"); ok {
		t.Fatal("a provider without replicas still has a driver")
	}
	if err := status(ctx, remote, "c", fixture.Secret()); !driver.IsCode(err, driver.Unavailable) || !strings.Contains(driver.MessageOf(err), "machinist connect") {
		t.Fatalf("call with no replica: %v", err)
	}
	ctrl.Server.Close()
	ctrl.GRPC.Stop()
}

// TestStreamDroppedMidOperation cuts the network under a running operation: the caller gets
// Unavailable at once, the provider reconnects by itself with backoff, and calls work again.
func TestStreamDroppedMidOperation(t *testing.T) {
	var block atomic.Bool
	block.Store(true)
	entered := make(chan struct{}, 1)
	d := &fixture.FuncDriver{Handle: func(ctx context.Context, _ string, _ any) (any, error) {
		if block.Load() {
			entered <- struct{}{}
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return &driver.GetMachineStatusResponse{NodeName: "back"}, nil
	}}
	certs := fixture.NewCerts(t)
	ctrl := fixture.ServeController(t, dialin.Options{}, fixture.ServerTransport(t, certs))
	proxy := fixture.NewProxy(t, ctrl.Addr)
	fixture.ConnectProvider(t, proxy.Addr, fixture.ProviderCerts(t, certs, "mem"), map[string]driver.Driver{"mem": d})
	waitFor(t, ctrl.Server, "mem", 1)
	remote, _ := ctrl.Server.Driver("mem")

	errc := make(chan error, 1)
	go func() { errc <- status(t.Context(), remote, "c", fixture.Secret()) }()
	<-entered
	proxy.Pause()
	start := time.Now()
	proxy.Cut()
	if err := <-errc; !driver.IsCode(err, driver.Unavailable) || time.Since(start) > 5*time.Second {
		t.Fatalf("operation on a dropped stream: %v after %v", err, time.Since(start))
	}
	// Refused while the network is down; the provider keeps retrying.
	time.Sleep(300 * time.Millisecond)
	if _, ok := ctrl.Server.Driver("mem"); ok {
		t.Fatal("provider registered through a paused proxy")
	}
	block.Store(false)
	proxy.Resume()
	waitFor(t, ctrl.Server, "mem", 1)
	resp, err := remote.GetMachineStatus(t.Context(), &driver.GetMachineStatusRequest{Machine: fixture.Machine("m"), MachineClass: fixture.Class("mem")})
	if err != nil || resp.NodeName != "back" {
		t.Fatalf("after reconnecting: %v %v", resp, err)
	}
}

// TestDeadlineAndCancelReachTheProvider: the caller's remaining time bounds the provider's driver
// call, and a cancellation stops it.
func TestDeadlineAndCancelReachTheProvider(t *testing.T) {
	type seen struct {
		deadline time.Time
		ok       bool
	}
	seenc := make(chan seen, 1)
	stopped := make(chan error, 1)
	d := &fixture.FuncDriver{Handle: func(ctx context.Context, _ string, _ any) (any, error) {
		dl, ok := ctx.Deadline()
		seenc <- seen{dl, ok}
		<-ctx.Done()
		stopped <- ctx.Err()
		return nil, ctx.Err()
	}}
	remote, _, _ := dialled(t, "mem", d)

	ctx, cancel := context.WithTimeout(t.Context(), 400*time.Millisecond)
	want, _ := ctx.Deadline()
	err := status(ctx, remote, "c", nil)
	cancel()
	s := <-seenc
	if !s.ok || s.deadline.Sub(want).Abs() > time.Second {
		t.Fatalf("driver saw deadline %v (set %v), want about %v", s.deadline, s.ok, want)
	}
	if !driver.IsCode(err, driver.DeadlineExceeded) {
		t.Fatalf("slow operation: %v", err)
	}
	<-stopped //nolint:errcheck // waits for the first call to end, so the select below reads the second's

	ctx, cancel = context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- status(ctx, remote, "c", nil) }()
	<-seenc
	cancel()
	select {
	case err := <-stopped:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("driver context ended with %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the cancellation never reached the provider")
	}
	if err := <-errc; !driver.IsCode(err, driver.Canceled) {
		t.Fatalf("cancelled operation: %v", err)
	}
}

// TestErrorsKeepTheirCode: every code and its message cross the stream.
func TestErrorsKeepTheirCode(t *testing.T) {
	var next atomic.Value
	d := &fixture.FuncDriver{Handle: func(context.Context, string, any) (any, error) { return nil, next.Load().(error) }}
	remote, _, _ := dialled(t, "mem", d)
	for code := driver.Code(1); code < driver.NumCodes; code++ {
		msg := fmt.Sprintf("%s: ünïcode and \xff", code)
		next.Store(driver.Error(code, msg))
		for _, m := range fixture.Methods {
			err := fixture.CallMethod(t.Context(), remote, m)
			if driver.CodeOf(err) != code || driver.MessageOf(err) != msg {
				t.Fatalf("%s: sent %s %q, got %v", m, code, msg, err)
			}
		}
	}
}

// TestUnauthorizedCertificates: a certificate of another CA never gets a stream; an expired one
// neither until rotation replaces it; a valid certificate naming a provider it may not serve is
// refused with PermissionDenied, logged, and the provider stops.
func TestUnauthorizedCertificates(t *testing.T) {
	var logs syncbuf.Buffer
	certs := fixture.NewCerts(t)
	ctrl := fixture.ServeController(t, dialin.Options{Log: slog.New(slog.NewTextHandler(&logs, nil))}, fixture.ServerTransport(t, certs))
	drivers := map[string]driver.Driver{"mem": okDriver()}

	// Another CA signed the provider's certificate (it trusts the controller's CA).
	other := mtlstest.NewCA(t, "other")
	intruder := clientTransport(t, other.IssueFiles(t, mtlstest.Leaf{CommonName: "intruder", URIs: []string{"machinist://provider/mem"}}, certs.CA.PEM))
	p := fixture.ConnectProvider(t, ctrl.Addr, intruder, drivers)
	time.Sleep(300 * time.Millisecond)
	if _, ok := ctrl.Server.Driver("mem"); ok || p.Connector.Connected() {
		t.Fatal("a certificate of an unknown CA registered")
	}
	p.Stop()

	// Expired, then rotated in place: the same provider process connects without a restart.
	f := certs.CA.IssueFiles(t, mtlstest.Leaf{CommonName: "expired", URIs: []string{"machinist://provider/mem"}, NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)}, nil)
	expired := clientTransport(t, f)
	p = fixture.ConnectProvider(t, ctrl.Addr, expired, drivers)
	time.Sleep(300 * time.Millisecond)
	if _, ok := ctrl.Server.Driver("mem"); ok {
		t.Fatal("an expired certificate registered")
	}
	certs.CA.WriteFiles(t, f, mtlstest.Leaf{CommonName: "renewed", URIs: []string{"machinist://provider/mem"}}, nil)
	waitFor(t, ctrl.Server, "mem", 1)
	p.Stop()

	// Valid certificate, forbidden name.
	p = fixture.ConnectProvider(t, ctrl.Addr, fixture.ProviderCerts(t, certs, "local"), map[string]driver.Driver{"local": okDriver(), "mem": okDriver()})
	select {
	case err := <-p.Err:
		if !errors.Is(err, dialin.ErrRefused) || !strings.Contains(err.Error(), "does not authorize provider mem") || !strings.Contains(err.Error(), "machinist://provider/mem") {
			t.Fatalf("forbidden name: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a provider registering a forbidden name was not refused")
	}
	if _, ok := ctrl.Server.Driver("local"); ok {
		t.Fatal("a refused registration registered its allowed names")
	}
	if !strings.Contains(logs.String(), "registration refused") || !strings.Contains(logs.String(), "denied=[mem]") {
		t.Fatalf("refusal not logged:\n%s", logs.String())
	}
}

// TestSecretsOnlyToAuthorizedProviders: a provider authorized for another name cannot pull the
// secret of an operation in flight for mem, even knowing its digest; nothing secret is logged.
func TestSecretsOnlyToAuthorizedProviders(t *testing.T) {
	var logs syncbuf.Buffer
	certs := fixture.NewCerts(t)
	ctrl := fixture.ServeController(t, dialin.Options{Log: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}, fixture.ServerTransport(t, certs))
	refs := make(chan *dialinv1.ObjectRef, 1)
	release := make(chan struct{})
	// A provider speaking the raw protocol, to see the references it is sent.
	mem := fixture.ProviderCerts(t, certs, "mem")
	conn, err := grpcbridge.Dial(ctrl.Addr, mem)
	mustOK(t, err)
	defer conn.Close()
	stream, err := dialinv1.NewControllerServiceClient(conn).Register(t.Context())
	mustOK(t, err)
	mustOK(t, stream.Send(&dialinv1.RegisterRequest{Message: &dialinv1.RegisterRequest_Hello{Hello: &dialinv1.Hello{Providers: []string{"mem"}}}}))
	_, err = stream.Recv()
	mustOK(t, err)
	go func() {
		msg, err := stream.Recv()
		if err != nil {
			return
		}
		refs <- msg.GetOperation().Secret
		<-release
		_ = stream.Send(&dialinv1.RegisterRequest{Message: &dialinv1.RegisterRequest_Result{Result: &dialinv1.Result{Id: msg.GetOperation().Id,
			Response: &dialinv1.Result_GetMachineStatus{}}}})
	}()
	remote, _ := ctrl.Server.Driver("mem")
	done := make(chan error, 1)
	go func() { done <- status(t.Context(), remote, "c", fixture.Secret()) }()
	ref := <-refs

	// The rightful provider can pull it.
	got, err := dialinv1.NewControllerServiceClient(conn).GetSecret(t.Context(), &dialinv1.GetSecretRequest{Secret: ref})
	mustOK(t, err)
	if sec, _ := grpcbridge.DecodeSecret(got.Secret); string(sec.Data["password"]) != "s3cr3t-Passw0rd" {
		t.Fatal("rightful pull returned the wrong secret")
	}
	// Another provider's certificate cannot.
	otherConn, err := grpcbridge.Dial(ctrl.Addr, fixture.ProviderCerts(t, certs, "local"))
	mustOK(t, err)
	defer otherConn.Close()
	_, err = dialinv1.NewControllerServiceClient(otherConn).GetSecret(t.Context(), &dialinv1.GetSecretRequest{Secret: ref})
	if e := grpcbridge.FromGRPCStatus(t.Context(), err); !driver.IsCode(e, driver.PermissionDenied) {
		t.Fatalf("foreign pull: %v", e)
	}
	close(release)
	mustOK(t, <-done)
	// Once the operation is over, the version is gone.
	_, err = dialinv1.NewControllerServiceClient(conn).GetSecret(t.Context(), &dialinv1.GetSecretRequest{Secret: ref})
	if e := grpcbridge.FromGRPCStatus(t.Context(), err); !driver.IsCode(e, driver.NotFound) {
		t.Fatalf("pull after the operation: %v", e)
	}
	if strings.Contains(logs.String(), "s3cr3t") || strings.Contains(logs.String(), "Passw0rd") {
		t.Fatalf("secret in the logs:\n%s", logs.String())
	}
}

// TestPullByName: with an ObjectSource, a provider may pull a class of its provider and the
// secrets that class references, and nothing else.
func TestPullByName(t *testing.T) {
	certs := fixture.NewCerts(t)
	class := fixture.Class("mem")
	class.Name, class.Namespace = "workers", "shoot"
	class.SecretRef = &corev1.SecretReference{Name: "userdata"} // namespace: the class's
	foreign := class.DeepCopy()
	foreign.Name, foreign.Provider = "azure-workers", "azure"
	secret := &corev1.Secret{Data: map[string][]byte{"userData": []byte("x")}}
	secret.Name, secret.Namespace = "userdata", "shoot"
	unrelated := secret.DeepCopy()
	unrelated.Name = "unrelated"
	src := dialin.NewMapSource([]*v1alpha1.MachineClass{class, foreign}, []*corev1.Secret{secret, unrelated})
	ctrl := fixture.ServeController(t, dialin.Options{Source: src}, fixture.ServerTransport(t, certs))
	conn, err := grpcbridge.Dial(ctrl.Addr, fixture.ProviderCerts(t, certs, "mem"))
	mustOK(t, err)
	defer conn.Close()
	cl := dialinv1.NewControllerServiceClient(conn)
	ctx := t.Context()

	resp, err := cl.GetMachineClass(ctx, &dialinv1.GetMachineClassRequest{MachineClass: &dialinv1.ObjectRef{Namespace: "shoot", Name: "workers"}})
	mustOK(t, err)
	if c, _ := grpcbridge.DecodeMachineClass(resp.MachineClass); c.Name != "workers" {
		t.Fatalf("class by name: %v", c)
	}
	codeOf := func(err error) driver.Code { return driver.CodeOf(grpcbridge.FromGRPCStatus(ctx, err)) }
	_, err = cl.GetMachineClass(ctx, &dialinv1.GetMachineClassRequest{MachineClass: &dialinv1.ObjectRef{Namespace: "shoot", Name: "azure-workers"}})
	if codeOf(err) != driver.PermissionDenied {
		t.Fatalf("class of another provider: %v", err)
	}
	_, err = cl.GetMachineClass(ctx, &dialinv1.GetMachineClassRequest{MachineClass: &dialinv1.ObjectRef{Namespace: "shoot", Name: "missing"}})
	if codeOf(err) != driver.NotFound {
		t.Fatalf("missing class: %v", err)
	}
	classRef := &dialinv1.ObjectRef{Namespace: "shoot", Name: "workers"}
	sresp, err := cl.GetSecret(ctx, &dialinv1.GetSecretRequest{Secret: &dialinv1.ObjectRef{Namespace: "shoot", Name: "userdata"}, MachineClass: classRef})
	mustOK(t, err)
	if s, _ := grpcbridge.DecodeSecret(sresp.Secret); string(s.Data["userData"]) != "x" {
		t.Fatal("secret by name")
	}
	_, err = cl.GetSecret(ctx, &dialinv1.GetSecretRequest{Secret: &dialinv1.ObjectRef{Namespace: "shoot", Name: "unrelated"}, MachineClass: classRef})
	if codeOf(err) != driver.PermissionDenied {
		t.Fatalf("secret the class does not reference: %v", err)
	}
	_, err = cl.GetSecret(ctx, &dialinv1.GetSecretRequest{Secret: &dialinv1.ObjectRef{Namespace: "shoot", Name: "userdata"}, MachineClass: &dialinv1.ObjectRef{Namespace: "shoot", Name: "azure-workers"}})
	if codeOf(err) != driver.PermissionDenied {
		t.Fatalf("secret through another provider's class: %v", err)
	}
}

// TestInsecureOnlyWhenChosen: without TLS the controller accepts providers only with Insecure.
func TestInsecureOnlyWhenChosen(t *testing.T) {
	for _, insecure := range []bool{false, true} {
		ctrl := fixture.ServeController(t, dialin.Options{Insecure: insecure}, fixture.Insecure)
		p := fixture.ConnectProvider(t, ctrl.Addr, fixture.Insecure, map[string]driver.Driver{"mem": okDriver()})
		if insecure {
			waitFor(t, ctrl.Server, "mem", 1)
			continue
		}
		select {
		case err := <-p.Err:
			if !errors.Is(err, dialin.ErrRefused) || !strings.Contains(err.Error(), "no client certificate") {
				t.Fatalf("plain text without Insecure: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("plain-text provider not refused")
		}
	}
}

// TestCloseEndsStreams: closing the server fails operations in flight, and the providers
// reconnect to nothing: each later registration is refused before a Welcome, so a provider is
// never told it is connected to a controller that is shutting down (its Run keeps retrying, with
// a growing backoff, until stopped).
func TestCloseEndsStreams(t *testing.T) {
	inDriver := make(chan struct{})
	var once sync.Once
	d := &fixture.FuncDriver{Handle: func(ctx context.Context, _ string, _ any) (any, error) {
		once.Do(func() { close(inDriver) })
		<-ctx.Done()
		return nil, ctx.Err()
	}}
	certs := fixture.NewCerts(t)
	ctrl := fixture.ServeController(t, dialin.Options{}, fixture.ServerTransport(t, certs))
	logs := &syncbuf.Buffer{}
	p := fixture.ConnectProvider(t, ctrl.Addr, fixture.ProviderCerts(t, certs, "mem"), map[string]driver.Driver{"mem": d},
		func(o *dialin.ConnectorOptions) { o.Log = slog.New(slog.NewTextHandler(logs, nil)) })
	waitFor(t, ctrl.Server, "mem", 1)
	remote, _ := ctrl.Server.Driver("mem")
	errc := make(chan error, 1)
	go func() { errc <- status(t.Context(), remote, "c", nil) }()
	select {
	case <-inDriver:
	case err := <-errc:
		t.Fatalf("the operation ended before it reached the provider's driver: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the operation never reached the provider's driver")
	}
	ctrl.Server.Close()
	if err := <-errc; !driver.IsCode(err, driver.Unavailable) {
		t.Fatalf("operation when the controller closed: %v", err)
	}
	// Three attempts after the stream ended: the first session's end, then two refusals.
	const retrying, welcomed = `msg="dialin: not connected to the controller; retrying"`, `msg="dialin: connected to the controller"`
	if err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return strings.Count(logs.String(), retrying) >= 3, nil
	}); err != nil {
		t.Fatalf("the provider did not retry three times:\n%s", logs.String())
	}
	if n := strings.Count(logs.String(), welcomed); n != 1 || p.Connector.Connected() {
		t.Fatalf("the provider was welcomed %d times (want once, before the close) and Connected() = %v:\n%s", n, p.Connector.Connected(), logs.String())
	}
}

// TestBackoffStartsOverOnceRegistered: a provider that waited longer and longer while the
// controller was away waits only the first, short delay after a registration was accepted, however
// briefly the stream then lasted (a controller that restarts quickly). The delays are read from
// the provider's "retrying" log lines, not timed.
func TestBackoffStartsOverOnceRegistered(t *testing.T) {
	lis, err := grpcbridge.Listen("127.0.0.1:0")
	mustOK(t, err)
	addr := lis.Addr().String()
	lis.Close() // nothing listens yet: every attempt fails and the delay grows

	delays := &retryLog{}
	b := wait.Backoff{Duration: 5 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: 100, Cap: time.Minute}
	certs := fixture.NewCerts(t)
	fixture.ConnectProvider(t, addr, fixture.ProviderCerts(t, certs, "mem"), map[string]driver.Driver{"mem": okDriver()},
		func(o *dialin.ConnectorOptions) {
			o.Backoff = b
			o.Log = slog.New(delays)
		})
	delays.waitFor(t, 6) // 5, 10, 20, 40, 80, 160 ms
	if d := delays.all()[5]; d < 150*time.Millisecond {
		t.Fatalf("the sixth delay is %v: the backoff does not grow", d)
	}

	lis, err = grpcbridge.Listen(addr)
	mustOK(t, err)
	srv, err := grpcbridge.NewGRPCServer(fixture.ServerTransport(t, certs))
	mustOK(t, err)
	ctrl := dialin.NewServer(dialin.Options{})
	ctrl.RegisterService(srv)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	waitFor(t, ctrl, "mem", 1)
	before := len(delays.all())
	ctrl.Close() // the controller goes away at once after accepting the registration
	delays.waitFor(t, before+1)
	limit := time.Duration(float64(b.Duration) * (1 + b.Jitter))
	if d := delays.all()[before]; d > limit {
		t.Fatalf("after an accepted registration the provider waits %v before reconnecting, want the first delay (at most %v)", d, limit)
	}
}

// retryLog is a slog handler that records the delay of each "retrying" line.
type retryLog struct {
	mu     sync.Mutex
	delays []time.Duration
}

func (h *retryLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *retryLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *retryLog) WithGroup(string) slog.Handler            { return h }
func (h *retryLog) Handle(_ context.Context, r slog.Record) error {
	if !strings.Contains(r.Message, "retrying") {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "in" {
			h.mu.Lock()
			h.delays = append(h.delays, a.Value.Duration())
			h.mu.Unlock()
		}
		return true
	})
	return nil
}

func (h *retryLog) all() []time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]time.Duration(nil), h.delays...)
}

func (h *retryLog) waitFor(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for len(h.all()) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d retries logged, want %d: %v", len(h.all()), n, h.all())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func mustOK(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func clientTransport(t testing.TB, f mtls.Files) grpcbridge.Transport {
	cfg, err := mtls.ClientConfig(f, "localhost")
	if err != nil {
		t.Fatal(err)
	}
	return grpcbridge.Transport{TLS: cfg}
}
