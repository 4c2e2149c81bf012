// Package fakeazure is a stateful fake of Azure for tests: Azure Resource Manager (resource groups,
// VMs, managed disks, NICs, subnets, marketplace images, generic resource listing by tag) and the
// Microsoft Entra ID token endpoint that azidentity talks to.
//
// It is built on the SDK's own fake servers (armcompute/v8/fake, armnetwork/v9/fake,
// armresources/v3/fake): the Cloud implements their handler functions over shared state, and its
// Transport plugs into the real SDK clients through ClientOptions.Transport, so the real pipeline
// runs: bearer-token authentication through azidentity, the retry policy with Retry-After, LRO
// pollers, pagers and ARM error parsing. Long-running operations pass through in-progress states
// (provisioningState Creating/Deleting) before they complete. Every response carries an
// x-ms-request-id. Faults are switched on per operation (Inject, SetCoreQuota,
// SetSkuUnavailable, FailNextAllocation, SetLROPolls) and every request is counted with its time
// (Requests), so tests can check that Retry-After was honoured.
//
// In tests nothing leaves the process: the endpoints use the reserved .test domain and are
// answered by the Transport itself. Cloud.Serve puts the same cloud behind an HTTPS listener
// (`machinist fakecloud azure`), with a CA of its own, for clients that talk to a custom cloud.
package fakeazure

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/cloud"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v8"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v9"

	"k8s.io/utils/ptr"

	"github.com/machinist-io/machinist/providers/kit/fakekit"
)

// Endpoints of the fake cloud. They are in the reserved .test domain, so a client that is not
// wired to the Transport fails to resolve them instead of reaching a real service.
const (
	LoginHost = "login.fakeazure.test"
	ARMHost   = "management.fakeazure.test"
)

// Default identities of a new Cloud.
const (
	DefaultTenantID       = "72f988bf-0000-4000-8000-00000000cafe"
	DefaultSubscriptionID = "00000000-0000-4000-8000-0000000000a1"
)

// Operation names (the SDK's API names) for fault injection and request counting.
const (
	OpCreateVM       = "VirtualMachinesClient.BeginCreateOrUpdate"
	OpGetVM          = "VirtualMachinesClient.Get"
	OpUpdateVM       = "VirtualMachinesClient.BeginUpdate"
	OpDeleteVM       = "VirtualMachinesClient.BeginDelete"
	OpListVMs        = "VirtualMachinesClient.NewListPager"
	OpCreateDisk     = "DisksClient.BeginCreateOrUpdate"
	OpGetDisk        = "DisksClient.Get"
	OpUpdateDisk     = "DisksClient.BeginUpdate"
	OpDeleteDisk     = "DisksClient.BeginDelete"
	OpListDisks      = "DisksClient.NewListByResourceGroupPager"
	OpGetImage       = "VirtualMachineImagesClient.Get"
	OpListImages     = "VirtualMachineImagesClient.List"
	OpCreateNIC      = "InterfacesClient.BeginCreateOrUpdate"
	OpGetNIC         = "InterfacesClient.Get"
	OpDeleteNIC      = "InterfacesClient.BeginDelete"
	OpListNICs       = "InterfacesClient.NewListPager"
	OpGetSubnet      = "SubnetsClient.Get"
	OpListResources  = "Client.NewListByResourceGroupPager"
	OpGetGroup       = "ResourceGroupsClient.Get"
	OpCheckGroup     = "ResourceGroupsClient.CheckExistence"
	OpCreateGroup    = "ResourceGroupsClient.CreateOrUpdate"
	OpDeleteGroup    = "ResourceGroupsClient.BeginDelete"
	OpToken          = "token"
	OpOpenIDMetadata = "openid-configuration"
)

// Provisioning states the fake reports.
const (
	StateCreating  = "Creating"
	StateUpdating  = "Updating"
	StateDeleting  = "Deleting"
	StateSucceeded = "Succeeded"
	StateFailed    = "Failed"
)

