package fakeaws

import (
	"encoding/base64"
	"encoding/xml"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

var (
	idPattern         = regexp.MustCompile(`^[a-z]+-[0-9a-z]{8,17}$`)
	deviceNamePattern = regexp.MustCompile(`^/dev/(sd[a-z][0-9]*|xvd[a-z]{1,2}[0-9]*|nvme[0-9]+n1)$`)
	volumeTypesKnown  = []string{"gp2", "gp3", "io1", "io2", "st1", "sc1", "standard"}
	taggableOnRun     = []string{"instance", "volume", "network-interface", "spot-instances-request"}
)

// stateReasons are the messages EC2 gives with state reason codes.
var stateReasons = map[string]string{
	"Client.UserInitiatedShutdown":        "User initiated shutdown",
	"Server.InsufficientInstanceCapacity": "Insufficient capacity to satisfy instance request",
	"Server.SpotInstanceTermination":      "Spot instance termination",
	"Server.InternalError":                "Internal error on launch",
	"Client.VolumeLimitExceeded":          "Volume limit exceeded",
}

// ec2Actions are the actions the fake answers, by name; others are InvalidAction.
func (c *Cloud) ec2Actions() map[string]func(params) (any, *apiError) {
	return map[string]func(params) (any, *apiError){
		"RunInstances":                    c.apiInstances.runInstances,
		"DescribeInstances":               c.apiInstances.describeInstances,
		"TerminateInstances":              c.apiInstances.terminateInstances,
		"ModifyInstanceAttribute":         c.apiInstances.modifyInstanceAttribute,
		"DescribeNetworkInterfaces":       c.apiNetwork.describeNetworkInterfaces,
		"ModifyNetworkInterfaceAttribute": c.apiNetwork.modifyNetworkInterfaceAttribute,
		"AssignIpv6Addresses":             c.apiNetwork.assignIpv6Addresses,
		"DescribeImages":                  c.apiResources.describeImages,
		"DescribeVolumes":                 c.apiResources.describeVolumes,
		"CreateTags":                      c.apiResources.createTags,
		"DescribeSpotInstanceRequests":    c.apiSpot.describeSpotRequests,
		"CancelSpotInstanceRequests":      c.apiSpot.cancelSpotRequests,
	}
}

// checkID answers EC2's Malformed error for an ID that is not of the form prefix-<hex>.
func checkID(id, prefix, code string) *apiError {
	if !strings.HasPrefix(id, prefix+"-") || !idPattern.MatchString(id) {
		return badRequest(code, "Invalid id: %q (expecting %q)", id, prefix+"-...")
	}
	return nil
}

// ---------------------------------------------------------------- RunInstances

type nicSpec struct {
	subnet      *Subnet
	groups      []string
	deviceIndex int32
	cardIndex   int32
	deleteOnT   bool
	ifType      string
	description string
	publicIP    bool
	ipv6Count   int32
	ipv6Prefix  int32
}

type volumeSpec struct {
	device     string
	size       int32
	volType    string
	iops       int32
	throughput int32
	encrypted  bool
	kmsKeyID   string
	snapshotID string
	deleteOnT  bool
}

func (c *instancesAPI) runInstances(p params) (any, *apiError) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.advanceLocked()

	token := p.str("ClientToken")
	if len(token) > 64 {
		return nil, badRequest("InvalidParameterValue", "Value (%s) for parameter clientToken is invalid. Length exceeds maximum of 64 ASCII characters.", token)
	}
	fp := p.fingerprint("ClientToken", "DryRun")
	if token != "" {
		if use := c.tokens[token]; use != nil {
			if use.fingerprint != fp {
				return nil, badRequest("IdempotentParameterMismatch", "The client token %s has already been used with different parameters.", token)
			}
			return c.reservationLocked(use.reservationID, use.instanceIDs), nil
		}
	}
	if dry, _ := p.boolean("DryRun"); dry {
		return nil, errf(http.StatusPreconditionFailed, "DryRunOperation", "Request would have succeeded, but DryRun flag is set.")
	}
	minCount, _, err1 := p.int32("MinCount")
	maxCount, _, err2 := p.int32("MaxCount")
	if err1 != nil || err2 != nil || minCount < 1 || maxCount < minCount {
		return nil, badRequest("InvalidParameterValue", "MinCount and MaxCount must be positive and MinCount <= MaxCount (got %q and %q)", p.str("MinCount"), p.str("MaxCount"))
	}
	count := int(maxCount)

	imageID := p.str("ImageId")
	if imageID == "" {
		return nil, badRequest("MissingParameter", "The request must contain the parameter ImageId")
	}
	if err := checkID(imageID, "ami", "InvalidAMIID.Malformed"); err != nil {
		return nil, err
	}
	image := c.images[imageID]
	if image == nil {
		return nil, badRequest("InvalidAMIID.NotFound", "The image id '[%s]' does not exist", imageID)
	}
	itype := p.str("InstanceType")
	typ, known := InstanceTypes[itype]
	if !known {
		return nil, badRequest("InvalidParameterValue", "Invalid value '%s' for InstanceType.", itype)
	}
	if typ.Arch != image.Architecture {
		return nil, badRequest("InvalidParameterValue", "The architecture '%s' of the specified instance type does not match the architecture '%s' of the specified AMI. "+
			"Specify an instance type and an AMI that have matching architectures, and try again. "+
			"You can use 'describe-instance-types' or 'describe-images' to discover the architecture of the instance type or AMI.", typ.Arch, image.Architecture)
	}
	vcpus := typ.VCPUs

	nics, apiErr := c.nicSpecsLocked(p)
	if apiErr != nil {
		return nil, apiErr
	}
	zone := nics[0].subnet.Zone
	if key := p.str("KeyName"); key != "" && !c.keyPairs[key] {
		return nil, badRequest("InvalidKeyPair.NotFound", "The key pair '%s' does not exist", key)
	}
	profileARN := ""
	if name := p.str("IamInstanceProfile.Name"); name != "" {
		arn, ok := c.profiles[name]
		if !ok {
			return nil, badRequest("InvalidParameterValue", "Value (%s) for parameter iamInstanceProfile.name is invalid. Invalid IAM Instance Profile name", name)
		}
		profileARN = arn
	}
	if arn := p.str("IamInstanceProfile.Arn"); arn != "" {
		if !slices.Contains(mapValues(c.profiles), arn) {
			return nil, badRequest("InvalidParameterValue", "Value (%s) for parameter iamInstanceProfile.arn is invalid. Invalid IAM Instance Profile ARN", arn)
		}
		profileARN = arn
	}
	placement := p.obj("Placement")
	if az := placement.str("AvailabilityZone"); az != "" && az != zone {
		return nil, badRequest("InvalidParameterValue", "Value (%s) for parameter availabilityZone is invalid. Subnet '%s' is in the availability zone %s", az, nics[0].subnet.ID, zone)
	}
	tenancy := placement.str("Tenancy")
	group, partition, apiErr := c.placementLocked(placement)
	if apiErr != nil {
		return nil, apiErr
	}

	volumes, apiErr := blockDeviceSpecs(p, image)
	if apiErr != nil {
		return nil, apiErr
	}
	tags, apiErr := tagSpecs(p)
	if apiErr != nil {
		return nil, apiErr
	}

	market := p.str("InstanceMarketOptions.MarketType")
	spot := market == "spot"
	if market != "" && !slices.Contains([]string{"spot", "capacity-block", "interruptible-capacity-reservation"}, market) {
		return nil, badRequest("InvalidParameterValue", "Value (%s) for parameter marketType is invalid.", market)
	}
	var reservation *CapacityReservation
	if id := p.str("CapacityReservationSpecification.CapacityReservationTarget.CapacityReservationId"); id != "" {
		reservation = c.reservations[id]
		if reservation == nil {
			return nil, badRequest("InvalidCapacityReservationId.NotFound", "The capacity reservation ID '%s' does not exist", id)
		}
		if reservation.InstanceType != itype || reservation.Zone != zone {
			return nil, badRequest("InvalidParameterCombination", "The instance type %s and availability zone %s do not match capacity reservation %s (%s in %s).", itype, zone, id, reservation.InstanceType, reservation.Zone)
		}
	} else if market == "capacity-block" {
		return nil, badRequest("InvalidParameterCombination", "A capacity reservation ID must be specified for market type capacity-block.")
	}

	// Limits and capacity, in the order EC2 checks them.
	live, liveVcpus := 0, 0
	for _, i := range c.instances {
		if i.State == StateShuttingDown || i.State == StateTerminated {
			continue
		}
		live++
		if i.Lifecycle != "spot" {
			liveVcpus += InstanceTypes[i.InstanceType].VCPUs
		}
	}
	if c.instLimit > 0 && live+count > c.instLimit {
		return nil, badRequest("InstanceLimitExceeded", "You have requested more instances (%d) than your current instance limit of %d allows for the specified instance type. Please visit http://aws.amazon.com/contact-us/ec2-request to request an adjustment to this limit.", live+count, c.instLimit)
	}
	maxPrice := ""
	if spot {
		maxPrice = p.str("InstanceMarketOptions.SpotOptions.MaxPrice")
		if current, ok := c.spotPrice[itype]; ok && maxPrice != "" {
			bid, err := strconv.ParseFloat(maxPrice, 64)
			if err != nil {
				return nil, badRequest("InvalidParameterValue", "Value (%s) for parameter maxPrice is invalid.", maxPrice)
			}
			if bid < current {
				return nil, badRequest("SpotMaxPriceTooLow", "Your Spot request price of %s is lower than the minimum required Spot request fulfillment price of %g.", maxPrice, current)
			}
		}
		if left, limited := c.spotCap[zone]; limited && left < count {
			return nil, errf(http.StatusInternalServerError, "InsufficientInstanceCapacity", "There is no Spot capacity available that matches your request.")
		}
	} else {
		if c.vcpuQuota > 0 && liveVcpus+count*vcpus > c.vcpuQuota {
			return nil, badRequest("VcpuLimitExceeded", "You have requested more vCPU capacity than your current vCPU limit of %d allows for the instance bucket that the specified instance type belongs to. Please visit http://aws.amazon.com/contact-us/ec2-request to request an adjustment to this limit.", c.vcpuQuota)
		}
		if reservation == nil {
			if left, limited := c.zoneCap[zone]; limited && left < count {
				return nil, errf(http.StatusInternalServerError, "InsufficientInstanceCapacity",
					"We currently do not have sufficient %s capacity in the Availability Zone you requested (%s). Our system will be working on provisioning additional capacity. You can currently get %s capacity by not specifying an Availability Zone in your request or choosing %s.",
					itype, zone, itype, strings.Join(c.otherZonesLocked(zone), ", "))
			}
		}
	}
	if reservation != nil && reservation.Total-reservation.Used < count {
		return nil, badRequest("ReservationCapacityExceeded", "There is insufficient capacity in the Capacity Reservation %s to launch %d instances.", reservation.ID, count)
	}
	needIPs := map[string]int{}
	for _, n := range nics {
		needIPs[n.subnet.ID] += count
	}
	for id, n := range needIPs {
		if c.subnets[id].AvailableIPs < n {
			return nil, badRequest("InsufficientFreeAddressesInSubnet", "There are not enough free addresses in subnet '%s' to satisfy the requested number of instances.", id)
		}
	}

	// Launch.
	now := c.clock.Now()
	resID := c.newIDLocked("r")
	ids := make([]string, 0, count)
	for range count {
		inst := &Instance{
			ID: c.newIDLocked("i"), ReservationID: resID, ImageID: imageID, InstanceType: itype, KeyName: p.str("KeyName"),
			State: StatePending, Zone: zone, ClientToken: token, LaunchTime: now, Tags: maps.Clone(tags["instance"]),
			IAMProfileARN: profileARN, UserData: p.str("UserData"), Tenancy: tenancy, Partition: partition,
			visibleAfter: c.describeLag,
		}
		inst.EbsOptimized, _ = p.boolean("EbsOptimized")
		inst.Monitoring, _ = p.boolean("Monitoring.Enabled")
		if cc, ok, _ := p.int32("CpuOptions.CoreCount"); ok {
			inst.CoreCount = cc
		}
		if tpc, ok, _ := p.int32("CpuOptions.ThreadsPerCore"); ok {
			inst.ThreadsPerCore = tpc
		}
		if md := p.obj("MetadataOptions"); len(md) > 0 {
			inst.MetadataOptions = md
		}
		if group != nil {
			inst.PlacementGroup, inst.PlacementID = group.Name, group.ID
		}
		if len(c.failLaunch) > 0 {
			inst.failReason, c.failLaunch = c.failLaunch[0], c.failLaunch[1:]
		}
		for idx, ns := range nics {
			nic := c.newNICLocked(ns, inst, tags["network-interface"])
			inst.NICs = append(inst.NICs, nic.ID)
			if idx == 0 {
				inst.SubnetID, inst.VpcID, inst.PrivateIP, inst.PrivateDNSName = nic.SubnetID, nic.VpcID, nic.PrivateIP, nic.PrivateDNSName
				inst.SecurityGroups = nic.SecurityGroups
			}
		}
		for _, vs := range volumes {
			v := &Volume{
				ID: c.newIDLocked("vol"), Zone: zone, Size: vs.size, Type: vs.volType, Iops: vs.iops, Throughput: vs.throughput,
				Encrypted: vs.encrypted, KmsKeyID: vs.kmsKeyID, SnapshotID: vs.snapshotID, State: "in-use", InstanceID: inst.ID,
				Device: vs.device, DeleteOnTermination: vs.deleteOnT, CreateTime: now, Tags: maps.Clone(tags["volume"]),
			}
			c.volumes[v.ID] = v
			inst.Devices = append(inst.Devices, Device{Name: vs.device, VolumeID: v.ID, DeleteOnTermination: vs.deleteOnT})
		}
		if spot {
			sr := &SpotRequest{ID: c.newIDLocked("sir"), State: "active", StatusCode: "fulfilled", InstanceID: inst.ID, MaxPrice: maxPrice,
				Type: "one-time", Zone: zone, CreateTime: now, Tags: maps.Clone(tags["spot-instances-request"])}
			c.spots[sr.ID] = sr
			inst.Lifecycle, inst.SpotRequestID = "spot", sr.ID
			if _, limited := c.spotCap[zone]; limited {
				c.spotCap[zone]--
			}
		} else if reservation == nil {
			if _, limited := c.zoneCap[zone]; limited {
				c.zoneCap[zone]--
			}
		}
		if reservation != nil {
			reservation.Used++
			inst.Reservation = reservation.ID
		}
		c.instances[inst.ID] = inst
		ids = append(ids, inst.ID)
	}
	if token != "" {
		c.tokens[token] = &tokenUse{fingerprint: fp, reservationID: resID, instanceIDs: ids}
	}
	return c.reservationLocked(resID, ids), nil
}

