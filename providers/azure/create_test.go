package azure

import (
	"context"
	"encoding/base64"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v8"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v9"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/azure/fakeazure"
)

func TestCreateMakesTaggedNICDisksAndACascadingVM(t *testing.T) {
	e := newTestEnv(t)
	resp := e.mustCreate(t, "shoot--dev--alpha-worker-a-z1-5f7c9-abcde")
	name := "shoot--dev--alpha-worker-a-z1-5f7c9-abcde"
	if want := "azure:///westeurope/" + name; resp.ProviderID != want || resp.NodeName != name {
		t.Fatalf("response = %+v, want ProviderID %s and NodeName %s", resp, want, name)
	}
	if len(resp.Addresses) != 2 || resp.Addresses[0].Type != corev1.NodeInternalIP || resp.Addresses[0].Address != "10.250.0.4" {
		t.Errorf("addresses = %+v, want the NIC's private IP and the host name", resp.Addresses)
	}

	vm, ok := e.cloud.VM(testRG, name)
	if !ok {
		t.Fatal("no VM in the cloud")
	}
	p := vm.Properties
	if got := ptr.Deref(p.ProvisioningState, ""); got != fakeazure.StateSucceeded {
		t.Errorf("VM provisioningState = %s", got)
	}
	if got, _ := base64.StdEncoding.DecodeString(ptr.Deref(p.OSProfile.CustomData, "")); string(got) != testUserData {
		t.Errorf("customData decodes to %q, want the secret's userData", got)
	}
	if ptr.Deref(p.OSProfile.ComputerName, "") != name || ptr.Deref(p.OSProfile.AdminUsername, "") != "core" {
		t.Errorf("osProfile = %+v", p.OSProfile)
	}
	if keys := p.OSProfile.LinuxConfiguration.SSH.PublicKeys; len(keys) != 1 || !strings.HasPrefix(ptr.Deref(keys[0].KeyData, ""), "ssh-ed25519") {
		t.Errorf("ssh keys = %+v", keys)
	}
	if len(vm.Zones) != 1 || ptr.Deref(vm.Zones[0], "") != "1" {
		t.Errorf("zones = %v, want [1]", vm.Zones)
	}
	img := p.StorageProfile.ImageReference
	if ptr.Deref(img.Publisher, "") != "sap" || ptr.Deref(img.Version, "") != "1592.1.0" {
		t.Errorf("image = %+v", img)
	}
	os := p.StorageProfile.OSDisk
	if ptr.Deref(os.Name, "") != name+"-os-disk" || ptr.Deref(os.DeleteOption, "") != armcompute.DiskDeleteOptionTypesDelete || ptr.Deref(os.DiskSizeGB, 0) != 50 {
		t.Errorf("OS disk = %+v, want %s-os-disk, 50 GiB, deleted with the VM", os, name)
	}
	if dd := p.StorageProfile.DataDisks; len(dd) != 1 || ptr.Deref(dd[0].Name, "") != name+"-kubelet-0-data-disk" || ptr.Deref(dd[0].DeleteOption, "") != armcompute.DiskDeleteOptionTypesDelete {
		t.Errorf("data disks = %+v, want %s-kubelet-0-data-disk deleted with the VM", dd, name)
	}
	nicRef := p.NetworkProfile.NetworkInterfaces[0]
	if lastSegment(ptr.Deref(nicRef.ID, "")) != name+"-nic" || ptr.Deref(nicRef.Properties.DeleteOption, "") != armcompute.DeleteOptionsDelete {
		t.Errorf("NIC reference = %+v, want %s-nic deleted with the VM", nicRef, name)
	}
	nic, _ := e.cloud.NIC(testRG, name+"-nic")
	if !ptr.Deref(nic.Properties.EnableAcceleratedNetworking, false) || !ptr.Deref(nic.Properties.EnableIPForwarding, false) {
		t.Errorf("NIC accelerated networking / IP forwarding = %v / %v, want true / true", nic.Properties.EnableAcceleratedNetworking, nic.Properties.EnableIPForwarding)
	}
	if got := ptr.Deref(nic.Properties.IPConfigurations[0].Properties.PrivateIPAllocationMethod, ""); got != armnetwork.IPAllocationMethodDynamic {
		t.Errorf("private IP allocation = %s", got)
	}
	for _, r := range e.resourcesOf(name) {
		if r.Tags[clusterTag] != "1" || r.Tags["kubernetes.io-role-node"] != "1" || r.Tags["worker.gardener.cloud_pool"] != "worker-a" {
			t.Errorf("%s %s tags = %v, want the class's tags", r.Type, r.Name, r.Tags)
		}
	}
	if n := len(e.resourcesOf(name)); n != 4 {
		t.Errorf("machine has %d resources (%+v), want VM, NIC, OS disk and data disk", n, e.resourcesOf(name))
	}
}

