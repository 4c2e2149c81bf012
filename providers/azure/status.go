package azure

import (
	"context"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/resources/armresources/v3"
	"k8s.io/utils/ptr"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/kit"
)

// GetMachineStatus reports the machine's VM; NotFound when there is none.
func (d *Driver) GetMachineStatus(ctx context.Context, req *driver.GetMachineStatusRequest) (*driver.GetMachineStatusResponse, error) {
	spec, cs, err := d.prepare(req.MachineClass, req.Secret)
	if err != nil {
		return nil, err
	}
	if _, err := kit.MachineName(ProviderName, req.Machine); err != nil {
		return nil, err
	}
	name, err := vmName(req.Machine)
	if err != nil {
		return nil, driver.Errorf(driver.NotFound, "azure: no VM can be named %q: %s", req.Machine.Name, driver.MessageOf(err))
	}
	ctx, cancel := d.opts.Bound(ctx)
	defer cancel()
	vm, err := cs.vms.Get(ctx, spec.ResourceGroup, name, nil)
	if isNotFound(err) {
		return nil, driver.Errorf(driver.NotFound, "azure: no VM %q in resource group %q", name, spec.ResourceGroup)
	}
	if err != nil {
		return nil, statusOf("get VM "+name, err)
	}
	if !owns(spec, vm.Tags) {
		return nil, driver.Errorf(driver.NotFound, "azure: VM %q in resource group %q lacks this class's cluster and role tags, so it is not this machine's", name, spec.ResourceGroup)
	}
	return &driver.GetMachineStatusResponse{
		ProviderID: providerID(spec.Location, name),
		NodeName:   name,
		Addresses:  d.addresses(ctx, cs, spec, name),
	}, nil
}

// ListMachines lists the class's cluster and role: its VMs, and the NICs and disks whose VM is
// gone, each under the VM name it belongs to, so the orphan collector deletes leftovers too. The
// listing is filtered by the cluster tag on Azure's side.
func (d *Driver) ListMachines(ctx context.Context, req *driver.ListMachinesRequest) (*driver.ListMachinesResponse, error) {
	spec, cs, err := d.prepare(req.MachineClass, req.Secret)
	if err != nil {
		return nil, err
	}
	ctx, cancel := d.opts.Bound(ctx)
	defer cancel()
	filter := "tagName eq '" + strings.ReplaceAll(spec.clusterTag(), "'", "''") + "'"
	pager := cs.resources.NewListByResourceGroupPager(spec.ResourceGroup, &armresources.ClientListByResourceGroupOptions{Filter: &filter})
	out := map[string]string{}
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if isGroupNotFound(err) {
			return &driver.ListMachinesResponse{MachineList: out}, nil
		}
		if err != nil {
			return nil, statusOf("list resources of resource group "+spec.ResourceGroup, err)
		}
		for _, r := range page.Value {
			// ARM returns tags with a tag-name filter; when it does, the role must match too.
			if r.Tags != nil && !owns(spec, r.Tags) {
				continue
			}
			vm, ok := vmNameOf(ptr.Deref(r.Type, ""), ptr.Deref(r.Name, ""), spec)
			if !ok {
				continue
			}
			out[providerID(spec.Location, vm)] = vm
		}
	}
	return &driver.ListMachinesResponse{MachineList: out}, nil
}

// GetVolumeIDs returns the disk of each of the volumes that are Azure disks, skipping other
// volumes.
func (d *Driver) GetVolumeIDs(_ context.Context, req *driver.GetVolumeIDsRequest) (*driver.GetVolumeIDsResponse, error) {
	return volumes.IDs(req.PVSpecs), nil
}
