package dialin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/registry"
	"github.com/machinist-io/machinist/grpcbridge"
	dialinv1 "github.com/machinist-io/machinist/grpcbridge/proto/machinist/dialin/v1"
	driverv1 "github.com/machinist-io/machinist/grpcbridge/proto/machinist/driver/v1"
	"github.com/machinist-io/machinist/internal/version"
)

// ConnectorOptions configure a Connector.
type ConnectorOptions struct {
	// Controller is the controller's dial-in address (host:port or unix:///path).
	Controller string
	// Transport secures the connection: mutual TLS with a certificate that authorizes every name
	// in Drivers, or plain text chosen explicitly.
	Transport grpcbridge.Transport
	// Drivers are the drivers served, by provider name.
	Drivers map[string]driver.Driver
	// Instance names this replica in the controller's logs; default the host name.
	Instance string
	// Log receives connection changes; nil means slog.Default().
	Log *slog.Logger
	// Backoff paces reconnection; zero fields take DefaultBackoff's. It starts over once the
	// controller accepts a registration.
	Backoff wait.Backoff
	// CacheSize bounds the classes and the secrets kept (each; default 256).
	CacheSize int
	// DialOptions are added to the gRPC dial (tests route through a proxy with them).
	DialOptions []grpc.DialOption
}

// Connector is the provider side of dial-in: it connects to a controller and serves its drivers
// over the Register stream (machinist connect).
type Connector struct {
	opts    ConnectorOptions
	names   []string
	log     *slog.Logger
	conn    *grpc.ClientConn
	client  dialinv1.ControllerServiceClient
	dec     *grpcbridge.Decoder // machines
	classes *objectCache[*v1alpha1.MachineClass]
	secrets *objectCache[*corev1.Secret]

	connected   atomic.Bool
	classPulls  atomic.Int64
	secretPulls atomic.Int64
}

// NewConnector checks the options and prepares the connection (it dials lazily; Run connects).
func NewConnector(o ConnectorOptions) (*Connector, error) {
	if len(o.Drivers) == 0 {
		return nil, errors.New("dialin: no drivers to serve: name at least one provider")
	}
	drivers := make(map[string]driver.Driver, len(o.Drivers))
	var names []string
	for n, d := range o.Drivers {
		name := registry.Normalize(n)
		if !registry.ValidName(name) {
			return nil, fmt.Errorf("dialin: %q is not a provider name", n)
		}
		drivers[name] = d
		names = append(names, name)
	}
	sort.Strings(names)
	o.Drivers = drivers
	if o.Instance == "" {
		o.Instance, _ = os.Hostname()
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.CacheSize <= 0 {
		o.CacheSize = 256
	}
	conn, err := grpcbridge.Dial(o.Controller, o.Transport, o.DialOptions...)
	if err != nil {
		return nil, err
	}
	return &Connector{
		opts:    o,
		names:   names,
		log:     o.Log.With("controller", o.Controller, "providers", names),
		conn:    conn,
		client:  dialinv1.NewControllerServiceClient(conn),
		dec:     grpcbridge.NewDecoder(),
		classes: newObjectCache[*v1alpha1.MachineClass](o.CacheSize),
		secrets: newObjectCache[*corev1.Secret](o.CacheSize),
	}, nil
}

// Close releases the connection. Run must have returned.
func (p *Connector) Close() error { return p.conn.Close() }

// Connected reports whether a Register stream is open and welcomed.
func (p *Connector) Connected() bool { return p.connected.Load() }

// Pulls returns how many classes and secrets this provider has pulled from the controller.
func (p *Connector) Pulls() (classes, secrets int64) {
	return p.classPulls.Load(), p.secretPulls.Load()
}

// ErrRefused wraps the controller's refusal of this provider (a certificate that does not
// authorize a name, an invalid name): reconnecting cannot help, so Run returns it.
var ErrRefused = errors.New("dialin: the controller refused this provider")

// DefaultBackoff reconnects after about 0.5 s, 1 s, 2 s, ... up to 30 s, each wait plus up to a
// fifth at random so that replicas that lost the controller together do not come back in
// lockstep.
var DefaultBackoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: math.MaxInt32, Cap: 30 * time.Second}

