// Package grpcbridge carries the driver interface (core/driver) over gRPC. NewServer exposes a
// driver.Driver as the machinist.driver.v1 service; NewClient is its twin, a driver.Driver that
// calls such a server, so a controller cannot tell a remote driver from a compiled-in one.
// Package dialin carries the same interface in the other direction.
package grpcbridge

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	driverv1 "github.com/machinist-io/machinist/grpcbridge/proto/machinist/driver/v1"
	"github.com/machinist-io/machinist/internal/version"
)

// Server serves one driver (use a Router for several providers) as the DriverService and
// IdentityService.
type Server struct {
	driverv1.UnimplementedDriverServiceServer
	driverv1.UnimplementedIdentityServiceServer

	d         driver.Driver
	providers []string
	timeouts  Timeouts
	log       *slog.Logger
	dec       *Decoder
}

// ServerOption configures a Server.
type ServerOption func(*Server)

// WithProviders names the providers the server reports in GetInfo. A Router names its own.
func WithProviders(names ...string) ServerOption {
	return func(s *Server) { s.providers = names }
}

// WithServerTimeouts sets the bounds for calls that arrive without a deadline.
func WithServerTimeouts(t Timeouts) ServerOption { return func(s *Server) { s.timeouts = t } }

// WithServerLogger sets the logger; nil means slog.Default().
func WithServerLogger(l *slog.Logger) ServerOption { return func(s *Server) { s.log = l } }

// NewServer returns a server for d.
func NewServer(d driver.Driver, opts ...ServerOption) *Server {
	s := &Server{d: d, dec: NewDecoder()}
	for _, o := range opts {
		o(s)
	}
	if p, ok := d.(interface{ Providers() []string }); ok && s.providers == nil {
		s.providers = p.Providers()
	}
	s.timeouts = s.timeouts.orDefault()
	if s.log == nil {
		s.log = slog.Default()
	}
	return s
}

// Register adds the Driver and Identity services to a gRPC server.
func (s *Server) Register(r grpc.ServiceRegistrar) {
	driverv1.RegisterDriverServiceServer(r, s)
	driverv1.RegisterIdentityServiceServer(r, s)
}

// GetInfo reports the providers served.
func (s *Server) GetInfo(context.Context, *driverv1.GetInfoRequest) (*driverv1.GetInfoResponse, error) {
	return &driverv1.GetInfoResponse{Providers: s.providers, Version: version.Version}, nil
}

func (s *Server) CreateMachine(ctx context.Context, req *driverv1.CreateMachineRequest) (*driverv1.CreateMachineResponse, error) {
	m, c, sec, err := s.objects(req.Machine, req.MachineClass, req.Secret)
	if err != nil {
		return nil, ToGRPCStatus(err)
	}
	var resp *driver.CreateMachineResponse
	err = s.run(ctx, "CreateMachine", s.timeouts.Mutating, func(ctx context.Context) (err error) {
		resp, err = s.d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: m, MachineClass: c, Secret: sec})
		return err
	})
	if err != nil {
		return nil, err
	}
	return CreateResponseToProto(resp), nil
}

func (s *Server) InitializeMachine(ctx context.Context, req *driverv1.InitializeMachineRequest) (*driverv1.InitializeMachineResponse, error) {
	m, c, sec, err := s.objects(req.Machine, req.MachineClass, req.Secret)
	if err != nil {
		return nil, ToGRPCStatus(err)
	}
	var resp *driver.InitializeMachineResponse
	err = s.run(ctx, "InitializeMachine", s.timeouts.Mutating, func(ctx context.Context) (err error) {
		resp, err = s.d.InitializeMachine(ctx, &driver.InitializeMachineRequest{Machine: m, MachineClass: c, Secret: sec})
		return err
	})
	if err != nil {
		return nil, err
	}
	return InitializeResponseToProto(resp), nil
}

