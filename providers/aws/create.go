package aws

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/kit"
)

const (
	// maxUserData is the most user data EC2 takes, before base64.
	maxUserData = 16 * 1024
	// PlacementAnnotation on a machine's node template holds an EC2 Placement as JSON, used
	// when the class has no placement (Gardener's awsPlacement, pkg/aws/core.go).
	PlacementAnnotation = "machine.sapcloud.io/awsPlacement"
	// maxTokenChain bounds how many terminated instances a create steps over (each answered for
	// an earlier client token of the machine) before it gives up. A Machine object rarely needs a
	// second instance (the MachineSet replaces a failed machine with a new one, of a new UID), but
	// a name reused without a UID (machinist driver create, again and again) walks the chain.
	maxTokenChain = 32
)

// CreateMachine launches the machine's instance, or returns the live instance that already
// carries the machine's Name and the class's cluster and role tags. RunInstances carries a
// client token derived from the machine, so a create retried after a crash or a lost answer
// gets the instance the first one launched. When the instance does not show up, the create
// terminates it.
func (d *Driver) CreateMachine(ctx context.Context, req *driver.CreateMachineRequest) (*driver.CreateMachineResponse, error) {
	r, err := d.prepare(ctx, req.MachineClass, req.Secret, kit.ToCreate)
	if err != nil {
		return nil, err
	}
	name, err := kit.MachineName(ProviderName, req.Machine)
	if err != nil {
		return nil, err
	}
	userData, err := r.secret.UserData()
	if err != nil {
		return nil, err
	}
	if len(userData) > maxUserData {
		return nil, driver.Errorf(driver.InvalidArgument, "aws: secret %s: userData is %d bytes; EC2 takes at most %d: shrink it", r.secret.Name(), len(userData), maxUserData)
	}
	placement, err := placementOf(r.spec, req.Machine)
	if err != nil {
		return nil, err
	}
	ctx, cancel := d.opts.Bound(ctx)
	defer cancel()
	log := d.log.With("machine", name, "region", r.spec.Region)

	found, err := d.byName(ctx, r, name)
	if err != nil {
		return nil, err
	}
	if len(found) > 0 {
		if len(found) > 1 {
			log.Warn("aws: several instances carry the machine's name; adopting the oldest, the orphan collector reports the others", "instances", instanceIDs(found))
		}
		log.Info("aws: adopting existing instance", "instance", ptr.Deref(found[0].InstanceId, ""), "state", found[0].State.Name)
		return createResponse(r.spec.Region, &found[0]), nil
	}

	rootDevice, err := d.rootDevice(ctx, r)
	if err != nil {
		return nil, err
	}
	input := runInput(r.spec, name, userData, rootDevice, placement)
	inst, err := d.run(ctx, r, req.Machine, req.MachineClass, input, log)
	if err != nil {
		return nil, err
	}
	id := ptr.Deref(inst.InstanceId, "")
	ready, err := d.waitVisible(ctx, r, id)
	switch {
	case err == nil:
	case ready != nil:
		// EC2 shut the instance down itself: nothing is left.
		return nil, err
	case ctx.Err() != nil:
		// The caller gave up (its deadline, lost leadership): another create of this machine
		// may be under way and adopt the instance, so terminating it could take it from under
		// that one. The next create adopts it; DeleteMachine finds it by name.
		return nil, driver.Errorf(driver.CodeOf(err), "%s; instance %s is left to the next create of the machine, which adopts it", driver.MessageOf(err), id)
	default:
		return nil, d.cleanup(ctx, r, id, err, log)
	}
	log.Info("aws: launched instance", "instance", id, "zone", ptr.Deref(ready.Placement.AvailabilityZone, ""), "node", ptr.Deref(ready.PrivateDnsName, ""))
	return createResponse(r.spec.Region, ready), nil
}

