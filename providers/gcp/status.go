package gcp

import (
	"context"
	"fmt"

	compute "google.golang.org/api/compute/v1"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/kit"
)

// GetMachineStatus reports the machine's instance; NotFound when there is none of the class.
func (d *Driver) GetMachineStatus(ctx context.Context, req *driver.GetMachineStatusRequest) (*driver.GetMachineStatusResponse, error) {
	spec, cs, err := d.prepare(req.MachineClass, req.Secret, kit.ToReach)
	if err != nil {
		return nil, err
	}
	zone, name, err := machineInstance(req.Machine, spec)
	if err != nil {
		return nil, err
	}
	ctx, cancel := d.opts.Bound(ctx)
	defer cancel()
	in, err := cs.getInstance(ctx, zone, name)
	if isNotFound(err) {
		return nil, driver.Errorf(driver.NotFound, "gcp: no instance %q in %s of project %s", name, zone, cs.project)
	}
	if err != nil {
		return nil, statusOf("get instance "+name, err)
	}
	if !owns(spec, in) {
		return nil, driver.Errorf(driver.NotFound, "gcp: instance %q in %s lacks this class's cluster and role tags, so it is not this machine's", name, zone)
	}
	return &driver.GetMachineStatusResponse{
		ProviderID: providerID(cs.project, zone, name),
		NodeName:   name,
		Addresses:  addresses(in),
	}, nil
}

// ListMachines lists the instances of the class's zone that carry its cluster and role tags. It
// reads the whole zone page by page and picks them on its side, as Gardener's provider does
// (pkg/gcp/machine_controller_util.go, getVMs): Compute Engine's list filters do not reach into
// repeated fields such as tags.items (the discovery document's filter grammar compares a field
// with a string, number or boolean, and Compute Engine answers such filters 400 "Invalid list
// filter expression").
func (d *Driver) ListMachines(ctx context.Context, req *driver.ListMachinesRequest) (*driver.ListMachinesResponse, error) {
	spec, cs, err := d.prepare(req.MachineClass, req.Secret, kit.ToReach)
	if err != nil {
		return nil, err
	}
	ctx, cancel := d.opts.Bound(ctx)
	defer cancel()
	out := map[string]string{}
	err = cs.listInstances(ctx, spec.Zone, func(page *compute.InstanceList) error {
		for _, in := range page.Items {
			if owns(spec, in) {
				out[providerID(cs.project, spec.Zone, in.Name)] = in.Name
			}
		}
		return nil
	})
	if err != nil {
		return nil, statusOf(fmt.Sprintf("list instances in %s", spec.Zone), err)
	}
	return &driver.ListMachinesResponse{MachineList: out}, nil
}

// GetVolumeIDs returns the disk of each of the volumes that are Compute Engine disks, skipping
// other volumes.
func (d *Driver) GetVolumeIDs(_ context.Context, req *driver.GetVolumeIDsRequest) (*driver.GetVolumeIDsResponse, error) {
	return volumes.IDs(req.PVSpecs), nil
}