// placementLocked checks a RunInstances request's placement as EC2 does: tenancy and host, and
// the placement group by ID or name (not both; it must exist), with a partition number only in
// a partition group's range.
func (c *instancesAPI) placementLocked(placement params) (*PlacementGroup, int32, *apiError) {
	tenancy := placement.str("Tenancy")
	if tenancy != "" && !slices.Contains([]string{"default", "dedicated", "host"}, tenancy) {
		return nil, 0, badRequest("InvalidParameterValue", "Value (%s) for parameter tenancy is invalid.", tenancy)
	}
	if placement.str("HostId") != "" && tenancy != "host" {
		return nil, 0, badRequest("InvalidParameterCombination", "A host ID can only be specified with tenancy 'host'.")
	}
	id, name := placement.str("GroupId"), placement.str("GroupName")
	var group *PlacementGroup
	switch {
	case id != "" && name != "":
		return nil, 0, badRequest("InvalidParameterCombination", "The parameter groupName cannot be used with the parameter groupId")
	case id != "":
		if err := checkID(id, "pg", "InvalidParameterValue"); err != nil {
			return nil, 0, err
		}
		if group = c.pgroups[id]; group == nil {
			return nil, 0, badRequest("InvalidPlacementGroup.Unknown", "The Placement Group '%s' is unknown.", id)
		}
	case name != "":
		for _, g := range c.pgroups {
			if g.Name == name {
				group = g
			}
		}
		if group == nil {
			return nil, 0, badRequest("InvalidPlacementGroup.Unknown", "The Placement Group '%s' is unknown.", name)
		}
	}
	n, set, err := placement.int32("PartitionNumber")
	switch {
	case !set:
		return group, 0, nil
	case err != nil || group == nil || group.Strategy != "partition":
		return nil, 0, badRequest("InvalidParameterCombination", "A partition number can only be specified for a placement group with the partition strategy.")
	case n < 1 || int(n) > group.Partitions:
		return nil, 0, badRequest("InvalidParameterValue", "Value (%d) for parameter partitionNumber is invalid. Placement group '%s' has %d partitions.", n, group.Name, group.Partitions)
	}
	return group, n, nil
}