// withDefaults fills the zero fields of b from DefaultBackoff.
func withDefaults(b wait.Backoff) wait.Backoff {
	if b.Duration <= 0 {
		b.Duration = DefaultBackoff.Duration
	}
	if b.Factor < 1 {
		b.Factor = DefaultBackoff.Factor
	}
	if b.Jitter <= 0 {
		b.Jitter = DefaultBackoff.Jitter
	}
	if b.Steps <= 0 {
		b.Steps = DefaultBackoff.Steps
	}
	if b.Cap <= 0 {
		b.Cap = max(DefaultBackoff.Cap, b.Duration)
	}
	return b
}

// Run connects, serves operations and reconnects with backoff until ctx ends (then it returns
// nil) or the controller refuses the registration (ErrRefused). The backoff starts over each
// time the controller accepts a registration, so a controller that restarts quickly is found
// again after the first short wait however long it was away before.
func (p *Connector) Run(ctx context.Context) error {
	initial := withDefaults(p.opts.Backoff)
	backoff := initial
	for {
		welcomed, err := p.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		switch status.Code(err) {
		case codes.PermissionDenied, codes.Unauthenticated, codes.InvalidArgument:
			p.log.Error("dialin: registration refused", "err", err)
			return fmt.Errorf("%w: %s", ErrRefused, status.Convert(err).Message())
		}
		if welcomed {
			backoff = initial
		}
		delay := backoff.Step()
		p.log.Warn("dialin: not connected to the controller; retrying", "in", delay.Round(time.Millisecond), "err", err)
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil
		}
	}
}

// session serves one Register stream until it ends and reports whether the controller accepted
// the registration. Operations in flight are cancelled when it ends and finish before it returns.
func (p *Connector) session(ctx context.Context) (welcomed bool, _ error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := p.client.Register(sctx)
	if err != nil {
		return false, err
	}
	if err := stream.Send(&dialinv1.RegisterRequest{Message: &dialinv1.RegisterRequest_Hello{Hello: &dialinv1.Hello{
		Providers: p.names, Instance: p.opts.Instance, Version: version.Version, Capabilities: p.capabilities(sctx),
	}}}); err != nil {
		return false, recvError(stream, err)
	}
	first, err := stream.Recv()
	if err != nil {
		return false, err
	}
	welcome := first.GetWelcome()
	if welcome == nil {
		return false, fmt.Errorf("dialin: the controller answered Hello with %T", first.GetMessage())
	}
	log := p.log.With("session", welcome.Session)
	log.Info("dialin: connected to the controller")
	for _, n := range p.names {
		if by := welcome.ShadowedBy[n]; by != "" {
			log.Warn(fmt.Sprintf("dialin: this replica gets no operations for provider %s: the controller serves it with its %s (resolution order: %s); "+
				"start the controller with --prefer-dialin=%s to send them here", n, by, registry.ResolutionOrder, n), "provider", n, "shadowedBy", by)
		}
	}
	p.connected.Store(true)
	defer p.connected.Store(false)

	var (
		wg     sync.WaitGroup
		sendMu sync.Mutex
		opsMu  sync.Mutex
		ops    = map[uint64]context.CancelFunc{}
	)
	defer wg.Wait()
	defer cancel()
	send := func(r *dialinv1.Result) {
		if sctx.Err() != nil {
			// The session is ending: this operation failed because of it, and the controller
			// fails it as Unavailable (retryable), not with the driver's Canceled.
			return
		}
		sendMu.Lock()
		defer sendMu.Unlock()
		if err := stream.Send(&dialinv1.RegisterRequest{Message: &dialinv1.RegisterRequest_Result{Result: r}}); err != nil && sctx.Err() == nil {
			log.Warn("dialin: sending a result failed", "operation", r.Id, "err", err)
		}
	}
	for {
		msg, err := stream.Recv()
		if err != nil {
			return true, err
		}
		switch m := msg.Message.(type) {
		case *dialinv1.RegisterResponse_Operation:
			op := m.Operation
			var opCtx context.Context
			var opCancel context.CancelFunc
			if op.Timeout != nil {
				opCtx, opCancel = context.WithTimeout(sctx, op.Timeout.AsDuration())
			} else {
				opCtx, opCancel = context.WithCancel(sctx)
			}
			opsMu.Lock()
			ops[op.Id] = opCancel
			opsMu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() {
					opsMu.Lock()
					delete(ops, op.Id)
					opsMu.Unlock()
					opCancel()
				}()
				r := p.handle(opCtx, op)
				r.Id = op.Id
				send(r)
			}()
		case *dialinv1.RegisterResponse_Cancel:
			opsMu.Lock()
			if c, ok := ops[m.Cancel.Id]; ok {
				c()
			}
			opsMu.Unlock()
		default:
			log.Warn("dialin: unexpected message from the controller ignored", "type", fmt.Sprintf("%T", msg.GetMessage()))
		}
	}
}