// Cloud is one fake Azure tenant with one subscription. Create it with New; the zero value is not
// usable. All methods are safe for concurrent use. Microsoft Entra ID and Resource Manager's
// compute, network and resources providers are each a type of their own over the shared state.
type Cloud struct {
	// Faults are the injected faults (fakekit.Faults: Inject, Clear, Hits).
	Faults fakekit.Faults[Fault]
	// Requests are the requests the cloud answered (fakekit.Journal: All, For, Len, Reset).
	Requests fakekit.Journal[Request]

	st        *state
	login     loginAPI
	compute   computeAPI
	network   networkAPI
	resources resourcesAPI
	transport *Transport
}

// Options configure a cloud. The zero value is ready to use.
type Options struct{}

// Microsoft Entra ID and Resource Manager's providers, over the shared state.
type (
	loginAPI struct {
		*state
		faults *fakekit.Faults[Fault]
	}
	computeAPI   struct{ *state }
	networkAPI   struct{ *state }
	resourcesAPI struct{ *state }
)

// state is what the services share, under one lock.
type state struct {
	tenantID       string
	subscriptionID string

	mu         sync.Mutex
	principals map[string]*principal // by client ID
	tokens     map[string]string     // access token -> client ID
	// audiences are the ARM audiences the token endpoint accepts besides https://ARMHost: the
	// URLs the cloud is served at (Serve).
	audiences []string
	groups    map[string]*group // by lower-case name
	subnets   map[string]*armnetwork.Subnet
	vms       map[string]*armcompute.VirtualMachine // by lower-case "rg/name"
	nics      map[string]*armnetwork.Interface
	disks     map[string]*armcompute.Disk
	images    map[string]*armcompute.VirtualMachineImage // by lower-case "location/publisher/offer/sku/version"
	quota     map[string]int                             // location -> regional vCPU limit
	skuOff    map[string]bool                            // "location/size/zone" ("" zone = whole location)
	allocFail []string                                   // codes for the next VM creations' LROs
	lroPolls  int
	opPolls   map[string]int // per-operation override of lroPolls
	pageSize  int
	lros      map[string]*lro          // pending LRO completions by lower-case resource path
	pending   map[string]pendingPoller // LROs whose client stopped polling
	pagers    map[string]pendingPager  // pagers whose client stopped paging
	nextIP    map[string]int
	seq       int
}

type principal struct {
	clientID  string
	secret    string
	assertion string
	objectID  string
}

type group struct {
	name     string
	location string
}

// New returns an empty cloud with the default tenant and subscription, LROs that report two
// in-progress polls, and list pages of two items (so paging is exercised).
func New(Options) *Cloud {
	st := &state{
		tenantID:       DefaultTenantID,
		subscriptionID: DefaultSubscriptionID,
		principals:     map[string]*principal{},
		tokens:         map[string]string{},
		groups:         map[string]*group{},
		subnets:        map[string]*armnetwork.Subnet{},
		vms:            map[string]*armcompute.VirtualMachine{},
		nics:           map[string]*armnetwork.Interface{},
		disks:          map[string]*armcompute.Disk{},
		images:         map[string]*armcompute.VirtualMachineImage{},
		quota:          map[string]int{},
		skuOff:         map[string]bool{},
		lroPolls:       2,
		opPolls:        map[string]int{},
		pageSize:       2,
		lros:           map[string]*lro{},
		pending:        map[string]pendingPoller{},
		pagers:         map[string]pendingPager{},
		nextIP:         map[string]int{},
	}
	c := &Cloud{st: st, compute: computeAPI{st}, network: networkAPI{st}, resources: resourcesAPI{st}}
	c.login = loginAPI{state: st, faults: &c.Faults}
	c.transport = newTransport(c)
	return c
}

// TenantID is the cloud's tenant.
func (c *Cloud) TenantID() string { return c.st.tenantID }

// SubscriptionID is the cloud's only subscription.
func (c *Cloud) SubscriptionID() string { return c.st.subscriptionID }

// Configuration is the cloud configuration for azidentity and the ARM clients: the fake's login
// and management endpoints.
func (c *Cloud) Configuration() cloud.Configuration {
	return cloud.Configuration{
		ActiveDirectoryAuthorityHost: "https://" + LoginHost + "/",
		Services: map[cloud.ServiceName]cloud.ServiceConfiguration{
			cloud.ResourceManager: {Endpoint: "https://" + ARMHost, Audience: "https://" + ARMHost},
		},
	}
}

