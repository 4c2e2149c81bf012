package fakeazure

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	azfake "github.com/Azure/azure-sdk-for-go/sdk/azcore/fake"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v8"
	computefake "github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v8/fake"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v9"
	"k8s.io/utils/ptr"
)

// maxCustomData is the longest base64 customData Microsoft.Compute accepts.
const maxCustomData = 87380

// lroResponder answers an LRO with polls in-progress answers of status pending and then the
// terminal answer.
func lroResponder[T any](polls, pending, final int, result T) azfake.PollerResponder[T] {
	var r azfake.PollerResponder[T]
	for range polls {
		r.AddNonTerminalResponse(pending, nil)
	}
	r.SetTerminalResponse(final, result, nil)
	return r
}

func fail(e *ARMError) azfake.ErrorResponder {
	var r azfake.ErrorResponder
	r.SetError(e)
	return r
}

// startLRO registers what happens when the LRO on a resource completes. Callers hold c.mu.
func (c *state) startLRO(id, op string, complete func() (any, *ARMError)) {
	c.lros[strings.ToLower(id)] = &lro{op: op, complete: complete}
}

func (c *computeAPI) virtualMachinesServer() computefake.VirtualMachinesServer {
	return computefake.VirtualMachinesServer{
		BeginCreateOrUpdate: c.createVM,
		Get: func(_ context.Context, rg, name string, _ *armcompute.VirtualMachinesClientGetOptions) (resp azfake.Responder[armcompute.VirtualMachinesClientGetResponse], errResp azfake.ErrorResponder) {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.groups[strings.ToLower(rg)] == nil {
				return resp, fail(errResourceGroupNotFound(rg))
			}
			vm, ok := c.vms[key(rg, name)]
			if !ok {
				return resp, fail(errResourceNotFound("Microsoft.Compute/virtualMachines", rg, name))
			}
			resp.SetResponse(http.StatusOK, armcompute.VirtualMachinesClientGetResponse{VirtualMachine: *renderVM(vm)}, nil)
			return resp, errResp
		},
		BeginUpdate: c.updateVM,
		BeginDelete: c.deleteVM,
		NewListPager: func(rg string, _ *armcompute.VirtualMachinesClientListOptions) (resp azfake.PagerResponder[armcompute.VirtualMachinesClientListResponse]) {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.groups[strings.ToLower(rg)] == nil {
				resp.AddError(errResourceGroupNotFound(rg))
				return resp
			}
			var all []*armcompute.VirtualMachine
			for _, k := range sortedKeys(c.vms, rg) {
				all = append(all, renderVM(c.vms[k]))
			}
			for _, page := range pages(all, c.pageSize) {
				resp.AddPage(http.StatusOK, armcompute.VirtualMachinesClientListResponse{VirtualMachineListResult: armcompute.VirtualMachineListResult{Value: page}}, nil)
			}
			return resp
		},
	}
}

