package aws

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/kit"
)

// validateScope checks what reaching a class's existing VMs needs: the region the client
// talks to, and the cluster and role tags without which the driver cannot tell the class's VMs
// from others'.
func validateScope(s *ProviderSpec) field.ErrorList {
	p := driver.ProviderSpecPath
	errs := validateRegion(s.Region, p.Child("region"))
	tags := p.Child("tags")
	errs = append(errs, scopeTags.Errors(slices.Collect(maps.Keys(s.Tags)), scopeTagKey(tags))...)
	return errs
}

// scopeTags are the tags of Gardener's AWS provider that scope a class (value "1").
var scopeTags = kit.ScopeTags{Cluster: ClusterTagPrefix, Role: RoleTagPrefix, Value: ` (value "1")`}

// scopeTagKey names a missing scope tag in the path as a key: tags[kubernetes.io/cluster/<cluster>].
func scopeTagKey(tags *field.Path) func(string) *field.Path {
	return func(fragment string) *field.Path {
		if fragment == ClusterTagPrefix {
			return tags.Key(fragment + "<cluster>")
		}
		return tags.Key(fragment + "<role>")
	}
}

// validateRegion requires a region and checks it as the bundled aws-sdk-go-v2 does before it
// puts it into the endpoint's host name (a DNS label; service/ec2 bindRegion). Which regions
// exist is not checked here: the SDK resolves any such name (eusc-de-east-1 in the aws-eusc
// partition, a region newer than the SDK in the aws partition), and EC2 answers the rest.
func validateRegion(region string, p *field.Path) field.ErrorList {
	switch {
	case strings.TrimSpace(region) == "":
		return field.ErrorList{field.Required(p, "set the AWS region, e.g. eu-west-1")}
	case !regionPattern.MatchString(region):
		return field.ErrorList{field.Invalid(p, region, "must be an AWS region name, e.g. eu-west-1: lower-case letters, digits and hyphens")}
	}
	return nil
}

var (
	// regionPattern matches a DNS label, what the SDK accepts as a region (it becomes part of
	// the endpoint's host name): eu-west-1, us-gov-west-1, eusc-de-east-1, ...
	regionPattern = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
	// dataDeviceNamePattern is Gardener's DataDeviceNameFormat (AWS's device naming).
	dataDeviceNamePattern = regexp.MustCompile(`^/dev/(sd[a-z]|xvd[a-c][a-z]?)$`)
	// volumeTypes are the EBS volume types Gardener accepts (ValidVolumeTypes).
	volumeTypes = []string{"gp2", "gp3", "io1", "st1", "sc1", "standard"}
)

// validateSpec checks a decoded spec as Gardener's validation does
// (pkg/aws/apis/validation/validation.go ValidateAWSProviderSpec), naming each bad field and
// what to do. It checks no ID's format (ami-..., subnet-..., sg-...): EC2 does, and its
// answer is InvalidArgument naming the field. Secrets are checked by credentialsFrom.
func validateSpec(s *ProviderSpec) field.ErrorList {
	var errs field.ErrorList
	p := driver.ProviderSpecPath
	if strings.TrimSpace(s.AMI) == "" {
		errs = append(errs, field.Required(p.Child("ami"), "set the AMI of the machines (ami-...)"))
	}
	errs = append(errs, validateScope(s)...)
	if strings.TrimSpace(s.MachineType) == "" {
		errs = append(errs, field.Required(p.Child("machineType"), "set the EC2 instance type, e.g. m5.large"))
	}
	if (s.IAM.Name == "") == (s.IAM.ARN == "") {
		errs = append(errs, field.Invalid(p.Child("iam"), fmt.Sprintf("name=%q arn=%q", s.IAM.Name, s.IAM.ARN), "set exactly one of iam.name and iam.arn: the instance profile of the machines"))
	}
	errs = append(errs, validateBlockDevices(s.BlockDevices, p.Child("blockDevices"))...)
	errs = append(errs, validateCapacityReservation(s.CapacityReservationTarget, p.Child("capacityReservation"))...)
	errs = append(errs, validateNetworkInterfaces(s.NetworkInterfaces, p.Child("networkInterfaces"))...)
	errs = append(errs, validatePlacement(s.Placement, p.Child("placement"))...)
	errs = append(errs, validateMarket(s, p)...)
	errs = append(errs, validateTags(s.Tags, p.Child("tags"))...)
	errs = append(errs, validateMetadataOptions(s.InstanceMetadataOptions, p.Child("instanceMetadataOptions"))...)
	errs = append(errs, validateCPUOptions(s.CPUOptions, p.Child("cpuOptions"))...)
	return errs
}

