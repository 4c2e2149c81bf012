package azure

import (
	"context"
	"errors"
	"log/slog"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v8"
	"k8s.io/utils/ptr"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/kit"
)

// DeleteMachine deletes the machine's VM and then its NIC and disks by name, so leftovers of a
// half-made machine go too. A missing resource group or VM is success.
func (d *Driver) DeleteMachine(ctx context.Context, req *driver.DeleteMachineRequest) (*driver.DeleteMachineResponse, error) {
	spec, cs, err := d.prepare(req.MachineClass, req.Secret)
	if err != nil {
		return nil, err
	}
	if _, err := kit.MachineName(ProviderName, req.Machine); err != nil {
		return nil, err
	}
	name, err := vmNameForDelete(req.Machine)
	if err != nil {
		// CreateMachine refuses such names, so no VM of it can exist: deleting it is done.
		d.log.Info("azure: machine name cannot name a VM; nothing to delete", "machine", req.Machine.Name)
		return &driver.DeleteMachineResponse{}, nil
	}
	ctx, cancel := d.opts.Bound(ctx)
	defer cancel()
	log := d.log.With("machine", name, "resourceGroup", spec.ResourceGroup)

	vm, err := cs.vms.Get(ctx, spec.ResourceGroup, name, nil)
	switch {
	case isGroupNotFound(err):
		log.Info("azure: resource group is gone; nothing to delete")
		return &driver.DeleteMachineResponse{}, nil
	case isNotFound(err):
		if err := d.deleteLeftovers(ctx, cs, spec, name, log); err != nil {
			return nil, err
		}
		return &driver.DeleteMachineResponse{}, nil
	case err != nil:
		return nil, statusOf("get VM "+name, err)
	}
	if foreignCluster(spec, vm.Tags) {
		return nil, driver.Errorf(driver.FailedPrecondition, "azure: VM %q in resource group %q carries another cluster's tag; not deleting it: check the MachineClass's resourceGroup and tags", name, spec.ResourceGroup)
	}
	if err := d.deleteVMAndLeftovers(ctx, cs, spec, name, &vm.VirtualMachine, log); err != nil {
		return nil, err
	}
	return &driver.DeleteMachineResponse{}, nil
}

// deleteVMAndLeftovers sets the VM's own NIC and disks to be deleted with it (when the VM can
// still be updated), deletes it, and then deletes whatever of them is left.
func (d *Driver) deleteVMAndLeftovers(ctx context.Context, cs *clientSet, spec *ProviderSpec, name string, vm *armcompute.VirtualMachine, log *slog.Logger) error {
	if update := cascadeUpdate(spec, vm); update != nil {
		// Deleting NICs and disks with the VM avoids Azure's NIC reservation after VM deletion.
		// A failed update is not fatal: the leftovers are deleted by name afterwards.
		if poller, err := cs.vms.BeginUpdate(ctx, spec.ResourceGroup, name, *update, nil); err != nil {
			log.Warn("azure: could not set cascade delete on the VM's NIC and disks", "error", driver.MessageOf(statusOf("update VM "+name, err)))
		} else if _, err := poller.PollUntilDone(ctx, d.pollOptions()); err != nil {
			log.Warn("azure: could not set cascade delete on the VM's NIC and disks", "error", driver.MessageOf(statusOf("update VM "+name, err)))
		}
	}
	log.Info("azure: deleting VM")
	if err := d.deleteVM(ctx, cs, spec, name); err != nil {
		return err
	}
	return d.deleteLeftovers(ctx, cs, spec, name, log)
}