// capabilities are the optional capabilities of each driver served, for the Hello. A driver that
// cannot say (it forwards to a server that does not answer) is reported without them: the
// controller then sends it nothing that needs them until this replica registers again.
func (p *Connector) capabilities(ctx context.Context) map[string]*driverv1.GetCapabilitiesResponse {
	out := make(map[string]*driverv1.GetCapabilitiesResponse, len(p.names))
	for _, n := range p.names {
		caps, err := driver.CapabilitiesOf(grpcbridge.ContextWithProvider(ctx, n), p.opts.Drivers[n])
		if err != nil {
			p.log.Warn("dialin: cannot tell the optional capabilities of a driver; registering it without them", "provider", n, "err", err)
			continue
		}
		out[n] = grpcbridge.CapabilitiesToProto(caps)
	}
	return out
}

// recvError returns the status the server ended the stream with when a Send failed because of it.
func recvError(stream grpc.BidiStreamingClient[dialinv1.RegisterRequest, dialinv1.RegisterResponse], sendErr error) error {
	if _, err := stream.Recv(); err != nil {
		return err
	}
	return sendErr
}

// handle runs one operation against the driver and returns its result.
func (p *Connector) handle(ctx context.Context, op *dialinv1.Operation) (r *dialinv1.Result) {
	defer func() {
		if v := recover(); v != nil {
			p.log.Error("dialin: driver panicked", "provider", op.Provider, "method", op.Method.String(), "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			r = errorResult(driver.Errorf(driver.Internal, "driver panicked in %s: %v", op.Method, v))
		}
	}()
	d, ok := p.opts.Drivers[op.Provider]
	if !ok {
		return errorResult(driver.Errorf(driver.FailedPrecondition, "dialin: this provider process serves %v, not %q", p.names, op.Provider))
	}
	m, err := p.dec.Machine(op.Machine)
	if err != nil {
		return errorResult(err)
	}
	class, err := p.class(ctx, op.MachineClass)
	if err != nil {
		return errorResult(err)
	}
	secret, err := p.secret(ctx, op.Secret)
	if err != nil {
		return errorResult(err)
	}
	switch op.Method {
	case dialinv1.Method_METHOD_CREATE_MACHINE:
		resp, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: m, MachineClass: class, Secret: secret})
		if err != nil {
			return errorResult(err)
		}
		return &dialinv1.Result{Response: &dialinv1.Result_CreateMachine{CreateMachine: grpcbridge.CreateResponseToProto(resp)}}
	case dialinv1.Method_METHOD_INITIALIZE_MACHINE:
		resp, err := d.InitializeMachine(ctx, &driver.InitializeMachineRequest{Machine: m, MachineClass: class, Secret: secret})
		if err != nil {
			return errorResult(err)
		}
		return &dialinv1.Result{Response: &dialinv1.Result_InitializeMachine{InitializeMachine: grpcbridge.InitializeResponseToProto(resp)}}
	case dialinv1.Method_METHOD_DELETE_MACHINE:
		resp, err := d.DeleteMachine(ctx, &driver.DeleteMachineRequest{Machine: m, MachineClass: class, Secret: secret})
		if err != nil {
			return errorResult(err)
		}
		return &dialinv1.Result{Response: &dialinv1.Result_DeleteMachine{DeleteMachine: grpcbridge.DeleteResponseToProto(resp)}}
	case dialinv1.Method_METHOD_GET_MACHINE_STATUS:
		resp, err := d.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: m, MachineClass: class, Secret: secret})
		if err != nil {
			return errorResult(err)
		}
		return &dialinv1.Result{Response: &dialinv1.Result_GetMachineStatus{GetMachineStatus: grpcbridge.StatusResponseToProto(resp)}}
	case dialinv1.Method_METHOD_LIST_MACHINES:
		resp, err := d.ListMachines(ctx, &driver.ListMachinesRequest{MachineClass: class, Secret: secret})
		if err != nil {
			return errorResult(err)
		}
		return &dialinv1.Result{Response: &dialinv1.Result_ListMachines{ListMachines: grpcbridge.ListResponseToProto(resp)}}
	case dialinv1.Method_METHOD_STOP_MACHINE, dialinv1.Method_METHOD_START_MACHINE:
		return p.handlePower(ctx, op, d, &driver.StopMachineRequest{Machine: m, MachineClass: class, Secret: secret})
	case dialinv1.Method_METHOD_GET_VOLUME_IDS:
		specs, err := grpcbridge.PVSpecsFromProto(op.PvSpecs)
		if err != nil {
			return errorResult(err)
		}
		resp, err := d.GetVolumeIDs(grpcbridge.ContextWithProvider(ctx, op.Provider), &driver.GetVolumeIDsRequest{PVSpecs: specs})
		if err != nil {
			return errorResult(err)
		}
		return &dialinv1.Result{Response: &dialinv1.Result_GetVolumeIds{GetVolumeIds: grpcbridge.VolumeIDsResponseToProto(resp)}}
	}
	return errorResult(driver.Errorf(driver.Unimplemented, "dialin: unknown operation %v: update this provider", op.Method))
}

