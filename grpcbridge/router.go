package grpcbridge

import (
	"context"
	"sort"

	corev1 "k8s.io/api/core/v1"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/registry"
)

// Router is a driver.Driver over several providers' drivers: each call goes to the driver named
// by MachineClass.provider (case-insensitively). A server serving several providers serves a
// Router.
type Router struct {
	drivers map[string]driver.Driver
	names   []string
}

// NewRouter routes to drivers by provider name.
func NewRouter(drivers map[string]driver.Driver) *Router {
	r := &Router{drivers: make(map[string]driver.Driver, len(drivers))}
	for name, d := range drivers {
		n := registry.Normalize(name)
		r.drivers[n] = d
		r.names = append(r.names, n)
	}
	sort.Strings(r.names)
	return r
}

// Providers returns the routed provider names, sorted.
func (r *Router) Providers() []string { return append([]string(nil), r.names...) }

// Driver returns the driver of a provider; it makes a Router a registry.Source.
func (r *Router) Driver(provider string) (driver.Driver, bool) {
	d, ok := r.drivers[registry.Normalize(provider)]
	return d, ok
}

func (r *Router) route(provider string) (driver.Driver, error) {
	if d, ok := r.drivers[registry.Normalize(provider)]; ok {
		return d, nil
	}
	if registry.Normalize(provider) == "" {
		return nil, driver.Errorf(driver.InvalidArgument, "grpcbridge: the request has no machineClass.provider; this server serves %v", r.names)
	}
	return nil, driver.Errorf(driver.InvalidArgument,
		"grpcbridge: this server does not serve provider %q (it serves %v): start it with --provider %s or point the controller at a server that does",
		provider, r.names, registry.Normalize(provider))
}

func (r *Router) CreateMachine(ctx context.Context, req *driver.CreateMachineRequest) (*driver.CreateMachineResponse, error) {
	d, err := r.forClass(req.MachineClass)
	if err != nil {
		return nil, err
	}
	return d.CreateMachine(ctx, req)
}

func (r *Router) InitializeMachine(ctx context.Context, req *driver.InitializeMachineRequest) (*driver.InitializeMachineResponse, error) {
	d, err := r.forClass(req.MachineClass)
	if err != nil {
		return nil, err
	}
	return d.InitializeMachine(ctx, req)
}

func (r *Router) DeleteMachine(ctx context.Context, req *driver.DeleteMachineRequest) (*driver.DeleteMachineResponse, error) {
	d, err := r.forClass(req.MachineClass)
	if err != nil {
		return nil, err
	}
	return d.DeleteMachine(ctx, req)
}

func (r *Router) GetMachineStatus(ctx context.Context, req *driver.GetMachineStatusRequest) (*driver.GetMachineStatusResponse, error) {
	d, err := r.forClass(req.MachineClass)
	if err != nil {
		return nil, err
	}
	return d.GetMachineStatus(ctx, req)
}

func (r *Router) ListMachines(ctx context.Context, req *driver.ListMachinesRequest) (*driver.ListMachinesResponse, error) {
	d, err := r.forClass(req.MachineClass)
	if err != nil {
		return nil, err
	}
	return d.ListMachines(ctx, req)
}

// GetVolumeIDs goes to the provider named in ctx (ContextWithProvider; the server sets it from
// the request). Without one, each volume is offered to every provider in turn and the first ID
// found is kept, which keeps the result in request order.
func (r *Router) GetVolumeIDs(ctx context.Context, req *driver.GetVolumeIDsRequest) (*driver.GetVolumeIDsResponse, error) {
	if p := ProviderFromContext(ctx); p != "" {
		d, err := r.route(p)
		if err != nil {
			return nil, err
		}
		return d.GetVolumeIDs(ctx, req)
	}
	if len(r.names) == 1 {
		return r.drivers[r.names[0]].GetVolumeIDs(ctx, req)
	}
	out := &driver.GetVolumeIDsResponse{}
	for _, spec := range req.PVSpecs {
		for _, name := range r.names {
			resp, err := r.drivers[name].GetVolumeIDs(ctx, &driver.GetVolumeIDsRequest{PVSpecs: []*corev1.PersistentVolumeSpec{spec}})
			if driver.IsCode(err, driver.Unimplemented) {
				continue
			}
			if err != nil {
				return nil, err
			}
			if len(resp.VolumeIDs) > 0 {
				out.VolumeIDs = append(out.VolumeIDs, resp.VolumeIDs...)
				break
			}
		}
	}
	return out, nil
}

func (r *Router) forClass(class *v1alpha1.MachineClass) (driver.Driver, error) {
	if class == nil {
		return nil, driver.Errorf(driver.InvalidArgument, "grpcbridge: the request has no machineClass, so no provider to route to (this server serves %v)", r.names)
	}
	return r.route(class.Provider)
}

type providerKey struct{}

// ContextWithProvider names the provider a call without a MachineClass (GetVolumeIDs) is for.
func ContextWithProvider(ctx context.Context, provider string) context.Context {
	return context.WithValue(ctx, providerKey{}, provider)
}

// ProviderFromContext returns the provider set by ContextWithProvider, or "".
func ProviderFromContext(ctx context.Context) string {
	p, _ := ctx.Value(providerKey{}).(string)
	return p
}

var _ driver.Driver = (*Router)(nil)
var _ registry.Source = (*Router)(nil)