func createResponse(region string, i *ec2types.Instance) *driver.CreateMachineResponse {
	pid, node, addrs := identity(region, i)
	return &driver.CreateMachineResponse{ProviderID: pid, NodeName: node, Addresses: addrs}
}

// rootDevice returns the root device name of the class's AMI, which the root block device
// mapping must use.
func (d *Driver) rootDevice(ctx context.Context, r *request) (string, error) {
	out, err := r.api.DescribeImages(ctx, &ec2.DescribeImagesInput{ImageIds: []string{r.spec.AMI}})
	if err != nil {
		return "", statusOf(r.spec, "describe AMI "+r.spec.AMI, err)
	}
	if len(out.Images) == 0 {
		return "", driver.Errorf(driver.InvalidArgument, "aws: AMI %s is not visible in region %s: fix providerSpec.ami, or share the AMI with the account", r.spec.AMI, r.spec.Region)
	}
	root := ptr.Deref(out.Images[0].RootDeviceName, "")
	if root == "" {
		return "", driver.Errorf(driver.InvalidArgument, "aws: AMI %s has no root device: fix providerSpec.ami (an EBS-backed AMI)", r.spec.AMI)
	}
	return root, nil
}

// run calls RunInstances with the machine's client token. When EC2 answers with an instance
// that is already shutting down or terminated, the token launched an instance of this machine
// earlier that is gone since; the next token in the chain launches a new one.
func (d *Driver) run(ctx context.Context, r *request, m *v1alpha1.Machine, class *v1alpha1.MachineClass, input *ec2.RunInstancesInput, log *slog.Logger) (*ec2types.Instance, error) {
	after := ""
	for range maxTokenChain {
		input.ClientToken = aws.String(clientToken(m, class, after))
		out, err := r.api.RunInstances(ctx, input)
		if err != nil {
			st := statusOf(r.spec, "launch the instance of machine "+m.Name, err)
			// The request may have taken effect although its answer was lost: what it
			// launched carries the token, and is the machine's.
			if ctx.Err() == nil {
				if made := d.launchedWith(ctx, r, *input.ClientToken); made != nil {
					log.Info("aws: the launch took effect although its answer was lost", "instance", ptr.Deref(made.InstanceId, ""), "error", driver.MessageOf(st))
					return made, nil
				}
			}
			return nil, st
		}
		if len(out.Instances) == 0 {
			return nil, driver.Errorf(driver.Internal, "aws: launch the instance of machine %s: EC2 answered reservation %s without an instance", m.Name, ptr.Deref(out.ReservationId, ""))
		}
		inst := out.Instances[0]
		if live(&inst) {
			return &inst, nil
		}
		after = ptr.Deref(inst.InstanceId, "")
		log.Info("aws: the machine's client token names an instance that is gone; launching the next", "instance", after, "state", inst.State.Name)
	}
	return nil, driver.Errorf(driver.Internal, "aws: launch the instance of machine %s: %d instances launched for it were terminated since: delete and recreate the machine", m.Name, maxTokenChain)
}

// waitVisible waits until EC2's reads show the instance with its private DNS name. An instance
// EC2 shut down right after launch (capacity, a spot reclaim) is returned with the error that
// explains it.
func (d *Driver) waitVisible(ctx context.Context, r *request, id string) (*ec2types.Instance, error) {
	wctx, cancel := context.WithTimeout(ctx, d.opts.VisibleTimeout)
	defer cancel()
	var inst *ec2types.Instance
	backoff := wait.Backoff{Duration: d.opts.PollInterval, Factor: 1.5, Jitter: 0.1, Steps: math.MaxInt32, Cap: 15 * time.Second}
	err := wait.ExponentialBackoffWithContext(wctx, backoff, func(ctx context.Context) (bool, error) {
		i, err := d.byID(ctx, r, id)
		if err != nil || i == nil {
			return false, err
		}
		if !live(i) {
			inst = i
			return false, launchFailure(id, i)
		}
		if ptr.Deref(i.PrivateDnsName, "") == "" {
			return false, nil
		}
		inst = i
		return true, nil
	})
	switch {
	case err == nil:
		return inst, nil
	case inst != nil:
		return inst, err
	case wctx.Err() != nil && ctx.Err() == nil:
		return nil, driver.Errorf(driver.Unavailable, "aws: instance %s did not show up in EC2's reads within %s", id, d.opts.VisibleTimeout)
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || wctx.Err() != nil:
		return nil, statusOf(r.spec, "wait for instance "+id, ctx.Err())
	}
	return nil, err
}