// nicSpecsLocked reads the network interfaces of a RunInstances request (or its instance-level
// SubnetId and SecurityGroupId) and checks them as EC2 does.
func (c *instancesAPI) nicSpecsLocked(p params) ([]nicSpec, *apiError) {
	raw := p.structs("NetworkInterface")
	if len(raw) == 0 {
		if p.str("SubnetId") == "" {
			return nil, badRequest("VPCIdNotSpecified", "No default VPC for this user. GroupName is only supported for EC2-Classic and default VPC.")
		}
		raw = []params{{"SubnetId": p.str("SubnetId")}}
		for i, g := range p.list("SecurityGroupId") {
			raw[0]["SecurityGroupId."+strconv.Itoa(i+1)] = g
		}
	} else if p.str("SubnetId") != "" || p.has("SecurityGroupId") {
		return nil, badRequest("InvalidParameterCombination", "Network interfaces and an instance-level subnet ID may not be specified on the same request")
	}
	var out []nicSpec
	seenIdx := map[int32]bool{}
	for i, n := range raw {
		subnetID := n.str("SubnetId")
		if subnetID == "" {
			return nil, badRequest("MissingParameter", "The request must contain the parameter subnetId for network interface %d", i)
		}
		if err := checkID(subnetID, "subnet", "InvalidSubnetID.Malformed"); err != nil {
			return nil, err
		}
		subnet := c.subnets[subnetID]
		if subnet == nil {
			return nil, badRequest("InvalidSubnetID.NotFound", "The subnet ID '%s' does not exist", subnetID)
		}
		if len(out) > 0 && out[0].subnet.Zone != subnet.Zone {
			return nil, badRequest("InvalidParameterCombination", "Network interfaces must all be in the same Availability Zone: %s is in %s, %s in %s", out[0].subnet.ID, out[0].subnet.Zone, subnet.ID, subnet.Zone)
		}
		groups := n.list("SecurityGroupId")
		for _, g := range groups {
			if err := checkID(g, "sg", "InvalidGroupId.Malformed"); err != nil {
				return nil, err
			}
			sg := c.groups[g]
			if sg == nil {
				return nil, badRequest("InvalidGroup.NotFound", "The security group '%s' does not exist in VPC '%s'", g, subnet.VpcID)
			}
			if sg.VpcID != subnet.VpcID {
				return nil, badRequest("InvalidParameter", "Security group %s and subnet %s belong to different networks.", g, subnet.ID)
			}
		}
		idx := int32(i)
		if v, ok, err := n.int32("DeviceIndex"); err != nil {
			return nil, badRequest("InvalidParameterValue", "Invalid value '%s' for deviceIndex", n.str("DeviceIndex"))
		} else if ok {
			idx = v
		}
		card, _, _ := n.int32("NetworkCardIndex")
		if seenIdx[card*1000+idx] {
			return nil, badRequest("InvalidParameterValue", "Each network interface requires a unique device index.")
		}
		seenIdx[card*1000+idx] = true
		ifType := n.str("InterfaceType")
		if ifType == "" {
			ifType = "interface"
		}
		if !slices.Contains([]string{"interface", "efa", "efa-only"}, ifType) {
			return nil, badRequest("InvalidParameterValue", "Value (%s) for parameter interfaceType is invalid.", ifType)
		}
		publicIP, _ := n.boolean("AssociatePublicIpAddress")
		if publicIP && len(raw) > 1 {
			return nil, badRequest("InvalidParameterCombination", "The associatePublicIPAddress parameter cannot be specified when launching with multiple network interfaces.")
		}
		deleteOnT, set := n.boolean("DeleteOnTermination")
		ipv6, _, _ := n.int32("Ipv6AddressCount")
		prefixes, _, _ := n.int32("Ipv6PrefixCount")
		out = append(out, nicSpec{subnet: subnet, groups: groups, deviceIndex: idx, cardIndex: card, deleteOnT: deleteOnT || !set,
			ifType: ifType, description: n.str("Description"), publicIP: publicIP, ipv6Count: ipv6, ipv6Prefix: prefixes})
	}
	return out, nil
}

func (c *state) newNICLocked(ns nicSpec, inst *Instance, tags map[string]string) *NetworkInterface {
	s := ns.subnet
	ip := s.next
	s.next = s.next.Next()
	s.AvailableIPs--
	b := ip.As4()
	dns := fmt.Sprintf("ip-%d-%d-%d-%d.%s.compute.internal", b[0], b[1], b[2], b[3], c.region)
	n := &NetworkInterface{
		ID: c.newIDLocked("eni"), SubnetID: s.ID, VpcID: s.VpcID, Zone: s.Zone, PrivateIP: ip.String(), PrivateDNSName: dns,
		SecurityGroups: ns.groups, SourceDestCheck: true, InterfaceType: ns.ifType, Description: ns.description, Status: "in-use",
		InstanceID: inst.ID, DeviceIndex: ns.deviceIndex, NetworkCardIndex: ns.cardIndex, DeleteOnTermination: ns.deleteOnT,
		Tags: maps.Clone(tags),
	}
	if ns.publicIP {
		n.PublicIP = fmt.Sprintf("203.0.113.%d", c.seq%250+1)
	}
	for k := range ns.ipv6Count {
		s.ipv6PrefixCounter++
		n.Ipv6Addresses = append(n.Ipv6Addresses, fmt.Sprintf("2001:db8:%x::%x", s.ipv6PrefixCounter, k+1))
	}
	c.assignPrefixesLocked(n, ns.ipv6Prefix)
	c.nics[n.ID] = n
	return n
}

