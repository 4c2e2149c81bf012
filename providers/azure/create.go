package azure

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v8"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v9"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/internal/waitctx"
	"github.com/machinist-io/machinist/providers/kit"
)

// maxCustomData is the longest base64 customData Azure accepts.
const maxCustomData = 87380

// CreateMachine creates the machine's NIC, data disks made from images and VM, or adopts the VM
// that already carries the machine's name. On failure it deletes what it made.
func (d *Driver) CreateMachine(ctx context.Context, req *driver.CreateMachineRequest) (*driver.CreateMachineResponse, error) {
	spec, cs, err := d.prepare(req.MachineClass, req.Secret)
	if err != nil {
		return nil, err
	}
	name, err := vmName(req.Machine)
	if err != nil {
		return nil, err
	}
	secret, userData, err := kit.UserData(ProviderName, req.Secret)
	if err != nil {
		return nil, err
	}
	customData := base64.StdEncoding.EncodeToString(userData)
	if len(customData) > maxCustomData {
		return nil, driver.Errorf(driver.InvalidArgument, "azure: secret %s: userData is %d bytes; Azure accepts at most %d bytes (%d base64 characters): shrink it", secret.Name(), len(userData), maxCustomData/4*3, maxCustomData)
	}
	ctx, cancel := d.opts.Bound(ctx)
	defer cancel()
	log := d.log.With("machine", name, "resourceGroup", spec.ResourceGroup)

	for attempt := 0; ; attempt++ {
		vm, err := cs.vms.Get(ctx, spec.ResourceGroup, name, nil)
		switch {
		case isGroupNotFound(err):
			return nil, driver.Errorf(driver.FailedPrecondition, "azure: resource group %q does not exist: create it or fix providerSpec.resourceGroup", spec.ResourceGroup)
		case isNotFound(err):
			return d.create(ctx, cs, spec, name, customData, log)
		case err != nil:
			return nil, statusOf("get VM "+name, err)
		}
		if !owns(spec, vm.Tags) {
			return nil, driver.Errorf(driver.AlreadyExists, "azure: VM %q exists in resource group %q without this class's cluster and role tags (%s): it is not this machine's; delete or rename it, or rename the machine",
				name, spec.ResourceGroup, strings.Join(spec.scopeTags(), ", "))
		}
		state := ptr.Deref(vm.Properties.ProvisioningState, "")
		switch {
		case strings.EqualFold(state, "Failed") && attempt == 0:
			// A VM that failed to provision is of no use: remove it with its NIC and disks and
			// make a new one.
			log.Info("azure: replacing VM in provisioning state Failed")
			if err := d.deleteVMAndLeftovers(ctx, cs, spec, name, &vm.VirtualMachine, log); err != nil {
				return nil, err
			}
			continue
		case strings.EqualFold(state, "Deleting"):
			return nil, driver.Errorf(driver.Unavailable, "azure: VM %q is being deleted; retry once it is gone", name)
		case strings.EqualFold(state, "Creating") || strings.EqualFold(state, "Updating"):
			// Another call (or an earlier, interrupted one) is still creating it: wait.
			if err := waitctx.Sleep(ctx, clock.RealClock{}, d.opts.PollInterval); err != nil {
				return nil, statusOf("wait for VM "+name, err)
			}
			continue
		case strings.EqualFold(state, "Failed"):
			return nil, driver.Errorf(driver.Internal, "azure: VM %q is in provisioning state Failed again after being recreated", name)
		}
		log.Info("azure: adopting existing VM", "state", state)
		if err := d.tagDisks(ctx, cs, spec, &vm.VirtualMachine); err != nil {
			return nil, err
		}
		return &driver.CreateMachineResponse{
			ProviderID: providerID(spec.Location, name),
			NodeName:   name,
			Addresses:  d.addresses(ctx, cs, spec, name),
		}, nil
	}
}

// made records what a create made, so a failure can remove exactly that.
type made struct {
	nic   bool
	vm    bool
	disks []string
}

