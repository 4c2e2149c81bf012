// Package dialin is the 2018 grpc-driver design done right: the controller listens (default :5000) and
// provider processes dial in. A provider holds one Register stream open for its lifetime and
// names the providers it serves; its client certificate must authorize each name (see
// mtls.ProviderURI). The controller sends operations down the stream, multiplexed by operation
// id, with the caller's remaining deadline, and cancels them when the caller gives up. Each
// operation names its MachineClass and Secret by reference (digest plus name and
// resourceVersion); the provider pulls a version once with GetMachineClass / GetSecret and
// caches it.
//
// Server is the controller side: each provider name with at least one connected replica is a
// driver.Driver (Server.Driver), which makes the Server the registry's Remote source. Several
// replicas of one provider may connect; each operation goes to the one with the fewest
// operations in flight. When a replica disconnects its operations in flight fail at once with
// Unavailable. Connector is the provider side: it serves drivers over the stream and reconnects
// with capped exponential backoff and jitter.
package dialin

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/registry"
	"github.com/machinist-io/machinist/grpcbridge"
	"github.com/machinist-io/machinist/grpcbridge/mtls"
	"github.com/machinist-io/machinist/grpcbridge/proto/infra"
	dialinv1 "github.com/machinist-io/machinist/grpcbridge/proto/machinist/dialin/v1"
)

// DefaultAddress is where the controller listens for providers unless told otherwise.
const DefaultAddress = ":5000"

// Options configure a Server.
type Options struct {
	// Source answers pulls by name (GetMachineClass / GetSecret without a digest). Nil serves
	// only the versions operations referenced.
	Source ObjectSource
	// Log receives registrations, refusals and disconnects; nil means slog.Default(). Secret
	// contents are never logged.
	Log *slog.Logger
	// Insecure accepts providers without a client certificate and lets them serve any name. Only
	// for a plain-text listener chosen explicitly (--insecure).
	Insecure bool
	// Timeouts bound operations whose caller set no deadline.
	Timeouts grpcbridge.Timeouts
	// SendQueue is the number of messages that may wait to be sent to one provider (default 64).
	SendQueue int
	// ShadowedBy, when set, says what serves a provider name instead of its dialled-in replicas
	// ("" when they get the work): the controller's resolution order (registry.Resolver). A
	// registration of a shadowed name is accepted with a warning, and Shadowed reports it.
	ShadowedBy func(provider string) string
}

// Server is the controller side of dial-in.
type Server struct {
	dialinv1.UnimplementedControllerServiceServer

	opts      Options
	log       *slog.Logger
	enc       *grpcbridge.Encoder
	classes   *store
	secrets   *store
	infragrpc *infragrpcRefs

	mu       sync.Mutex
	sessions map[string][]*session
	drivers  map[string]*remoteDriver
	changed  chan struct{}
	shutdown chan struct{}
	closed   bool
	rr       atomic.Uint64
}

// NewServer returns a dial-in server; register it on a gRPC server with Register.
func NewServer(o Options) *Server {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.SendQueue <= 0 {
		o.SendQueue = 64
	}
	return &Server{
		opts:      o,
		log:       o.Log,
		enc:       grpcbridge.NewEncoder(),
		classes:   newStore(),
		secrets:   newStore(),
		infragrpc: newInfragrpcRefs(),
		sessions:  map[string][]*session{},
		drivers:   map[string]*remoteDriver{},
		changed:   make(chan struct{}),
		shutdown:  make(chan struct{}),
	}
}

// RegisterService adds the ControllerService and the 2018 design's infra.Infragrpc (see infragrpc.go) to a
// gRPC server.
func (s *Server) RegisterService(r grpc.ServiceRegistrar) {
	dialinv1.RegisterControllerServiceServer(r, s)
	infra.RegisterInfragrpcServer(r, &infragrpcService{s: s})
}

