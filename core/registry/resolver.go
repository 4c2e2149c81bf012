package registry

import (
	"fmt"
	"reflect"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
)

// Source supplies drivers by provider name from outside the binary: driver servers the
// controller dials, or providers that dialled in.
type Source interface {
	// Driver returns the driver serving provider (a normalized name), if any.
	Driver(provider string) (driver.Driver, bool)
}

// Notifier is a Source that says when the drivers it has change (a provider connected or went).
type Notifier interface {
	// Changed returns a channel closed at the next change.
	Changed() <-chan struct{}
}

// Resolver picks the driver of a MachineClass, in the order docs/controllers.md#drivers gives: a
// configured endpoint for the provider, then the compiled-in driver, then a provider that dialled
// in. PreferRemote moves dialled-in providers to the front for the names it lists, and
// PreferGrace makes their classes wait a while for the first replica rather than go elsewhere.
// Compiled-in drivers are opened once and reused.
type Resolver struct {
	// Endpoints are configured driver servers (dial-out); nil means none.
	Endpoints Source
	// Remote are providers that dialled in; nil means none.
	Remote Source
	// PreferRemote names the providers whose dialled-in replicas, while any is connected, serve
	// before an endpoint or the compiled-in driver of the same name; "*" means every provider.
	PreferRemote []string
	// PreferGrace is how long a preferred provider's classes wait for its first replica to
	// connect before an endpoint or the compiled-in driver serves them, counted from the first
	// time the provider is resolved (in a controller: when its controllers start). Resolve
	// answers a *WaitingError meanwhile. Zero: no wait.
	PreferGrace time.Duration
	// Clock is the time of the grace period; nil means the real clock.
	Clock clock.PassiveClock
	// Env is passed to compiled-in drivers when they are opened.
	Env Env

	mu         sync.Mutex
	opened     map[string]driver.Driver
	graceStart map[string]time.Time
}

// WaitingError is what Resolve answers for a preferred provider during its grace period
// (Resolver.PreferGrace) while none of its replicas is connected. It comes wrapped in the code
// Unavailable: retry, at Until at the latest.
type WaitingError struct {
	// Provider is the preferred provider's name.
	Provider string
	// Until is when the grace period ends and Fallback serves the provider's classes.
	Until time.Time
	// Fallback is what serves them then: "driver endpoint" or "compiled-in driver".
	Fallback string
}

func (e *WaitingError) Error() string {
	return fmt.Sprintf("waiting for a dialled-in %s provider (--prefer-dialin %s) until %s; if none has connected by then, the %s serves this class",
		e.Provider, e.Provider, e.Until.UTC().Format(time.RFC3339), e.Fallback)
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
		if w := r.waiting(name); w != nil {
			return nil, driver.Wrap(driver.Unavailable, w, "")
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
	if r.prefersRemote(name) {
		return ""
	}
	return r.fallbackOf(name)
}

// waiting returns the WaitingError of a preferred provider with no replica connected while its
// grace period lasts and something else would serve it; nil otherwise. The first call for a
// name starts its grace period.
func (r *Resolver) waiting(name string) *WaitingError {
	if r.PreferGrace <= 0 {
		return nil
	}
	fallback := r.fallbackOf(name)
	if fallback == "" {
		return nil // nothing else would serve it: the usual unknown-provider answer
	}
	now := r.now()
	r.mu.Lock()
	start, ok := r.graceStart[name]
	if !ok {
		if r.graceStart == nil {
			r.graceStart = map[string]time.Time{}
		}
		start = now
		r.graceStart[name] = start
	}
	r.mu.Unlock()
	if until := start.Add(r.PreferGrace); now.Before(until) {
		return &WaitingError{Provider: name, Until: until, Fallback: fallback}
	}
	return nil
}

// fallbackOf says what serves name when no dialled-in replica does: "driver endpoint",
// "compiled-in driver" or "".
func (r *Resolver) fallbackOf(name string) string {
	if r.Endpoints != nil && hasDriver(r.Endpoints, name) {
		return "driver endpoint"
	}
	if _, ok := Lookup(name); ok {
		return "compiled-in driver"
	}
	return ""
}

func (r *Resolver) now() time.Time {
	if r.Clock == nil {
		return time.Now()
	}
	return r.Clock.Now()
}

// ServedRemotely reports whether provider's classes go to dialled-in replicas now: one is
// connected and nothing earlier in the order serves the name.
func (r *Resolver) ServedRemotely(provider string) bool {
	name := Normalize(provider)
	return r.Remote != nil && hasDriver(r.Remote, name) && (r.prefersRemote(name) || r.fallbackOf(name) == "")
}

// RemoteChanged returns a channel closed when the dialled-in providers change, or nil when the
// Remote source cannot tell (or there is none).
func (r *Resolver) RemoteChanged() <-chan struct{} {
	if n, ok := r.Remote.(Notifier); ok {
		return n.Changed()
	}
	return nil
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