func (d *Driver) create(ctx context.Context, cs *clientSet, spec *ProviderSpec, name, customData string, log *slog.Logger) (resp *driver.CreateMachineResponse, err error) {
	ref, plan, err := d.resolveImage(ctx, cs, spec)
	if err != nil {
		return nil, err
	}
	subnetID, err := d.subnetID(ctx, cs, spec)
	if err != nil {
		return nil, err
	}

	var m made
	defer func() {
		if err == nil {
			return
		}
		if cerr := d.cleanup(ctx, cs, spec, name, m); cerr != nil {
			log.Warn("azure: cleanup after failed create left resources for the orphan collector", "error", cerr)
			err = driver.Errorf(driver.CodeOf(err), "%s; removing what it made also failed, the orphan collector will retry: %s", driver.MessageOf(err), driver.MessageOf(cerr))
		}
	}()

	nicID, err := d.ensureNIC(ctx, cs, spec, name, subnetID, &m)
	if err != nil {
		return nil, err
	}
	imageDisks, err := d.ensureImageDisks(ctx, cs, spec, name, &m)
	if err != nil {
		return nil, err
	}
	params := vmParams(spec, name, nicID, customData, ref, plan, imageDisks)
	m.vm = true
	m.disks = append(m.disks, diskNames(name, spec)...)
	log.Info("azure: creating VM", "size", spec.Properties.HardwareProfile.VMSize)
	poller, err := cs.vms.BeginCreateOrUpdate(ctx, spec.ResourceGroup, name, params, nil)
	if err != nil {
		return nil, statusOf("create VM "+name, err)
	}
	vm, err := poller.PollUntilDone(ctx, d.pollOptions())
	if err != nil {
		return nil, statusOf("create VM "+name, err)
	}
	if err := d.tagDisks(ctx, cs, spec, &vm.VirtualMachine); err != nil {
		return nil, err
	}
	log.Info("azure: created VM")
	return &driver.CreateMachineResponse{
		ProviderID: providerID(spec.Location, name),
		NodeName:   name,
		Addresses:  d.addresses(ctx, cs, spec, name),
	}, nil
}

// resolveImage turns a marketplace URN into a concrete version and the image's purchase plan;
// other image kinds pass through.
func (d *Driver) resolveImage(ctx context.Context, cs *clientSet, spec *ProviderSpec) (*armcompute.ImageReference, *armcompute.Plan, error) {
	img := spec.Properties.StorageProfile.ImageReference
	switch {
	case img.ID != "":
		return &armcompute.ImageReference{ID: ptr.To(img.ID)}, nil, nil
	case img.CommunityGalleryImageID != nil && *img.CommunityGalleryImageID != "":
		return &armcompute.ImageReference{CommunityGalleryImageID: img.CommunityGalleryImageID}, nil, nil
	case img.SharedGalleryImageID != nil && *img.SharedGalleryImageID != "":
		return &armcompute.ImageReference{SharedGalleryImageID: img.SharedGalleryImageID}, nil, nil
	}
	parts := strings.Split(*img.URN, ":")
	publisher, offer, sku, version := parts[0], parts[1], parts[2], parts[3]
	notFound := func() error {
		return driver.Errorf(driver.InvalidArgument, "azure: marketplace image %s is not available in %s: fix providerSpec.properties.storageProfile.imageReference.urn", *img.URN, spec.Location)
	}
	if strings.EqualFold(version, "latest") {
		list, err := cs.images.List(ctx, spec.Location, publisher, offer, sku, &armcompute.VirtualMachineImagesClientListOptions{Top: ptr.To(int32(1)), Orderby: ptr.To("name desc")})
		if isNotFound(err) || (err == nil && len(list.VirtualMachineImageResourceArray) == 0) {
			return nil, nil, notFound()
		}
		if err != nil {
			return nil, nil, statusOf("list versions of image "+*img.URN, err)
		}
		version = ptr.Deref(list.VirtualMachineImageResourceArray[0].Name, "")
	}
	image, err := cs.images.Get(ctx, spec.Location, publisher, offer, sku, version, nil)
	if isNotFound(err) {
		return nil, nil, notFound()
	}
	if err != nil {
		return nil, nil, statusOf("get image "+*img.URN, err)
	}
	ref := &armcompute.ImageReference{Publisher: &publisher, Offer: &offer, SKU: &sku, Version: &version}
	var plan *armcompute.Plan
	if image.Properties != nil && image.Properties.Plan != nil {
		p := image.Properties.Plan
		plan = &armcompute.Plan{Name: p.Name, Product: p.Product, Publisher: p.Publisher}
	}
	return ref, plan, nil
}