func (s *Server) DeleteMachine(ctx context.Context, req *driverv1.DeleteMachineRequest) (*driverv1.DeleteMachineResponse, error) {
	m, c, sec, err := s.objects(req.Machine, req.MachineClass, req.Secret)
	if err != nil {
		return nil, ToGRPCStatus(err)
	}
	var resp *driver.DeleteMachineResponse
	err = s.run(ctx, "DeleteMachine", s.timeouts.Mutating, func(ctx context.Context) (err error) {
		resp, err = s.d.DeleteMachine(ctx, &driver.DeleteMachineRequest{Machine: m, MachineClass: c, Secret: sec})
		return err
	})
	if err != nil {
		return nil, err
	}
	return DeleteResponseToProto(resp), nil
}

func (s *Server) GetMachineStatus(ctx context.Context, req *driverv1.GetMachineStatusRequest) (*driverv1.GetMachineStatusResponse, error) {
	m, c, sec, err := s.objects(req.Machine, req.MachineClass, req.Secret)
	if err != nil {
		return nil, ToGRPCStatus(err)
	}
	var resp *driver.GetMachineStatusResponse
	err = s.run(ctx, "GetMachineStatus", s.timeouts.Reading, func(ctx context.Context) (err error) {
		resp, err = s.d.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: m, MachineClass: c, Secret: sec})
		return err
	})
	if err != nil {
		return nil, err
	}
	return StatusResponseToProto(resp), nil
}

func (s *Server) ListMachines(ctx context.Context, req *driverv1.ListMachinesRequest) (*driverv1.ListMachinesResponse, error) {
	c, err := s.dec.MachineClass(req.MachineClass)
	if err != nil {
		return nil, ToGRPCStatus(err)
	}
	sec, err := s.dec.Secret(req.Secret)
	if err != nil {
		return nil, ToGRPCStatus(err)
	}
	var resp *driver.ListMachinesResponse
	err = s.run(ctx, "ListMachines", s.timeouts.Reading, func(ctx context.Context) (err error) {
		resp, err = s.d.ListMachines(ctx, &driver.ListMachinesRequest{MachineClass: c, Secret: sec})
		return err
	})
	if err != nil {
		return nil, err
	}
	return ListResponseToProto(resp), nil
}

func (s *Server) GetVolumeIDs(ctx context.Context, req *driverv1.GetVolumeIDsRequest) (*driverv1.GetVolumeIDsResponse, error) {
	specs, err := PVSpecsFromProto(req.PvSpecs)
	if err != nil {
		return nil, ToGRPCStatus(err)
	}
	if req.Provider != "" {
		ctx = ContextWithProvider(ctx, req.Provider)
	}
	var resp *driver.GetVolumeIDsResponse
	err = s.run(ctx, "GetVolumeIDs", s.timeouts.Reading, func(ctx context.Context) (err error) {
		resp, err = s.d.GetVolumeIDs(ctx, &driver.GetVolumeIDsRequest{PVSpecs: specs})
		return err
	})
	if err != nil {
		return nil, err
	}
	return VolumeIDsResponseToProto(resp), nil
}

func (s *Server) objects(machine, class, secret []byte) (*v1alpha1.Machine, *v1alpha1.MachineClass, *corev1.Secret, error) {
	m, err := s.dec.Machine(machine)
	if err != nil {
		return nil, nil, nil, err
	}
	c, err := s.dec.MachineClass(class)
	if err != nil {
		return nil, nil, nil, err
	}
	sec, err := s.dec.Secret(secret)
	if err != nil {
		return nil, nil, nil, err
	}
	return m, c, sec, nil
}

// run calls the driver under the caller's deadline (or the default bound when there is none),
// turns a panic into Internal so one bad request cannot take the server down, and converts the
// error for the wire.
func (s *Server) run(ctx context.Context, method string, timeout time.Duration, call func(context.Context) error) (err error) {
	ctx, cancel := bound(ctx, timeout)
	defer cancel()
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("grpcbridge: driver panicked", "method", method, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			err = ToGRPCStatus(driver.Errorf(driver.Internal, "driver panicked in %s: %v", method, r))
		}
	}()
	return ToGRPCStatus(call(ctx))
}

var _ driverv1.DriverServiceServer = (*Server)(nil)
var _ driverv1.IdentityServiceServer = (*Server)(nil)
