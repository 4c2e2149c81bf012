package grpcbridge

import (
	"context"
	"sync"
	"time"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	driverv1 "github.com/machinist-io/machinist/grpcbridge/proto/machinist/driver/v1"
)

// The optional power capability (core/driver.PowerDriver) on both sides of the DriverService:
// the server serves StopMachine, StartMachine and GetCapabilities for a driver that has it; the
// client implements PowerDriver and CapabilityReporter, asking the server which it serves, so a
// server built before the capability reads as one without it.

// StopMachine stops the VM of a machine through the served driver's PowerDriver.
func (s *Server) StopMachine(ctx context.Context, req *driverv1.StopMachineRequest) (*driverv1.StopMachineResponse, error) {
	m, c, sec, err := s.objects(req.Machine, req.MachineClass, req.Secret)
	if err != nil {
		return nil, ToGRPCStatus(err)
	}
	var resp *driver.StopMachineResponse
	err = s.run(ctx, "StopMachine", s.timeouts.Mutating, func(ctx context.Context) error {
		p, err := s.power()
		if err != nil {
			return err
		}
		resp, err = p.StopMachine(ctx, &driver.StopMachineRequest{Machine: m, MachineClass: c, Secret: sec})
		return err
	})
	if err != nil {
		return nil, err
	}
	return StopResponseToProto(resp), nil
}

// StartMachine starts the stopped VM of a machine through the served driver's PowerDriver.
func (s *Server) StartMachine(ctx context.Context, req *driverv1.StartMachineRequest) (*driverv1.StartMachineResponse, error) {
	m, c, sec, err := s.objects(req.Machine, req.MachineClass, req.Secret)
	if err != nil {
		return nil, ToGRPCStatus(err)
	}
	var resp *driver.StartMachineResponse
	err = s.run(ctx, "StartMachine", s.timeouts.Mutating, func(ctx context.Context) error {
		p, err := s.power()
		if err != nil {
			return err
		}
		resp, err = p.StartMachine(ctx, &driver.StartMachineRequest{Machine: m, MachineClass: c, Secret: sec})
		return err
	})
	if err != nil {
		return nil, err
	}
	return StartResponseToProto(resp), nil
}

// GetCapabilities reports the optional capabilities of the served driver (of req.Provider, on a
// server serving several).
func (s *Server) GetCapabilities(ctx context.Context, req *driverv1.GetCapabilitiesRequest) (*driverv1.GetCapabilitiesResponse, error) {
	if req.Provider != "" {
		ctx = ContextWithProvider(ctx, req.Provider)
	}
	var caps driver.Capabilities
	err := s.run(ctx, "GetCapabilities", s.timeouts.Reading, func(ctx context.Context) (err error) {
		caps, err = driver.CapabilitiesOf(ctx, s.d)
		return err
	})
	if err != nil {
		return nil, err
	}
	return CapabilitiesToProto(caps), nil
}

// power is the served driver as a PowerDriver. One that forwards (a Router, a client of another
// server) decides per call; one that lacks the methods is Unimplemented.
func (s *Server) power() (driver.PowerDriver, error) {
	if p, ok := s.d.(driver.PowerDriver); ok {
		return p, nil
	}
	return nil, driver.Errorf(driver.Unimplemented, "grpcbridge: the driver served here (%v) cannot stop and start machines", s.providers)
}

// capabilitiesTTL is how long a client trusts a server's answer to GetCapabilities: what a server
// serves changes only when it is replaced, and the controllers ask before every stop and start.
const capabilitiesTTL = 30 * time.Second

// capabilityCache holds a client's last answers to GetCapabilities, by provider.
type capabilityCache struct {
	mu      sync.Mutex
	answers map[string]cachedCapabilities
}

type cachedCapabilities struct {
	caps driver.Capabilities
	at   time.Time
}

func (c *capabilityCache) get(provider string, now time.Time) (driver.Capabilities, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	a, ok := c.answers[provider]
	if !ok || now.Sub(a.at) > capabilitiesTTL {
		return driver.Capabilities{}, false
	}
	return a.caps, true
}