func (c *state) assignPrefixesLocked(n *NetworkInterface, count int32) []string {
	s := c.subnets[n.SubnetID]
	var added []string
	for range count {
		s.ipv6PrefixCounter++
		prefix := fmt.Sprintf("2001:db8:%x:%x::/80", len(n.Ipv6Prefixes)+1, s.ipv6PrefixCounter)
		n.Ipv6Prefixes = append(n.Ipv6Prefixes, prefix)
		added = append(added, prefix)
	}
	return added
}

// blockDeviceSpecs reads the block device mapping: a mapping of the image's root device
// replaces its default 8 GiB gp2 root volume.
func blockDeviceSpecs(p params, image *Image) ([]volumeSpec, *apiError) {
	root := volumeSpec{device: image.RootDeviceName, size: 8, volType: "gp2", deleteOnT: true}
	out := []volumeSpec{root}
	seen := map[string]bool{}
	for _, m := range p.structs("BlockDeviceMapping") {
		dev := m.str("DeviceName")
		if dev == "" {
			return nil, badRequest("MissingParameter", "The request must contain the parameter BlockDeviceMapping.DeviceName")
		}
		if !deviceNamePattern.MatchString(dev) {
			return nil, badRequest("InvalidBlockDeviceMapping", "Invalid device name %s", dev)
		}
		if seen[dev] {
			return nil, badRequest("InvalidBlockDeviceMapping", "The device '%s' is used in more than one block-device mapping", dev)
		}
		seen[dev] = true
		if m.str("NoDevice") != "" || m.str("VirtualName") != "" {
			continue
		}
		ebs := m.obj("Ebs")
		vs := volumeSpec{device: dev, size: 8, volType: "gp2", deleteOnT: true, kmsKeyID: ebs.str("KmsKeyId"), snapshotID: ebs.str("SnapshotId")}
		if t := ebs.str("VolumeType"); t != "" {
			if !slices.Contains(volumeTypesKnown, t) {
				return nil, badRequest("InvalidParameterValue", "Value (%s) for parameter volumeType is invalid. Valid values: %s", t, strings.Join(volumeTypesKnown, ", "))
			}
			vs.volType = t
		}
		if size, ok, err := ebs.int32("VolumeSize"); err != nil || (ok && (size < 1 || size > 16384)) {
			return nil, badRequest("InvalidParameterValue", "Volume of size %s is not valid for volume type %s", ebs.str("VolumeSize"), vs.volType)
		} else if ok {
			vs.size = size
		}
		if iops, ok, _ := ebs.int32("Iops"); ok {
			if vs.volType != "io1" && vs.volType != "io2" && vs.volType != "gp3" {
				return nil, badRequest("InvalidParameterCombination", "The parameter iops is not supported for %s volumes.", vs.volType)
			}
			vs.iops = iops
		} else if vs.volType == "io1" || vs.volType == "io2" {
			return nil, badRequest("InvalidParameterCombination", "The parameter iops must be specified for %s volumes.", vs.volType)
		}
		if tp, ok, _ := ebs.int32("Throughput"); ok {
			if vs.volType != "gp3" {
				return nil, badRequest("InvalidParameterCombination", "The parameter throughput is not supported for %s volumes.", vs.volType)
			}
			vs.throughput = tp
		}
		vs.encrypted, _ = ebs.boolean("Encrypted")
		if d, ok := ebs.boolean("DeleteOnTermination"); ok {
			vs.deleteOnT = d
		}
		if dev == image.RootDeviceName {
			out[0] = vs
			continue
		}
		out = append(out, vs)
	}
	return out, nil
}

// tagSpecs reads TagSpecification.N into tags by resource type.
func tagSpecs(p params) (map[string]map[string]string, *apiError) {
	out := map[string]map[string]string{}
	for _, ts := range p.structs("TagSpecification") {
		rt := ts.str("ResourceType")
		if !slices.Contains(taggableOnRun, rt) {
			return nil, badRequest("InvalidParameterValue", "'%s' is not a valid taggable resource type for this operation.", rt)
		}
		if out[rt] == nil {
			out[rt] = map[string]string{}
		}
		for _, t := range ts.structs("Tag") {
			if err := checkTag(t.str("Key"), t.str("Value")); err != nil {
				return nil, err
			}
			out[rt][t.str("Key")] = t.str("Value")
		}
	}
	return out, nil
}

func checkTag(key, value string) *apiError {
	switch {
	case key == "" || len(key) > 128:
		return badRequest("InvalidParameterValue", "Tag key must be between 1 and 128 characters: %q", key)
	case strings.HasPrefix(strings.ToLower(key), "aws:"):
		return badRequest("InvalidParameterValue", "Tag keys starting with 'aws:' are reserved for internal use")
	case len(value) > 256:
		return badRequest("InvalidParameterValue", "Tag value for key %q exceeds 256 characters", key)
	}
	return nil
}

func (c *instancesAPI) otherZonesLocked(zone string) []string {
	seen := map[string]bool{}
	for _, s := range c.subnets {
		if s.Zone != zone {
			seen[s.Zone] = true
		}
	}
	out := make([]string, 0, len(seen))
	for z := range seen {
		out = append(out, z)
	}
	sort.Strings(out)
	return out
}

func (c *instancesAPI) reservationLocked(resID string, ids []string) *runInstancesResponse {
	r := &runInstancesResponse{Xmlns: ec2Namespace}
	r.ReservationID, r.OwnerID = resID, c.accountID
	for _, id := range ids {
		i := c.instances[id]
		if i == nil {
			i = c.expired[id]
		}
		if i != nil {
			r.InstancesSet = append(r.InstancesSet, c.xmlInstanceLocked(i))
		}
	}
	return r
}