// Transport is the policy.Transporter to put in the SDK clients' options.
func (c *Cloud) Transport() *Transport { return c.transport }

// AddServicePrincipal registers an application that authenticates with a client secret and has
// Contributor on the subscription.
func (c *Cloud) AddServicePrincipal(clientID, secret string) {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	c.st.principals[clientID] = &principal{clientID: clientID, secret: secret, objectID: c.st.newID()}
}

// AddFederatedPrincipal registers an application that authenticates with a federated client
// assertion (workload identity): a token request must present exactly this assertion.
func (c *Cloud) AddFederatedPrincipal(clientID, assertion string) {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	c.st.principals[clientID] = &principal{clientID: clientID, assertion: assertion, objectID: c.st.newID()}
}

// AddResourceGroup creates a resource group.
func (c *Cloud) AddResourceGroup(name, location string) {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	c.st.groups[strings.ToLower(name)] = &group{name: name, location: location}
}

// DeleteResourceGroup removes a resource group and everything in it.
func (c *Cloud) DeleteResourceGroup(name string) {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	c.st.deleteGroupLocked(name)
}

func (c *state) deleteGroupLocked(name string) {
	rg := strings.ToLower(name)
	delete(c.groups, rg)
	for k := range c.vms {
		if strings.HasPrefix(k, rg+"/") {
			delete(c.vms, k)
		}
	}
	for k := range c.nics {
		if strings.HasPrefix(k, rg+"/") {
			delete(c.nics, k)
		}
	}
	for k := range c.disks {
		if strings.HasPrefix(k, rg+"/") {
			delete(c.disks, k)
		}
	}
	for k := range c.subnets {
		if strings.HasPrefix(k, rg+"/") {
			delete(c.subnets, k)
		}
	}
}

// AddSubnet creates a virtual network subnet with an IPv4 prefix like "10.250.0.0/16"; NICs in it
// get addresses from the prefix.
func (c *Cloud) AddSubnet(resourceGroup, vnet, subnet, prefix string) {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	id := fmt.Sprintf("/subscriptions/%s/resourceGroups/%s/providers/Microsoft.Network/virtualNetworks/%s/subnets/%s", c.st.subscriptionID, resourceGroup, vnet, subnet)
	state := armnetwork.ProvisioningStateSucceeded
	c.st.subnets[subnetKey(resourceGroup, vnet, subnet)] = &armnetwork.Subnet{
		ID:   &id,
		Name: &subnet,
		Type: ptr.To("Microsoft.Network/virtualNetworks/subnets"),
		Properties: &armnetwork.SubnetPropertiesFormat{
			AddressPrefix:     &prefix,
			ProvisioningState: &state,
		},
	}
}

// AddImage publishes a marketplace image version in a location. A non-nil plan makes it an image
// that VMs must name in their plan.
func (c *Cloud) AddImage(location, publisher, offer, sku, version string, plan *armcompute.PurchasePlan) {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	id := fmt.Sprintf("/Subscriptions/%s/Providers/Microsoft.Compute/Locations/%s/Publishers/%s/ArtifactTypes/VMImage/Offers/%s/Skus/%s/Versions/%s",
		c.st.subscriptionID, location, publisher, offer, sku, version)
	c.st.images[imageKey(location, publisher, offer, sku, version)] = &armcompute.VirtualMachineImage{
		ID:         &id,
		Name:       ptr.To(version),
		Location:   ptr.To(location),
		Properties: &armcompute.VirtualMachineImageProperties{Plan: plan},
	}
}

// SetCoreQuota limits the total vCPUs of the VMs in a location; 0 removes the limit. A VM that
// would exceed it is refused with OperationNotAllowed, as Microsoft.Compute does.
func (c *Cloud) SetCoreQuota(location string, cores int) {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	c.st.quota[strings.ToLower(location)] = cores
}

