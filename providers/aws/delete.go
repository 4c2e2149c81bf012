package aws

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/kit"
)

// DeleteMachine terminates the machine's instance: the one its provider ID names, or, when the
// machine has none, every live instance of the class that carries its Name (as Gardener's
// provider does, pkg/aws/core.go DeleteMachine). Its volumes and interfaces go with it unless
// the class keeps them (deleteOnTermination false). An instance that does not exist is success;
// one tagged for another cluster is left alone.
func (d *Driver) DeleteMachine(ctx context.Context, req *driver.DeleteMachineRequest) (*driver.DeleteMachineResponse, error) {
	r, err := d.prepare(ctx, req.MachineClass, req.Secret, kit.ToReach)
	if err != nil {
		return nil, err
	}
	name, err := kit.MachineName(ProviderName, req.Machine)
	if err != nil {
		return nil, err
	}
	ctx, cancel := d.opts.Bound(ctx)
	defer cancel()
	log := d.log.With("machine", name, "region", r.spec.Region)

	var ids []string
	if pid := req.Machine.Spec.ProviderID; pid != "" {
		// By ID only: the orphan collector deletes a second instance of a live machine this
		// way, and a lookup by name would find the machine's own instance too.
		id, ok := instanceFromProviderID(pid)
		if !ok {
			return nil, driver.Errorf(driver.InvalidArgument, "aws: machine %s: providerID %q is not aws:///<zone>/<instance-id>: fix or clear spec.providerID", name, pid)
		}
		inst, err := d.byID(ctx, r, id)
		if err != nil {
			return nil, err
		}
		if inst == nil || !live(inst) {
			log.Info("aws: instance is gone; nothing to delete", "instance", id)
			return &driver.DeleteMachineResponse{}, nil
		}
		if foreignCluster(r.spec, inst) {
			return nil, driver.Errorf(driver.FailedPrecondition, "aws: instance %s carries another cluster's tag; not terminating it: check the machine's providerID and the class's tags", id)
		}
		ids = []string{id}
	} else {
		found, err := d.byName(ctx, r, name)
		if err != nil {
			return nil, err
		}
		ids = instanceIDs(found)
	}
	if len(ids) == 0 {
		log.Info("aws: no instance; nothing to delete")
		return &driver.DeleteMachineResponse{}, nil
	}
	if err := d.terminate(ctx, r, ids); err != nil {
		return nil, err
	}
	log.Info("aws: terminated instance", "instances", ids)
	return &driver.DeleteMachineResponse{}, nil
}

// terminate terminates instances, one request each with DryRun false, as Gardener's provider
// sends it (pkg/aws/core_util.go terminateInstance); one that EC2 does not know is gone.
func (d *Driver) terminate(ctx context.Context, r *request, ids []string) error {
	for _, id := range ids {
		_, err := r.api.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}, DryRun: aws.Bool(false)})
		if errorCode(err) == "InvalidInstanceID.NotFound" {
			continue
		}
		if err != nil {
			return statusOf(r.spec, "terminate instance "+id, err)
		}
	}
	return nil
}
