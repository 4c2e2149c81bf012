// Package azure is machinist's Azure provider: it creates each machine as an Azure VM with its own
// NIC and managed disks through the Azure SDK for Go (azcore, armcompute, armnetwork,
// armresources) and authenticates with azidentity (client secret or workload identity).
//
// The provider spec and secret are Gardener's, so existing Azure MachineClasses work unchanged;
// README.md lists the fields, secret keys, tags and the role the service principal needs.
package azure

import (
	"context"
	"log/slog"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/cloud"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/kit"
)

// ProviderName is the provider's registry name; MachineClass.provider "Azure" selects it.
const ProviderName = "azure"

// Options tune the driver. The zero value talks to the real Azure clouds.
type Options struct {
	// Transport carries the SDK's HTTP requests; nil uses the SDK's default HTTP client. Tests put
	// fakeazure's transport here.
	Transport policy.Transporter
	// Cloud, when set, replaces the cloud named in the spec (private clouds, tests). Instance
	// discovery is skipped for it.
	Cloud *cloud.Configuration
	// PollInterval is the wait between polls of a long-running operation when Azure sends no
	// Retry-After; default 5s. Outside tests the SDK requires at least one second.
	PollInterval time.Duration
	// OperationTimeout bounds a call whose context has no deadline; default 20 minutes.
	OperationTimeout time.Duration
	// CleanupTimeout bounds the removal of what a failed create made, which runs even when the
	// caller's context is done; default 5 minutes.
	CleanupTimeout time.Duration
	// Retry configures the SDK's retry policy (429 and 5xx, honouring Retry-After); the zero value
	// keeps the SDK's defaults: 3 retries, Retry-After up to 60s.
	Retry policy.RetryOptions
	// MaxClientSets is how many credential sets keep their clients; default 32.
	MaxClientSets int
	// Log receives progress; nil uses slog.Default(). Secrets are never logged.
	Log *slog.Logger
	// SpecMode is how providerSpecs are decoded: driver.Lenient (default) as Gardener's provider
	// does, or driver.Strict.
	SpecMode driver.SpecMode
}

// Driver manages Azure VMs. It is safe for concurrent use.
type Driver struct {
	driver.UnimplementedDriver // InitializeMachine: nothing to do after create on Azure

	opts  Options
	log   *slog.Logger
	cache *kit.Clients[*clientSet] // by a hash of the credentials and the cloud
}

// New returns an Azure driver. It does not contact Azure: credentials arrive with each request.
func New(opts Options) *Driver {
	if opts.PollInterval <= 0 {
		opts.PollInterval = 5 * time.Second
	}
	if opts.OperationTimeout <= 0 {
		opts.OperationTimeout = 20 * time.Minute
	}
	if opts.CleanupTimeout <= 0 {
		opts.CleanupTimeout = 5 * time.Minute
	}
	if opts.MaxClientSets <= 0 {
		opts.MaxClientSets = 32
	}
	log := opts.Log
	if log == nil {
		log = slog.Default()
	}
	return &Driver{opts: opts, log: log.With("provider", ProviderName), cache: kit.NewClients[*clientSet](opts.MaxClientSets)}
}

// prepare decodes the class and secret and returns the spec and the credential set's clients.
func (d *Driver) prepare(class *v1alpha1.MachineClass, secret *corev1.Secret) (*ProviderSpec, *clientSet, error) {
	spec, _, err := decodeSpec(class, d.opts.SpecMode)
	if err != nil {
		return nil, nil, err
	}
	creds, err := credentialsFrom(secret)
	if err != nil {
		return nil, nil, err
	}
	cs, err := d.clients(creds, spec)
	if err != nil {
		return nil, nil, err
	}
	return spec, cs, nil
}

// bound gives ctx the operation timeout when it has no deadline, so no LRO polls forever.
func (d *Driver) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d.opts.OperationTimeout)
}

func (d *Driver) pollOptions() *runtime.PollUntilDoneOptions {
	return &runtime.PollUntilDoneOptions{Frequency: d.opts.PollInterval}
}

// owns reports whether tags carry every cluster and role tag of the spec (with its value).
func owns(spec *ProviderSpec, tags map[string]*string) bool {
	for _, k := range spec.scopeTags() {
		v, ok := lookupTag(tags, k)
		if !ok || v != spec.Tags[k] {
			return false
		}
	}
	return true
}

// foreignCluster reports whether tags name a cluster other than the spec's.
func foreignCluster(spec *ProviderSpec, tags map[string]*string) bool {
	for k := range tags {
		if hasPrefixFold(k, ClusterTagPrefix) {
			if _, ours := spec.Tags[k]; !ours {
				return true
			}
		}
	}
	return false
}

func lookupTag(tags map[string]*string, key string) (string, bool) {
	for k, v := range tags {
		if k == key || (len(k) == len(key) && hasPrefixFold(k, key)) {
			if v == nil {
				return "", true
			}
			return *v, true
		}
	}
	return "", false
}

func azureTags(tags map[string]string) map[string]*string {
	out := make(map[string]*string, len(tags))
	for k, v := range tags {
		out[k] = ptr.To(v)
	}
	return out
}

var _ driver.Driver = (*Driver)(nil)
