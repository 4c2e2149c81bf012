package gcp

import (
	"context"
	"fmt"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/kit"
)

// DeleteMachine deletes the machine's instance (found by its ProviderID, else by the machine's
// name in the class's zone) and waits for the operation; the disks go with it unless their
// autoDelete is false. An instance that does not exist is success; one of that name without the
// class's cluster and role tags is not the machine's: it is left alone and the answer is
// NotFound, as Gardener's provider answers (the controller reads NotFound as "no VM").
func (d *Driver) DeleteMachine(ctx context.Context, req *driver.DeleteMachineRequest) (*driver.DeleteMachineResponse, error) {
	spec, cs, err := d.prepare(req.MachineClass, req.Secret, kit.ToReach)
	if err != nil {
		return nil, err
	}
	zone, name, err := machineInstance(req.Machine, spec)
	if driver.IsCode(err, driver.NotFound) {
		// CreateMachine refuses such names, so no instance of it can exist.
		d.log.Info("gcp: machine name cannot name an instance; nothing to delete", "machine", req.Machine.Name)
		return &driver.DeleteMachineResponse{}, nil
	}
	if err != nil {
		return nil, err
	}
	ctx, cancel := d.opts.Bound(ctx)
	defer cancel()
	log := d.log.With("machine", name, "zone", zone)
	in, err := cs.getInstance(ctx, zone, name)
	if isNotFound(err) {
		log.Info("gcp: no instance; nothing to delete")
		return &driver.DeleteMachineResponse{}, nil
	}
	if err != nil {
		return nil, statusOf("get instance "+name, err)
	}
	if !owns(spec, in) {
		// Not this machine's instance: it is left alone, and the machine has no instance, as
		// Gardener's provider answers (its getVMs finds none, MachineNotFoundError).
		log.Info("gcp: an instance of the machine's name lacks the class's cluster and role tags; not deleting it", "tags", tagsOf(in))
		return nil, driver.Errorf(driver.NotFound, "gcp: instance %q in %s lacks this class's cluster and role tags (%v), so it is not this machine's: not deleted", name, zone, spec.scopeTags())
	}
	if in.DeletionProtection {
		return nil, driver.Errorf(driver.FailedPrecondition, "gcp: instance %q in %s has deletion protection: turn it off (gcloud compute instances update %s --zone %s --no-deletion-protection) and the machine is deleted", name, zone, name, zone)
	}
	log.Info("gcp: deleting instance")
	if err := d.deleteInstance(ctx, cs, zone, name); err != nil {
		return nil, statusOf(fmt.Sprintf("delete instance %s in %s", name, zone), err)
	}
	for _, disk := range in.Disks {
		if !disk.AutoDelete && disk.Type == "PERSISTENT" {
			log.Info("gcp: kept a disk of the instance: its autoDelete is false", "disk", lastSegment(disk.Source))
		}
	}
	log.Info("gcp: deleted instance")
	return &driver.DeleteMachineResponse{}, nil
}

// deleteInstance deletes an instance and awaits the operation; one that is already gone is
// success.
func (d *Driver) deleteInstance(ctx context.Context, cs *clientSet, zone, name string) error {
	op, err := cs.deleteInstance(ctx, zone, name)
	if isNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	return d.await(ctx, cs, zone, op)
}
