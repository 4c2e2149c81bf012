package aws

import (
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/kit"
)

// ProviderSpec is the providerSpec of an AWS MachineClass. Its JSON field names and types are
// those of Gardener's AWSProviderSpec (machine-controller-manager-provider-aws
// pkg/aws/apis/aws_provider_spec.go at the commit README.md names), so existing MachineClasses
// decode unchanged. Decoding is Gardener's (encoding/json): names match case-insensitively and
// unknown fields are ignored, each with a warning; strict mode refuses them.
type ProviderSpec struct {
	// APIVersion is accepted for compatibility (Gardener writes mcm.gardener.cloud/v1alpha1).
	APIVersion string `json:"apiVersion,omitempty"`
	// AMI is the image of the instances (ami-...).
	AMI string `json:"ami,omitempty"`
	// BlockDevices are the instance's EBS volumes: one with deviceName /root (or the only one)
	// is the root volume, the others are data volumes named /dev/sd[a-z] or /dev/xvd...
	BlockDevices []BlockDeviceMapping `json:"blockDevices,omitempty"`
	// CapacityReservationTarget targets a capacity reservation, its resource group, or a
	// preference (open or none).
	CapacityReservationTarget *CapacityReservationTarget `json:"capacityReservation,omitempty"`
	// EbsOptimized launches the instance EBS-optimized.
	EbsOptimized bool `json:"ebsOptimized,omitempty"`
	// IAM is the instance profile of the instances: exactly one of name and arn.
	IAM IAMProfile `json:"iam,omitempty"`
	// MachineType is the EC2 instance type, e.g. m5.large.
	MachineType string `json:"machineType,omitempty"`
	// KeyName is the EC2 key pair for SSH; empty means none.
	KeyName *string `json:"keyName,omitempty"`
	// Monitoring enables detailed CloudWatch monitoring.
	Monitoring bool `json:"monitoring,omitempty"`
	// NetworkInterfaces of the instance; at least one, each with its subnet and security groups.
	// The instance's availability zone is that of the first interface's subnet.
	NetworkInterfaces []NetworkInterface `json:"networkInterfaces,omitempty"`
	// Region of the instances, e.g. eu-west-1.
	Region string `json:"region,omitempty"`
	// SpotPrice, when set, launches spot instances: "" bids up to the on-demand price, a number
	// is the highest hourly price. Gardener deprecates it for InstanceMarketOptions.
	SpotPrice *string `json:"spotPrice,omitempty"`
	// SrcAndDstChecksEnabled false disables the source/destination check of the instance's
	// network interfaces (NAT instances, routing CNIs); nil or true keeps it.
	SrcAndDstChecksEnabled *bool `json:"srcAndDstChecksEnabled,omitempty"`
	// Tags go on the instance, its volumes and network interfaces, with Name set to the machine
	// name. A kubernetes.io/cluster/<cluster> and a kubernetes.io/role/<role> tag are required:
	// they scope the class to its cluster and role.
	Tags map[string]string `json:"tags,omitempty"`
	// InstanceMetadataOptions configure the instance metadata service (IMDS).
	InstanceMetadataOptions *InstanceMetadataOptions `json:"instanceMetadataOptions,omitempty"`
	// CPUOptions set the cores and threads per core, and AMD SEV-SNP.
	CPUOptions *CPUOptions `json:"cpuOptions,omitempty"`
	// Placement sets the placement group, tenancy and dedicated host. Without it, the machine's
	// node template annotation machine.sapcloud.io/awsPlacement is read, as in Gardener.
	Placement *Placement `json:"placement,omitempty"`
	// InstanceMarketOptions selects the market: spot, capacity-block or
	// interruptible-capacity-reservation. It takes precedence over SpotPrice.
	InstanceMarketOptions *InstanceMarketOptions `json:"instanceMarketOptions,omitempty"`
}

