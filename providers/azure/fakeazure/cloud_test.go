package fakeazure_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v8"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v9"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/resources/armresources/v3"
	"k8s.io/utils/ptr"

	"github.com/machinist-io/machinist/providers/azure/fakeazure"
)

const (
	rg       = "shoot--dev--a"
	location = "westeurope"
	clientID = "app-1"
	secret   = "s3cr3t-value"
)

type clients struct {
	vms       *armcompute.VirtualMachinesClient
	nics      *armnetwork.InterfacesClient
	resources *armresources.Client
}

func setup(t *testing.T) (*fakeazure.Cloud, clients) {
	t.Helper()
	c := fakeazure.New(fakeazure.Options{})
	c.AddServicePrincipal(clientID, secret)
	c.AddResourceGroup(rg, location)
	c.AddSubnet(rg, "vnet", "nodes", "10.250.0.0/16")
	c.AddImage(location, "sap", "gardenlinux", "greatest", "1592.1.0", nil)
	opts := policy.ClientOptions{Cloud: c.Configuration(), Transport: c.Transport(), Retry: policy.RetryOptions{RetryDelay: time.Millisecond, MaxRetryDelay: 5 * time.Second}}
	cred, err := azidentity.NewClientSecretCredential(c.TenantID(), clientID, secret, &azidentity.ClientSecretCredentialOptions{ClientOptions: opts, DisableInstanceDiscovery: true})
	if err != nil {
		t.Fatal(err)
	}
	armOpts := &arm.ClientOptions{ClientOptions: opts}
	var cl clients
	if cl.vms, err = armcompute.NewVirtualMachinesClient(c.SubscriptionID(), cred, armOpts); err != nil {
		t.Fatal(err)
	}
	if cl.nics, err = armnetwork.NewInterfacesClient(c.SubscriptionID(), cred, armOpts); err != nil {
		t.Fatal(err)
	}
	if cl.resources, err = armresources.NewClient(c.SubscriptionID(), cred, armOpts); err != nil {
		t.Fatal(err)
	}
	return c, cl
}