func validateBlockDevices(devices []BlockDeviceMapping, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(devices) == 0 {
		// Gardener's provider fails the create ("no block devices passed"); say so up front.
		return append(errs, field.Required(p, "set at least the root volume: deviceName /root with ebs.volumeSize and ebs.volumeType"))
	}
	roots := 0
	seen := map[string]bool{}
	for i, d := range devices {
		dp := p.Index(i)
		if d.DeviceName == RootDeviceName {
			roots++
		} else if len(devices) > 1 && !dataDeviceNamePattern.MatchString(d.DeviceName) {
			errs = append(errs, field.Invalid(dp.Child("deviceName"), d.DeviceName, "must be /root or a device of the form "+dataDeviceNamePattern.String()+", e.g. /dev/sdb"))
		}
		if seen[d.DeviceName] {
			errs = append(errs, field.Duplicate(dp.Child("deviceName"), d.DeviceName))
		}
		seen[d.DeviceName] = true
		ep := dp.Child("ebs")
		if !slices.Contains(volumeTypes, d.Ebs.VolumeType) {
			errs = append(errs, field.NotSupported(ep.Child("volumeType"), d.Ebs.VolumeType, volumeTypes))
		}
		if d.Ebs.VolumeSize <= 0 {
			errs = append(errs, field.Invalid(ep.Child("volumeSize"), d.Ebs.VolumeSize, "must be a positive number of GiB"))
		}
		if d.Ebs.Iops < 0 || (d.Ebs.VolumeType == "io1" && d.Ebs.Iops == 0) {
			errs = append(errs, field.Invalid(ep.Child("iops"), d.Ebs.Iops, "must be positive (required for io1)"))
		}
		if d.Ebs.Throughput != nil && *d.Ebs.Throughput <= 0 {
			errs = append(errs, field.Invalid(ep.Child("throughput"), *d.Ebs.Throughput, "must be a positive number of MiB/s"))
		}
	}
	if len(devices) > 1 && roots != 1 {
		errs = append(errs, field.Invalid(p, roots, "with several block devices, exactly one must have deviceName /root"))
	}
	return errs
}

func validateCapacityReservation(c *CapacityReservationTarget, p *field.Path) field.ErrorList {
	if c == nil {
		return nil
	}
	var errs field.ErrorList
	if c.CapacityReservationPreference != "" {
		valid := kit.EnumStrings(ec2types.CapacityReservationPreference("").Values())
		if !slices.Contains(valid, c.CapacityReservationPreference) {
			errs = append(errs, field.NotSupported(p.Child("capacityReservationPreference"), c.CapacityReservationPreference, valid))
		}
		if c.CapacityReservationID != nil || c.CapacityReservationResourceGroupArn != nil {
			errs = append(errs, field.Forbidden(p.Child("capacityReservationPreference"), "set either a preference or a reservation (capacityReservationId or capacityReservationResourceGroupArn), not both"))
		}
	} else if c.CapacityReservationID != nil && c.CapacityReservationResourceGroupArn != nil {
		errs = append(errs, field.Forbidden(p.Child("capacityReservationResourceGroupArn"), "set capacityReservationId or capacityReservationResourceGroupArn, not both"))
	}
	return errs
}