// BlockDeviceMapping is one block device of the instance.
type BlockDeviceMapping struct {
	// DeviceName is /root for the root volume, else the device, e.g. /dev/sdb. A single block
	// device is the root volume whatever its name.
	DeviceName string `json:"deviceName,omitempty"`
	// Ebs describes the EBS volume.
	Ebs EbsBlockDevice `json:"ebs,omitempty"`
	// NoDevice suppresses a device of the AMI's block device mapping.
	NoDevice string `json:"noDevice,omitempty"`
	// VirtualName is an instance store volume (ephemeralN).
	VirtualName string `json:"virtualName,omitempty"`
}

// EbsBlockDevice describes an EBS volume made with the instance.
type EbsBlockDevice struct {
	// DeleteOnTermination nil or true deletes the volume with the instance.
	DeleteOnTermination *bool `json:"deleteOnTermination,omitempty"`
	// Encrypted encrypts the volume (with KmsKeyID, else the account's default key).
	Encrypted bool `json:"encrypted,omitempty"`
	// Iops is the provisioned IOPS of io1 and gp3 volumes (required for io1).
	Iops int32 `json:"iops,omitempty"`
	// Throughput is the throughput of a gp3 volume in MiB/s.
	Throughput *int32 `json:"throughput,omitempty"`
	// KmsKeyID is the KMS key of an encrypted volume.
	KmsKeyID *string `json:"kmsKeyID,omitempty"`
	// SnapshotID is the snapshot the volume is made from.
	SnapshotID *string `json:"snapshotID,omitempty"`
	// VolumeSize in GiB.
	VolumeSize int32 `json:"volumeSize,omitempty"`
	// VolumeType is gp2, gp3, io1, st1, sc1 or standard.
	VolumeType string `json:"volumeType,omitempty"`
}

// CapacityReservationTarget targets a capacity reservation.
type CapacityReservationTarget struct {
	// CapacityReservationPreference is open or none; not together with the ID or ARN.
	CapacityReservationPreference string `json:"capacityReservationPreference,omitempty"`
	// CapacityReservationID is the reservation to launch into.
	CapacityReservationID *string `json:"capacityReservationId,omitempty"`
	// CapacityReservationResourceGroupArn is a resource group of reservations.
	CapacityReservationResourceGroupArn *string `json:"capacityReservationResourceGroupArn,omitempty"`
}

// InstanceMarketOptions selects the market of the instance.
type InstanceMarketOptions struct {
	// MarketType is spot, capacity-block or interruptible-capacity-reservation.
	MarketType string `json:"marketType"`
}

// IAMProfile names an instance profile.
type IAMProfile struct {
	// ARN of the instance profile.
	ARN string `json:"arn,omitempty"`
	// Name of the instance profile.
	Name string `json:"name,omitempty"`
}

// NetworkInterface is one network interface made with the instance.
type NetworkInterface struct {
	// AssociatePublicIPAddress gives the interface a public IPv4 address.
	AssociatePublicIPAddress *bool `json:"associatePublicIPAddress,omitempty"`
	// Ipv6AddressCount is how many IPv6 addresses the interface gets.
	Ipv6AddressCount *int32 `json:"ipv6AddressCount,omitempty"`
	// Ipv6PrefixCount is how many IPv6 /80 prefixes the interface gets; they are assigned once
	// the instance exists (InitializeMachine), as Gardener does.
	Ipv6PrefixCount *int32 `json:"ipv6PrefixCount,omitempty"`
	// DeleteOnTermination nil or true deletes the interface with the instance.
	DeleteOnTermination *bool `json:"deleteOnTermination,omitempty"`
	// Description of the interface.
	Description *string `json:"description,omitempty"`
	// SecurityGroupIDs of the interface; at least one.
	SecurityGroupIDs []string `json:"securityGroupIDs,omitempty"`
	// SubnetID of the interface; required.
	SubnetID string `json:"subnetID,omitempty"`
	// InterfaceType is interface (default), efa or efa-only.
	InterfaceType *string `json:"interfaceType,omitempty"`
	// NetworkCardIndex of the interface.
	NetworkCardIndex *int32 `json:"networkCardIndex,omitempty"`
	// DeviceIndex of the interface; default: its position in the list.
	DeviceIndex *int32 `json:"deviceIndex,omitempty"`
	// PrimaryIpv6 makes the first IPv6 address the primary one (default true with
	// ipv6AddressCount).
	PrimaryIpv6 *bool `json:"primaryIpv6,omitempty"`
}