func createNIC(t *testing.T, cl clients, c *fakeazure.Cloud, name string) string {
	t.Helper()
	subnetID := "/subscriptions/" + c.SubscriptionID() + "/resourceGroups/" + rg + "/providers/Microsoft.Network/virtualNetworks/vnet/subnets/nodes"
	p, err := cl.nics.BeginCreateOrUpdate(context.Background(), rg, name, armnetwork.Interface{
		Location: ptr.To(location),
		Tags:     map[string]*string{"kubernetes.io-cluster-a": ptr.To("1")},
		Properties: &armnetwork.InterfacePropertiesFormat{IPConfigurations: []*armnetwork.InterfaceIPConfiguration{{
			Name:       ptr.To("ipconfig1"),
			Properties: &armnetwork.InterfaceIPConfigurationPropertiesFormat{Subnet: &armnetwork.Subnet{ID: &subnetID}},
		}}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.PollUntilDone(context.Background(), &runtime.PollUntilDoneOptions{Frequency: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return *res.ID
}

func vmParams(nicID string) armcompute.VirtualMachine {
	return armcompute.VirtualMachine{
		Location: ptr.To(location),
		Tags:     map[string]*string{"kubernetes.io-cluster-a": ptr.To("1"), "kubernetes.io-role-node": ptr.To("1")},
		Properties: &armcompute.VirtualMachineProperties{
			HardwareProfile: &armcompute.HardwareProfile{VMSize: ptr.To(armcompute.VirtualMachineSizeTypes("Standard_D2s_v3"))},
			OSProfile:       &armcompute.OSProfile{AdminUsername: ptr.To("core"), ComputerName: ptr.To("vm"), CustomData: ptr.To("IyEvYmluL3NoCg==")},
			StorageProfile: &armcompute.StorageProfile{
				ImageReference: &armcompute.ImageReference{Publisher: ptr.To("sap"), Offer: ptr.To("gardenlinux"), SKU: ptr.To("greatest"), Version: ptr.To("1592.1.0")},
				OSDisk:         &armcompute.OSDisk{Name: ptr.To("vm-os-disk"), CreateOption: ptr.To(armcompute.DiskCreateOptionTypesFromImage), DeleteOption: ptr.To(armcompute.DiskDeleteOptionTypesDelete)},
			},
			NetworkProfile: &armcompute.NetworkProfile{NetworkInterfaces: []*armcompute.NetworkInterfaceReference{{
				ID:         &nicID,
				Properties: &armcompute.NetworkInterfaceReferenceProperties{Primary: ptr.To(true), DeleteOption: ptr.To(armcompute.DeleteOptionsDelete)},
			}}},
		},
	}
}

func TestLROPassesThroughCreatingAndCascadesDelete(t *testing.T) {
	c, cl := setup(t)
	nicID := createNIC(t, cl, c, "vm-nic")
	if nic, _ := c.NIC(rg, "vm-nic"); *nic.Properties.IPConfigurations[0].Properties.PrivateIPAddress != "10.250.0.4" {
		t.Errorf("first NIC address = %s, want 10.250.0.4 (Azure reserves the first four)", *nic.Properties.IPConfigurations[0].Properties.PrivateIPAddress)
	}
	ctx := context.Background()
	p, err := cl.vms.BeginCreateOrUpdate(ctx, rg, "vm", vmParams(nicID), nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := cl.vms.Get(ctx, rg, "vm", nil)
	if err != nil {
		t.Fatal(err)
	}
	if st := *got.Properties.ProvisioningState; st != fakeazure.StateCreating {
		t.Fatalf("state during the LRO = %s, want Creating", st)
	}
	if got.Properties.OSProfile.CustomData != nil {
		t.Error("GET returned customData; Azure never does")
	}
	res, err := p.PollUntilDone(ctx, &runtime.PollUntilDoneOptions{Frequency: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if st := *res.Properties.ProvisioningState; st != fakeazure.StateSucceeded {
		t.Fatalf("final state = %s", st)
	}
	if polls := len(c.Requests.For(fakeazure.OpCreateVM)); polls != 3 {
		t.Errorf("create requests = %d, want 1 initial + 2 polls", polls)
	}
	if d, ok := c.Disk(rg, "vm-os-disk"); !ok || d.ManagedBy == nil || len(d.Tags) != 0 {
		t.Fatalf("OS disk = %+v, want attached and untagged (implicit disks do not inherit VM tags)", d)
	}
	dp, err := cl.vms.BeginDelete(ctx, rg, "vm", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dp.PollUntilDone(ctx, &runtime.PollUntilDoneOptions{Frequency: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if left := c.Resources(); len(left) != 0 {
		t.Fatalf("cascade delete left %+v", left)
	}
}

func TestAllocationFailureLeavesFailedVMAndParsesLikeAzure(t *testing.T) {
	c, cl := setup(t)
	nicID := createNIC(t, cl, c, "vm-nic")
	c.FailNextAllocation("ZonalAllocationFailed")
	ctx := context.Background()
	p, err := cl.vms.BeginCreateOrUpdate(ctx, rg, "vm", vmParams(nicID), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.PollUntilDone(ctx, &runtime.PollUntilDoneOptions{Frequency: time.Millisecond})
	var re *azcore.ResponseError
	if !errors.As(err, &re) || re.ErrorCode != "ZonalAllocationFailed" {
		t.Fatalf("err = %v, want a ResponseError with code ZonalAllocationFailed", err)
	}
	if re.RawResponse.Header.Get("x-ms-request-id") == "" || !strings.Contains(err.Error(), "sufficient capacity") {
		t.Errorf("error lacks request id or message: %v", err)
	}
	vm, ok := c.VM(rg, "vm")
	if !ok || *vm.Properties.ProvisioningState != fakeazure.StateFailed {
		t.Fatalf("VM after failed allocation = %+v", vm)
	}
	if nic, _ := c.NIC(rg, "vm-nic"); nic.Properties.VirtualMachine == nil {
		t.Error("NIC of the failed VM is not attached")
	}
}

func TestThrottleHonoursRetryAfter(t *testing.T) {
	c, cl := setup(t)
	c.Faults.Inject(fakeazure.Throttle(fakeazure.OpGetVM, 2, 150*time.Millisecond))
	_, err := cl.vms.Get(context.Background(), rg, "missing", nil)
	var re *azcore.ResponseError
	if !errors.As(err, &re) || re.StatusCode != http.StatusNotFound {
		t.Fatalf("err = %v, want 404 after the throttling passed", err)
	}
	reqs := c.Requests.For(fakeazure.OpGetVM)
	if len(reqs) != 3 || reqs[0].Status != 429 || reqs[1].Status != 429 || reqs[2].Status != 404 {
		t.Fatalf("requests = %+v", reqs)
	}
	for i := 1; i < len(reqs); i++ {
		if gap := reqs[i].Time.Sub(reqs[i-1].Time); gap < 150*time.Millisecond {
			t.Errorf("retry %d came after %s, before Retry-After", i, gap)
		}
	}
}

func TestPagingAndTagFilter(t *testing.T) {
	c, cl := setup(t)
	for _, n := range []string{"a-nic", "b-nic", "c-nic"} {
		createNIC(t, cl, c, n)
	}
	c.PutNIC(rg, &armnetwork.Interface{Name: ptr.To("other-nic"), Location: ptr.To(location), Tags: map[string]*string{"kubernetes.io-cluster-b": ptr.To("1")}})
	ctx := context.Background()
	count := func(filter string) (n int, tagged bool) {
		pager := cl.resources.NewListByResourceGroupPager(rg, &armresources.ClientListByResourceGroupOptions{Filter: &filter})
		for pager.More() {
			page, err := pager.NextPage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range page.Value {
				n++
				tagged = tagged || r.Tags != nil
			}
		}
		return n, tagged
	}
	if n, tagged := count("tagName eq 'kubernetes.io-cluster-a'"); n != 3 || !tagged {
		t.Errorf("tagName filter: %d resources (tags returned %v), want 3 with tags", n, tagged)
	}
	if n, tagged := count("tagName eq 'kubernetes.io-cluster-b' and tagValue eq '1'"); n != 1 || tagged {
		t.Errorf("tagName+tagValue filter: %d resources (tags returned %v), want 1 without tags", n, tagged)
	}
	// Abandon a pager after its first page: the next list starts from the beginning.
	pager := cl.nics.NewListPager(rg, nil)
	if _, err := pager.NextPage(ctx); err != nil {
		t.Fatal(err)
	}
	total := 0
	pager = cl.nics.NewListPager(rg, nil)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		total += len(page.Value)
	}
	if total != 4 {
		t.Errorf("listed %d NICs after an abandoned pager, want 4", total)
	}
}

func TestWrongSecretIsRejectedByTheTokenEndpoint(t *testing.T) {
	c := fakeazure.New(fakeazure.Options{})
	c.AddServicePrincipal(clientID, secret)
	c.AddResourceGroup(rg, location)
	opts := policy.ClientOptions{Cloud: c.Configuration(), Transport: c.Transport()}
	cred, err := azidentity.NewClientSecretCredential(c.TenantID(), clientID, "wrong-secret", &azidentity.ClientSecretCredentialOptions{ClientOptions: opts, DisableInstanceDiscovery: true})
	if err != nil {
		t.Fatal(err)
	}
	vms, err := armcompute.NewVirtualMachinesClient(c.SubscriptionID(), cred, &arm.ClientOptions{ClientOptions: opts})
	if err != nil {
		t.Fatal(err)
	}
	_, err = vms.Get(context.Background(), rg, "vm", nil)
	var af *azidentity.AuthenticationFailedError
	if !errors.As(err, &af) || !strings.Contains(err.Error(), "AADSTS7000215") {
		t.Fatalf("err = %v, want an AuthenticationFailedError with AADSTS7000215", err)
	}
	if strings.Contains(err.Error(), "wrong-secret") {
		t.Error("the error shows the client secret")
	}
}