func (d *Driver) subnetID(ctx context.Context, cs *clientSet, spec *ProviderSpec) (string, error) {
	rg, vnet, subnet := spec.vnetResourceGroup(), spec.SubnetInfo.VnetName, spec.SubnetInfo.SubnetName
	s, err := cs.subnets.Get(ctx, rg, vnet, subnet, nil)
	if isNotFound(err) {
		return "", driver.Errorf(driver.FailedPrecondition, "azure: subnet %s/%s/%s does not exist: create it or fix providerSpec.subnetInfo (%s)", rg, vnet, subnet, errorCode(err))
	}
	if err != nil {
		return "", statusOf(fmt.Sprintf("get subnet %s/%s/%s", rg, vnet, subnet), err)
	}
	return ptr.Deref(s.ID, ""), nil
}

// ensureNIC returns the machine's NIC, creating it when absent.
func (d *Driver) ensureNIC(ctx context.Context, cs *clientSet, spec *ProviderSpec, vm, subnetID string, m *made) (string, error) {
	name := nicName(vm)
	nic, err := cs.nics.Get(ctx, spec.ResourceGroup, name, nil)
	switch {
	case err == nil:
		if foreignCluster(spec, nic.Tags) {
			return "", driver.Errorf(driver.AlreadyExists, "azure: NIC %q exists in resource group %q and belongs to another cluster: delete or rename it", name, spec.ResourceGroup)
		}
		if att := nic.Properties.VirtualMachine; att != nil && !strings.EqualFold(lastSegment(ptr.Deref(att.ID, "")), vm) {
			return "", driver.Errorf(driver.AlreadyExists, "azure: NIC %q is attached to VM %s: detach or delete it", name, ptr.Deref(att.ID, ""))
		}
		m.nic = true // a leftover of an earlier attempt for this machine: ours to clean up
		return ptr.Deref(nic.ID, ""), nil
	case !isNotFound(err):
		return "", statusOf("get NIC "+name, err)
	}
	m.nic = true
	params := armnetwork.Interface{
		Location: ptr.To(spec.Location),
		Tags:     azureTags(spec.Tags),
		Properties: &armnetwork.InterfacePropertiesFormat{
			EnableAcceleratedNetworking: spec.Properties.NetworkProfile.AcceleratedNetworking,
			EnableIPForwarding:          ptr.To(true),
			IPConfigurations: []*armnetwork.InterfaceIPConfiguration{{
				Name: ptr.To(name + "-ipconfig"),
				Properties: &armnetwork.InterfaceIPConfigurationPropertiesFormat{
					Subnet:                    &armnetwork.Subnet{ID: &subnetID},
					PrivateIPAllocationMethod: ptr.To(armnetwork.IPAllocationMethodDynamic),
					Primary:                   ptr.To(true),
				},
			}},
		},
	}
	poller, err := cs.nics.BeginCreateOrUpdate(ctx, spec.ResourceGroup, name, params, nil)
	if err != nil {
		return "", statusOf("create NIC "+name, err)
	}
	res, err := poller.PollUntilDone(ctx, d.pollOptions())
	if err != nil {
		return "", statusOf("create NIC "+name, err)
	}
	return ptr.Deref(res.ID, ""), nil
}

