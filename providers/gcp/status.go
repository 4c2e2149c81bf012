package gcp

import (
	"context"
	"fmt"

	compute "google.golang.org/api/compute/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/machinist-io/machinist/core/driver"
)

// GetMachineStatus reports the machine's instance; NotFound when there is none of the class.
func (d *Driver) GetMachineStatus(ctx context.Context, req *driver.GetMachineStatusRequest) (*driver.GetMachineStatusResponse, error) {
	spec, cs, err := d.prepare(req.MachineClass, req.Secret, toReach)
	if err != nil {
		return nil, err
	}
	if req.Machine == nil || req.Machine.Name == "" {
		return nil, driver.Error(driver.InvalidArgument, "gcp: the request carries no machine name")
	}
	zone := spec.Zone
	name, err := instanceName(req.Machine)
	if _, z, n, ok := parseProviderID(req.Machine.Spec.ProviderID); ok {
		zone, name, err = z, n, nil
	}
	if err != nil {
		return nil, driver.Errorf(driver.NotFound, "gcp: no instance can be named %q: %s", req.Machine.Name, driver.MessageOf(err))
	}
	ctx, cancel := d.bound(ctx)
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
	spec, cs, err := d.prepare(req.MachineClass, req.Secret, toReach)
	if err != nil {
		return nil, err
	}
	ctx, cancel := d.bound(ctx)
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

// gcePDCSIDriver is the Compute Engine persistent disk CSI driver's name.
const gcePDCSIDriver = "pd.csi.storage.gke.io"

// GetVolumeIDs returns the disk of each in-tree gcePersistentDisk volume (its PD name) and each
// pd.csi.storage.gke.io volume (its volume handle), skipping other volumes, as Gardener's
// provider does (pkg/gcp/machine_controller.go, GetVolumeIDs).
func (d *Driver) GetVolumeIDs(_ context.Context, req *driver.GetVolumeIDsRequest) (*driver.GetVolumeIDsResponse, error) {
	ids := []string{}
	for _, spec := range req.PVSpecs {
		if id := volumeID(spec); id != "" {
			ids = append(ids, id)
		}
	}
	return &driver.GetVolumeIDsResponse{VolumeIDs: ids}, nil
}

func volumeID(spec *corev1.PersistentVolumeSpec) string {
	switch {
	case spec == nil:
		return ""
	case spec.GCEPersistentDisk != nil:
		return spec.GCEPersistentDisk.PDName
	case spec.CSI != nil && spec.CSI.Driver == gcePDCSIDriver:
		return spec.CSI.VolumeHandle
	}
	return ""
}