// Close ends every provider stream (their operations in flight fail with Unavailable) and makes
// later registrations fail. Call it before GracefulStop of the gRPC server, which would otherwise
// wait for streams that last as long as the providers.
func (s *Server) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		close(s.shutdown)
	}
}

// session is one connected provider process.
type session struct {
	id        string
	protocol  string // dialinv1's package or the 2018 design's ("infra")
	instance  string
	peer      string
	providers []string
	since     time.Time
	kind      string // the machine-class kind a 2018-protocol provider registered
	// caps are the optional capabilities of each provider name its Hello reported (none for a
	// provider built before them, or the 2018 protocol's).
	caps map[string]driver.Capabilities

	sendq     chan *dialinv1.RegisterResponse
	done      chan struct{}
	closeOnce sync.Once
	reason    error

	nextID   atomic.Uint64
	inflight atomic.Int64
	mu       sync.Mutex
	pending  map[uint64]chan *dialinv1.Result
}

func (s *Server) newSession(ctx context.Context, protocol, instance string, providers []string) *session {
	return &session{
		id:        newID(),
		protocol:  protocol,
		instance:  instance,
		peer:      mtls.PeerIdentity(ctx),
		providers: providers,
		since:     time.Now(),
		sendq:     make(chan *dialinv1.RegisterResponse, s.opts.SendQueue),
		done:      make(chan struct{}),
		pending:   map[uint64]chan *dialinv1.Result{},
	}
}

func (ss *session) close(reason error) {
	ss.closeOnce.Do(func() {
		ss.mu.Lock()
		ss.reason = reason
		ss.mu.Unlock()
		close(ss.done)
	})
}

// Register serves one provider's stream for its lifetime.
func (s *Server) Register(stream grpc.BidiStreamingServer[dialinv1.RegisterRequest, dialinv1.RegisterResponse]) error {
	ctx := stream.Context()
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	hello := first.GetHello()
	if hello == nil {
		return status.Error(codes.InvalidArgument, "dialin: the first message on Register must be Hello naming the providers served")
	}
	if len(hello.Providers) == 0 {
		return status.Error(codes.InvalidArgument, "dialin: Hello names no provider: start the provider with --provider NAME")
	}
	names, err := s.authorizeNames(ctx, hello.Instance, hello.Providers)
	if err != nil {
		return err
	}
	ss := s.newSession(ctx, "machinist.dialin.v1", hello.Instance, names)
	ss.caps = capabilitiesOf(hello, names)
	log := s.log.With("session", ss.id, "protocol", ss.protocol, "instance", ss.instance, "peer", ss.peer, "providers", names, "version", hello.Version)
	// Welcome only once the session is in service: a provider takes it as accepted (and starts
	// its reconnect backoff over), which a controller shutting down must not say. Operations sent
	// to the session meanwhile wait in its queue, which serve drains after the Welcome.
	if err := s.connect(ss, log); err != nil {
		return err
	}
	if err := stream.Send(&dialinv1.RegisterResponse{Message: &dialinv1.RegisterResponse_Welcome{
		Welcome: &dialinv1.Welcome{Session: ss.id, Providers: names, ShadowedBy: s.shadowedOf(names)},
	}}); err != nil {
		s.remove(ss, err)
		log.Info("dialin: provider disconnected", "reason", err.Error())
		return err
	}

	recvErr := make(chan error, 1)
	go func() {
		for {
			msg, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			r := msg.GetResult()
			if r == nil {
				log.Warn("dialin: unexpected message from provider ignored", "type", fmt.Sprintf("%T", msg.GetMessage()))
				continue
			}
			s.deliver(ss, r)
		}
	}()
	return s.serve(ctx, ss, stream.Send, recvErr, log)
}