// ensureImageDisks creates the data disks that are made from an image; the VM attaches them.
// It returns their IDs by LUN.
func (d *Driver) ensureImageDisks(ctx context.Context, cs *clientSet, spec *ProviderSpec, vm string, m *made) (map[int32]string, error) {
	ids := map[int32]string{}
	for _, dd := range spec.Properties.StorageProfile.DataDisks {
		if dd.ImageRef == nil {
			continue
		}
		name := dataDiskName(vm, dd)
		if existing, err := cs.disks.Get(ctx, spec.ResourceGroup, name, nil); err == nil {
			if foreignCluster(spec, existing.Tags) {
				return nil, driver.Errorf(driver.AlreadyExists, "azure: disk %q exists and belongs to another cluster: delete or rename it", name)
			}
			m.disks = append(m.disks, name)
			ids[*dd.Lun] = ptr.Deref(existing.ID, "")
			continue
		} else if !isNotFound(err) {
			return nil, statusOf("get disk "+name, err)
		}
		source := &armcompute.ImageDiskReference{}
		switch {
		case dd.ImageRef.CommunityGalleryImageID != nil && *dd.ImageRef.CommunityGalleryImageID != "":
			source.CommunityGalleryImageID = dd.ImageRef.CommunityGalleryImageID
		case dd.ImageRef.SharedGalleryImageID != nil && *dd.ImageRef.SharedGalleryImageID != "":
			source.SharedGalleryImageID = dd.ImageRef.SharedGalleryImageID
		default:
			source.ID = ptr.To(dd.ImageRef.ID)
		}
		disk := armcompute.Disk{
			Location: ptr.To(spec.Location),
			Tags:     azureTags(spec.Tags),
			SKU:      &armcompute.DiskSKU{Name: ptr.To(armcompute.DiskStorageAccountTypes(dd.StorageAccountType))},
			Properties: &armcompute.DiskProperties{
				CreationData: &armcompute.CreationData{CreateOption: ptr.To(armcompute.DiskCreateOptionFromImage), GalleryImageReference: source},
				DiskSizeGB:   ptr.To(dd.DiskSizeGB),
			},
		}
		if z := spec.Properties.Zone; z != nil {
			disk.Zones = []*string{ptr.To(strconv.Itoa(*z))}
		}
		m.disks = append(m.disks, name)
		poller, err := cs.disks.BeginCreateOrUpdate(ctx, spec.ResourceGroup, name, disk, nil)
		if err != nil {
			return nil, statusOf("create disk "+name, err)
		}
		res, err := poller.PollUntilDone(ctx, d.pollOptions())
		if err != nil {
			return nil, statusOf("create disk "+name, err)
		}
		ids[*dd.Lun] = ptr.Deref(res.ID, "")
	}
	return ids, nil
}