func (c *instancesAPI) xmlInstanceLocked(i *Instance) xmlInstance {
	x := xmlInstance{
		InstanceID: i.ID, ImageID: i.ImageID, InstanceState: xmlState{Code: stateCodes[i.State], Name: i.State},
		PrivateDNSName: i.PrivateDNSName, KeyName: i.KeyName, InstanceType: i.InstanceType, LaunchTime: isoTime(i.LaunchTime),
		Placement:       xmlPlacement{AvailabilityZone: i.Zone, GroupName: i.PlacementGroup, GroupID: i.PlacementID, PartitionNumber: i.Partition, Tenancy: "default"},
		MonitoringState: "disabled", SubnetID: i.SubnetID, VpcID: i.VpcID, PrivateIPAddress: i.PrivateIP,
		Architecture: InstanceTypes[i.InstanceType].Arch, RootDeviceType: "ebs", VirtualizationType: "hvm", ClientToken: i.ClientToken,
		TagSet: xmlTags(i.Tags), Hypervisor: "xen", InstanceLifecycle: i.Lifecycle, SpotInstanceRequestID: i.SpotRequestID,
		EbsOptimized: i.EbsOptimized, CapacityReservationID: i.Reservation,
		MetadataOptions: xmlMetadataOptions{State: "applied", HTTPTokens: "optional", HTTPPutResponseHopLimit: "1", HTTPEndpoint: "enabled", HTTPProtocolIpv6: "disabled"},
	}
	if i.Tenancy != "" {
		x.Placement.Tenancy = i.Tenancy
	}
	if i.Monitoring {
		x.MonitoringState = "enabled"
	}
	if v := i.MetadataOptions["HttpTokens"]; v != "" {
		x.MetadataOptions.HTTPTokens = v
	}
	if v := i.MetadataOptions["HttpPutResponseHopLimit"]; v != "" {
		x.MetadataOptions.HTTPPutResponseHopLimit = v
	}
	if v := i.MetadataOptions["HttpEndpoint"]; v != "" {
		x.MetadataOptions.HTTPEndpoint = v
	}
	if v := i.MetadataOptions["HttpProtocolIpv6"]; v != "" {
		x.MetadataOptions.HTTPProtocolIpv6 = v
	}
	if i.CoreCount > 0 {
		x.CPUOptions = &xmlCPUOptions{CoreCount: i.CoreCount, ThreadsPerCore: i.ThreadsPerCore}
	}
	if i.IAMProfileARN != "" {
		x.IamInstanceProfile = &xmlIAMProfile{Arn: i.IAMProfileARN, ID: "AIPAFAKE" + strings.ToUpper(i.ID[2:10])}
	}
	if i.StateReason != "" {
		msg, known := stateReasons[i.StateReason]
		if !known {
			msg = i.StateReason
		}
		x.StateReason = &xmlStateReason{Code: i.StateReason, Message: i.StateReason + ": " + msg}
		if i.StateReason == "Client.UserInitiatedShutdown" {
			x.Reason = "User initiated (" + isoTime(i.ShutdownAt) + ")"
		}
	}
	for _, g := range i.SecurityGroups {
		x.GroupSet = append(x.GroupSet, xmlGroup{GroupID: g, GroupName: c.groupName(g)})
	}
	if len(i.Devices) > 0 {
		x.RootDeviceName = i.Devices[0].Name
	}
	if i.State != StateTerminated {
		for _, d := range i.Devices {
			x.BlockDeviceMapping = append(x.BlockDeviceMapping, xmlInstanceBDM{DeviceName: d.Name, Ebs: xmlInstanceEbs{
				VolumeID: d.VolumeID, Status: "attached", AttachTime: isoTime(i.LaunchTime), DeleteOnTermination: d.DeleteOnTermination,
			}})
		}
		for _, id := range i.NICs {
			if n := c.nics[id]; n != nil {
				x.NetworkInterfaceSet = append(x.NetworkInterfaceSet, c.xmlNICLocked(n, false))
				if n.DeviceIndex == 0 && n.NetworkCardIndex == 0 {
					x.SourceDestCheck = n.SourceDestCheck
					x.IPAddress = n.PublicIP
				}
			}
		}
	} else {
		x.PrivateDNSName, x.PrivateIPAddress = "", ""
	}
	return x
}

func (c *state) groupName(id string) string {
	if g := c.groups[id]; g != nil {
		return g.Name
	}
	return ""
}

func (c *state) xmlNICLocked(n *NetworkInterface, withTags bool) xmlInstanceNIC {
	x := xmlInstanceNIC{
		NetworkInterfaceID: n.ID, SubnetID: n.SubnetID, VpcID: n.VpcID, Description: n.Description, OwnerID: c.accountID,
		Status: n.Status, PrivateIPAddress: n.PrivateIP, PrivateDNSName: n.PrivateDNSName, SourceDestCheck: n.SourceDestCheck,
		InterfaceType: n.InterfaceType,
	}
	for _, g := range n.SecurityGroups {
		x.GroupSet = append(x.GroupSet, xmlGroup{GroupID: g, GroupName: c.groupName(g)})
	}
	if n.InstanceID != "" {
		x.Attachment = &xmlNICAttachment{AttachmentID: "eni-attach-" + n.ID[4:], DeviceIndex: n.DeviceIndex, NetworkCardIndex: n.NetworkCardIndex,
			Status: "attached", DeleteOnTermination: n.DeleteOnTermination}
	}
	for _, a := range n.Ipv6Addresses {
		x.Ipv6AddressesSet = append(x.Ipv6AddressesSet, xmlIpv6Address{Address: a})
	}
	for _, p := range n.Ipv6Prefixes {
		x.Ipv6PrefixSet = append(x.Ipv6PrefixSet, xmlIpv6Prefix{Prefix: p})
	}
	if withTags {
		x.TagSet = xmlTags(n.Tags)
		x.AvailabilityZone = n.Zone
	}
	return x
}

// ---------------------------------------------------------------- DescribeInstances

func (c *instancesAPI) describeInstances(p params) (any, *apiError) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.advanceLocked()
	ids := p.list("InstanceId")
	page, apiErr := pageParams(p, len(ids) > 0, "instancesSet", 5, 1000)
	if apiErr != nil {
		return nil, apiErr
	}
	filters, apiErr := parseFilters(p, instanceFilters)
	if apiErr != nil {
		return nil, apiErr
	}
	// Instances launched before this request and still within their describe lag are not seen;
	// each request brings them one step closer to being seen.
	visible := func(i *Instance) bool { return i.visibleAfter <= 0 }
	defer func() {
		for _, i := range c.instances {
			if i.visibleAfter > 0 {
				i.visibleAfter--
			}
		}
	}()
	var candidates []*Instance
	if len(ids) > 0 {
		var missing []string
		for _, id := range ids {
			if err := checkID(id, "i", "InvalidInstanceID.Malformed"); err != nil {
				return nil, err
			}
			i := c.instances[id]
			if i == nil || !visible(i) {
				missing = append(missing, id)
				continue
			}
			candidates = append(candidates, i)
		}
		if len(missing) > 0 {
			noun := "ID"
			if len(missing) > 1 {
				noun = "IDs"
			}
			return nil, badRequest("InvalidInstanceID.NotFound", "The instance %s '%s' does not exist", noun, strings.Join(missing, ", "))
		}
	} else {
		for _, i := range c.instances {
			if visible(i) {
				candidates = append(candidates, i)
			}
		}
	}
	var matched []*Instance
	for _, i := range candidates {
		if filters.match(func(name string) []string { return instanceAttr(i, name) }) {
			matched = append(matched, i)
		}
	}
	sort.Slice(matched, func(a, b int) bool {
		if !matched[a].LaunchTime.Equal(matched[b].LaunchTime) {
			return matched[a].LaunchTime.Before(matched[b].LaunchTime)
		}
		return matched[a].ID < matched[b].ID
	})
	keys := make([]string, len(matched))
	for n, i := range matched {
		keys[n] = i.ID
	}
	from, to, next, apiErr := page.window(keys)
	if apiErr != nil {
		return nil, apiErr
	}
	resp := &describeInstancesResponse{Xmlns: ec2Namespace, NextToken: next}
	for _, i := range matched[from:to] {
		x := c.xmlInstanceLocked(i)
		if n := len(resp.ReservationSet); n > 0 && resp.ReservationSet[n-1].ReservationID == i.ReservationID {
			resp.ReservationSet[n-1].InstancesSet = append(resp.ReservationSet[n-1].InstancesSet, x)
			continue
		}
		resp.ReservationSet = append(resp.ReservationSet, xmlReservation{ReservationID: i.ReservationID, OwnerID: c.accountID, InstancesSet: []xmlInstance{x}})
	}
	return resp, nil
}