var interfaceTypes = []string{
	string(ec2types.NetworkInterfaceTypeInterface),
	string(ec2types.NetworkInterfaceTypeEfa),
	string(ec2types.NetworkInterfaceTypeEfaOnly),
}

func validateNetworkInterfaces(nics []NetworkInterface, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(nics) == 0 {
		return append(errs, field.Required(p, "set at least one network interface with subnetID and securityGroupIDs"))
	}
	for i, n := range nics {
		np := p.Index(i)
		if strings.TrimSpace(n.SubnetID) == "" {
			errs = append(errs, field.Required(np.Child("subnetID"), "set the subnet of the interface (subnet-...)"))
		}
		if len(n.SecurityGroupIDs) == 0 {
			errs = append(errs, field.Required(np.Child("securityGroupIDs"), "set at least one security group (sg-...)"))
		}
		for j, sg := range n.SecurityGroupIDs {
			if strings.TrimSpace(sg) == "" {
				errs = append(errs, field.Required(np.Child("securityGroupIDs").Index(j), "remove the empty entry or set a security group (sg-...)"))
			}
		}
		if n.InterfaceType != nil && *n.InterfaceType != "" && !slices.Contains(interfaceTypes, *n.InterfaceType) {
			errs = append(errs, field.NotSupported(np.Child("interfaceType"), *n.InterfaceType, interfaceTypes))
		}
		if n.DeviceIndex != nil && *n.DeviceIndex < 0 {
			errs = append(errs, field.Invalid(np.Child("deviceIndex"), *n.DeviceIndex, "must be >= 0"))
		}
		if n.NetworkCardIndex != nil && *n.NetworkCardIndex < 0 {
			errs = append(errs, field.Invalid(np.Child("networkCardIndex"), *n.NetworkCardIndex, "must be >= 0"))
		}
		if n.Ipv6AddressCount != nil && *n.Ipv6AddressCount < 0 {
			errs = append(errs, field.Invalid(np.Child("ipv6AddressCount"), *n.Ipv6AddressCount, "must be >= 0"))
		}
		if n.Ipv6PrefixCount != nil && *n.Ipv6PrefixCount < 0 {
			errs = append(errs, field.Invalid(np.Child("ipv6PrefixCount"), *n.Ipv6PrefixCount, "must be >= 0"))
		}
	}
	return errs
}

func validatePlacement(pl *Placement, p *field.Path) field.ErrorList {
	if pl == nil {
		return nil
	}
	var errs field.ErrorList
	if pl.Tenancy != nil {
		valid := []string{"default", "dedicated", "host"}
		if !slices.Contains(valid, *pl.Tenancy) {
			errs = append(errs, field.NotSupported(p.Child("tenancy"), *pl.Tenancy, valid))
		}
	}
	if pl.Affinity != nil {
		valid := []string{"default", "host"}
		if !slices.Contains(valid, *pl.Affinity) {
			errs = append(errs, field.NotSupported(p.Child("affinity"), *pl.Affinity, valid))
		}
	}
	if pl.HostID != nil && (pl.Tenancy == nil || *pl.Tenancy != "host") {
		errs = append(errs, field.Forbidden(p.Child("hostId"), `set tenancy "host" to use a dedicated host, or remove hostId`))
	}
	if pl.PartitionNumber != nil && *pl.PartitionNumber < 1 {
		errs = append(errs, field.Invalid(p.Child("partitionNumber"), *pl.PartitionNumber, "must be >= 1"))
	}
	return errs
}

