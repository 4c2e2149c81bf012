package aws

import (
	"context"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"k8s.io/utils/ptr"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/kit"
)

// instanceOf finds the machine's live instance as Gardener's provider does
// (pkg/aws/core_util.go getMatchingInstancesForMachine): the class's live instances with its
// Name, else the one its provider ID names. NotFound when there is none, OutOfRange when several
// carry its name. Unlike Gardener's, the instance found by provider ID counts only when it is
// live and carries the class's tags: a terminated instance is NotFound, so the controller
// replaces the machine instead of waiting on a VM that is gone.
func (d *Driver) instanceOf(ctx context.Context, r *request, m *v1alpha1.Machine) (*ec2types.Instance, error) {
	name, err := kit.MachineName(ProviderName, m)
	if err != nil {
		return nil, err
	}
	found, err := d.byName(ctx, r, name)
	if err != nil {
		return nil, err
	}
	switch len(found) {
	case 1:
		return &found[0], nil
	case 0:
	default:
		return nil, driver.Errorf(driver.OutOfRange, "aws: machine %s has %d instances (%s): terminate all but the one its node runs on", name, len(found), strings.Join(instanceIDs(found), ", "))
	}
	if id, ok := instanceFromProviderID(m.Spec.ProviderID); ok {
		inst, err := d.byID(ctx, r, id)
		if err != nil {
			return nil, err
		}
		if inst != nil && live(inst) && owns(r.spec, inst) {
			return inst, nil
		}
	}
	return nil, driver.Errorf(driver.NotFound, "aws: machine %s has no live instance of cluster and role %s in region %s", name, strings.Join(r.spec.scopeTags(), ", "), r.spec.Region)
}

// GetMachineStatus reports the machine's instance. As Gardener's provider does, it answers
// Uninitialized (with the instance) while the class disables the source/destination check and
// an interface still has it, or an interface lacks its IPv6 prefixes: InitializeMachine does
// both.
func (d *Driver) GetMachineStatus(ctx context.Context, req *driver.GetMachineStatusRequest) (*driver.GetMachineStatusResponse, error) {
	r, err := d.prepare(ctx, req.MachineClass, req.Secret, kit.ToReach)
	if err != nil {
		return nil, err
	}
	ctx, cancel := d.opts.Bound(ctx)
	defer cancel()
	inst, err := d.instanceOf(ctx, r, req.Machine)
	if err != nil {
		return nil, err
	}
	pid, node, addrs := identity(r.spec.Region, inst)
	resp := &driver.GetMachineStatusResponse{ProviderID: pid, NodeName: node, Addresses: addrs}
	if todo := pendingInitialization(r.spec, inst); len(todo) > 0 {
		return resp, driver.Errorf(driver.Uninitialized, "aws: instance %s is not initialized yet: %s", ptr.Deref(inst.InstanceId, ""), strings.Join(todo, "; "))
	}
	return resp, nil
}

// pendingInitialization lists what InitializeMachine still has to do on the instance.
func pendingInitialization(spec *ProviderSpec, inst *ec2types.Instance) []string {
	var todo []string
	disable := spec.SrcAndDstChecksEnabled != nil && !*spec.SrcAndDstChecksEnabled
	for _, ni := range inst.NetworkInterfaces {
		id := ptr.Deref(ni.NetworkInterfaceId, "")
		if disable && !efa(ni) && ptr.Deref(ni.SourceDestCheck, false) {
			todo = append(todo, "disable the source/destination check of "+id)
		}
		if want := prefixCount(spec, ni); want > int32(len(ni.Ipv6Prefixes)) {
			todo = append(todo, fmt.Sprintf("assign %d IPv6 prefixes to %s", want-int32(len(ni.Ipv6Prefixes)), id))
		}
	}
	return todo
}

// efa reports whether an interface is an EFA one, whose source/destination check cannot change.
func efa(ni ec2types.InstanceNetworkInterface) bool {
	t := ptr.Deref(ni.InterfaceType, "")
	return t == string(ec2types.NetworkInterfaceTypeEfa) || t == string(ec2types.NetworkInterfaceTypeEfaOnly)
}

