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
	rpc      driverv1.DriverServiceClient
	provider string
	timeouts Timeouts
	enc      *Encoder
	caps     capabilityCache
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
	c := &client{rpc: driverv1.NewDriverServiceClient(conn), enc: NewEncoder()}
	for _, o := range opts {
		o(c)
	}
	c.timeouts = c.timeouts.orDefault()
	return c
}

func (c *client) CreateMachine(ctx context.Context, req *driver.CreateMachineRequest) (*driver.CreateMachineResponse, error) {
	o, err := c.encodeObjects(req.Machine, req.MachineClass, req.Secret)
	if err != nil {
		return nil, err
	}
	resp, err := call(ctx, c.timeouts.Mutating, c.rpc.CreateMachine, &driverv1.CreateMachineRequest{Machine: o.machine, MachineClass: o.class, Secret: o.secret})
	if err != nil {
		return nil, err
	}
	return CreateResponseFromProto(resp), nil
}

func (c *client) InitializeMachine(ctx context.Context, req *driver.InitializeMachineRequest) (*driver.InitializeMachineResponse, error) {
	o, err := c.encodeObjects(req.Machine, req.MachineClass, req.Secret)
	if err != nil {
		return nil, err
	}
	resp, err := call(ctx, c.timeouts.Mutating, c.rpc.InitializeMachine, &driverv1.InitializeMachineRequest{Machine: o.machine, MachineClass: o.class, Secret: o.secret})
	if err != nil {
		return nil, err
	}
	return InitializeResponseFromProto(resp), nil
}

func (c *client) DeleteMachine(ctx context.Context, req *driver.DeleteMachineRequest) (*driver.DeleteMachineResponse, error) {
	o, err := c.encodeObjects(req.Machine, req.MachineClass, req.Secret)
	if err != nil {
		return nil, err
	}
	resp, err := call(ctx, c.timeouts.Mutating, c.rpc.DeleteMachine, &driverv1.DeleteMachineRequest{Machine: o.machine, MachineClass: o.class, Secret: o.secret})
	if err != nil {
		return nil, err
	}
	return DeleteResponseFromProto(resp), nil
}

func (c *client) GetMachineStatus(ctx context.Context, req *driver.GetMachineStatusRequest) (*driver.GetMachineStatusResponse, error) {
	o, err := c.encodeObjects(req.Machine, req.MachineClass, req.Secret)
	if err != nil {
		return nil, err
	}
	resp, err := call(ctx, c.timeouts.Reading, c.rpc.GetMachineStatus, &driverv1.GetMachineStatusRequest{Machine: o.machine, MachineClass: o.class, Secret: o.secret})
	if err != nil {
		return nil, err
	}
	return StatusResponseFromProto(resp), nil
}

func (c *client) ListMachines(ctx context.Context, req *driver.ListMachinesRequest) (*driver.ListMachinesResponse, error) {
	o, err := c.encodeObjects(nil, req.MachineClass, req.Secret)
	if err != nil {
		return nil, err
	}
	resp, err := call(ctx, c.timeouts.Reading, c.rpc.ListMachines, &driverv1.ListMachinesRequest{MachineClass: o.class, Secret: o.secret})
	if err != nil {
		return nil, err
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
	resp, err := call(ctx, c.timeouts.Reading, c.rpc.GetVolumeIDs, &driverv1.GetVolumeIDsRequest{PvSpecs: specs, Provider: provider})
	if err != nil {
		return nil, err
	}
	return VolumeIDsResponseFromProto(resp), nil
}

// encodedObjects are a request's objects in their wire encoding; a nil object is nil bytes,
// which leaves its field out. The class's and secret's bytes are the encoder's, shared with
// other calls (gRPC only reads them).
type encodedObjects struct{ machine, class, secret []byte }

// encodeObjects encodes the Machine per call (the controller changes machines in memory
// before calling, e.g. a probe with another providerID, so no version names its content) and
// takes the class and secret from the encoder.
func (c *client) encodeObjects(m *v1alpha1.Machine, class *v1alpha1.MachineClass, s *corev1.Secret) (o encodedObjects, err error) {
	if o.machine, err = EncodeMachine(m); err != nil {
		return o, err
	}
	ec, err := c.enc.MachineClass(class)
	if err != nil {
		return o, err
	}
	es, err := c.enc.Secret(s)
	if err != nil {
		return o, err
	}
	return encodedObjects{machine: o.machine, class: ec.bytes(), secret: es.bytes()}, nil
}

// call makes one unary call of the generated client, bounded by timeout when ctx has no
// deadline, and turns its error into the driver error it carries.
func call[Req, Resp any](ctx context.Context, timeout time.Duration, rpc func(context.Context, Req, ...grpc.CallOption) (Resp, error), req Req) (Resp, error) {
	ctx, cancel := bound(ctx, timeout)
	defer cancel()
	resp, err := rpc(ctx, req)
	if err != nil {
		var zero Resp
		return zero, FromGRPCStatus(ctx, err)
	}
	return resp, nil
}

var _ driver.Driver = (*client)(nil)