// vmParams builds the VM: named after the machine, its NIC and disks set to be deleted with it.
func vmParams(spec *ProviderSpec, name, nicID, customData string, image *armcompute.ImageReference, plan *armcompute.Plan, imageDisks map[int32]string) armcompute.VirtualMachine {
	props := spec.Properties
	sp := props.StorageProfile
	osDisk := &armcompute.OSDisk{
		Name:         ptr.To(osDiskName(name)),
		CreateOption: ptr.To(armcompute.DiskCreateOptionTypesFromImage),
		DiskSizeGB:   ptr.To(sp.OsDisk.DiskSizeGB),
		DeleteOption: ptr.To(armcompute.DiskDeleteOptionTypesDelete),
		ManagedDisk:  &armcompute.ManagedDiskParameters{},
	}
	if sp.OsDisk.Caching != "" {
		osDisk.Caching = ptr.To(armcompute.CachingTypes(sp.OsDisk.Caching))
	}
	if t := sp.OsDisk.ManagedDisk.StorageAccountType; t != "" {
		osDisk.ManagedDisk.StorageAccountType = ptr.To(armcompute.StorageAccountTypes(t))
	}
	if sec := sp.OsDisk.ManagedDisk.SecurityProfile; sec != nil && ptr.Deref(sec.SecurityEncryptionType, "") != "" {
		osDisk.ManagedDisk.SecurityProfile = &armcompute.VMDiskSecurityProfile{SecurityEncryptionType: ptr.To(armcompute.SecurityEncryptionTypes(*sec.SecurityEncryptionType))}
	}
	var dataDisks []*armcompute.DataDisk
	for _, dd := range sp.DataDisks {
		disk := &armcompute.DataDisk{
			Name:         ptr.To(dataDiskName(name, dd)),
			Lun:          dd.Lun,
			DiskSizeGB:   ptr.To(dd.DiskSizeGB),
			CreateOption: ptr.To(armcompute.DiskCreateOptionTypesEmpty),
			DeleteOption: ptr.To(armcompute.DiskDeleteOptionTypesDelete),
			ManagedDisk:  &armcompute.ManagedDiskParameters{StorageAccountType: ptr.To(armcompute.StorageAccountTypes(dd.StorageAccountType))},
		}
		if dd.Caching != "" {
			disk.Caching = ptr.To(armcompute.CachingTypes(dd.Caching))
		}
		if id, ok := imageDisks[*dd.Lun]; ok {
			disk.CreateOption = ptr.To(armcompute.DiskCreateOptionTypesAttach)
			disk.DiskSizeGB = nil
			disk.ManagedDisk = &armcompute.ManagedDiskParameters{ID: ptr.To(id)}
		}
		dataDisks = append(dataDisks, disk)
	}
	linux := &armcompute.LinuxConfiguration{DisablePasswordAuthentication: ptr.To(props.OsProfile.LinuxConfiguration.DisablePasswordAuthentication)}
	if key := props.OsProfile.LinuxConfiguration.SSH.PublicKeys; key.KeyData != "" {
		path := key.Path
		if path == "" {
			path = "/home/" + props.OsProfile.AdminUsername + "/.ssh/authorized_keys"
		}
		linux.SSH = &armcompute.SSHConfiguration{PublicKeys: []*armcompute.SSHPublicKey{{Path: ptr.To(path), KeyData: ptr.To(key.KeyData)}}}
	}
	vm := armcompute.VirtualMachine{
		Location: ptr.To(spec.Location),
		Tags:     azureTags(spec.Tags),
		Plan:     plan,
		Properties: &armcompute.VirtualMachineProperties{
			HardwareProfile: &armcompute.HardwareProfile{VMSize: ptr.To(armcompute.VirtualMachineSizeTypes(props.HardwareProfile.VMSize))},
			StorageProfile: &armcompute.StorageProfile{
				ImageReference: image,
				OSDisk:         osDisk,
				DataDisks:      dataDisks,
			},
			OSProfile: &armcompute.OSProfile{
				ComputerName:       ptr.To(name),
				AdminUsername:      ptr.To(props.OsProfile.AdminUsername),
				CustomData:         ptr.To(customData),
				LinuxConfiguration: linux,
			},
			NetworkProfile: &armcompute.NetworkProfile{NetworkInterfaces: []*armcompute.NetworkInterfaceReference{{
				ID:         ptr.To(nicID),
				Properties: &armcompute.NetworkInterfaceReferenceProperties{Primary: ptr.To(true), DeleteOption: ptr.To(armcompute.DeleteOptionsDelete)},
			}}},
		},
	}
	p := vm.Properties
	if ct := ptr.Deref(sp.DiskControllerType, ""); ct != "" {
		p.StorageProfile.DiskControllerType = ptr.To(armcompute.DiskControllerTypes(ct))
	}
	if props.Zone != nil {
		vm.Zones = []*string{ptr.To(strconv.Itoa(*props.Zone))}
	}
	if as := props.AvailabilitySet; as != nil && as.ID != "" {
		p.AvailabilitySet = &armcompute.SubResource{ID: ptr.To(as.ID)}
	}
	if ss := props.VirtualMachineScaleSet; ss != nil && ss.ID != "" {
		p.VirtualMachineScaleSet = &armcompute.SubResource{ID: ptr.To(ss.ID)}
	}
	if ms := props.MachineSet; ms != nil && p.AvailabilitySet == nil && p.VirtualMachineScaleSet == nil {
		if ms.Kind == "vmo" {
			p.VirtualMachineScaleSet = &armcompute.SubResource{ID: ptr.To(ms.ID)}
		} else {
			p.AvailabilitySet = &armcompute.SubResource{ID: ptr.To(ms.ID)}
		}
	}
	if id := ptr.Deref(props.IdentityID, ""); id != "" {
		vm.Identity = &armcompute.VirtualMachineIdentity{
			Type:                   ptr.To(armcompute.ResourceIdentityTypeUserAssigned),
			UserAssignedIdentities: map[string]*armcompute.UserAssignedIdentitiesValue{id: {}},
		}
	}
	if dp := props.DiagnosticsProfile; dp != nil {
		p.DiagnosticsProfile = &armcompute.DiagnosticsProfile{BootDiagnostics: &armcompute.BootDiagnostics{Enabled: ptr.To(dp.Enabled), StorageURI: dp.StorageURI}}
	}
	if sec := props.SecurityProfile; sec != nil {
		p.SecurityProfile = &armcompute.SecurityProfile{}
		if st := ptr.Deref(sec.SecurityType, ""); st != "" {
			p.SecurityProfile.SecurityType = ptr.To(armcompute.SecurityTypes(st))
		}
		if u := sec.UefiSettings; u != nil {
			p.SecurityProfile.UefiSettings = &armcompute.UefiSettings{VTpmEnabled: u.VTpmEnabled, SecureBootEnabled: u.SecureBootEnabled}
		}
	}
	if cr := props.CapacityReservation; cr != nil && ptr.Deref(cr.CapacityReservationGroupID, "") != "" {
		p.CapacityReservation = &armcompute.CapacityReservationProfile{CapacityReservationGroup: &armcompute.SubResource{ID: cr.CapacityReservationGroupID}}
	}
	return vm
}