func (c *computeAPI) createVM(_ context.Context, rg, name string, in armcompute.VirtualMachine, _ *armcompute.VirtualMachinesClientBeginCreateOrUpdateOptions) (resp azfake.PollerResponder[armcompute.VirtualMachinesClientCreateOrUpdateResponse], errResp azfake.ErrorResponder) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.groups[strings.ToLower(rg)]
	if g == nil {
		return resp, fail(errResourceGroupNotFound(rg))
	}
	k := key(rg, name)
	if vm, ok := c.vms[k]; ok {
		// A PUT on an existing VM updates it; only tags may change here.
		if st := deref(vm.Properties.ProvisioningState); st == StateCreating || st == StateDeleting {
			return resp, fail(armErr(http.StatusConflict, "OperationNotAllowed", "Operation 'PUT' is not allowed on VM '%s' since the VM is in provisioning state '%s'.", name, st))
		}
		if in.Tags != nil {
			vm.Tags = in.Tags
		}
		return lroResponder(0, http.StatusCreated, http.StatusOK, armcompute.VirtualMachinesClientCreateOrUpdateResponse{VirtualMachine: *renderVM(vm)}), errResp
	}
	if e := c.validateVM(rg, name, &in); e != nil {
		return resp, fail(e)
	}
	location := deref(in.Location)
	size := string(deref(in.Properties.HardwareProfile.VMSize))
	zones := derefAll(in.Zones)
	if c.skuOff[strings.ToLower(location+"/"+size+"/")] {
		return resp, fail(ErrSkuNotAvailable(size, location, nil))
	}
	for _, z := range zones {
		if c.skuOff[strings.ToLower(location+"/"+size+"/"+z)] {
			return resp, fail(ErrSkuNotAvailable(size, location, zones))
		}
	}
	if limit := c.quota[strings.ToLower(location)]; limit > 0 {
		used := 0
		for _, vm := range c.vms {
			if strings.EqualFold(deref(vm.Location), location) && vm.Properties.HardwareProfile != nil {
				used += coresOf(string(deref(vm.Properties.HardwareProfile.VMSize)))
			}
		}
		if need := coresOf(size); used+need > limit {
			return resp, fail(ErrCoreQuota(location, limit, used, need))
		}
	}

	vm := clone(&in)
	vmID := c.resourceID(rg, "Microsoft.Compute/virtualMachines", name)
	vm.ID, vm.Name, vm.Type = &vmID, &name, ptr.To("Microsoft.Compute/virtualMachines")
	vm.Properties.ProvisioningState = ptr.To(StateCreating)
	vm.Properties.VMID = ptr.To(c.newID())
	vm.Properties.TimeCreated = ptr.To(time.Now().UTC())

	// Implicit disks are created with the VM. Like Azure, they do not inherit the VM's tags.
	sp := vm.Properties.StorageProfile
	osName := deref(sp.OSDisk.Name)
	if osName == "" {
		osName = fmt.Sprintf("%s_OsDisk_1_%s", name, strings.ReplaceAll(c.newID(), "-", ""))
		sp.OSDisk.Name = &osName
	}
	size30 := int32(30)
	if sp.OSDisk.DiskSizeGB == nil {
		sp.OSDisk.DiskSizeGB = &size30
	}
	osDisk := c.newDisk(rg, osName, location, zones, storageType(sp.OSDisk.ManagedDisk), *sp.OSDisk.DiskSizeGB, nil)
	osDisk.Properties.CreationData = &armcompute.CreationData{CreateOption: ptr.To(armcompute.DiskCreateOptionFromImage)}
	osDisk.Properties.OSType = ptr.To(armcompute.OperatingSystemTypesLinux)
	c.attachDisk(osDisk, vmID)
	if sp.OSDisk.ManagedDisk == nil {
		sp.OSDisk.ManagedDisk = &armcompute.ManagedDiskParameters{}
	}
	sp.OSDisk.ManagedDisk.ID = osDisk.ID
	for _, dd := range sp.DataDisks {
		if deref(dd.CreateOption) == armcompute.DiskCreateOptionTypesAttach {
			d := c.disks[key(rg, lastSegment(deref(dd.ManagedDisk.ID)))]
			c.attachDisk(d, vmID)
			dd.Name = d.Name
			continue
		}
		ddName := deref(dd.Name)
		if ddName == "" {
			ddName = fmt.Sprintf("%s_disk%d_%s", name, deref(dd.Lun), strings.ReplaceAll(c.newID(), "-", ""))
			dd.Name = &ddName
		}
		d := c.newDisk(rg, ddName, location, zones, storageType(dd.ManagedDisk), deref(dd.DiskSizeGB), nil)
		d.Properties.CreationData = &armcompute.CreationData{CreateOption: ptr.To(armcompute.DiskCreateOptionEmpty)}
		c.attachDisk(d, vmID)
		if dd.ManagedDisk == nil {
			dd.ManagedDisk = &armcompute.ManagedDiskParameters{}
		}
		dd.ManagedDisk.ID = d.ID
	}
	for _, ref := range vm.Properties.NetworkProfile.NetworkInterfaces {
		nic := c.nics[key(rg, lastSegment(deref(ref.ID)))]
		nic.Properties.VirtualMachine = &armnetwork.SubResource{ID: &vmID}
	}
	c.vms[k] = vm

	var failCode string
	if len(c.allocFail) > 0 {
		failCode, c.allocFail = c.allocFail[0], c.allocFail[1:]
	}
	c.startLRO(vmID, OpCreateVM, func() (any, *ARMError) {
		c.mu.Lock()
		defer c.mu.Unlock()
		vm, ok := c.vms[k]
		if !ok || deref(vm.Properties.ProvisioningState) != StateCreating {
			return nil, nil
		}
		if failCode != "" {
			vm.Properties.ProvisioningState = ptr.To(StateFailed)
			return nil, ErrAllocation(failCode)
		}
		vm.Properties.ProvisioningState = ptr.To(StateSucceeded)
		return renderVM(vm), nil
	})
	return lroResponder(c.polls(OpCreateVM), http.StatusCreated, http.StatusOK, armcompute.VirtualMachinesClientCreateOrUpdateResponse{VirtualMachine: *renderVM(vm)}), errResp
}

