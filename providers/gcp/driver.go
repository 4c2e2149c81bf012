// Package gcp is machinist's Google Cloud provider: it creates each machine as a Compute Engine
// instance (with its disks, made with it) through Google's Compute Engine Go client
// (google.golang.org/api/compute/v1, the client Gardener's provider uses) and authenticates with
// golang.org/x/oauth2 (a service account key, or workload identity).
//
// The provider spec and secret are Gardener's, so existing GCP MachineClasses work unchanged;
// README.md lists the fields, secret keys, tags and the IAM roles the service account needs.
package gcp

import (
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/kit"
)

// ProviderName is the provider's name; MachineClass.provider "GCP" selects it.
const ProviderName = "gcp"

// Options tune the driver. The zero value talks to Google's Compute Engine.
type Options struct {
	// Options are every provider's: Log, SpecMode, HTTPTransport (the Compute API's and the token
	// endpoints' requests; nil: kit.Transport trusting the secret's caCert when it has one),
	// MaxClientSets (default 32), OperationTimeout (default 20 minutes), CleanupTimeout (the
	// removal of what a failed create made; default 5 minutes) and PollInterval (the pause
	// between two waits on an operation, each held by Compute Engine until the operation is done
	// or about two minutes pass; default 1s).
	kit.Options
	// Retry paces the retries of rate-limited (rateLimitExceeded, 429) and failed (5xx)
	// requests; the zero value is 1s doubling to at most 30s, 5 retries.
	Retry wait.Backoff
	// TokenTimeout bounds one access token request; default 30s.
	TokenTimeout time.Duration
	// WorkloadIdentityTokenFile is the only file workload identity credentials may name as
	// their token's source; default Gardener's /var/run/secrets/gardener.cloud/workload-identity/token.
	WorkloadIdentityTokenFile string
	// Clock paces retries; nil is the real clock.
	Clock clock.Clock
}

// Driver manages Compute Engine instances. It is safe for concurrent use.
type Driver struct {
	driver.UnimplementedDriver // InitializeMachine: nothing to do after create on GCP

	opts  Options
	log   *slog.Logger
	cache *kit.Clients[*clientSet] // by a hash of the credentials
}

// open is the registry's factory of the GCP driver (register.go).
func open(o kit.Options, _ kit.Env) driver.Driver { return New(Options{Options: o}) }

// New returns a GCP driver. It does not contact Google: credentials arrive with each request.
func New(opts Options) *Driver {
	opts.Options = opts.WithDefaults(kit.Options{
		MaxClientSets: 32, OperationTimeout: 20 * time.Minute, CleanupTimeout: 5 * time.Minute, PollInterval: time.Second,
	})
	if opts.Retry.Steps <= 0 {
		opts.Retry = wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.1, Steps: 5, Cap: 30 * time.Second}
	}
	if opts.Retry.Cap <= 0 {
		opts.Retry.Cap = 30 * time.Second
	}
	if opts.TokenTimeout <= 0 {
		opts.TokenTimeout = defaultTokenTimeout
	}
	if opts.WorkloadIdentityTokenFile == "" {
		opts.WorkloadIdentityTokenFile = DefaultWorkloadIdentityTokenFile
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &Driver{opts: opts, log: opts.Logger(ProviderName), cache: kit.NewClients[*clientSet](opts.MaxClientSets)}
}

// prepare decodes the class and secret for p and returns the spec and the credential set's
// client.
func (d *Driver) prepare(class *v1alpha1.MachineClass, secret *corev1.Secret, p kit.Purpose) (*ProviderSpec, *clientSet, error) {
	spec, err := specs.DecodeFor(class, d.opts.SpecMode, p)
	if err != nil {
		return nil, nil, err
	}
	creds, err := credentialsFrom(secret, d.opts.WorkloadIdentityTokenFile)
	if err != nil {
		return nil, nil, err
	}
	cs, err := d.clients(creds)
	if err != nil {
		return nil, nil, err
	}
	return spec, cs, nil
}

var _ driver.Driver = (*Driver)(nil)