// serve sends a session's queued messages with send until the stream fails, the receiver ends
// (recvErr), the controller shuts down or ctx ends; then it takes the session out of service.
func (s *Server) serve(ctx context.Context, ss *session, send func(*dialinv1.RegisterResponse) error, recvErr <-chan error, log *slog.Logger) error {
	var end error
	for end == nil {
		select {
		case msg := <-ss.sendq:
			if err := send(msg); err != nil {
				end = err
			}
		case err := <-recvErr:
			end = err
		case <-s.shutdown:
			end = errShutdown
		case <-ctx.Done():
			end = ctx.Err()
		}
	}
	s.remove(ss, end)
	if errors.Is(end, errShutdown) {
		log.Info("dialin: provider stream closed: controller shutting down")
		return status.Error(codes.Unavailable, "dialin: the controller is shutting down")
	}
	log.Info("dialin: provider disconnected", "reason", end.Error())
	return nil
}

var errShutdown = errors.New("controller shutting down")

// authorizeNames returns the normalized provider names a registration asks for, or the status
// that refuses it.
func (s *Server) authorizeNames(ctx context.Context, instance string, requested []string) ([]string, error) {
	seen := map[string]bool{}
	var names, denied []string
	for _, raw := range requested {
		n := registry.Normalize(raw)
		if !registry.ValidName(n) {
			return nil, status.Errorf(codes.InvalidArgument, "dialin: %q is not a provider name: use lower-case letters and digits, starting with a letter", raw)
		}
		if seen[n] {
			continue
		}
		seen[n] = true
		names = append(names, n)
		if !s.authorizedFor(ctx, n) {
			denied = append(denied, n)
		}
	}
	sort.Strings(names)
	if len(denied) > 0 {
		cert := mtls.PeerCertificate(ctx)
		s.log.Warn("dialin: registration refused: certificate does not authorize the provider names",
			"peer", mtls.PeerIdentity(ctx), "instance", instance, "requested", names, "denied", denied,
			"authorized", mtls.AuthorizedProviders(cert))
		if cert == nil {
			return nil, status.Error(codes.Unauthenticated, "dialin: no client certificate: connect with --cert/--key/--cacert (the controller does not run --insecure)")
		}
		return nil, status.Errorf(codes.PermissionDenied,
			"dialin: the client certificate (%s) does not authorize provider %s: issue it with the URI SAN %s",
			mtls.PeerIdentity(ctx), strings.Join(denied, ", "), mtls.ProviderURI(denied[0]))
	}
	return names, nil
}

// authorizedFor reports whether the peer of ctx may serve (and pull the objects of) provider.
func (s *Server) authorizedFor(ctx context.Context, provider string) bool {
	if cert := mtls.PeerCertificate(ctx); cert != nil {
		return mtls.Authorizes(cert, provider)
	}
	return s.opts.Insecure
}

// connect logs a new session and its shadowed names, then puts it in service. The log comes
// first: once the session is in service, operations and waiters see it, and an operator reading
// the log must find the registration (and why it may get no work) before anything that follows
// from it.
func (s *Server) connect(ss *session, log *slog.Logger) error {
	log.Info("dialin: provider connected")
	s.warnShadowed(ss, log)
	if !s.add(ss) {
		log.Info("dialin: provider stream closed: controller shutting down")
		return status.Error(codes.Unavailable, "dialin: the controller is shutting down")
	}
	return nil
}

func (s *Server) add(ss *session) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	for _, n := range ss.providers {
		s.sessions[n] = append(s.sessions[n], ss)
	}
	s.notifyLocked()
	return true
}

// remove takes a session out of service and fails its operations in flight.
func (s *Server) remove(ss *session, reason error) {
	s.mu.Lock()
	for _, n := range ss.providers {
		list := s.sessions[n]
		for i, x := range list {
			if x == ss {
				list = append(list[:i:i], list[i+1:]...)
				break
			}
		}
		if len(list) == 0 {
			delete(s.sessions, n)
		} else {
			s.sessions[n] = list
		}
	}
	s.notifyLocked()
	s.mu.Unlock()
	ss.close(reason)
}