// SetSkuUnavailable makes a VM size unavailable in a location (no zones) or in the given zones;
// VM creation answers SkuNotAvailable.
func (c *Cloud) SetSkuUnavailable(location, size string, zones ...string) {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	if len(zones) == 0 {
		zones = []string{""}
	}
	for _, z := range zones {
		c.st.skuOff[strings.ToLower(location+"/"+size+"/"+z)] = true
	}
}

// FailNextAllocation makes the LRO of the next VM creation fail with code (ZonalAllocationFailed,
// AllocationFailed, ...): the VM is left in provisioningState Failed with its NIC and OS disk,
// as Azure does. Calls queue up.
func (c *Cloud) FailNextAllocation(code string) {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	c.st.allocFail = append(c.st.allocFail, code)
}

// SetLROPolls sets how many in-progress answers a long-running operation gives before it
// completes. A large number makes LROs slow.
func (c *Cloud) SetLROPolls(n int) { fakekit.Set(&c.st.mu, &c.st.lroPolls, n) }

// SetLROPollsFor sets the in-progress answers of one operation's LROs (OpCreateVM, ...),
// overriding SetLROPolls for it.
func (c *Cloud) SetLROPollsFor(op string, n int) {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	c.st.opPolls[op] = n
}

// polls is the number of in-progress answers of op's LROs. Callers hold c.mu.
func (c *state) polls(op string) int {
	if n, ok := c.opPolls[op]; ok {
		return n
	}
	return c.lroPolls
}

// SetPageSize sets how many items a list page holds.
func (c *Cloud) SetPageSize(n int) {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	if n < 1 {
		n = 1
	}
	c.st.pageSize = n
}

// Resource is a summary of one stored resource for assertions.
type Resource struct {
	Type              string // "vm", "nic" or "disk"
	ResourceGroup     string
	Name              string
	ProvisioningState string
	Tags              map[string]string
	// AttachedTo is the VM a NIC or disk is attached to ("" when free).
	AttachedTo string
}

// Resources lists every VM, NIC and disk, sorted by type and name.
func (c *Cloud) Resources() []Resource {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	var out []Resource
	for k, vm := range c.st.vms {
		out = append(out, Resource{Type: "vm", ResourceGroup: rgOf(k), Name: deref(vm.Name), ProvisioningState: deref(vm.Properties.ProvisioningState), Tags: flatTags(vm.Tags)})
	}
	for k, nic := range c.st.nics {
		r := Resource{Type: "nic", ResourceGroup: rgOf(k), Name: deref(nic.Name), Tags: flatTags(nic.Tags)}
		if nic.Properties.ProvisioningState != nil {
			r.ProvisioningState = string(*nic.Properties.ProvisioningState)
		}
		if nic.Properties.VirtualMachine != nil {
			r.AttachedTo = lastSegment(deref(nic.Properties.VirtualMachine.ID))
		}
		out = append(out, r)
	}
	for k, d := range c.st.disks {
		out = append(out, Resource{Type: "disk", ResourceGroup: rgOf(k), Name: deref(d.Name), ProvisioningState: deref(d.Properties.ProvisioningState), Tags: flatTags(d.Tags), AttachedTo: lastSegment(deref(d.ManagedBy))})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Type != out[j].Type {
			return out[i].Type < out[j].Type
		}
		return strings.ToLower(out[i].Name) < strings.ToLower(out[j].Name)
	})
	return out
}

// VM returns a copy of a stored VM.
func (c *Cloud) VM(resourceGroup, name string) (*armcompute.VirtualMachine, bool) {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	vm, ok := c.st.vms[key(resourceGroup, name)]
	if !ok {
		return nil, false
	}
	return clone(vm), true
}

// NIC returns a copy of a stored network interface.
func (c *Cloud) NIC(resourceGroup, name string) (*armnetwork.Interface, bool) {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	nic, ok := c.st.nics[key(resourceGroup, name)]
	if !ok {
		return nil, false
	}
	return clone(nic), true
}

// Disk returns a copy of a stored managed disk.
func (c *Cloud) Disk(resourceGroup, name string) (*armcompute.Disk, bool) {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	d, ok := c.st.disks[key(resourceGroup, name)]
	if !ok {
		return nil, false
	}
	return clone(d), true
}