func TestCreateIsIdempotentAndAdoptsTheExistingVM(t *testing.T) {
	e := newTestEnv(t)
	first := e.mustCreate(t, "m-1")
	e.cloud.Requests.Reset()
	second := e.mustCreate(t, "m-1")
	if first.ProviderID != second.ProviderID {
		t.Errorf("ProviderIDs differ: %s, %s", first.ProviderID, second.ProviderID)
	}
	if n := len(e.cloud.Requests.For(fakeazure.OpCreateVM)); n != 0 {
		t.Errorf("second create sent %d VM create requests, want 0 (adopt)", n)
	}
	if n := len(e.cloud.Requests.For(fakeazure.OpCreateNIC)); n != 0 {
		t.Errorf("second create sent %d NIC create requests, want 0", n)
	}
}

func TestCreateAdoptsAVMMadeByGardenerAndTagsItsDisks(t *testing.T) {
	e := newTestEnv(t)
	// A VM of the same class whose OS disk Azure created without tags.
	e.mustCreate(t, "m-1")
	e.cloud.PutDisk(testRG, &armcompute.Disk{Name: ptr.To("m-1-os-disk"), Location: ptr.To(testLocation), ManagedBy: ptr.To("/subscriptions/x/resourceGroups/" + testRG + "/providers/Microsoft.Compute/virtualMachines/m-1")})
	if _, err := e.create(t, "m-1"); err != nil {
		t.Fatal(err)
	}
	d, _ := e.cloud.Disk(testRG, "m-1-os-disk")
	if ptr.Deref(d.Tags[clusterTag], "") != "1" {
		t.Errorf("adopted VM's OS disk tags = %v, want the class's tags", d.Tags)
	}
}

func TestCreateRefusesAVMOfAnotherCluster(t *testing.T) {
	e := newTestEnv(t)
	e.cloud.PutVM(testRG, &armcompute.VirtualMachine{Name: ptr.To("m-1"), Location: ptr.To(testLocation), Tags: map[string]*string{"kubernetes.io-cluster-other": ptr.To("1"), "kubernetes.io-role-node": ptr.To("1")}})
	_, err := e.create(t, "m-1")
	if driver.CodeOf(err) != driver.AlreadyExists {
		t.Fatalf("err = %v, want AlreadyExists", err)
	}
	if len(e.resourcesOf("m-1")) != 1 {
		t.Errorf("resources = %+v, want only the foreign VM", e.resourcesOf("m-1"))
	}
}

func TestCreateReplacesAFailedVM(t *testing.T) {
	e := newTestEnv(t)
	tags := map[string]*string{}
	for k, v := range baseSpec().Tags {
		tags[k] = ptr.To(v)
	}
	e.cloud.PutVM(testRG, &armcompute.VirtualMachine{Name: ptr.To("m-1"), Location: ptr.To(testLocation), Tags: tags, Properties: &armcompute.VirtualMachineProperties{
		ProvisioningState: ptr.To(fakeazure.StateFailed),
		HardwareProfile:   &armcompute.HardwareProfile{VMSize: ptr.To(armcompute.VirtualMachineSizeTypes("Standard_D2s_v3"))},
	}})
	e.mustCreate(t, "m-1")
	vm, _ := e.cloud.VM(testRG, "m-1")
	if ptr.Deref(vm.Properties.ProvisioningState, "") != fakeazure.StateSucceeded || vm.Properties.StorageProfile == nil {
		t.Fatalf("VM after create = %+v, want a new, succeeded VM", vm.Properties)
	}
}

func TestCreateWithMarketplacePlanAndLatestVersion(t *testing.T) {
	e := newTestEnv(t)
	class := e.classWith("pro", func(s *ProviderSpec) {
		s.Properties.StorageProfile.ImageReference.URN = ptr.To("canonical:ubuntu-pro:22_04-lts:latest")
	})
	if _, err := e.createIn(context.Background(), class, "m-1"); err != nil {
		t.Fatal(err)
	}
	vm, _ := e.cloud.VM(testRG, "m-1")
	if vm.Plan == nil || ptr.Deref(vm.Plan.Name, "") != "pro-22_04-lts" || ptr.Deref(vm.Properties.StorageProfile.ImageReference.Version, "") != "22.4.202401010" {
		t.Errorf("plan = %+v, image = %+v: want the image's plan and the resolved latest version", vm.Plan, vm.Properties.StorageProfile.ImageReference)
	}
	latest := e.classWith("latest", func(s *ProviderSpec) {
		s.Properties.StorageProfile.ImageReference.URN = ptr.To("sap:gardenlinux:greatest:latest")
	})
	if _, err := e.createIn(context.Background(), latest, "m-2"); err != nil {
		t.Fatal(err)
	}
	vm, _ = e.cloud.VM(testRG, "m-2")
	if v := ptr.Deref(vm.Properties.StorageProfile.ImageReference.Version, ""); v != "1592.1.0" {
		t.Errorf("latest resolved to %s, want 1592.1.0 (numeric order)", v)
	}
}