func validateMarket(s *ProviderSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if m := s.InstanceMarketOptions; m != nil {
		valid := kit.EnumStrings(ec2types.MarketType("").Values())
		if !slices.Contains(valid, m.MarketType) {
			errs = append(errs, field.NotSupported(p.Child("instanceMarketOptions", "marketType"), m.MarketType, valid))
		}
	}
	if sp := s.SpotPrice; sp != nil && *sp != "" {
		var price float64
		if _, err := fmt.Sscanf(*sp, "%g", &price); err != nil || price <= 0 || strings.TrimSpace(*sp) != *sp {
			errs = append(errs, field.Invalid(p.Child("spotPrice"), *sp, `must be the highest hourly price in USD, e.g. "0.05", or "" for up to the on-demand price`))
		}
	}
	return errs
}

// validateTags checks EC2's limits on tags, which would otherwise fail every create; the
// cluster and role tags (Gardener's validateSpecTags) are validateScope's.
func validateTags(tags map[string]string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for k, v := range tags {
		if k == "" || len(k) > 128 {
			errs = append(errs, field.Invalid(p.Key(k), k, "a tag key is 1-128 characters"))
		} else if strings.HasPrefix(strings.ToLower(k), "aws:") {
			errs = append(errs, field.Invalid(p.Key(k), k, `tag keys starting with "aws:" are reserved for AWS: rename the tag`))
		}
		if len(v) > 256 {
			errs = append(errs, field.TooLong(p.Key(k), "", 256))
		}
	}
	// The Name tag is replaced by the machine name, so it does not count twice.
	n := len(tags)
	if _, ok := tags[NameTag]; !ok {
		n++
	}
	if n > 50 {
		errs = append(errs, field.TooMany(p, n, 50))
	}
	return errs
}

func validateMetadataOptions(m *InstanceMetadataOptions, p *field.Path) field.ErrorList {
	if m == nil {
		return nil
	}
	var errs field.ErrorList
	if l := m.HTTPPutResponseHopLimit; l != nil && (*l < 0 || *l > 64) {
		errs = append(errs, field.Invalid(p.Child("httpPutResponseHopLimit"), *l, "must be between 0 and 64"))
	}
	for _, f := range []struct {
		name, value string
		valid       []string
	}{
		{"httpEndpoint", m.HTTPEndpoint, []string{"disabled", "enabled"}},
		{"httpTokens", m.HTTPTokens, []string{"optional", "required"}},
		{"httpProtocolIpv6", m.HTTPProtocolIPv6, []string{"disabled", "enabled"}},
	} {
		if f.value != "" && !slices.Contains(f.valid, f.value) {
			errs = append(errs, field.NotSupported(p.Child(f.name), f.value, f.valid))
		}
	}
	return errs
}

func validateCPUOptions(c *CPUOptions, p *field.Path) field.ErrorList {
	if c == nil {
		return nil
	}
	var errs field.ErrorList
	if c.AmdSevSnp != nil {
		valid := kit.EnumStrings(ec2types.AmdSevSnpSpecification("").Values())
		if !slices.Contains(valid, *c.AmdSevSnp) {
			errs = append(errs, field.NotSupported(p.Child("amdSevSnp"), *c.AmdSevSnp, valid))
		}
	}
	switch {
	case c.CoreCount == nil && c.ThreadsPerCore != nil:
		errs = append(errs, field.Required(p.Child("coreCount"), "set coreCount together with threadsPerCore"))
	case c.CoreCount != nil && c.ThreadsPerCore == nil:
		errs = append(errs, field.Required(p.Child("threadsPerCore"), "set threadsPerCore (1 or 2) together with coreCount"))
	case c.ThreadsPerCore != nil && *c.ThreadsPerCore != 1 && *c.ThreadsPerCore != 2:
		errs = append(errs, field.Invalid(p.Child("threadsPerCore"), *c.ThreadsPerCore, "must be 1 (no multi-threading) or 2"))
	}
	if c.CoreCount != nil && *c.CoreCount <= 0 {
		errs = append(errs, field.Invalid(p.Child("coreCount"), *c.CoreCount, "must be positive"))
	}
	return errs
}