// handlePower runs a StopMachine or StartMachine operation (req holds its objects).
func (p *Connector) handlePower(ctx context.Context, op *dialinv1.Operation, d driver.Driver, req *driver.StopMachineRequest) *dialinv1.Result {
	pd, err := driver.PowerOf(ctx, op.Provider, d)
	if err != nil {
		return errorResult(err)
	}
	if op.Method == dialinv1.Method_METHOD_STOP_MACHINE {
		resp, err := pd.StopMachine(ctx, req)
		if err != nil {
			return errorResult(err)
		}
		return &dialinv1.Result{Response: &dialinv1.Result_StopMachine{StopMachine: grpcbridge.StopResponseToProto(resp)}}
	}
	resp, err := pd.StartMachine(ctx, &driver.StartMachineRequest{Machine: req.Machine, MachineClass: req.MachineClass, Secret: req.Secret})
	if err != nil {
		return errorResult(err)
	}
	return &dialinv1.Result{Response: &dialinv1.Result_StartMachine{StartMachine: grpcbridge.StartResponseToProto(resp)}}
}

func errorResult(err error) *dialinv1.Result {
	st := driver.StatusOf(err)
	code := st.Code()
	if code == driver.OK || !code.Valid() {
		code = driver.Unknown
	}
	return &dialinv1.Result{Response: &dialinv1.Result_Error{Error: &dialinv1.Error{Code: uint32(code), Message: st.Message()}}}
}

// class returns the referenced class from the cache, pulling it once per version.
func (p *Connector) class(ctx context.Context, ref *dialinv1.ObjectRef) (*v1alpha1.MachineClass, error) {
	if ref == nil {
		return nil, nil
	}
	fetch := func(ctx context.Context) (*v1alpha1.MachineClass, error) {
		p.classPulls.Add(1)
		resp, err := p.client.GetMachineClass(ctx, &dialinv1.GetMachineClassRequest{MachineClass: ref})
		if err != nil {
			return nil, pullError(ctx, "machineClass", ref, err)
		}
		c, err := grpcbridge.DecodeMachineClass(resp.MachineClass)
		if err == nil && c == nil {
			err = driver.Errorf(driver.Internal, "dialin: the controller returned an empty machineClass %s/%s", ref.Namespace, ref.Name)
		}
		return c, err
	}
	if len(ref.Digest) == 0 {
		return fetch(ctx) // by name: the current version, not cacheable
	}
	return p.classes.get(ctx, string(ref.Digest), fetch)
}

// secret returns the referenced secret from the cache, pulling it once per version.
func (p *Connector) secret(ctx context.Context, ref *dialinv1.ObjectRef) (*corev1.Secret, error) {
	if ref == nil {
		return nil, nil
	}
	fetch := func(ctx context.Context) (*corev1.Secret, error) {
		p.secretPulls.Add(1)
		resp, err := p.client.GetSecret(ctx, &dialinv1.GetSecretRequest{Secret: ref})
		if err != nil {
			return nil, pullError(ctx, "secret", ref, err)
		}
		s, err := grpcbridge.DecodeSecret(resp.Secret)
		if err == nil && s == nil {
			err = driver.Errorf(driver.Internal, "dialin: the controller returned an empty secret %s/%s", ref.Namespace, ref.Name)
		}
		return s, err
	}
	if len(ref.Digest) == 0 {
		return fetch(ctx)
	}
	return p.secrets.get(ctx, string(ref.Digest), fetch)
}

func pullError(ctx context.Context, kind string, ref *dialinv1.ObjectRef, err error) error {
	e := grpcbridge.FromGRPCStatus(ctx, err)
	return driver.Errorf(driver.CodeOf(e), "dialin: pull %s %s/%s: %s", kind, ref.Namespace, ref.Name, driver.MessageOf(e))
}