// tagDisks puts the class's tags on the VM's own disks: Azure does not copy a VM's tags to the
// disks created with it, and the orphan collector finds leftovers by tag.
func (d *Driver) tagDisks(ctx context.Context, cs *clientSet, spec *ProviderSpec, vm *armcompute.VirtualMachine) error {
	if vm.Properties == nil || vm.Properties.StorageProfile == nil {
		return nil
	}
	name := ptr.Deref(vm.Name, "")
	ours := map[string]bool{}
	for _, n := range diskNames(name, spec) {
		ours[strings.ToLower(n)] = true
	}
	var disks []string
	sp := vm.Properties.StorageProfile
	if sp.OSDisk != nil {
		disks = append(disks, ptr.Deref(sp.OSDisk.Name, ""))
	}
	for _, dd := range sp.DataDisks {
		disks = append(disks, ptr.Deref(dd.Name, ""))
	}
	for _, disk := range disks {
		if !ours[strings.ToLower(disk)] {
			continue // a volume attached later (CSI) is not ours to tag
		}
		got, err := cs.disks.Get(ctx, spec.ResourceGroup, disk, nil)
		if isNotFound(err) {
			continue
		}
		if err != nil {
			return statusOf("get disk "+disk, err)
		}
		if owns(spec, got.Tags) {
			continue
		}
		tags := map[string]*string{}
		for k, v := range got.Tags {
			tags[k] = v
		}
		for k, v := range spec.Tags {
			tags[k] = ptr.To(v)
		}
		poller, err := cs.disks.BeginUpdate(ctx, spec.ResourceGroup, disk, armcompute.DiskUpdate{Tags: tags}, nil)
		if err != nil {
			return statusOf("tag disk "+disk, err)
		}
		if _, err := poller.PollUntilDone(ctx, d.pollOptions()); err != nil {
			return statusOf("tag disk "+disk, err)
		}
	}
	return nil
}

// addresses returns the VM's private IP and host name; they matter only without a target
// cluster, so a failure to read them is not an error.
func (d *Driver) addresses(ctx context.Context, cs *clientSet, spec *ProviderSpec, vm string) []corev1.NodeAddress {
	out := []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: vm}}
	nic, err := cs.nics.Get(ctx, spec.ResourceGroup, nicName(vm), nil)
	if err != nil || nic.Properties == nil {
		return out
	}
	for _, ipc := range nic.Properties.IPConfigurations {
		if ipc.Properties != nil && ipc.Properties.PrivateIPAddress != nil {
			out = append([]corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: *ipc.Properties.PrivateIPAddress}}, out...)
			break
		}
	}
	return out
}

// cleanup removes what a failed create made. It runs on its own deadline because the caller's
// context may be the reason the create failed.
func (d *Driver) cleanup(ctx context.Context, cs *clientSet, spec *ProviderSpec, name string, m made) error {
	if !m.vm && !m.nic && len(m.disks) == 0 {
		return nil
	}
	ctx, cancel := d.opts.Cleanup(ctx)
	defer cancel()
	var errs []error
	if m.vm {
		if err := d.deleteVM(ctx, cs, spec, name); err != nil {
			errs = append(errs, err)
		}
	}
	if m.nic {
		if err := d.deleteNIC(ctx, cs, spec, nicName(name)); err != nil {
			errs = append(errs, err)
		}
	}
	seen := map[string]bool{}
	for _, disk := range m.disks {
		if seen[strings.ToLower(disk)] {
			continue
		}
		seen[strings.ToLower(disk)] = true
		if err := d.deleteDisk(ctx, cs, spec, disk); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return driver.Wrap(driver.CodeOf(errs[0]), errors.Join(errs...), "")
	}
	return nil
}

func lastSegment(id string) string {
	if i := strings.LastIndex(id, "/"); i >= 0 {
		return id[i+1:]
	}
	return id
}