func (s *Server) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// warnShadowed logs each name of a new session that the controller's resolution order serves
// from elsewhere: the replica is connected but gets no work.
func (s *Server) warnShadowed(ss *session, log *slog.Logger) {
	for _, n := range ss.providers {
		if by := s.shadowedOf([]string{n})[n]; by != "" {
			log.Warn(fmt.Sprintf("dialin: provider %s registered but gets no operations: the %s of that name serves them (resolution order: %s); "+
				"start the controller with --prefer-dialin=%s to send them to dialled-in replicas", n, by, registry.ResolutionOrder, n),
				"provider", n, "shadowedBy", by)
		}
	}
}

// Shadowed returns the connected provider names whose operations go elsewhere (see
// Options.ShadowedBy), each with what serves it instead.
func (s *Server) Shadowed() map[string]string {
	var names []string
	for n := range s.Providers() {
		names = append(names, n)
	}
	return s.shadowedOf(names)
}

// shadowedOf returns the names that Options.ShadowedBy says are served elsewhere, with what
// serves each.
func (s *Server) shadowedOf(names []string) map[string]string {
	out := map[string]string{}
	if s.opts.ShadowedBy == nil {
		return out
	}
	for _, n := range names {
		if by := s.opts.ShadowedBy(n); by != "" {
			out[n] = by
		}
	}
	return out
}

// deliver routes a Result to the operation waiting for it.
func (s *Server) deliver(ss *session, r *dialinv1.Result) {
	ss.mu.Lock()
	ch, ok := ss.pending[r.Id]
	delete(ss.pending, r.Id)
	ss.mu.Unlock()
	if ok {
		ch <- r // buffered; one result per operation
	}
}

// capabilitiesOf reads the capabilities a Hello reported for the accepted names.
func capabilitiesOf(hello *dialinv1.Hello, names []string) map[string]driver.Capabilities {
	out := make(map[string]driver.Capabilities, len(names))
	for raw, c := range hello.Capabilities {
		if n := registry.Normalize(raw); slices.Contains(names, n) {
			out[n] = grpcbridge.CapabilitiesFromProto(c)
		}
	}
	return out
}

// servesPower: the replica's driver of provider stops and starts machines.
func servesPower(ss *session, provider string) bool { return ss.caps[provider].Power }

// pick returns the session of provider with the fewest operations in flight, rotating among
// equals; with need, only among the sessions need accepts.
func (s *Server) pick(provider string, need func(*session, string) bool) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	var list []*session
	for _, ss := range s.sessions[provider] {
		if need == nil || need(ss, provider) {
			list = append(list, ss)
		}
	}
	if len(list) == 0 {
		return nil
	}
	start := int(s.rr.Add(1) % uint64(len(list)))
	best := list[start]
	for i := 1; i < len(list); i++ {
		c := list[(start+i)%len(list)]
		if c.inflight.Load() < best.inflight.Load() {
			best = c
		}
	}
	return best
}