// instanceFilters are the DescribeInstances filter names the fake knows.
var instanceFilters = []string{"instance-id", "instance-state-name", "instance-state-code", "availability-zone", "subnet-id", "vpc-id",
	"instance-type", "image-id", "client-token", "private-dns-name", "private-ip-address", "instance-lifecycle",
	"spot-instance-request-id", "reservation-id", "key-name", "placement-group-name", "placement-partition-number", "tag-key", "tag-value", "tag:*"}

func instanceAttr(i *Instance, name string) []string {
	switch name {
	case "instance-id":
		return []string{i.ID}
	case "instance-state-name":
		return []string{i.State}
	case "instance-state-code":
		return []string{strconv.Itoa(stateCodes[i.State])}
	case "availability-zone":
		return []string{i.Zone}
	case "subnet-id":
		return []string{i.SubnetID}
	case "vpc-id":
		return []string{i.VpcID}
	case "instance-type":
		return []string{i.InstanceType}
	case "image-id":
		return []string{i.ImageID}
	case "client-token":
		return []string{i.ClientToken}
	case "private-dns-name":
		return []string{i.PrivateDNSName}
	case "private-ip-address":
		return []string{i.PrivateIP}
	case "instance-lifecycle":
		return []string{i.Lifecycle}
	case "spot-instance-request-id":
		return []string{i.SpotRequestID}
	case "reservation-id":
		return []string{i.ReservationID}
	case "key-name":
		return []string{i.KeyName}
	case "placement-group-name":
		return []string{i.PlacementGroup}
	case "placement-partition-number":
		return []string{strconv.Itoa(int(i.Partition))}
	}
	return tagAttr(i.Tags, name)
}

func tagAttr(tags map[string]string, name string) []string {
	switch {
	case name == "tag-key":
		return mapKeys(tags)
	case name == "tag-value":
		return mapValues(tags)
	case strings.HasPrefix(name, "tag:"):
		if v, ok := tags[strings.TrimPrefix(name, "tag:")]; ok {
			return []string{v}
		}
	}
	return nil
}

// ---------------------------------------------------------------- TerminateInstances

func (c *instancesAPI) terminateInstances(p params) (any, *apiError) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.advanceLocked()
	ids := p.list("InstanceId")
	if len(ids) == 0 {
		return nil, badRequest("MissingParameter", "The request must contain the parameter InstanceId")
	}
	var missing []string
	for _, id := range ids {
		if err := checkID(id, "i", "InvalidInstanceID.Malformed"); err != nil {
			return nil, err
		}
		if c.instances[id] == nil {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		return nil, badRequest("InvalidInstanceID.NotFound", "The instance ID '%s' does not exist", strings.Join(missing, ", "))
	}
	resp := &terminateInstancesResponse{Xmlns: ec2Namespace}
	now := c.clock.Now()
	for _, id := range ids {
		i := c.instances[id]
		prev := i.State
		if i.State != StateShuttingDown && i.State != StateTerminated {
			i.State, i.ShutdownAt, i.StateReason = StateShuttingDown, now, "Client.UserInitiatedShutdown"
		}
		resp.InstancesSet = append(resp.InstancesSet, xmlStateChange{InstanceID: id,
			CurrentState: xmlState{Code: stateCodes[i.State], Name: i.State}, PreviousState: xmlState{Code: stateCodes[prev], Name: prev}})
	}
	return resp, nil
}

// ---------------------------------------------------------------- images, volumes, interfaces

func (c *resourcesAPI) describeImages(p params) (any, *apiError) {
	c.mu.Lock()
	defer c.mu.Unlock()
	resp := &describeImagesResponse{Xmlns: ec2Namespace}
	ids := p.list("ImageId")
	filters, apiErr := parseFilters(p, []string{"image-id", "name", "state"})
	if apiErr != nil {
		return nil, apiErr
	}
	var images []*Image
	if len(ids) > 0 {
		for _, id := range ids {
			if err := checkID(id, "ami", "InvalidAMIID.Malformed"); err != nil {
				return nil, err
			}
			img := c.images[id]
			if img == nil {
				return nil, badRequest("InvalidAMIID.NotFound", "The image id '[%s]' does not exist", id)
			}
			images = append(images, img)
		}
	} else {
		for _, img := range c.images {
			images = append(images, img)
		}
		sort.Slice(images, func(a, b int) bool { return images[a].ID < images[b].ID })
	}
	for _, img := range images {
		attr := func(name string) []string {
			switch name {
			case "image-id":
				return []string{img.ID}
			case "name":
				return []string{img.Name}
			case "state":
				return []string{"available"}
			}
			return nil
		}
		if !filters.match(attr) {
			continue
		}
		x := xmlImage{ImageID: img.ID, Name: img.Name, ImageState: "available", ImageOwnerID: c.accountID, Architecture: img.Architecture,
			ImageType: "machine", RootDeviceType: "ebs", RootDeviceName: img.RootDeviceName, VirtualizationType: "hvm"}
		bdm := xmlImageBDM{DeviceName: img.RootDeviceName}
		bdm.Ebs.VolumeSize, bdm.Ebs.VolumeType = 8, "gp2"
		x.BlockDeviceMapping = []xmlImageBDM{bdm}
		resp.ImagesSet = append(resp.ImagesSet, x)
	}
	return resp, nil
}

var volumeFilters = []string{"volume-id", "status", "availability-zone", "volume-type", "size", "attachment.instance-id",
	"attachment.device", "attachment.delete-on-termination", "tag-key", "tag-value", "tag:*"}