// validateVM checks a new VM the way Microsoft.Compute does before accepting it. Callers hold
// c.mu.
func (c *computeAPI) validateVM(rg, name string, vm *armcompute.VirtualMachine) *ARMError {
	if deref(vm.Location) == "" {
		return errInvalidParameter("location", "Required parameter 'location' is missing (null).")
	}
	p := vm.Properties
	if p == nil || p.HardwareProfile == nil || deref(p.HardwareProfile.VMSize) == "" {
		return errInvalidParameter("hardwareProfile.vmSize", "Required parameter 'hardwareProfile.vmSize' is missing (null).")
	}
	if p.OSProfile == nil || deref(p.OSProfile.AdminUsername) == "" {
		return errInvalidParameter("adminUsername", "Required parameter 'osProfile.adminUsername' is missing (null).")
	}
	if cd := deref(p.OSProfile.CustomData); cd != "" {
		if _, err := base64.StdEncoding.DecodeString(cd); err != nil || len(cd) > maxCustomData {
			return errInvalidParameter("customData", "Custom data in OSProfile must be in Base64 encoding and with a maximum length of %d characters.", maxCustomData)
		}
	}
	if lc := p.OSProfile.LinuxConfiguration; lc != nil && lc.SSH != nil {
		for _, k := range lc.SSH.PublicKeys {
			if !strings.HasPrefix(deref(k.KeyData), "ssh-") && !strings.HasPrefix(deref(k.KeyData), "ecdsa-") {
				return armErr(http.StatusBadRequest, "InvalidParameter", "The value of parameter linuxConfiguration.ssh.publicKeys.keyData is invalid.")
			}
		}
	}
	for _, z := range vm.Zones {
		if z := deref(z); z != "1" && z != "2" && z != "3" {
			return errInvalidParameter("zones", "The zone(s) '%s' for resource 'Microsoft.Compute/virtualMachines/%s' is not supported. The supported zones for location '%s' are '1,2,3'.", z, name, deref(vm.Location))
		}
	}
	if p.AvailabilitySet != nil && p.VirtualMachineScaleSet != nil {
		return errInvalidParameter("availabilitySet", "Virtual Machine cannot be part of both an availability set and a virtual machine scale set.")
	}
	sp := p.StorageProfile
	if sp == nil || sp.ImageReference == nil || sp.OSDisk == nil {
		return errInvalidParameter("storageProfile", "Required parameter 'storageProfile.imageReference' is missing (null).")
	}
	if e := c.validateImage(vm); e != nil {
		return e
	}
	luns := map[int32]bool{}
	for _, dd := range sp.DataDisks {
		lun := deref(dd.Lun)
		if dd.Lun == nil || luns[lun] {
			return errInvalidParameter("dataDisks", "Data disks must have unique LUNs; LUN %d is used more than once or missing.", lun)
		}
		luns[lun] = true
		switch deref(dd.CreateOption) {
		case armcompute.DiskCreateOptionTypesEmpty:
			if deref(dd.DiskSizeGB) <= 0 {
				return errInvalidParameter("dataDisks", "Required parameter 'dataDisk.diskSizeGB' is missing (null).")
			}
		case armcompute.DiskCreateOptionTypesAttach:
			if dd.ManagedDisk == nil || deref(dd.ManagedDisk.ID) == "" {
				return errInvalidParameter("dataDisks", "Required parameter 'dataDisk.managedDisk.id' is missing (null).")
			}
			d := c.disks[key(rg, lastSegment(deref(dd.ManagedDisk.ID)))]
			if d == nil {
				return armErr(http.StatusNotFound, "NotFound", "Disk %s is not found.", deref(dd.ManagedDisk.ID))
			}
			if d.ManagedBy != nil {
				return armErr(http.StatusConflict, "AttachDiskWhileBeingDetached", "Cannot attach data disk '%s' to VM '%s' because the disk is currently attached to VM '%s'.", deref(d.Name), name, lastSegment(*d.ManagedBy))
			}
		default:
			return errInvalidParameter("dataDisks", "The value '%s' of parameter 'dataDisk.createOption' is not supported here.", deref(dd.CreateOption))
		}
	}
	if p.NetworkProfile == nil || len(p.NetworkProfile.NetworkInterfaces) == 0 {
		return errInvalidParameter("networkProfile", "Required parameter 'networkProfile.networkInterfaces' is missing (null).")
	}
	for _, ref := range p.NetworkProfile.NetworkInterfaces {
		nic := c.nics[key(rg, lastSegment(deref(ref.ID)))]
		if nic == nil {
			return armErr(http.StatusNotFound, "NotFound", "Resource %s not found.", deref(ref.ID))
		}
		if vmRef := nic.Properties.VirtualMachine; vmRef != nil && !strings.EqualFold(lastSegment(deref(vmRef.ID)), name) {
			return armErr(http.StatusBadRequest, "NicInUse", "Network Interface %s is used by existing resource %s. In order to use the network interface for a new resource, it must be dissociated from the existing one.", deref(ref.ID), deref(vmRef.ID))
		}
	}
	return nil
}

