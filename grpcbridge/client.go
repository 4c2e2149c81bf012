package grpcbridge

import (
	"context"
	"time"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	driverv1 "github.com/machinist-io/machinist/grpcbridge/proto/machinist/driver/v1"
)

// client is the driver.Driver that calls a DriverService.
type client struct {
	conn     grpc.ClientConnInterface
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
	c := &client{conn: conn, rpc: driverv1.NewDriverServiceClient(conn)}
	for _, o := range opts {
		o(c)
	}
	c.timeouts = c.timeouts.orDefault()
	return c
}

func (c *client) CreateMachine(ctx context.Context, req *driver.CreateMachineRequest) (*driver.CreateMachineResponse, error) {
	resp := new(driverv1.CreateMachineResponse)
	if err := c.invoke(ctx, driverv1.DriverService_CreateMachine_FullMethodName, c.timeouts.Mutating, machineRequestFields, req.Machine, req.MachineClass, req.Secret, resp); err != nil {
		return nil, err
	}
	return CreateResponseFromProto(resp), nil
}

func (c *client) InitializeMachine(ctx context.Context, req *driver.InitializeMachineRequest) (*driver.InitializeMachineResponse, error) {
	resp := new(driverv1.InitializeMachineResponse)
	if err := c.invoke(ctx, driverv1.DriverService_InitializeMachine_FullMethodName, c.timeouts.Mutating, machineRequestFields, req.Machine, req.MachineClass, req.Secret, resp); err != nil {
		return nil, err
	}
	return InitializeResponseFromProto(resp), nil
}

func (c *client) DeleteMachine(ctx context.Context, req *driver.DeleteMachineRequest) (*driver.DeleteMachineResponse, error) {
	resp := new(driverv1.DeleteMachineResponse)
	if err := c.invoke(ctx, driverv1.DriverService_DeleteMachine_FullMethodName, c.timeouts.Mutating, machineRequestFields, req.Machine, req.MachineClass, req.Secret, resp); err != nil {
		return nil, err
	}
	return DeleteResponseFromProto(resp), nil
}

func (c *client) GetMachineStatus(ctx context.Context, req *driver.GetMachineStatusRequest) (*driver.GetMachineStatusResponse, error) {
	resp := new(driverv1.GetMachineStatusResponse)
	if err := c.invoke(ctx, driverv1.DriverService_GetMachineStatus_FullMethodName, c.timeouts.Reading, machineRequestFields, req.Machine, req.MachineClass, req.Secret, resp); err != nil {
		return nil, err
	}
	return StatusResponseFromProto(resp), nil
}

func (c *client) ListMachines(ctx context.Context, req *driver.ListMachinesRequest) (*driver.ListMachinesResponse, error) {
	resp := new(driverv1.ListMachinesResponse)
	if err := c.invoke(ctx, driverv1.DriverService_ListMachines_FullMethodName, c.timeouts.Reading, listRequestFields, nil, req.MachineClass, req.Secret, resp); err != nil {
		return nil, err
	}
	return ListResponseFromProto(resp), nil
}

// invoke calls method with a request holding the given objects, encoded in one pass (request.go),
// bounded by timeout when ctx has no deadline.
func (c *client) invoke(ctx context.Context, method string, timeout time.Duration, f requestFields, m *v1alpha1.Machine, class *v1alpha1.MachineClass, secret *corev1.Secret, resp any) error {
	req, err := encodeRequest(f, m, class, secret)
	if err != nil {
		return err
	}
	ctx, cancel := bound(ctx, timeout)
	defer cancel()
	if err := c.conn.Invoke(ctx, method, req, resp, sendEncoded); err != nil {
		return FromGRPCStatus(ctx, err)
	}
	return nil
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
