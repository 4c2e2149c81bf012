package grpcbridge

import (
	"context"

	"google.golang.org/grpc"

	"github.com/machinist-io/machinist/core/driver"
	driverv1 "github.com/machinist-io/machinist/grpcbridge/proto/machinist/driver/v1"
)

// client is the driver.Driver that calls a DriverService.
type client struct {
	rpc      driverv1.DriverServiceClient
	provider string
	timeouts Timeouts
}

// ClientOption configures NewClient.
type ClientOption func(*client)

// WithProvider names the provider this client is for. It is sent with GetVolumeIDs (the one call
// without a MachineClass) so a server serving several providers can route it.
func WithProvider(name string) ClientOption { return func(c *client) { c.provider = name } }

// WithTimeouts sets the bounds for calls whose context has no deadline.
func WithTimeouts(t Timeouts) ClientOption { return func(c *client) { c.timeouts = t } }

// NewClient returns a driver.Driver that calls the DriverService on conn. Errors keep their
// machine code and message; the caller's deadline and cancellation reach the remote driver.
func NewClient(conn grpc.ClientConnInterface, opts ...ClientOption) driver.Driver {
	c := &client{rpc: driverv1.NewDriverServiceClient(conn)}
	for _, o := range opts {
		o(c)
	}
	c.timeouts = c.timeouts.orDefault()
	return c
}

func (c *client) CreateMachine(ctx context.Context, req *driver.CreateMachineRequest) (*driver.CreateMachineResponse, error) {
	o, err := objectsToProto(req.Machine, req.MachineClass, req.Secret)
	if err != nil {
		return nil, err
	}
	ctx, cancel := bound(ctx, c.timeouts.Mutating)
	defer cancel()
	resp, err := c.rpc.CreateMachine(ctx, &driverv1.CreateMachineRequest{Machine: o.machine, MachineClass: o.class, Secret: o.secret})
	if err != nil {
		return nil, FromGRPCStatus(ctx, err)
	}
	return CreateResponseFromProto(resp), nil
}

func (c *client) InitializeMachine(ctx context.Context, req *driver.InitializeMachineRequest) (*driver.InitializeMachineResponse, error) {
	o, err := objectsToProto(req.Machine, req.MachineClass, req.Secret)
	if err != nil {
		return nil, err
	}
	ctx, cancel := bound(ctx, c.timeouts.Mutating)
	defer cancel()
	resp, err := c.rpc.InitializeMachine(ctx, &driverv1.InitializeMachineRequest{Machine: o.machine, MachineClass: o.class, Secret: o.secret})
	if err != nil {
		return nil, FromGRPCStatus(ctx, err)
	}
	return InitializeResponseFromProto(resp), nil
}

func (c *client) DeleteMachine(ctx context.Context, req *driver.DeleteMachineRequest) (*driver.DeleteMachineResponse, error) {
	o, err := objectsToProto(req.Machine, req.MachineClass, req.Secret)
	if err != nil {
		return nil, err
	}
	ctx, cancel := bound(ctx, c.timeouts.Mutating)
	defer cancel()
	resp, err := c.rpc.DeleteMachine(ctx, &driverv1.DeleteMachineRequest{Machine: o.machine, MachineClass: o.class, Secret: o.secret})
	if err != nil {
		return nil, FromGRPCStatus(ctx, err)
	}
	return DeleteResponseFromProto(resp), nil
}

func (c *client) GetMachineStatus(ctx context.Context, req *driver.GetMachineStatusRequest) (*driver.GetMachineStatusResponse, error) {
	o, err := objectsToProto(req.Machine, req.MachineClass, req.Secret)
	if err != nil {
		return nil, err
	}
	ctx, cancel := bound(ctx, c.timeouts.Reading)
	defer cancel()
	resp, err := c.rpc.GetMachineStatus(ctx, &driverv1.GetMachineStatusRequest{Machine: o.machine, MachineClass: o.class, Secret: o.secret})
	if err != nil {
		return nil, FromGRPCStatus(ctx, err)
	}
	return StatusResponseFromProto(resp), nil
}

func (c *client) ListMachines(ctx context.Context, req *driver.ListMachinesRequest) (*driver.ListMachinesResponse, error) {
	class, err := EncodeMachineClass(req.MachineClass)
	if err != nil {
		return nil, err
	}
	secret, err := EncodeSecret(req.Secret)
	if err != nil {
		return nil, err
	}
	ctx, cancel := bound(ctx, c.timeouts.Reading)
	defer cancel()
	resp, err := c.rpc.ListMachines(ctx, &driverv1.ListMachinesRequest{MachineClass: class, Secret: secret})
	if err != nil {
		return nil, FromGRPCStatus(ctx, err)
	}
	return ListResponseFromProto(resp), nil
}

func (c *client) GetVolumeIDs(ctx context.Context, req *driver.GetVolumeIDsRequest) (*driver.GetVolumeIDsResponse, error) {
	specs, err := PVSpecsToProto(req.PVSpecs)
	if err != nil {
		return nil, err
	}
	provider := c.provider
	if p := ProviderFromContext(ctx); p != "" {
		provider = p
	}
	ctx, cancel := bound(ctx, c.timeouts.Reading)
	defer cancel()
	resp, err := c.rpc.GetVolumeIDs(ctx, &driverv1.GetVolumeIDsRequest{PvSpecs: specs, Provider: provider})
	if err != nil {
		return nil, FromGRPCStatus(ctx, err)
	}
	return VolumeIDsResponseFromProto(resp), nil
}

var _ driver.Driver = (*client)(nil)
