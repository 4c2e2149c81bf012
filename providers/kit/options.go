package kit

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/registry"
)

// Options are the options every provider's driver takes, under the same names. A provider's own
// Options embed them (aws.Options{Options: kit.Options{Log: l}, MaxAttempts: 5}); a zero field
// takes the provider's default (WithDefaults).
type Options struct {
	// Log receives the driver's progress; nil uses slog.Default(). Secrets are never logged.
	Log *slog.Logger
	// SpecMode is how providerSpecs are decoded: driver.Lenient (the default) as Gardener's
	// provider of the cloud does, or driver.Strict.
	SpecMode driver.SpecMode
	// HTTPTransport carries every request the driver sends (the cloud's API and its token
	// endpoints); nil uses Transport with the TLS settings of the request's secret. A transport
	// set here is used as it is: the secret's TLS settings (CA bundle, client certificate) do not
	// apply to it.
	HTTPTransport http.RoundTripper
	// MaxClientSets is how many credential sets keep their SDK clients (Clients).
	MaxClientSets int
	// OperationTimeout bounds a call whose context has no deadline (Bound); 0 leaves it unbounded.
	OperationTimeout time.Duration
	// CleanupTimeout bounds the removal of what a failed create made, which runs even when the
	// caller's context is done.
	CleanupTimeout time.Duration
	// PollInterval is the wait between two reads of something the cloud is still doing.
	PollInterval time.Duration
}

// WithDefaults returns o with each zero (or negative) field taken from defaults, and Log set.
func (o Options) WithDefaults(defaults Options) Options {
	if o.Log == nil {
		o.Log = defaults.Log
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.HTTPTransport == nil {
		o.HTTPTransport = defaults.HTTPTransport
	}
	if o.MaxClientSets <= 0 {
		o.MaxClientSets = defaults.MaxClientSets
	}
	if o.OperationTimeout <= 0 {
		o.OperationTimeout = defaults.OperationTimeout
	}
	if o.CleanupTimeout <= 0 {
		o.CleanupTimeout = defaults.CleanupTimeout
	}
	if o.PollInterval <= 0 {
		o.PollInterval = defaults.PollInterval
	}
	return o
}

// Logger is the driver's logger: Log, every record carrying the provider's name.
func (o Options) Logger(provider string) *slog.Logger {
	log := o.Log
	if log == nil {
		log = slog.Default()
	}
	return log.With("provider", provider)
}

// Bound gives ctx the operation timeout when it has no deadline, so that no call waits on the
// cloud forever; the cancel function must be called.
func (o Options) Bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok || o.OperationTimeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, o.OperationTimeout)
}

// Cleanup is the context a failed create removes what it made in: it outlives ctx's cancellation
// (the removal must run even when the caller gave up) and ends after CleanupTimeout.
func (o Options) Cleanup(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), o.CleanupTimeout)
}

// Env is what a process offers its drivers (registry.Env), for the few providers that read more
// of it than FromEnv takes.
type Env = registry.Env

// FromEnv are the options a process gives every driver (registry.Env): its logger and spec mode.
func FromEnv(env registry.Env) Options {
	return Options{Log: env.Logger(), SpecMode: env.SpecMode}
}

// Register registers a provider built on the kit: open makes its driver from the options of the
// process (FromEnv) and, for what only some providers read, the process's env; check is its
// Registration.CheckSpec (Spec.Check).
func Register(name, description string, check func(*v1alpha1.MachineClass, driver.SpecMode) ([]driver.SpecWarning, error), open func(Options, Env) driver.Driver) {
	registry.Register(registry.Registration{
		Name:        name,
		Description: description,
		New:         func(env registry.Env) (driver.Driver, error) { return open(FromEnv(env), env), nil },
		CheckSpec:   check,
	})
}