func (c *computeAPI) validateImage(vm *armcompute.VirtualMachine) *ARMError {
	ref := vm.Properties.StorageProfile.ImageReference
	marketplace := deref(ref.Publisher) != "" || deref(ref.Offer) != "" || deref(ref.SKU) != ""
	set := 0
	for _, b := range []bool{marketplace, deref(ref.ID) != "", deref(ref.CommunityGalleryImageID) != "", deref(ref.SharedGalleryImageID) != ""} {
		if b {
			set++
		}
	}
	if set != 1 {
		return errInvalidParameter("imageReference", "The value of parameter imageReference is invalid: specify exactly one of a platform image (publisher, offer, sku, version), id, communityGalleryImageId or sharedGalleryImageId.")
	}
	if !marketplace {
		return nil
	}
	location := deref(vm.Location)
	urn := strings.Join([]string{deref(ref.Publisher), deref(ref.Offer), deref(ref.SKU), deref(ref.Version)}, ":")
	var img *armcompute.VirtualMachineImage
	if v := deref(ref.Version); strings.EqualFold(v, "latest") {
		versions := c.imageVersions(location, deref(ref.Publisher), deref(ref.Offer), deref(ref.SKU))
		if len(versions) > 0 {
			img = c.images[imageKey(location, deref(ref.Publisher), deref(ref.Offer), deref(ref.SKU), versions[len(versions)-1])]
		}
	} else {
		img = c.images[imageKey(location, deref(ref.Publisher), deref(ref.Offer), deref(ref.SKU), v)]
	}
	if img == nil {
		return armErr(http.StatusNotFound, "PlatformImageNotFound", "The platform image '%s' is not available. Verify that all fields in the storage profile are correct. For more details about storage profile information, please refer to https://aka.ms/storageprofile", urn)
	}
	if plan := img.Properties.Plan; plan != nil {
		vp := vm.Plan
		if vp == nil || deref(vp.Name) != deref(plan.Name) || deref(vp.Product) != deref(plan.Product) || deref(vp.Publisher) != deref(plan.Publisher) {
			return armErr(http.StatusBadRequest, "VMMarketplaceInvalidInput", "Creating a virtual machine from Marketplace image or a custom image sourced from a Marketplace image requires Plan information in the request. VM: '%s'.", deref(vm.Name))
		}
	}
	return nil
}