// PutVM stores a VM as if someone else had created it (with its provisioningState as given, or
// Succeeded). It is how tests place foreign or half-made machines.
func (c *Cloud) PutVM(resourceGroup string, vm *armcompute.VirtualMachine) {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	vm = clone(vm)
	name := deref(vm.Name)
	vm.ID = ptr.To(c.st.resourceID(resourceGroup, "Microsoft.Compute/virtualMachines", name))
	vm.Type = ptr.To("Microsoft.Compute/virtualMachines")
	if vm.Properties == nil {
		vm.Properties = &armcompute.VirtualMachineProperties{}
	}
	if vm.Properties.ProvisioningState == nil {
		vm.Properties.ProvisioningState = ptr.To(StateSucceeded)
	}
	c.st.vms[key(resourceGroup, name)] = vm
}

// PutNIC stores a network interface as if someone else had created it.
func (c *Cloud) PutNIC(resourceGroup string, nic *armnetwork.Interface) {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	nic = clone(nic)
	nic.ID = ptr.To(c.st.resourceID(resourceGroup, "Microsoft.Network/networkInterfaces", deref(nic.Name)))
	nic.Type = ptr.To("Microsoft.Network/networkInterfaces")
	if nic.Properties == nil {
		nic.Properties = &armnetwork.InterfacePropertiesFormat{}
	}
	st := armnetwork.ProvisioningStateSucceeded
	nic.Properties.ProvisioningState = &st
	c.st.nics[key(resourceGroup, deref(nic.Name))] = nic
}

// PutDisk stores a managed disk as if someone else had created it.
func (c *Cloud) PutDisk(resourceGroup string, d *armcompute.Disk) {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	d = clone(d)
	d.ID = ptr.To(c.st.resourceID(resourceGroup, "Microsoft.Compute/disks", deref(d.Name)))
	d.Type = ptr.To("Microsoft.Compute/disks")
	if d.Properties == nil {
		d.Properties = &armcompute.DiskProperties{}
	}
	d.Properties.ProvisioningState = ptr.To(StateSucceeded)
	c.st.disks[key(resourceGroup, deref(d.Name))] = d
}

// Settle completes every long-running operation a client stopped polling, as Azure would in the
// background.
func (c *Cloud) Settle() {
	c.transport.settle()
}

// newID returns a fresh GUID-shaped identifier. Callers hold c.mu.
func (c *state) newID() string {
	c.seq++
	return fmt.Sprintf("%08x-0000-4000-8000-%012x", time.Now().UnixNano()&0xffffffff, c.seq)
}

func (c *state) resourceID(rg, typ, name string) string {
	return fmt.Sprintf("/subscriptions/%s/resourceGroups/%s/providers/%s/%s", c.subscriptionID, rg, typ, name)
}

func key(rg, name string) string { return strings.ToLower(rg + "/" + name) }

func subnetKey(rg, vnet, subnet string) string {
	return strings.ToLower(rg + "/" + vnet + "/" + subnet)
}

func imageKey(location, publisher, offer, sku, version string) string {
	return strings.ToLower(strings.Join([]string{location, publisher, offer, sku, version}, "/"))
}

func rgOf(k string) string { rg, _, _ := strings.Cut(k, "/"); return rg }

func lastSegment(id string) string {
	if i := strings.LastIndex(id, "/"); i >= 0 {
		return id[i+1:]
	}
	return id
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func flatTags(tags map[string]*string) map[string]string {
	out := make(map[string]string, len(tags))
	for k, v := range tags {
		out[k] = deref(v)
	}
	return out
}

// clone deep-copies an SDK model through its JSON form, so stored state never aliases what a
// handler hands to the SDK fake or a test.
func clone[T any](v *T) *T {
	if v == nil {
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("fakeazure: clone %T: %v", v, err))
	}
	out := new(T)
	if err := json.Unmarshal(b, out); err != nil {
		panic(fmt.Sprintf("fakeazure: clone %T: %v", v, err))
	}
	return out
}