// prefixCount is the ipv6PrefixCount the class asks for on the interface at its device index.
func prefixCount(spec *ProviderSpec, ni ec2types.InstanceNetworkInterface) int32 {
	if ni.Attachment == nil {
		return 0
	}
	idx := ptr.Deref(ni.Attachment.DeviceIndex, -1)
	for i, n := range spec.NetworkInterfaces {
		at := int32(i)
		if n.DeviceIndex != nil {
			at = *n.DeviceIndex
		}
		if at == idx && ptr.Deref(n.NetworkCardIndex, 0) == ptr.Deref(ni.Attachment.NetworkCardIndex, 0) {
			return ptr.Deref(n.Ipv6PrefixCount, 0)
		}
	}
	return 0
}

// InitializeMachine disables the source/destination check of the instance's interfaces (not
// EFA ones) when the class says srcAndDstChecksEnabled: false, and assigns the IPv6 prefixes
// the class asks for, as Gardener's provider does (pkg/aws/core.go InitializeMachine). It is
// idempotent; an instance not (yet) found is Uninitialized.
func (d *Driver) InitializeMachine(ctx context.Context, req *driver.InitializeMachineRequest) (*driver.InitializeMachineResponse, error) {
	r, err := d.prepare(ctx, req.MachineClass, req.Secret, kit.ToCreate)
	if err != nil {
		return nil, err
	}
	ctx, cancel := d.opts.Bound(ctx)
	defer cancel()
	inst, err := d.instanceOf(ctx, r, req.Machine)
	if driver.IsCode(err, driver.NotFound) {
		return nil, driver.Errorf(driver.Uninitialized, "%s; initialization waits for it", driver.MessageOf(err))
	}
	if err != nil {
		return nil, err
	}
	id := ptr.Deref(inst.InstanceId, "")
	disable := r.spec.SrcAndDstChecksEnabled != nil && !*r.spec.SrcAndDstChecksEnabled
	for _, ni := range inst.NetworkInterfaces {
		nid := ptr.Deref(ni.NetworkInterfaceId, "")
		if disable && !efa(ni) && ptr.Deref(ni.SourceDestCheck, false) {
			_, err := r.api.ModifyNetworkInterfaceAttribute(ctx, &ec2.ModifyNetworkInterfaceAttributeInput{
				NetworkInterfaceId: ni.NetworkInterfaceId,
				SourceDestCheck:    &ec2types.AttributeBooleanValue{Value: aws.Bool(false)},
			})
			if err != nil {
				return nil, statusOf(r.spec, fmt.Sprintf("disable the source/destination check of %s (instance %s)", nid, id), err)
			}
		}
		if want, have := prefixCount(r.spec, ni), int32(len(ni.Ipv6Prefixes)); want > have {
			_, err := r.api.AssignIpv6Addresses(ctx, &ec2.AssignIpv6AddressesInput{NetworkInterfaceId: ni.NetworkInterfaceId, Ipv6PrefixCount: aws.Int32(want - have)})
			if err != nil {
				return nil, statusOf(r.spec, fmt.Sprintf("assign IPv6 prefixes to %s (instance %s)", nid, id), err)
			}
		}
	}
	pid, node, addrs := identity(r.spec.Region, inst)
	return &driver.InitializeMachineResponse{ProviderID: pid, NodeName: node, Addresses: addrs}, nil
}

// ListMachines lists the live instances that carry every cluster and role tag of the class, as
// provider ID -> machine (their Name tag), filtered by EC2.
func (d *Driver) ListMachines(ctx context.Context, req *driver.ListMachinesRequest) (*driver.ListMachinesResponse, error) {
	r, err := d.prepare(ctx, req.MachineClass, req.Secret, kit.ToReach)
	if err != nil {
		return nil, err
	}
	ctx, cancel := d.opts.Bound(ctx)
	defer cancel()
	found, err := d.describe(ctx, r, "list the instances of class "+req.MachineClass.Name, scopeFilters(r.spec))
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(found))
	for i := range found {
		pid, _, _ := identity(r.spec.Region, &found[i])
		name, _ := tagValue(found[i].Tags, NameTag)
		out[pid] = name
	}
	return &driver.ListMachinesResponse{MachineList: out}, nil
}

// GetVolumeIDs returns the EBS volume of each in-tree AWSElasticBlockStore volume and each
// ebs.csi.aws.com volume, skipping other volumes.
func (d *Driver) GetVolumeIDs(_ context.Context, req *driver.GetVolumeIDsRequest) (*driver.GetVolumeIDsResponse, error) {
	return volumes.IDs(req.PVSpecs), nil
}