func (c *computeAPI) updateVM(_ context.Context, rg, name string, in armcompute.VirtualMachineUpdate, _ *armcompute.VirtualMachinesClientBeginUpdateOptions) (resp azfake.PollerResponder[armcompute.VirtualMachinesClientUpdateResponse], errResp azfake.ErrorResponder) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.groups[strings.ToLower(rg)] == nil {
		return resp, fail(errResourceGroupNotFound(rg))
	}
	k := key(rg, name)
	vm, ok := c.vms[k]
	if !ok {
		return resp, fail(errResourceNotFound("Microsoft.Compute/virtualMachines", rg, name))
	}
	before := deref(vm.Properties.ProvisioningState)
	if before == StateCreating || before == StateDeleting {
		return resp, fail(armErr(http.StatusConflict, "OperationNotAllowed", "Operation 'PATCH' is not allowed on VM '%s' since the VM is in provisioning state '%s'.", name, before))
	}
	if in.Tags != nil {
		vm.Tags = in.Tags
	}
	if p := in.Properties; p != nil {
		if p.NetworkProfile != nil && vm.Properties.NetworkProfile != nil {
			for _, upd := range p.NetworkProfile.NetworkInterfaces {
				for _, ref := range vm.Properties.NetworkProfile.NetworkInterfaces {
					if strings.EqualFold(deref(ref.ID), deref(upd.ID)) && upd.Properties != nil && upd.Properties.DeleteOption != nil {
						if ref.Properties == nil {
							ref.Properties = &armcompute.NetworkInterfaceReferenceProperties{}
						}
						ref.Properties.DeleteOption = upd.Properties.DeleteOption
					}
				}
			}
		}
		if sp := p.StorageProfile; sp != nil && vm.Properties.StorageProfile != nil {
			if sp.OSDisk != nil && sp.OSDisk.DeleteOption != nil && vm.Properties.StorageProfile.OSDisk != nil {
				vm.Properties.StorageProfile.OSDisk.DeleteOption = sp.OSDisk.DeleteOption
			}
			for _, upd := range sp.DataDisks {
				for _, dd := range vm.Properties.StorageProfile.DataDisks {
					if (upd.Lun != nil && deref(upd.Lun) == deref(dd.Lun)) || (upd.Name != nil && strings.EqualFold(deref(upd.Name), deref(dd.Name))) {
						if upd.DeleteOption != nil {
							dd.DeleteOption = upd.DeleteOption
						}
					}
				}
			}
		}
	}
	vm.Properties.ProvisioningState = ptr.To(StateUpdating)
	c.startLRO(deref(vm.ID), OpUpdateVM, func() (any, *ARMError) {
		c.mu.Lock()
		defer c.mu.Unlock()
		vm, ok := c.vms[k]
		if !ok {
			return nil, nil
		}
		if before == StateFailed {
			vm.Properties.ProvisioningState = ptr.To(StateFailed)
		} else {
			vm.Properties.ProvisioningState = ptr.To(StateSucceeded)
		}
		return renderVM(vm), nil
	})
	return lroResponder(c.polls(OpUpdateVM), http.StatusOK, http.StatusOK, armcompute.VirtualMachinesClientUpdateResponse{VirtualMachine: *renderVM(vm)}), errResp
}

func (c *computeAPI) deleteVM(_ context.Context, rg, name string, _ *armcompute.VirtualMachinesClientBeginDeleteOptions) (resp azfake.PollerResponder[armcompute.VirtualMachinesClientDeleteResponse], errResp azfake.ErrorResponder) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.groups[strings.ToLower(rg)] == nil {
		return resp, fail(errResourceGroupNotFound(rg))
	}
	k := key(rg, name)
	vm, ok := c.vms[k]
	if !ok {
		return lroResponder(0, http.StatusAccepted, http.StatusNoContent, armcompute.VirtualMachinesClientDeleteResponse{}), errResp
	}
	vm.Properties.ProvisioningState = ptr.To(StateDeleting)
	c.startLRO(deref(vm.ID), OpDeleteVM, func() (any, *ARMError) {
		c.mu.Lock()
		defer c.mu.Unlock()
		vm, ok := c.vms[k]
		if !ok {
			return nil, nil
		}
		delete(c.vms, k)
		// Cascade: resources with deleteOption Delete go with the VM, the rest are detached.
		var refs []*armcompute.NetworkInterfaceReference
		if vm.Properties.NetworkProfile != nil {
			refs = vm.Properties.NetworkProfile.NetworkInterfaces
		}
		for _, ref := range refs {
			nk := key(rg, lastSegment(deref(ref.ID)))
			nic := c.nics[nk]
			if nic == nil {
				continue
			}
			if ref.Properties != nil && deref(ref.Properties.DeleteOption) == armcompute.DeleteOptionsDelete {
				delete(c.nics, nk)
			} else {
				nic.Properties.VirtualMachine = nil
			}
		}
		if sp := vm.Properties.StorageProfile; sp != nil {
			if sp.OSDisk != nil {
				c.releaseDisk(rg, sp.OSDisk.ManagedDisk, sp.OSDisk.DeleteOption)
			}
			for _, dd := range sp.DataDisks {
				c.releaseDisk(rg, dd.ManagedDisk, dd.DeleteOption)
			}
		}
		return nil, nil
	})
	return lroResponder(c.polls(OpDeleteVM), http.StatusAccepted, http.StatusOK, armcompute.VirtualMachinesClientDeleteResponse{}), errResp
}