// Placement of the instance.
type Placement struct {
	GroupID         *string `json:"groupId,omitempty"`
	Tenancy         *string `json:"tenancy,omitempty"`
	HostID          *string `json:"hostId,omitempty"`
	PartitionNumber *int32  `json:"partitionNumber,omitempty"`
	Affinity        *string `json:"affinity,omitempty"`
}

// InstanceMetadataOptions configure the instance metadata service.
type InstanceMetadataOptions struct {
	// HTTPEndpoint is enabled or disabled.
	HTTPEndpoint string `json:"httpEndpoint,omitempty"`
	// HTTPPutResponseHopLimit is 1-64; 2 or more lets containers reach IMDSv2.
	HTTPPutResponseHopLimit *int32 `json:"httpPutResponseHopLimit,omitempty"`
	// HTTPTokens is required (IMDSv2 only) or optional.
	HTTPTokens string `json:"httpTokens,omitempty"`
	// HTTPProtocolIPv6 is enabled or disabled.
	HTTPProtocolIPv6 string `json:"httpProtocolIpv6,omitempty"`
}

// CPUOptions set the instance's CPU topology.
type CPUOptions struct {
	// CoreCount and ThreadsPerCore go together.
	CoreCount *int32 `json:"coreCount"`
	// ThreadsPerCore is 1 or 2.
	ThreadsPerCore *int32 `json:"threadsPerCore"`
	// AmdSevSnp is enabled or disabled.
	AmdSevSnp *string `json:"amdSevSnp,omitempty"`
}

// Tag key prefixes that scope a class to its cluster and role, and the tag naming the machine.
const (
	ClusterTagPrefix = "kubernetes.io/cluster/"
	RoleTagPrefix    = "kubernetes.io/role/"
	NameTag          = "Name"
	// RootDeviceName marks the root volume among several block devices.
	RootDeviceName = "/root"
)

// scopeTags are the class's cluster and role tag keys, sorted: an instance belongs to the class
// when it carries all of them. Gardener's provider matches keys that contain the prefixes
// (pkg/aws/apis/validation/validation.go validateSpecTags); so does this.
func (s *ProviderSpec) scopeTags() []string {
	var keys []string
	for k := range s.Tags {
		if strings.Contains(k, ClusterTagPrefix) || strings.Contains(k, RoleTagPrefix) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

// spotRequested reports whether the class launches spot instances.
func (s *ProviderSpec) spotRequested() bool {
	if s.InstanceMarketOptions != nil {
		return s.InstanceMarketOptions.MarketType == "spot"
	}
	return s.SpotPrice != nil
}

// specs decodes the class's providerSpec as Gardener's provider does (json.Unmarshal in
// pkg/aws/core_util.go decodeProviderSpecAndSecret: names match case-insensitively, unknown
// fields are ignored) in Lenient mode. For DeleteMachine, GetMachineStatus and ListMachines only
// the region and the scope tags must be valid (validateScope), where Gardener's provider
// validates the whole spec and secret on every call.
var specs = kit.Spec[ProviderSpec]{
	Provider: ProviderName, Names: driver.FoldedNames, Validate: validateSpec, Scope: validateScope,
}

// volumes are the EBS volumes among persistent volumes: in-tree AWSElasticBlockStore ones and
// those of the EBS CSI driver (their handle).
var volumes = kit.Volumes{CSIDriver: "ebs.csi.aws.com", InTree: func(spec *corev1.PersistentVolumeSpec) string {
	if spec.AWSElasticBlockStore == nil {
		return ""
	}
	id, _ := ebsVolumeID(spec.AWSElasticBlockStore.VolumeID)
	return id
}}