func (c *resourcesAPI) describeVolumes(p params) (any, *apiError) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.advanceLocked()
	ids := p.list("VolumeId")
	page, apiErr := pageParams(p, len(ids) > 0, "volumeIds", 5, 500)
	if apiErr != nil {
		return nil, apiErr
	}
	filters, apiErr := parseFilters(p, volumeFilters)
	if apiErr != nil {
		return nil, apiErr
	}
	var candidates []*Volume
	if len(ids) > 0 {
		for _, id := range ids {
			if err := checkID(id, "vol", "InvalidParameterValue"); err != nil {
				return nil, err
			}
			v := c.volumes[id]
			if v == nil {
				return nil, badRequest("InvalidVolume.NotFound", "The volume '%s' does not exist.", id)
			}
			candidates = append(candidates, v)
		}
	} else {
		for _, v := range c.volumes {
			candidates = append(candidates, v)
		}
	}
	var matched []*Volume
	for _, v := range candidates {
		attr := func(name string) []string {
			switch name {
			case "volume-id":
				return []string{v.ID}
			case "status":
				return []string{v.State}
			case "availability-zone":
				return []string{v.Zone}
			case "volume-type":
				return []string{v.Type}
			case "size":
				return []string{strconv.Itoa(int(v.Size))}
			case "attachment.instance-id":
				return []string{v.InstanceID}
			case "attachment.device":
				return []string{v.Device}
			case "attachment.delete-on-termination":
				return []string{strconv.FormatBool(v.DeleteOnTermination)}
			}
			return tagAttr(v.Tags, name)
		}
		if filters.match(attr) {
			matched = append(matched, v)
		}
	}
	sort.Slice(matched, func(a, b int) bool { return matched[a].ID < matched[b].ID })
	keys := make([]string, len(matched))
	for n, v := range matched {
		keys[n] = v.ID
	}
	from, to, next, apiErr := page.window(keys)
	if apiErr != nil {
		return nil, apiErr
	}
	resp := &describeVolumesResponse{Xmlns: ec2Namespace, NextToken: next}
	for _, v := range matched[from:to] {
		x := xmlVolume{VolumeID: v.ID, Size: v.Size, SnapshotID: v.SnapshotID, AvailabilityZone: v.Zone, Status: v.State,
			CreateTime: isoTime(v.CreateTime), VolumeType: v.Type, Iops: v.Iops, Throughput: v.Throughput, Encrypted: v.Encrypted,
			KmsKeyID: v.KmsKeyID, TagSet: xmlTags(v.Tags)}
		if v.InstanceID != "" {
			x.AttachmentSet = []xmlVolumeAttachment{{VolumeID: v.ID, InstanceID: v.InstanceID, Device: v.Device, Status: "attached", DeleteOnTermination: v.DeleteOnTermination}}
		}
		resp.VolumeSet = append(resp.VolumeSet, x)
	}
	return resp, nil
}

var nicFilters = []string{"network-interface-id", "subnet-id", "vpc-id", "status", "availability-zone", "attachment.instance-id",
	"interface-type", "description", "tag-key", "tag-value", "tag:*"}

func (c *networkAPI) describeNetworkInterfaces(p params) (any, *apiError) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.advanceLocked()
	ids := p.list("NetworkInterfaceId")
	page, apiErr := pageParams(p, len(ids) > 0, "networkInterfaceIds", 5, 1000)
	if apiErr != nil {
		return nil, apiErr
	}
	filters, apiErr := parseFilters(p, nicFilters)
	if apiErr != nil {
		return nil, apiErr
	}
	var matched []*NetworkInterface
	for _, n := range c.nics {
		if len(ids) > 0 && !slices.Contains(ids, n.ID) {
			continue
		}
		attr := func(name string) []string {
			switch name {
			case "network-interface-id":
				return []string{n.ID}
			case "subnet-id":
				return []string{n.SubnetID}
			case "vpc-id":
				return []string{n.VpcID}
			case "status":
				return []string{n.Status}
			case "availability-zone":
				return []string{n.Zone}
			case "attachment.instance-id":
				return []string{n.InstanceID}
			case "interface-type":
				return []string{n.InterfaceType}
			case "description":
				return []string{n.Description}
			}
			return tagAttr(n.Tags, name)
		}
		if filters.match(attr) {
			matched = append(matched, n)
		}
	}
	for _, id := range ids {
		if c.nics[id] == nil {
			return nil, badRequest("InvalidNetworkInterfaceID.NotFound", "The networkInterface ID '%s' does not exist", id)
		}
	}
	sort.Slice(matched, func(a, b int) bool { return matched[a].ID < matched[b].ID })
	keys := make([]string, len(matched))
	for k, n := range matched {
		keys[k] = n.ID
	}
	from, to, next, apiErr := page.window(keys)
	if apiErr != nil {
		return nil, apiErr
	}
	resp := &describeNetworkInterfacesResponse{Xmlns: ec2Namespace, NextToken: next}
	for _, n := range matched[from:to] {
		resp.NetworkInterfaceSet = append(resp.NetworkInterfaceSet, c.xmlNICLocked(n, true))
	}
	return resp, nil
}

// ---------------------------------------------------------------- spot requests

func (c *spotAPI) describeSpotRequests(p params) (any, *apiError) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.advanceLocked()
	ids := p.list("SpotInstanceRequestId")
	page, apiErr := pageParams(p, len(ids) > 0, "spotInstanceRequestIds", 5, 1000)
	if apiErr != nil {
		return nil, apiErr
	}
	filters, apiErr := parseFilters(p, []string{"spot-instance-request-id", "state", "instance-id", "launched-availability-zone", "tag-key", "tag-value", "tag:*"})
	if apiErr != nil {
		return nil, apiErr
	}
	for _, id := range ids {
		if c.spots[id] == nil {
			return nil, badRequest("InvalidSpotInstanceRequestID.NotFound", "The spot instance request ID '%s' does not exist", id)
		}
	}
	var matched []*SpotRequest
	for _, s := range c.spots {
		if len(ids) > 0 && !slices.Contains(ids, s.ID) {
			continue
		}
		attr := func(name string) []string {
			switch name {
			case "spot-instance-request-id":
				return []string{s.ID}
			case "state":
				return []string{s.State}
			case "instance-id":
				return []string{s.InstanceID}
			case "launched-availability-zone":
				return []string{s.Zone}
			}
			return tagAttr(s.Tags, name)
		}
		if filters.match(attr) {
			matched = append(matched, s)
		}
	}
	sort.Slice(matched, func(a, b int) bool { return matched[a].ID < matched[b].ID })
	keys := make([]string, len(matched))
	for k, s := range matched {
		keys[k] = s.ID
	}
	from, to, next, apiErr := page.window(keys)
	if apiErr != nil {
		return nil, apiErr
	}
	resp := &describeSpotRequestsResponse{Xmlns: ec2Namespace, NextToken: next}
	for _, s := range matched[from:to] {
		resp.SpotInstanceRequestSet = append(resp.SpotInstanceRequestSet, xmlSpotRequest{SpotInstanceRequestID: s.ID, SpotPrice: s.MaxPrice,
			Type: s.Type, State: s.State, StatusCode: s.StatusCode, InstanceID: s.InstanceID, CreateTime: isoTime(s.CreateTime),
			LaunchedAvailabilityZone: s.Zone, TagSet: xmlTags(s.Tags)})
	}
	return resp, nil
}

func (c *spotAPI) cancelSpotRequests(p params) (any, *apiError) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ids := p.list("SpotInstanceRequestId")
	for _, id := range ids {
		if c.spots[id] == nil {
			return nil, badRequest("InvalidSpotInstanceRequestID.NotFound", "The spot instance request ID '%s' does not exist", id)
		}
	}
	resp := &cancelSpotRequestsResponse{Xmlns: ec2Namespace}
	for _, id := range ids {
		s := c.spots[id]
		if s.State == "open" || s.State == "active" {
			s.State, s.StatusCode = "cancelled", "request-canceled-and-instance-running"
		}
		resp.SpotInstanceRequestSet = append(resp.SpotInstanceRequestSet, xmlCancelledSpot{SpotInstanceRequestID: id, State: s.State})
	}
	return resp, nil
}

// ---------------------------------------------------------------- tags and attributes