func (c *capabilityCache) put(provider string, caps driver.Capabilities, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.answers == nil {
		c.answers = map[string]cachedCapabilities{}
	}
	c.answers[provider] = cachedCapabilities{caps: caps, at: now}
}

// Capabilities asks the server which optional capabilities the provider's driver serves. A server
// built before GetCapabilities answers Unimplemented: it serves none.
func (c *client) Capabilities(ctx context.Context) (driver.Capabilities, error) {
	provider := c.provider
	if p := ProviderFromContext(ctx); p != "" {
		provider = p
	}
	if caps, ok := c.caps.get(provider, time.Now()); ok {
		return caps, nil
	}
	resp, err := call(ctx, c.timeouts.Reading, c.rpc.GetCapabilities, &driverv1.GetCapabilitiesRequest{Provider: provider})
	switch {
	case driver.IsCode(err, driver.Unimplemented):
		resp = nil
	case err != nil:
		return driver.Capabilities{}, err
	}
	caps := CapabilitiesFromProto(resp)
	c.caps.put(provider, caps, time.Now())
	return caps, nil
}

func (c *client) StopMachine(ctx context.Context, req *driver.StopMachineRequest) (*driver.StopMachineResponse, error) {
	o, err := c.encodeObjects(req.Machine, req.MachineClass, req.Secret)
	if err != nil {
		return nil, err
	}
	resp, err := call(ctx, c.timeouts.Mutating, c.rpc.StopMachine, &driverv1.StopMachineRequest{Machine: o.machine, MachineClass: o.class, Secret: o.secret})
	if err != nil {
		return nil, err
	}
	return StopResponseFromProto(resp), nil
}

func (c *client) StartMachine(ctx context.Context, req *driver.StartMachineRequest) (*driver.StartMachineResponse, error) {
	o, err := c.encodeObjects(req.Machine, req.MachineClass, req.Secret)
	if err != nil {
		return nil, err
	}
	resp, err := call(ctx, c.timeouts.Mutating, c.rpc.StartMachine, &driverv1.StartMachineRequest{Machine: o.machine, MachineClass: o.class, Secret: o.secret})
	if err != nil {
		return nil, err
	}
	return StartResponseFromProto(resp), nil
}

// StopMachine stops the VM through the driver of the request's class, when it has the capability.
func (r *Router) StopMachine(ctx context.Context, req *driver.StopMachineRequest) (*driver.StopMachineResponse, error) {
	p, err := r.powerForClass(ctx, req.MachineClass)
	if err != nil {
		return nil, err
	}
	return p.StopMachine(ctx, req)
}

// StartMachine starts the VM through the driver of the request's class, when it has the
// capability.
func (r *Router) StartMachine(ctx context.Context, req *driver.StartMachineRequest) (*driver.StartMachineResponse, error) {
	p, err := r.powerForClass(ctx, req.MachineClass)
	if err != nil {
		return nil, err
	}
	return p.StartMachine(ctx, req)
}

func (r *Router) powerForClass(ctx context.Context, class *v1alpha1.MachineClass) (driver.PowerDriver, error) {
	d, err := r.forClass(class)
	if err != nil {
		return nil, err
	}
	return driver.PowerOf(ctx, class.Provider, d)
}

// Capabilities reports the capabilities of the provider named in ctx (ContextWithProvider; the
// server sets it from the request), or of the only provider routed.
func (r *Router) Capabilities(ctx context.Context) (driver.Capabilities, error) {
	provider := ProviderFromContext(ctx)
	if provider == "" && len(r.names) == 1 {
		provider = r.names[0]
	}
	d, err := r.route(provider)
	if err != nil {
		return driver.Capabilities{}, err
	}
	return driver.CapabilitiesOf(ctx, d)
}

var (
	_ driver.PowerDriver        = (*client)(nil)
	_ driver.CapabilityReporter = (*client)(nil)
	_ driver.PowerDriver        = (*Router)(nil)
	_ driver.CapabilityReporter = (*Router)(nil)
)