func TestCreateWithImageDataDiskAndPlacement(t *testing.T) {
	e := newTestEnv(t)
	class := e.classWith("vmss", func(s *ProviderSpec) {
		lun := int32(3)
		s.Properties.Zone = nil
		s.Properties.VirtualMachineScaleSet = &SubResource{ID: "/subscriptions/x/resourceGroups/" + testRG + "/providers/Microsoft.Compute/virtualMachineScaleSets/workers"}
		s.Properties.IdentityID = ptr.To("/subscriptions/x/resourceGroups/" + testRG + "/providers/Microsoft.ManagedIdentity/userAssignedIdentities/id")
		s.Properties.StorageProfile.ImageReference = ImageReference{CommunityGalleryImageID: ptr.To("/CommunityGalleries/g/Images/i/Versions/1.0.0")}
		s.Properties.StorageProfile.DataDisks = append(s.Properties.StorageProfile.DataDisks, DataDisk{Lun: &lun, DiskSizeGB: 64, StorageAccountType: "Premium_LRS", ImageRef: &ImageReference{SharedGalleryImageID: ptr.To("/SharedGalleries/s/Images/cache/Versions/1.0.0")}})
		s.Properties.SecurityProfile = &SecurityProfile{SecurityType: ptr.To("TrustedLaunch"), UefiSettings: &UefiSettings{VTpmEnabled: ptr.To(true), SecureBootEnabled: ptr.To(true)}}
	})
	if _, err := e.createIn(context.Background(), class, "m-1"); err != nil {
		t.Fatal(err)
	}
	vm, _ := e.cloud.VM(testRG, "m-1")
	p := vm.Properties
	if p.VirtualMachineScaleSet == nil || len(vm.Zones) != 0 || vm.Identity == nil || len(vm.Identity.UserAssignedIdentities) != 1 {
		t.Errorf("placement/identity = %+v %v %+v", p.VirtualMachineScaleSet, vm.Zones, vm.Identity)
	}
	if ptr.Deref(p.SecurityProfile.SecurityType, "") != armcompute.SecurityTypesTrustedLaunch {
		t.Errorf("security profile = %+v", p.SecurityProfile)
	}
	img, ok := e.cloud.Disk(testRG, "m-1-3-data-disk")
	if !ok || img.ManagedBy == nil || ptr.Deref(img.Properties.CreationData.GalleryImageReference.SharedGalleryImageID, "") == "" || ptr.Deref(img.Tags[clusterTag], "") != "1" {
		t.Fatalf("image data disk = %+v, want it made from the gallery image, tagged and attached", img)
	}
	if err := e.delete(t, class, "m-1"); err != nil {
		t.Fatal(err)
	}
	if left := e.resourcesOf("m-1"); len(left) != 0 {
		t.Errorf("delete left %+v", left)
	}
}

func TestCreateValidatesBeforeTouchingAzure(t *testing.T) {
	e := newTestEnv(t)
	cases := []struct {
		name  string
		class func() *corev1.Secret
		want  string
	}{
		{"no userData", func() *corev1.Secret { s := testSecretObj(); delete(s.Data, KeyUserData); return s }, "userData"},
		{"no client id", func() *corev1.Secret { s := testSecretObj(); delete(s.Data, KeyClientID); return s }, "clientID"},
		{"secret and token file", func() *corev1.Secret {
			s := testSecretObj()
			s.Data[KeyWorkloadIdentityTokenFile] = []byte("/var/run/token")
			return s
		}, "mutually exclusive"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e.cloud.Requests.Reset()
			_, err := e.drv.CreateMachine(context.Background(), &driver.CreateMachineRequest{Machine: machine("m-1"), MachineClass: e.class, Secret: tc.class()})
			if driver.CodeOf(err) != driver.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want InvalidArgument naming %s", err, tc.want)
			}
			if n := len(e.cloud.Requests.All()); n != 0 {
				t.Errorf("%d requests reached Azure", n)
			}
		})
	}
	if _, err := e.drv.CreateMachine(context.Background(), &driver.CreateMachineRequest{Machine: machine("has.dot"), MachineClass: e.class, Secret: e.secret}); driver.CodeOf(err) != driver.InvalidArgument {
		t.Errorf("machine name with a dot: err = %v, want InvalidArgument", err)
	}
	big := testSecretObj()
	big.Data[KeyUserData] = []byte(strings.Repeat("x", 70000))
	if _, err := e.drv.CreateMachine(context.Background(), &driver.CreateMachineRequest{Machine: machine("m-2"), MachineClass: e.class, Secret: big}); driver.CodeOf(err) != driver.InvalidArgument || strings.Contains(err.Error(), "xxxxxxxx") {
		t.Errorf("oversized userData: err = %v, want InvalidArgument without the data", err)
	}
}