// releaseDisk deletes or detaches a disk of a deleted VM. Callers hold c.mu.
func (c *computeAPI) releaseDisk(rg string, md *armcompute.ManagedDiskParameters, opt *armcompute.DiskDeleteOptionTypes) {
	if md == nil || md.ID == nil {
		return
	}
	dk := key(rg, lastSegment(*md.ID))
	d := c.disks[dk]
	if d == nil {
		return
	}
	if deref(opt) == armcompute.DiskDeleteOptionTypesDelete {
		delete(c.disks, dk)
		return
	}
	d.ManagedBy = nil
	d.Properties.DiskState = ptr.To(armcompute.DiskStateUnattached)
}

// newDisk stores a managed disk. Callers hold c.mu.
func (c *computeAPI) newDisk(rg, name, location string, zones []string, sku armcompute.DiskStorageAccountTypes, sizeGB int32, tags map[string]*string) *armcompute.Disk {
	d := &armcompute.Disk{
		ID:       ptr.To(c.resourceID(rg, "Microsoft.Compute/disks", name)),
		Name:     ptr.To(name),
		Type:     ptr.To("Microsoft.Compute/disks"),
		Location: ptr.To(location),
		Tags:     tags,
		SKU:      &armcompute.DiskSKU{Name: &sku},
		Properties: &armcompute.DiskProperties{
			DiskSizeGB:        &sizeGB,
			DiskState:         ptr.To(armcompute.DiskStateUnattached),
			ProvisioningState: ptr.To(StateSucceeded),
			TimeCreated:       ptr.To(time.Now().UTC()),
			UniqueID:          ptr.To(c.newID()),
		},
	}
	for _, z := range zones {
		d.Zones = append(d.Zones, ptr.To(z))
	}
	c.disks[key(rg, name)] = d
	return d
}

func (c *computeAPI) attachDisk(d *armcompute.Disk, vmID string) {
	d.ManagedBy = &vmID
	d.Properties.DiskState = ptr.To(armcompute.DiskStateAttached)
}

func storageType(md *armcompute.ManagedDiskParameters) armcompute.DiskStorageAccountTypes {
	if md == nil || md.StorageAccountType == nil {
		return armcompute.DiskStorageAccountTypesStandardLRS
	}
	return armcompute.DiskStorageAccountTypes(*md.StorageAccountType)
}