// cascadeUpdate returns the update that sets deleteOption Delete on the VM's own NIC and disks,
// or nil when nothing needs it or the VM cannot be updated (provisioning failed, or a disk is
// being detached).
func cascadeUpdate(spec *ProviderSpec, vm *armcompute.VirtualMachine) *armcompute.VirtualMachineUpdate {
	p := vm.Properties
	if p == nil || strings.EqualFold(ptr.Deref(p.ProvisioningState, ""), "Failed") {
		return nil
	}
	name := ptr.Deref(vm.Name, "")
	update := &armcompute.VirtualMachineUpdate{Properties: &armcompute.VirtualMachineProperties{}}
	changed := false
	if p.NetworkProfile != nil {
		for _, ref := range p.NetworkProfile.NetworkInterfaces {
			if !strings.EqualFold(lastSegment(ptr.Deref(ref.ID, "")), nicName(name)) {
				continue
			}
			if ref.Properties != nil && ptr.Deref(ref.Properties.DeleteOption, "") == armcompute.DeleteOptionsDelete {
				continue
			}
			update.Properties.NetworkProfile = &armcompute.NetworkProfile{NetworkInterfaces: []*armcompute.NetworkInterfaceReference{{
				ID: ref.ID, Properties: &armcompute.NetworkInterfaceReferenceProperties{Primary: ptr.To(true), DeleteOption: ptr.To(armcompute.DeleteOptionsDelete)},
			}}}
			changed = true
		}
	}
	if sp := p.StorageProfile; sp != nil {
		ours := map[string]bool{}
		for _, n := range diskNames(name, spec) {
			ours[strings.ToLower(n)] = true
		}
		update.Properties.StorageProfile = &armcompute.StorageProfile{}
		if sp.OSDisk != nil && ptr.Deref(sp.OSDisk.DeleteOption, "") != armcompute.DiskDeleteOptionTypesDelete {
			update.Properties.StorageProfile.OSDisk = &armcompute.OSDisk{Name: sp.OSDisk.Name, DeleteOption: ptr.To(armcompute.DiskDeleteOptionTypesDelete)}
			changed = true
		}
		for _, dd := range sp.DataDisks {
			if ptr.Deref(dd.ToBeDetached, false) {
				return nil
			}
			if !ours[strings.ToLower(ptr.Deref(dd.Name, ""))] || ptr.Deref(dd.DeleteOption, "") == armcompute.DiskDeleteOptionTypesDelete {
				continue
			}
			update.Properties.StorageProfile.DataDisks = append(update.Properties.StorageProfile.DataDisks, &armcompute.DataDisk{
				Lun: dd.Lun, Name: dd.Name, CreateOption: dd.CreateOption, DeleteOption: ptr.To(armcompute.DiskDeleteOptionTypesDelete),
			})
			changed = true
		}
	}
	if !changed {
		return nil
	}
	return update
}

// deleteLeftovers deletes the machine's NIC and disks by name, skipping any that another cluster
// has tagged.
func (d *Driver) deleteLeftovers(ctx context.Context, cs *clientSet, spec *ProviderSpec, name string, log *slog.Logger) error {
	var errs []error
	if nic, err := cs.nics.Get(ctx, spec.ResourceGroup, nicName(name), nil); err == nil {
		if foreignCluster(spec, nic.Tags) {
			log.Warn("azure: leaving NIC of another cluster", "nic", nicName(name))
		} else if err := d.deleteNIC(ctx, cs, spec, nicName(name)); err != nil {
			errs = append(errs, err)
		}
	} else if !isNotFound(err) {
		errs = append(errs, statusOf("get NIC "+nicName(name), err))
	}
	for _, disk := range diskNames(name, spec) {
		got, err := cs.disks.Get(ctx, spec.ResourceGroup, disk, nil)
		if isNotFound(err) {
			continue
		}
		if err != nil {
			errs = append(errs, statusOf("get disk "+disk, err))
			continue
		}
		if foreignCluster(spec, got.Tags) {
			log.Warn("azure: leaving disk of another cluster", "disk", disk)
			continue
		}
		if err := d.deleteDisk(ctx, cs, spec, disk); err != nil {
			errs = append(errs, err)
		}
	}
	return joinStatus(errs)
}

func (d *Driver) deleteVM(ctx context.Context, cs *clientSet, spec *ProviderSpec, name string) error {
	poller, err := cs.vms.BeginDelete(ctx, spec.ResourceGroup, name, nil)
	if err == nil {
		_, err = poller.PollUntilDone(ctx, d.pollOptions())
	}
	if err != nil && !isNotFound(err) {
		return statusOf("delete VM "+name, err)
	}
	return nil
}

func (d *Driver) deleteNIC(ctx context.Context, cs *clientSet, spec *ProviderSpec, name string) error {
	poller, err := cs.nics.BeginDelete(ctx, spec.ResourceGroup, name, nil)
	if err == nil {
		_, err = poller.PollUntilDone(ctx, d.pollOptions())
	}
	if err != nil && !isNotFound(err) {
		return statusOf("delete NIC "+name, err)
	}
	return nil
}

func (d *Driver) deleteDisk(ctx context.Context, cs *clientSet, spec *ProviderSpec, name string) error {
	poller, err := cs.disks.BeginDelete(ctx, spec.ResourceGroup, name, nil)
	if err == nil {
		_, err = poller.PollUntilDone(ctx, d.pollOptions())
	}
	if err != nil && !isNotFound(err) {
		return statusOf("delete disk "+name, err)
	}
	return nil
}

// joinStatus combines errors into one status carrying the first error's code.
func joinStatus(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	if len(errs) == 1 {
		return errs[0]
	}
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = driver.MessageOf(e)
	}
	return driver.Wrap(driver.CodeOf(errs[0]), errors.Join(errs...), strings.Join(msgs, "; "))
}