func TestCreateNeedsResourceGroupAndSubnet(t *testing.T) {
	e := newTestEnv(t)
	noSubnet := e.classWith("nosubnet", func(s *ProviderSpec) { s.SubnetInfo.SubnetName = "missing" })
	_, err := e.createIn(context.Background(), noSubnet, "m-1")
	if driver.CodeOf(err) != driver.FailedPrecondition || !strings.Contains(err.Error(), "subnetInfo") {
		t.Errorf("missing subnet: err = %v, want FailedPrecondition naming subnetInfo", err)
	}
	noImage := e.classWith("noimage", func(s *ProviderSpec) {
		s.Properties.StorageProfile.ImageReference.URN = ptr.To("sap:gardenlinux:greatest:9.9.9")
	})
	_, err = e.createIn(context.Background(), noImage, "m-1")
	if driver.CodeOf(err) != driver.InvalidArgument || !strings.Contains(err.Error(), "imageReference.urn") {
		t.Errorf("missing image: err = %v, want InvalidArgument naming the urn", err)
	}
	e.cloud.DeleteResourceGroup(testRG)
	_, err = e.create(t, "m-1")
	if driver.CodeOf(err) != driver.FailedPrecondition || !strings.Contains(err.Error(), "resourceGroup") {
		t.Errorf("missing group: err = %v, want FailedPrecondition naming resourceGroup", err)
	}
	if len(e.cloud.Resources()) != 0 {
		t.Errorf("resources made: %+v", e.cloud.Resources())
	}
}

// TestSlowVMCreationIsBoundedByTheContextAndCleanedUp: a deadline that passes while the VM
// create is under way ends the call with DeadlineExceeded and leaves nothing behind. The deadline
// passes at the create's first status poll, not after a fixed time: under load the steps before
// the VM (image, NIC) could take all of any fixed time.
func TestSlowVMCreationIsBoundedByTheContextAndCleanedUp(t *testing.T) {
	ctx := &deadlineWhen{Context: context.Background(), passed: make(chan struct{})}
	e := newTestEnv(t, func(o *Options) {
		o.HTTPTransport = &deadlineAtRequest{RoundTripper: o.HTTPTransport, op: fakeazure.OpCreateVM, n: 2, ctx: ctx}
	})
	e.cloud.SetLROPollsFor(fakeazure.OpCreateVM, 400)
	_, err := e.createIn(ctx, e.class, "m-1")
	if code := driver.CodeOf(err); code != driver.DeadlineExceeded {
		t.Fatalf("err = %v, want DeadlineExceeded", err)
	}
	if left := e.resourcesOf("m-1"); len(left) != 0 {
		t.Errorf("a timed-out create left %+v", left)
	}
}

// deadlineWhen is a context whose deadline passes when passed is closed: at the point of an
// operation a test chooses rather than at a wall-clock guess of when that point comes.
type deadlineWhen struct {
	context.Context
	passed chan struct{}
}

func (c *deadlineWhen) Done() <-chan struct{} { return c.passed }

func (c *deadlineWhen) Err() error {
	select {
	case <-c.passed:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// deadlineAtRequest passes ctx's deadline at the nth request of SDK operation op (the initial
// request is the first, its status polls follow), which then ends as a request does whose
// deadline passes in flight. The other requests go to the RoundTripper.
type deadlineAtRequest struct {
	http.RoundTripper
	op  string
	n   int
	ctx *deadlineWhen

	mu   sync.Mutex
	seen int
}

func (d *deadlineAtRequest) RoundTrip(req *http.Request) (*http.Response, error) {
	if op, _ := req.Context().Value(runtime.CtxAPINameKey{}).(string); op == d.op {
		d.mu.Lock()
		d.seen++
		now := d.seen == d.n
		d.mu.Unlock()
		if now {
			close(d.ctx.passed)
			<-req.Context().Done() // the request's context derives from ctx
			return nil, req.Context().Err()
		}
	}
	return d.RoundTripper.RoundTrip(req)
}