func (c *computeAPI) disksServer() computefake.DisksServer {
	return computefake.DisksServer{
		BeginCreateOrUpdate: func(_ context.Context, rg, name string, in armcompute.Disk, _ *armcompute.DisksClientBeginCreateOrUpdateOptions) (resp azfake.PollerResponder[armcompute.DisksClientCreateOrUpdateResponse], errResp azfake.ErrorResponder) {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.groups[strings.ToLower(rg)] == nil {
				return resp, fail(errResourceGroupNotFound(rg))
			}
			k := key(rg, name)
			if d, ok := c.disks[k]; ok {
				if in.Tags != nil {
					d.Tags = in.Tags
				}
				return lroResponder(0, http.StatusAccepted, http.StatusOK, armcompute.DisksClientCreateOrUpdateResponse{Disk: *clone(d)}), errResp
			}
			if in.Properties == nil || in.Properties.CreationData == nil || in.Properties.CreationData.CreateOption == nil {
				return resp, fail(errInvalidParameter("disk.creationData.createOption", "Required parameter 'disk.creationData.createOption' is missing (null)."))
			}
			cd := in.Properties.CreationData
			switch *cd.CreateOption {
			case armcompute.DiskCreateOptionEmpty:
				if deref(in.Properties.DiskSizeGB) <= 0 {
					return resp, fail(errInvalidParameter("disk.diskSizeGB", "Required parameter 'disk.diskSizeGB' is missing (null)."))
				}
			case armcompute.DiskCreateOptionFromImage:
				if cd.ImageReference == nil && cd.GalleryImageReference == nil {
					return resp, fail(errInvalidParameter("disk.creationData.imageReference", "Required parameter 'disk.creationData.imageReference' is missing (null)."))
				}
			}
			sku := armcompute.DiskStorageAccountTypesStandardLRS
			if in.SKU != nil && in.SKU.Name != nil {
				sku = *in.SKU.Name
			}
			sizeGB := deref(in.Properties.DiskSizeGB)
			if sizeGB == 0 {
				sizeGB = 30
			}
			d := c.newDisk(rg, name, deref(in.Location), derefAll(in.Zones), sku, sizeGB, in.Tags)
			d.Properties.CreationData = clone(cd)
			d.Properties.ProvisioningState = ptr.To(StateCreating)
			c.startLRO(deref(d.ID), OpCreateDisk, func() (any, *ARMError) {
				c.mu.Lock()
				defer c.mu.Unlock()
				d, ok := c.disks[k]
				if !ok {
					return nil, nil
				}
				d.Properties.ProvisioningState = ptr.To(StateSucceeded)
				return clone(d), nil
			})
			return lroResponder(c.polls(OpCreateDisk), http.StatusAccepted, http.StatusOK, armcompute.DisksClientCreateOrUpdateResponse{Disk: *clone(d)}), errResp
		},
		Get: func(_ context.Context, rg, name string, _ *armcompute.DisksClientGetOptions) (resp azfake.Responder[armcompute.DisksClientGetResponse], errResp azfake.ErrorResponder) {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.groups[strings.ToLower(rg)] == nil {
				return resp, fail(errResourceGroupNotFound(rg))
			}
			d, ok := c.disks[key(rg, name)]
			if !ok {
				return resp, fail(errResourceNotFound("Microsoft.Compute/disks", rg, name))
			}
			resp.SetResponse(http.StatusOK, armcompute.DisksClientGetResponse{Disk: *clone(d)}, nil)
			return resp, errResp
		},
		BeginUpdate: func(_ context.Context, rg, name string, in armcompute.DiskUpdate, _ *armcompute.DisksClientBeginUpdateOptions) (resp azfake.PollerResponder[armcompute.DisksClientUpdateResponse], errResp azfake.ErrorResponder) {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.groups[strings.ToLower(rg)] == nil {
				return resp, fail(errResourceGroupNotFound(rg))
			}
			k := key(rg, name)
			d, ok := c.disks[k]
			if !ok {
				return resp, fail(errResourceNotFound("Microsoft.Compute/disks", rg, name))
			}
			if in.Tags != nil {
				d.Tags = in.Tags
			}
			c.startLRO(deref(d.ID), OpUpdateDisk, func() (any, *ARMError) {
				c.mu.Lock()
				defer c.mu.Unlock()
				if d, ok := c.disks[k]; ok {
					return clone(d), nil
				}
				return nil, nil
			})
			return lroResponder(c.polls(OpUpdateDisk), http.StatusAccepted, http.StatusOK, armcompute.DisksClientUpdateResponse{Disk: *clone(d)}), errResp
		},
		BeginDelete: func(_ context.Context, rg, name string, _ *armcompute.DisksClientBeginDeleteOptions) (resp azfake.PollerResponder[armcompute.DisksClientDeleteResponse], errResp azfake.ErrorResponder) {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.groups[strings.ToLower(rg)] == nil {
				return resp, fail(errResourceGroupNotFound(rg))
			}
			k := key(rg, name)
			d, ok := c.disks[k]
			if !ok {
				return lroResponder(0, http.StatusAccepted, http.StatusNoContent, armcompute.DisksClientDeleteResponse{}), errResp
			}
			if d.ManagedBy != nil {
				return resp, fail(armErr(http.StatusConflict, "OperationNotAllowed", "Disk %s is attached to VM %s.", name, *d.ManagedBy))
			}
			d.Properties.ProvisioningState = ptr.To(StateDeleting)
			c.startLRO(deref(d.ID), OpDeleteDisk, func() (any, *ARMError) {
				c.mu.Lock()
				defer c.mu.Unlock()
				delete(c.disks, k)
				return nil, nil
			})
			return lroResponder(c.polls(OpDeleteDisk), http.StatusAccepted, http.StatusOK, armcompute.DisksClientDeleteResponse{}), errResp
		},
		NewListByResourceGroupPager: func(rg string, _ *armcompute.DisksClientListByResourceGroupOptions) (resp azfake.PagerResponder[armcompute.DisksClientListByResourceGroupResponse]) {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.groups[strings.ToLower(rg)] == nil {
				resp.AddError(errResourceGroupNotFound(rg))
				return resp
			}
			var all []*armcompute.Disk
			for _, k := range sortedKeys(c.disks, rg) {
				all = append(all, clone(c.disks[k]))
			}
			for _, page := range pages(all, c.pageSize) {
				resp.AddPage(http.StatusOK, armcompute.DisksClientListByResourceGroupResponse{DiskList: armcompute.DiskList{Value: page}}, nil)
			}
			return resp
		},
	}
}