// launchFailure explains an instance that EC2 shut down right after launching it.
func launchFailure(id string, i *ec2types.Instance) error {
	code, msg := "", ""
	if i.StateReason != nil {
		code, msg = ptr.Deref(i.StateReason.Code, ""), ptr.Deref(i.StateReason.Message, "")
	}
	switch code {
	case "Server.InsufficientInstanceCapacity", "Server.SpotInstanceTermination", "Server.SpotInstanceShutdown", "Client.VolumeLimitExceeded":
		return driver.Errorf(driver.ResourceExhausted, "aws: instance %s was %s right after launch: %s: %s: a fallback class takes over, else the machine is retried", id, i.State.Name, code, msg)
	}
	return driver.Errorf(driver.Internal, "aws: instance %s was %s right after launch: %s: %s", id, i.State.Name, code, msg)
}

// cleanup terminates the instance a failed create launched, on a deadline of its own (the
// caller's context may be why the create failed), and returns the create's error with what
// the cleanup did.
func (d *Driver) cleanup(ctx context.Context, r *request, id string, cause error, log *slog.Logger) error {
	cctx, cancel := d.opts.Cleanup(ctx)
	defer cancel()
	if err := d.terminate(cctx, r, []string{id}); err != nil {
		log.Warn("aws: terminating the instance of a failed create failed; the orphan collector will retry", "instance", id, "error", driver.MessageOf(err))
		return driver.Errorf(driver.CodeOf(cause), "%s; terminating instance %s failed too, the orphan collector will retry: %s", driver.MessageOf(cause), id, driver.MessageOf(err))
	}
	log.Info("aws: terminated the instance of a failed create", "instance", id)
	return driver.Errorf(driver.CodeOf(cause), "%s; instance %s was terminated", driver.MessageOf(cause), id)
}

// launchedWith returns the live instance launched with token, or nil when there is none or it
// cannot be told.
func (d *Driver) launchedWith(ctx context.Context, r *request, token string) *ec2types.Instance {
	filters := []ec2types.Filter{
		{Name: aws.String("client-token"), Values: []string{token}},
		{Name: aws.String("instance-state-name"), Values: liveStates},
	}
	found, err := d.describe(ctx, r, "look up the instances of client token "+token, filters)
	if err != nil || len(found) == 0 {
		return nil
	}
	return &found[0]
}

