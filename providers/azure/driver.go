// Package azure is machinist's Azure provider: it creates each machine as an Azure VM with its own
// NIC and managed disks through the Azure SDK for Go (azcore, armcompute, armnetwork,
// armresources) and authenticates with azidentity (client secret or workload identity).
//
// The provider spec and secret are Gardener's, so existing Azure MachineClasses work unchanged;
// README.md lists the fields, secret keys, tags and the role the service principal needs.
package azure

import (
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
	// Options are every provider's: Log, SpecMode, HTTPTransport (the SDK's HTTP requests, to
	// Microsoft Entra ID and Resource Manager; nil: kit.Transport trusting the secret's caCert
	// when it has one; tests put fakeazure's transport here), MaxClientSets (default 32),
	// OperationTimeout (default 20 minutes), CleanupTimeout (the removal of what a failed create
	// made; default 5 minutes) and PollInterval (the wait between polls of a long-running
	// operation when Azure sends no Retry-After; default 5s; outside tests the SDK requires at
	// least one second).
	kit.Options
	// Cloud, when set, replaces the cloud named in the spec (private clouds, tests). Instance
	// discovery is skipped for it.
	Cloud *cloud.Configuration
	// Retry configures the SDK's retry policy (429 and 5xx, honouring Retry-After); the zero value
	// keeps the SDK's defaults: 3 retries, Retry-After up to 60s.
	Retry policy.RetryOptions
}

// Driver manages Azure VMs. It is safe for concurrent use.
type Driver struct {
	driver.UnimplementedDriver // InitializeMachine: nothing to do after create on Azure

	opts  Options
	log   *slog.Logger
	cache *kit.Clients[*clientSet] // by a hash of the credentials and the cloud
}

// open is the registry's factory of the Azure driver (register.go).
func open(o kit.Options, _ kit.Env) driver.Driver { return New(Options{Options: o}) }

// New returns an Azure driver. It does not contact Azure: credentials arrive with each request.
func New(opts Options) *Driver {
	opts.Options = opts.WithDefaults(kit.Options{
		MaxClientSets: 32, OperationTimeout: 20 * time.Minute, CleanupTimeout: 5 * time.Minute, PollInterval: 5 * time.Second,
	})
	return &Driver{opts: opts, log: opts.Logger(ProviderName), cache: kit.NewClients[*clientSet](opts.MaxClientSets)}
}

// prepare decodes the class and secret and returns the spec and the credential set's clients.
func (d *Driver) prepare(class *v1alpha1.MachineClass, secret *corev1.Secret) (*ProviderSpec, *clientSet, error) {
	spec, _, err := specs.Decode(class, d.opts.SpecMode)
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