func (c *computeAPI) imagesServer() computefake.VirtualMachineImagesServer {
	return computefake.VirtualMachineImagesServer{
		Get: func(_ context.Context, location, publisher, offer, sku, version string, _ *armcompute.VirtualMachineImagesClientGetOptions) (resp azfake.Responder[armcompute.VirtualMachineImagesClientGetResponse], errResp azfake.ErrorResponder) {
			c.mu.Lock()
			defer c.mu.Unlock()
			img, ok := c.images[imageKey(location, publisher, offer, sku, version)]
			if !ok {
				return resp, fail(armErr(http.StatusNotFound, "NotFound", "Artifact: VMImage was not found."))
			}
			resp.SetResponse(http.StatusOK, armcompute.VirtualMachineImagesClientGetResponse{VirtualMachineImage: *clone(img)}, nil)
			return resp, errResp
		},
		List: func(_ context.Context, location, publisher, offer, sku string, opts *armcompute.VirtualMachineImagesClientListOptions) (resp azfake.Responder[armcompute.VirtualMachineImagesClientListResponse], errResp azfake.ErrorResponder) {
			c.mu.Lock()
			defer c.mu.Unlock()
			versions := c.imageVersions(location, publisher, offer, sku)
			if len(versions) == 0 {
				return resp, fail(armErr(http.StatusNotFound, "NotFound", "Artifact: VMImage was not found."))
			}
			if opts != nil && strings.EqualFold(strings.TrimSpace(deref(opts.Orderby)), "name desc") {
				for i, j := 0, len(versions)-1; i < j; i, j = i+1, j-1 {
					versions[i], versions[j] = versions[j], versions[i]
				}
			}
			if opts != nil && opts.Top != nil && int(*opts.Top) < len(versions) {
				versions = versions[:*opts.Top]
			}
			var out []*armcompute.VirtualMachineImageResource
			for _, v := range versions {
				img := c.images[imageKey(location, publisher, offer, sku, v)]
				out = append(out, &armcompute.VirtualMachineImageResource{ID: img.ID, Name: img.Name, Location: img.Location})
			}
			resp.SetResponse(http.StatusOK, armcompute.VirtualMachineImagesClientListResponse{VirtualMachineImageResourceArray: out}, nil)
			return resp, errResp
		},
	}
}

// imageVersions returns the versions of an image, oldest first. Callers hold c.mu.
func (c *computeAPI) imageVersions(location, publisher, offer, sku string) []string {
	prefix := imageKey(location, publisher, offer, sku, "")
	var versions []string
	for k, img := range c.images {
		if strings.HasPrefix(k, prefix) {
			versions = append(versions, deref(img.Name))
		}
	}
	sort.Slice(versions, func(i, j int) bool { return versionLess(versions[i], versions[j]) })
	return versions
}

// versionLess orders image versions numerically part by part ("1.10.0" after "1.9.0").
func versionLess(a, b string) bool {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(pa) && i < len(pb); i++ {
		na, ea := strconv.Atoi(pa[i])
		nb, eb := strconv.Atoi(pb[i])
		if ea == nil && eb == nil {
			if na != nb {
				return na < nb
			}
			continue
		}
		if pa[i] != pb[i] {
			return pa[i] < pb[i]
		}
	}
	return len(pa) < len(pb)
}

var sizeCores = regexp.MustCompile(`(?i)^(?:standard|basic)_[a-z]+?(\d+)`)

// coresOf reads the vCPU count from a VM size name (Standard_D4s_v3 -> 4).
func coresOf(size string) int {
	if m := sizeCores.FindStringSubmatch(size); m != nil {
		if n, err := strconv.Atoi(m[1]); err == nil && n > 0 {
			return n
		}
	}
	return 2
}

// renderVM is a VM as the API returns it: Azure never returns customData or the admin password.
func renderVM(vm *armcompute.VirtualMachine) *armcompute.VirtualMachine {
	out := clone(vm)
	if out.Properties != nil && out.Properties.OSProfile != nil {
		out.Properties.OSProfile.CustomData = nil
		out.Properties.OSProfile.AdminPassword = nil
	}
	return out
}

func sortedKeys[T any](m map[string]T, rg string) []string {
	prefix := strings.ToLower(rg) + "/"
	var keys []string
	for k := range m {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

func pages[T any](items []T, size int) [][]T {
	if len(items) == 0 {
		return [][]T{{}}
	}
	var out [][]T
	for len(items) > 0 {
		n := min(size, len(items))
		out = append(out, items[:n])
		items = items[n:]
	}
	return out
}

func derefAll(in []*string) []string {
	var out []string
	for _, s := range in {
		out = append(out, deref(s))
	}
	return out
}