// call sends op to a replica of provider and waits for its result, the caller's context or the
// replica's disconnection, whichever comes first. Stopping and starting machines goes only to
// replicas that reported the power capability.
func (s *Server) call(ctx context.Context, provider, method string, op *dialinv1.Operation) (*dialinv1.Result, error) {
	var need func(*session, string) bool
	if op.Method == dialinv1.Method_METHOD_STOP_MACHINE || op.Method == dialinv1.Method_METHOD_START_MACHINE {
		need = servesPower
	}
	ss := s.pick(provider, need)
	if ss == nil && need != nil && s.pick(provider, nil) != nil {
		return nil, driver.Errorf(driver.Unimplemented,
			"dialin: no connected %s provider can stop and start machines (they were built before the capability, or their driver lacks it)", provider)
	}
	if ss == nil {
		return nil, driver.Errorf(driver.Unavailable,
			"dialin: no %s provider is connected to this controller: start one with `machinist connect --controller ADDR --provider %s`", provider, provider)
	}
	ss.inflight.Add(1)
	defer ss.inflight.Add(-1)
	op.Id = ss.nextID.Add(1)
	ch := make(chan *dialinv1.Result, 1)
	ss.mu.Lock()
	ss.pending[op.Id] = ch // registered before sending: the result cannot overtake it
	ss.mu.Unlock()
	defer func() {
		ss.mu.Lock()
		delete(ss.pending, op.Id)
		ss.mu.Unlock()
	}()

	select {
	case ss.sendq <- &dialinv1.RegisterResponse{Message: &dialinv1.RegisterResponse_Operation{Operation: op}}:
	case <-ctx.Done():
		return nil, contextError(ctx, provider, method)
	case <-ss.done:
		return nil, disconnected(ss, provider, method)
	}
	select {
	case r := <-ch:
		return r, nil
	case <-ctx.Done():
		// Best effort: the provider stops the driver call; its late result is dropped.
		select {
		case ss.sendq <- &dialinv1.RegisterResponse{Message: &dialinv1.RegisterResponse_Cancel{Cancel: &dialinv1.Cancel{Id: op.Id}}}:
		default:
		}
		return nil, contextError(ctx, provider, method)
	case <-ss.done:
		return nil, disconnected(ss, provider, method)
	}
}

func contextError(ctx context.Context, provider, method string) error {
	st := driver.StatusOf(ctx.Err())
	return driver.Errorf(st.Code(), "dialin: %s on provider %s: %s", method, provider, st.Message())
}

func disconnected(ss *session, provider, method string) error {
	ss.mu.Lock()
	reason := ss.reason
	ss.mu.Unlock()
	msg := "stream closed"
	if reason != nil {
		msg = reason.Error()
	}
	return driver.Errorf(driver.Unavailable, "dialin: provider %s (instance %q) disconnected during %s: %s; retry", provider, ss.instance, method, msg)
}

// Driver returns the driver of a provider with at least one connected replica. It makes Server a
// registry.Source (the registry's Remote fallback).
func (s *Server) Driver(provider string) (driver.Driver, bool) {
	name := registry.Normalize(provider)
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.sessions[name]) == 0 {
		return nil, false
	}
	d, ok := s.drivers[name]
	if !ok {
		d = &remoteDriver{s: s, name: name}
		s.drivers[name] = d
	}
	return d, true
}

// Changed returns a channel closed at the next registration or disconnection of a replica. It
// makes Server a registry.Notifier: the Machine controller creates at once the machines that
// waited for a provider when it connects.
func (s *Server) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

var _ registry.Notifier = (*Server)(nil)

// capabilities reports what a provider's connected replicas serve: a capability any of them
// reports (operations needing it go only to those).
func (s *Server) capabilities(provider string) driver.Capabilities {
	s.mu.Lock()
	defer s.mu.Unlock()
	var caps driver.Capabilities
	for _, ss := range s.sessions[provider] {
		caps.Power = caps.Power || servesPower(ss, provider)
	}
	return caps
}

// Providers returns the connected provider names and how many replicas serve each.
func (s *Server) Providers() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.sessions))
	for n, list := range s.sessions {
		out[n] = len(list)
	}
	return out
}

// WaitFor blocks until provider has at least the given number of connected replicas, or ctx ends.
func (s *Server) WaitFor(ctx context.Context, provider string, replicas int) error {
	name := registry.Normalize(provider)
	for {
		s.mu.Lock()
		n, changed := len(s.sessions[name]), s.changed
		s.mu.Unlock()
		if n >= replicas {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("dialin: waiting for %d %s provider(s), %d connected: %w", replicas, name, n, ctx.Err())
		}
	}
}

func newID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

var _ dialinv1.ControllerServiceServer = (*Server)(nil)
var _ registry.Source = (*Server)(nil)