// runInput is the RunInstances request of a machine, as Gardener's provider makes it
// (pkg/aws/core.go CreateMachine): tags with Name = the machine on the instance, its volumes and
// interfaces; the root volume on the AMI's root device.
func runInput(spec *ProviderSpec, name string, userData []byte, rootDevice string, placement *ec2types.Placement) *ec2.RunInstancesInput {
	in := &ec2.RunInstancesInput{
		ImageId:             aws.String(spec.AMI),
		InstanceType:        ec2types.InstanceType(spec.MachineType),
		MinCount:            aws.Int32(1),
		MaxCount:            aws.Int32(1),
		UserData:            aws.String(base64.StdEncoding.EncodeToString(userData)),
		BlockDeviceMappings: blockDevices(spec.BlockDevices, rootDevice),
		NetworkInterfaces:   networkInterfaces(spec.NetworkInterfaces),
		TagSpecifications: []ec2types.TagSpecification{
			tagSpec(spec.Tags, ec2types.ResourceTypeInstance, name),
			tagSpec(spec.Tags, ec2types.ResourceTypeVolume, name),
			tagSpec(spec.Tags, ec2types.ResourceTypeNetworkInterface, name),
		},
		Placement: placement,
	}
	if spec.EbsOptimized {
		in.EbsOptimized = aws.Bool(true)
	}
	if spec.Monitoring {
		in.Monitoring = &ec2types.RunInstancesMonitoringEnabled{Enabled: aws.Bool(true)}
	}
	if spec.IAM.Name != "" {
		in.IamInstanceProfile = &ec2types.IamInstanceProfileSpecification{Name: aws.String(spec.IAM.Name)}
	} else {
		in.IamInstanceProfile = &ec2types.IamInstanceProfileSpecification{Arn: aws.String(spec.IAM.ARN)}
	}
	if k := ptr.Deref(spec.KeyName, ""); k != "" {
		in.KeyName = aws.String(k)
	}
	if m := spec.InstanceMetadataOptions; m != nil {
		in.MetadataOptions = &ec2types.InstanceMetadataOptionsRequest{
			HttpEndpoint:            ec2types.InstanceMetadataEndpointState(m.HTTPEndpoint),
			HttpPutResponseHopLimit: m.HTTPPutResponseHopLimit,
			HttpTokens:              ec2types.HttpTokensState(m.HTTPTokens),
			HttpProtocolIpv6:        ec2types.InstanceMetadataProtocolState(m.HTTPProtocolIPv6),
		}
	}
	if c := spec.CPUOptions; c != nil {
		in.CpuOptions = &ec2types.CpuOptionsRequest{CoreCount: c.CoreCount, ThreadsPerCore: c.ThreadsPerCore}
		if c.AmdSevSnp != nil {
			in.CpuOptions.AmdSevSnp = ec2types.AmdSevSnpSpecification(*c.AmdSevSnp)
		}
	}
	if c := spec.CapacityReservationTarget; c != nil {
		in.CapacityReservationSpecification = &ec2types.CapacityReservationSpecification{
			CapacityReservationPreference: ec2types.CapacityReservationPreference(c.CapacityReservationPreference),
		}
		if c.CapacityReservationID != nil || c.CapacityReservationResourceGroupArn != nil {
			in.CapacityReservationSpecification.CapacityReservationTarget = &ec2types.CapacityReservationTarget{
				CapacityReservationId:               c.CapacityReservationID,
				CapacityReservationResourceGroupArn: c.CapacityReservationResourceGroupArn,
			}
		}
	}
	switch {
	case spec.InstanceMarketOptions != nil:
		in.InstanceMarketOptions = &ec2types.InstanceMarketOptionsRequest{MarketType: ec2types.MarketType(spec.InstanceMarketOptions.MarketType)}
	case spec.SpotPrice != nil:
		in.InstanceMarketOptions = &ec2types.InstanceMarketOptionsRequest{
			MarketType:  ec2types.MarketTypeSpot,
			SpotOptions: &ec2types.SpotMarketOptions{SpotInstanceType: ec2types.SpotInstanceTypeOneTime},
		}
		if *spec.SpotPrice != "" {
			in.InstanceMarketOptions.SpotOptions.MaxPrice = spec.SpotPrice
		}
	}
	return in
}

