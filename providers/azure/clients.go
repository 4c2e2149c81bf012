package azure

import (
	"fmt"
	"net/http"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/cloud"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v8"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v9"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/resources/armresources/v3"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/kit"
)

// clientSet holds the ARM clients of one credential set. The clients share one credential, so
// its token cache is reused across calls.
type clientSet struct {
	vms       *armcompute.VirtualMachinesClient
	disks     *armcompute.DisksClient
	images    *armcompute.VirtualMachineImagesClient
	nics      *armnetwork.InterfacesClient
	subnets   *armnetwork.SubnetsClient
	resources *armresources.Client
}

// cloudConfig resolves the cloud: Options.Cloud, else the custom cloud of the secret, else the
// cloud the spec names (Gardener's cloudConfiguration.name), else Azure public. The name keys
// the client cache.
func (d *Driver) cloudConfig(spec *ProviderSpec, creds credentials) (cloud.Configuration, string, error) {
	if d.opts.Cloud != nil {
		return *d.opts.Cloud, "custom", nil
	}
	named := spec.CloudConfiguration != nil && spec.CloudConfiguration.Name != ""
	if creds.custom() {
		if named {
			return cloud.Configuration{}, "", driver.Errorf(driver.InvalidArgument,
				"azure: the secret names a custom cloud (%s) and providerSpec.cloudConfiguration.name names %s: remove one of them",
				data(KeyResourceManagerEndpoint), spec.CloudConfiguration.Name)
		}
		return cloud.Configuration{
			ActiveDirectoryAuthorityHost: creds.authorityHost,
			Services: map[cloud.ServiceName]cloud.ServiceConfiguration{
				cloud.ResourceManager: {Endpoint: creds.armEndpoint, Audience: creds.armAudience},
			},
		}, "custom", nil
	}
	name := CloudAzurePublic
	if named {
		name = spec.CloudConfiguration.Name
	}
	switch name {
	case CloudAzureChina:
		return cloud.AzureChina, name, nil
	case CloudAzureGovernment:
		return cloud.AzureGovernment, name, nil
	}
	return cloud.AzurePublic, CloudAzurePublic, nil
}

// clients returns the client set of a credential set, building it on first use.
func (d *Driver) clients(creds credentials, spec *ProviderSpec) (*clientSet, error) {
	cfg, cloudName, err := d.cloudConfig(spec, creds)
	if err != nil {
		return nil, err
	}
	return d.cache.Get(creds.hash(cloudName), func() (*clientSet, error) {
		set, err := d.newClientSet(creds, cfg)
		if err != nil {
			return nil, driver.Wrap(driver.InvalidArgument, err, "azure: set up the Azure clients")
		}
		return set, nil
	})
}

func (d *Driver) newClientSet(creds credentials, cfg cloud.Configuration) (*clientSet, error) {
	base, err := d.opts.Transport(kit.TLS{CACert: creds.caCert})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", data(KeyCACert), err)
	}
	transport := &http.Client{Transport: base}
	reach := &kit.Reach{}
	credOpts := policy.ClientOptions{
		Cloud:     cfg,
		Transport: &http.Client{Transport: reach.Watch(base)},
		Retry:     d.opts.Retry,
		Telemetry: policy.TelemetryOptions{ApplicationID: "machinist"},
	}
	// Instance discovery only knows Microsoft's clouds; a custom cloud has to skip it.
	customCloud := d.opts.Cloud != nil || creds.custom()
	var cred azcore.TokenCredential
	if creds.clientSecret != "" {
		cred, err = azidentity.NewClientSecretCredential(creds.tenantID, creds.clientID, creds.clientSecret,
			&azidentity.ClientSecretCredentialOptions{ClientOptions: credOpts, DisableInstanceDiscovery: customCloud})
	} else {
		cred, err = azidentity.NewWorkloadIdentityCredential(&azidentity.WorkloadIdentityCredentialOptions{
			ClientOptions: credOpts, ClientID: creds.clientID, TenantID: creds.tenantID, TokenFilePath: creds.tokenFile,
			DisableInstanceDiscovery: customCloud,
		})
	}
	if err != nil {
		return nil, fmt.Errorf("credential for client %s in tenant %s: %w", creds.clientID, creds.tenantID, err)
	}
	armOpts := &arm.ClientOptions{ClientOptions: policy.ClientOptions{
		Cloud:           cfg,
		Transport:       transport,
		Retry:           d.opts.Retry,
		Telemetry:       policy.TelemetryOptions{ApplicationID: "machinist"},
		PerCallPolicies: []policy.Policy{apiMetrics{}, loginPolicy{reach: reach}},
	}}
	factory, err := armcompute.NewClientFactory(creds.subscriptionID, cred, armOpts)
	if err != nil {
		return nil, err
	}
	network, err := armnetwork.NewClientFactory(creds.subscriptionID, cred, armOpts)
	if err != nil {
		return nil, err
	}
	resources, err := armresources.NewClient(creds.subscriptionID, cred, armOpts)
	if err != nil {
		return nil, err
	}
	return &clientSet{
		vms:       factory.NewVirtualMachinesClient(),
		disks:     factory.NewDisksClient(),
		images:    factory.NewVirtualMachineImagesClient(),
		nics:      network.NewInterfacesClient(),
		subnets:   network.NewSubnetsClient(),
		resources: resources,
	}, nil
}