func (c *resourcesAPI) createTags(p params) (any, *apiError) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ids := p.list("ResourceId")
	tags := p.structs("Tag")
	if len(ids) == 0 || len(tags) == 0 {
		return nil, badRequest("MissingParameter", "The request must contain the parameters ResourceId and Tag")
	}
	var targets []map[string]string
	for _, id := range ids {
		var m *map[string]string
		switch {
		case strings.HasPrefix(id, "i-") && c.instances[id] != nil:
			m = &c.instances[id].Tags
		case strings.HasPrefix(id, "vol-") && c.volumes[id] != nil:
			m = &c.volumes[id].Tags
		case strings.HasPrefix(id, "eni-") && c.nics[id] != nil:
			m = &c.nics[id].Tags
		case strings.HasPrefix(id, "sir-") && c.spots[id] != nil:
			m = &c.spots[id].Tags
		case strings.HasPrefix(id, "i-"):
			return nil, badRequest("InvalidInstanceID.NotFound", "The instance ID '%s' does not exist", id)
		default:
			return nil, badRequest("InvalidID", "The ID '%s' is not valid", id)
		}
		if *m == nil {
			*m = map[string]string{}
		}
		targets = append(targets, *m)
	}
	for _, t := range tags {
		if err := checkTag(t.str("Key"), t.str("Value")); err != nil {
			return nil, err
		}
	}
	for _, m := range targets {
		for _, t := range tags {
			m[t.str("Key")] = t.str("Value")
		}
	}
	return ok("CreateTagsResponse"), nil
}

func (c *networkAPI) modifyNetworkInterfaceAttribute(p params) (any, *apiError) {
	c.mu.Lock()
	defer c.mu.Unlock()
	id := p.str("NetworkInterfaceId")
	n := c.nics[id]
	if n == nil {
		return nil, badRequest("InvalidNetworkInterfaceID.NotFound", "The networkInterface ID '%s' does not exist", id)
	}
	if v, set := p.boolean("SourceDestCheck.Value"); set {
		if n.InterfaceType == "efa-only" {
			return nil, badRequest("InvalidParameterValue", "SourceDestCheck cannot be modified on an efa-only network interface")
		}
		n.SourceDestCheck = v
	}
	if d := p.str("Description.Value"); d != "" {
		n.Description = d
	}
	return ok("ModifyNetworkInterfaceAttributeResponse"), nil
}

func (c *instancesAPI) modifyInstanceAttribute(p params) (any, *apiError) {
	c.mu.Lock()
	defer c.mu.Unlock()
	id := p.str("InstanceId")
	i := c.instances[id]
	if i == nil {
		return nil, badRequest("InvalidInstanceID.NotFound", "The instance ID '%s' does not exist", id)
	}
	if v, set := p.boolean("SourceDestCheck.Value"); set {
		if len(i.NICs) > 1 {
			return nil, badRequest("InvalidInstanceID", "There are multiple interfaces attached to instance '%s'. Please specify an interface ID for the operation instead.", id)
		}
		if n := c.nics[i.NICs[0]]; n != nil {
			n.SourceDestCheck = v
		}
	}
	return ok("ModifyInstanceAttributeResponse"), nil
}

func (c *networkAPI) assignIpv6Addresses(p params) (any, *apiError) {
	c.mu.Lock()
	defer c.mu.Unlock()
	id := p.str("NetworkInterfaceId")
	n := c.nics[id]
	if n == nil {
		return nil, badRequest("InvalidNetworkInterfaceID.NotFound", "The networkInterface ID '%s' does not exist", id)
	}
	count, _, err := p.int32("Ipv6PrefixCount")
	if err != nil || count < 0 {
		return nil, badRequest("InvalidParameterValue", "Invalid value for Ipv6PrefixCount")
	}
	resp := &assignIpv6Response{Xmlns: ec2Namespace, NetworkInterfaceID: id}
	resp.AssignedIpv6PrefixSet = c.assignPrefixesLocked(n, count)
	return resp, nil
}

func ok(name string) *returnResponse {
	return &returnResponse{XMLName: xml.Name{Local: name}, Xmlns: ec2Namespace, Return: true}
}

// ---------------------------------------------------------------- filters and pages

type filter struct {
	name   string
	values []string
}

type filters []filter

// parseFilters reads Filter.N.Name and Filter.N.Value.M; a name not in known (where "tag:*"
// stands for every tag:<key>) is InvalidParameterValue, as in EC2.
func parseFilters(p params, known []string) (filters, *apiError) {
	var out filters
	for _, f := range p.structs("Filter") {
		name := f.str("Name")
		ok := slices.Contains(known, name) || (strings.HasPrefix(name, "tag:") && len(name) > 4 && slices.Contains(known, "tag:*"))
		if !ok {
			return nil, badRequest("InvalidParameterValue", "The filter '%s' is invalid", name)
		}
		out = append(out, filter{name: name, values: f.list("Value")})
	}
	return out, nil
}

// match reports whether every filter has a value matching one of the resource's values for it
// (filters are ANDed, a filter's values ORed; * and ? are wildcards).
func (fs filters) match(attr func(name string) []string) bool {
	for _, f := range fs {
		got := attr(f.name)
		found := false
		for _, want := range f.values {
			for _, g := range got {
				if wildcard(want, g) {
					found = true
				}
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// wildcard matches s against pattern with EC2's filter wildcards: * any run, ? one character,
// a backslash escapes the next character.
func wildcard(pattern, s string) bool {
	if pattern == "" {
		return s == ""
	}
	switch pattern[0] {
	case '*':
		for i := 0; i <= len(s); i++ {
			if wildcard(pattern[1:], s[i:]) {
				return true
			}
		}
		return false
	case '?':
		return s != "" && wildcard(pattern[1:], s[1:])
	case '\\':
		if len(pattern) > 1 {
			return s != "" && s[0] == pattern[1] && wildcard(pattern[2:], s[1:])
		}
	}
	return s != "" && s[0] == pattern[0] && wildcard(pattern[1:], s[1:])
}

// page is a request's MaxResults and NextToken.
type page struct {
	max   int
	after string // the key the previous page ended with
}

func pageParams(p params, byID bool, idsParam string, lo, hi int) (page, *apiError) {
	var pg page
	if v, set, err := p.int32("MaxResults"); set {
		if byID {
			return pg, badRequest("InvalidParameterCombination", "The parameter %s cannot be used with the parameter maxResults", idsParam)
		}
		if err != nil || int(v) < lo || int(v) > hi {
			return pg, badRequest("InvalidParameterValue", "Value ( %s ) for parameter maxResults is invalid. Expecting a value between %d and %d.", p.str("MaxResults"), lo, hi)
		}
		pg.max = int(v)
	}
	if tok := p.str("NextToken"); tok != "" {
		raw, err := base64.RawURLEncoding.DecodeString(tok)
		if err != nil || !strings.HasPrefix(string(raw), "after:") {
			return pg, badRequest("InvalidParameterValue", "Invalid value '%s' for nextToken", tok)
		}
		pg.after = strings.TrimPrefix(string(raw), "after:")
	}
	return pg, nil
}

// window returns the slice bounds of this page of keys (sorted) and the token of the next.
func (pg page) window(keys []string) (from, to int, next string, err *apiError) {
	if pg.after != "" {
		// keys need not be sorted by value (instances are by launch time): find it.
		from = slices.Index(keys, pg.after)
		if from < 0 {
			return 0, 0, "", badRequest("InvalidParameterValue", "The nextToken is no longer valid: the resource it continues after is gone")
		}
		from++
	}
	to = len(keys)
	if pg.max > 0 && from+pg.max < to {
		to = from + pg.max
		next = base64.RawURLEncoding.EncodeToString([]byte("after:" + keys[to-1]))
	}
	return from, to, next, nil
}

func mapKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func mapValues(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}