// blockDevices maps the class's block devices: /root (or a single device) on the AMI's root
// device; volumes are deleted with the instance unless deleteOnTermination is false.
func blockDevices(devices []BlockDeviceMapping, rootDevice string) []ec2types.BlockDeviceMapping {
	out := make([]ec2types.BlockDeviceMapping, 0, len(devices))
	for _, dev := range devices {
		name := dev.DeviceName
		if name == RootDeviceName || len(devices) == 1 {
			name = rootDevice
		}
		ebs := &ec2types.EbsBlockDevice{
			Encrypted:           aws.Bool(dev.Ebs.Encrypted),
			VolumeSize:          aws.Int32(dev.Ebs.VolumeSize),
			VolumeType:          ec2types.VolumeType(dev.Ebs.VolumeType),
			DeleteOnTermination: aws.Bool(ptr.Deref(dev.Ebs.DeleteOnTermination, true)),
			Throughput:          dev.Ebs.Throughput,
			SnapshotId:          dev.Ebs.SnapshotID,
			KmsKeyId:            dev.Ebs.KmsKeyID,
		}
		if dev.Ebs.Iops > 0 {
			ebs.Iops = aws.Int32(dev.Ebs.Iops)
		}
		out = append(out, ec2types.BlockDeviceMapping{DeviceName: aws.String(name), Ebs: ebs})
	}
	return out
}

func networkInterfaces(nics []NetworkInterface) []ec2types.InstanceNetworkInterfaceSpecification {
	out := make([]ec2types.InstanceNetworkInterfaceSpecification, 0, len(nics))
	for i, n := range nics {
		s := ec2types.InstanceNetworkInterfaceSpecification{
			Groups:                   n.SecurityGroupIDs,
			AssociatePublicIpAddress: n.AssociatePublicIPAddress,
			DeleteOnTermination:      aws.Bool(ptr.Deref(n.DeleteOnTermination, true)),
			Description:              n.Description,
			SubnetId:                 aws.String(n.SubnetID),
			DeviceIndex:              aws.Int32(int32(i)),
			NetworkCardIndex:         n.NetworkCardIndex,
			InterfaceType:            n.InterfaceType,
		}
		if n.DeviceIndex != nil {
			s.DeviceIndex = n.DeviceIndex
		}
		if n.Ipv6AddressCount != nil {
			s.Ipv6AddressCount = n.Ipv6AddressCount
			s.PrimaryIpv6 = aws.Bool(ptr.Deref(n.PrimaryIpv6, true))
		}
		out = append(out, s)
	}
	return out
}

// tagSpec tags a resource with the class's tags and Name = the machine (the class's own Name
// tag is replaced: it identifies the machine).
func tagSpec(tags map[string]string, resource ec2types.ResourceType, machine string) ec2types.TagSpecification {
	out := ec2types.TagSpecification{ResourceType: resource}
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		if k == NameTag {
			continue
		}
		out.Tags = append(out.Tags, ec2types.Tag{Key: aws.String(k), Value: aws.String(tags[k])})
	}
	out.Tags = append(out.Tags, ec2types.Tag{Key: aws.String(NameTag), Value: aws.String(machine)})
	return out
}

// placementOf is the class's placement, else the machine's awsPlacement annotation.
func placementOf(spec *ProviderSpec, m *v1alpha1.Machine) (*ec2types.Placement, error) {
	if p := spec.Placement; p != nil {
		out := &ec2types.Placement{GroupId: p.GroupID, HostId: p.HostID, PartitionNumber: p.PartitionNumber, Affinity: p.Affinity}
		if p.Tenancy != nil {
			out.Tenancy = ec2types.Tenancy(*p.Tenancy)
		}
		return out, nil
	}
	raw := ""
	if m != nil {
		raw = m.Spec.NodeTemplateSpec.Annotations[PlacementAnnotation]
	}
	if raw == "" {
		return nil, nil
	}
	var p ec2types.Placement
	if err := json.Unmarshal([]byte(raw), &p); err != nil {
		return nil, driver.Errorf(driver.InvalidArgument, "aws: machine %s: annotation %s of the node template is not an EC2 placement as JSON (%v): fix it, or set providerSpec.placement", m.Name, PlacementAnnotation, err)
	}
	if p == (ec2types.Placement{}) {
		return nil, nil
	}
	return &p, nil
}

func instanceIDs(list []ec2types.Instance) []string {
	out := make([]string, len(list))
	for i := range list {
		out[i] = ptr.Deref(list[i].InstanceId, "")
	}
	return out
}
