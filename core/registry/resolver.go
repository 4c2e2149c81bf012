package registry

import (
	"sync"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
)

// Source supplies drivers by provider name from outside the binary: driver servers the
// controller dials, or providers that dialled in.
type Source interface {
	// Driver returns the driver serving provider (a normalized name), if any.
	Driver(provider string) (driver.Driver, bool)
}

// Resolver picks the driver of a MachineClass, in the order of design.md: a configured endpoint
// for the provider, then the compiled-in driver, then a provider that dialled in. Compiled-in
// drivers are opened once and reused.
type Resolver struct {
	// Endpoints are configured driver servers (dial-out); nil means none.
	Endpoints Source
	// Remote are providers that dialled in; nil means none.
	Remote Source
	// Env is passed to compiled-in drivers when they are opened.
	Env Env

	mu     sync.Mutex
	opened map[string]driver.Driver
}

// ForClass returns the driver of class.provider.
func (r *Resolver) ForClass(class *v1alpha1.MachineClass) (driver.Driver, error) {
	if class == nil {
		return nil, driver.Error(driver.InvalidArgument, "no machine class given")
	}
	return r.Resolve(class.Provider)
}

// Resolve returns the driver of a provider name.
func (r *Resolver) Resolve(provider string) (driver.Driver, error) {
	name := Normalize(provider)
	if r.Endpoints != nil {
		if d, ok := r.Endpoints.Driver(name); ok {
			return d, nil
		}
	}
	if _, ok := Lookup(name); ok {
		return r.compiled(name)
	}
	if r.Remote != nil {
		if d, ok := r.Remote.Driver(name); ok {
			return d, nil
		}
	}
	return nil, UnknownProvider(name)
}

func (r *Resolver) compiled(name string) (driver.Driver, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if d, ok := r.opened[name]; ok {
		return d, nil
	}
	d, err := Open(name, r.Env)
	if err != nil {
		return nil, err
	}
	if r.opened == nil {
		r.opened = map[string]driver.Driver{}
	}
	r.opened[name] = d
	return d, nil
}

// Close closes every opened driver that implements io.Closer-like Close() error.
func (r *Resolver) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var first error
	for name, d := range r.opened {
		if c, ok := d.(interface{ Close() error }); ok {
			if err := c.Close(); err != nil && first == nil {
				first = err
			}
		}
		delete(r.opened, name)
	}
	return first
}
