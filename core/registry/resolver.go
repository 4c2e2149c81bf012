package registry

import (
	"reflect"
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

// Resolver picks the driver of a MachineClass, in the order docs/controllers.md#drivers gives: a
// configured endpoint for the provider, then the compiled-in driver, then a provider that dialled
// in. PreferRemote moves dialled-in providers to the front for the names it lists. Compiled-in
// drivers are opened once and reused.
type Resolver struct {
	// Endpoints are configured driver servers (dial-out); nil means none.
	Endpoints Source
	// Remote are providers that dialled in; nil means none.
	Remote Source
	// PreferRemote names the providers whose dialled-in replicas, while any is connected, serve
	// before an endpoint or the compiled-in driver of the same name; "*" means every provider.
	PreferRemote []string
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
	if r.Remote != nil && r.prefersRemote(name) {
		if d, ok := r.Remote.Driver(name); ok {
			return d, nil
		}
	}
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

// ResolutionOrder says in words in which order the sources are asked, for messages.
const ResolutionOrder = "--driver-endpoint/--driver-exec, then compiled-in, then dialled-in"

// ShadowedBy says what serves provider instead of a dialled-in replica of that name: "driver
// endpoint" or "compiled-in driver", or "" when a dialled-in replica would get the work.
func (r *Resolver) ShadowedBy(provider string) string {
	name := Normalize(provider)
	switch {
	case r.prefersRemote(name):
		return ""
	case r.Endpoints != nil && hasDriver(r.Endpoints, name):
		return "driver endpoint"
	}
	if _, ok := Lookup(name); ok {
		return "compiled-in driver"
	}
	return ""
}

func hasDriver(s Source, name string) bool {
	_, ok := s.Driver(name)
	return ok
}

func (r *Resolver) prefersRemote(name string) bool {
	for _, p := range r.PreferRemote {
		if p == "*" || Normalize(p) == name {
			return true
		}
	}
	return false
}

// SpecCheck is what the offline check of a class's providerSpec found.
type SpecCheck struct {
	// Checked is false when nothing is known: the provider is not compiled in, has no
	// Registration.CheckSpec, or the class resolves to a driver server or a dialled-in provider
	// (which decode on their side).
	Checked bool
	// Mode is the decoding mode checked in (Env.SpecMode).
	Mode driver.SpecMode
	// Warnings are the fields decoding ignored or matched loosely.
	Warnings []driver.SpecWarning
	// Err is what the driver answers for this spec (InvalidArgument), or nil.
	Err error
}

// CheckSpec checks class.providerSpec as the driver that serves the class will decode it, when
// that driver is compiled in (see SpecCheck.Checked). It makes no cloud call.
func (r *Resolver) CheckSpec(class *v1alpha1.MachineClass) SpecCheck {
	if class == nil {
		return SpecCheck{}
	}
	name := Normalize(class.Provider)
	reg, ok := Lookup(name)
	if !ok || reg.CheckSpec == nil {
		return SpecCheck{}
	}
	// Only the compiled-in driver decodes with this binary's code: ask Resolve which serves.
	d, err := r.Resolve(name)
	if err != nil {
		return SpecCheck{}
	}
	r.mu.Lock()
	compiled, opened := r.opened[name]
	r.mu.Unlock()
	if !opened || !sameDriver(d, compiled) {
		return SpecCheck{}
	}
	return CheckSpec(class, r.Env.SpecMode)
}

// CheckSpec checks class.providerSpec with the compiled-in provider's Registration.CheckSpec;
// Checked is false when the provider is not compiled in or cannot check specs.
func CheckSpec(class *v1alpha1.MachineClass, mode driver.SpecMode) SpecCheck {
	if class == nil {
		return SpecCheck{}
	}
	reg, ok := Lookup(class.Provider)
	if !ok || reg.CheckSpec == nil {
		return SpecCheck{}
	}
	warnings, err := reg.CheckSpec(class, mode)
	return SpecCheck{Checked: true, Mode: mode, Warnings: warnings, Err: err}
}

func sameDriver(a, b driver.Driver) bool {
	ta, tb := reflect.TypeOf(a), reflect.TypeOf(b)
	return ta == tb && ta != nil && ta.Comparable() && a == b
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
