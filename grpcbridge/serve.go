package grpcbridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"time"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/internal/graceful"
)

// ServeOptions configure Serve.
type ServeOptions struct {
	// Listen is "unix:///path.sock" or "host:port".
	Listen string
	// Transport secures the listener (mutual TLS, or plain text chosen explicitly).
	Transport Transport
	// Drivers are served by provider name; with several, calls are routed by
	// MachineClass.provider.
	Drivers map[string]driver.Driver
	// Log; nil means slog.Default().
	Log *slog.Logger
	// Timeouts bound calls that arrive without a deadline.
	Timeouts Timeouts
	// GracePeriod is how long calls in flight may finish after ctx ends (default 10 s).
	GracePeriod time.Duration
	// Ready, if set, is called with the listening address once the server accepts calls.
	Ready func(net.Addr)
}

// Serve serves drivers as a driver server (DriverService, IdentityService and the standard
// gRPC health service) until ctx ends, then lets calls in flight finish for GracePeriod.
func Serve(ctx context.Context, o ServeOptions) error {
	if len(o.Drivers) == 0 {
		return errors.New("grpcbridge: no drivers to serve")
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.GracePeriod <= 0 {
		o.GracePeriod = 10 * time.Second
	}
	names := make([]string, 0, len(o.Drivers))
	for n := range o.Drivers {
		names = append(names, n)
	}
	sort.Strings(names)
	var d driver.Driver
	if len(o.Drivers) == 1 {
		d = o.Drivers[names[0]]
	} else {
		d = NewRouter(o.Drivers)
	}
	srv, err := NewGRPCServer(o.Transport)
	if err != nil {
		return err
	}
	NewServer(d, WithProviders(names...), WithServerTimeouts(o.Timeouts), WithServerLogger(o.Log)).Register(srv)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	lis, err := Listen(o.Listen)
	if err != nil {
		return err
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	o.Log.Info("grpcbridge: serving drivers", "listen", lis.Addr().String(), "providers", names, "tls", o.Transport.TLS != nil)
	if o.Ready != nil {
		o.Ready(lis.Addr())
	}
	select {
	case err := <-served:
		return fmt.Errorf("grpcbridge: serve %s: %w", o.Listen, err)
	case <-ctx.Done():
	}
	hs.Shutdown()
	if graceful.Stop(srv.GracefulStop, srv.Stop, o.GracePeriod) {
		o.Log.Warn("grpcbridge: calls were still in flight after the grace period; stopped them", "grace", o.GracePeriod)
	}
	o.Log.Info("grpcbridge: stopped serving", "listen", o.Listen, "cause", context.Cause(ctx))
	return nil
}
