package gcp

import (
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/kit"
)

// ProviderSpec is the providerSpec of a GCP MachineClass. Its JSON fields are those of Gardener's
// GCPProviderSpec (gardener/machine-controller-manager-provider-gcp, pkg/api/v1alpha1/provider_spec.go
// at commit f192d12161a1e7c8c147ae471758b97358c381c1), so existing MachineClasses decode
// unchanged; Scheduling.ProvisioningModel and Scheduling.InstanceTerminationAction are
// machinist's additions (Spot VMs).
type ProviderSpec struct {
	// APIVersion is accepted and ignored, as in Gardener (its field has no JSON tag).
	APIVersion string `json:"APIVersion,omitempty"`
	// CanIPForward lets the instance send and receive packets with foreign addresses (routes
	// to pods need it).
	CanIPForward bool `json:"canIpForward"`
	// DeletionProtection protects the instance against deletion; DeleteMachine then fails with
	// FailedPrecondition until it is turned off.
	DeletionProtection bool `json:"deletionProtection"`
	// Description of the instance.
	Description *string `json:"description,omitempty"`
	// Disks of the instance: exactly one boot disk, made from an image, and data disks
	// (persistent, or local SSDs of type SCRATCH). They are created with the instance.
	Disks []*Disk `json:"disks,omitempty"`
	// Gpu attaches accelerators.
	Gpu *GPU `json:"gpu,omitempty"`
	// Labels of the instance.
	Labels map[string]string `json:"labels,omitempty"`
	// MachineType is the machine type's name, e.g. n2-standard-4.
	MachineType string `json:"machineType"`
	// Metadata are the instance's metadata items (user-data comes from the secret).
	Metadata []*Metadata `json:"metadata,omitempty"`
	// MinCPUPlatform is the minimum CPU platform, e.g. "Intel Ice Lake".
	MinCPUPlatform string `json:"minCpuPlatform,omitempty"`
	// NetworkInterfaces of the instance; the first is its primary interface.
	NetworkInterfaces []*NetworkInterface `json:"networkInterfaces,omitempty"`
	// Region of the zone and of the subnetworks.
	Region string `json:"region"`
	// Scheduling options.
	Scheduling Scheduling `json:"scheduling"`
	// ServiceAccounts of the instance (Compute Engine allows one) with their scopes.
	ServiceAccounts []ServiceAccount `json:"serviceAccounts"`
	// Tags are the instance's network tags. A tag containing "kubernetes-io-cluster-" and one
	// containing "kubernetes-io-role-" are required: they scope the class to its cluster and
	// role, as in Gardener.
	Tags []string `json:"tags,omitempty"`
	// Zone of the instance.
	Zone string `json:"zone"`
	// ShieldedInstanceConfiguration turns Shielded VM features on or off.
	ShieldedInstanceConfiguration *ShieldedInstanceConfiguration `json:"shieldedInstanceConfiguration,omitempty"`
	// AdvancedMachineFeatures are BIOS-level options.
	AdvancedMachineFeatures *AdvancedMachineFeatures `json:"advancedMachineFeatures,omitempty"`
}

// ShieldedInstanceConfiguration of a Shielded VM.
type ShieldedInstanceConfiguration struct {
	IntegrityMonitoring *bool `json:"integrityMonitoring,omitempty"`
	SecureBoot          *bool `json:"secureBoot,omitempty"`
	Vtpm                *bool `json:"vtpm,omitempty"`
}

// AdvancedMachineFeatures of the instance.
type AdvancedMachineFeatures struct {
	EnableNestedVirtualization bool `json:"enableNestedVirtualization,omitempty"`
}

// Disk is a disk created with the instance.
type Disk struct {
	// AutoDelete deletes the disk with the instance; default true.
	AutoDelete *bool `json:"autoDelete"`
	// Boot marks the boot disk.
	Boot bool `json:"boot"`
	// SizeGb is the size in GiB; 0 takes the image's size.
	SizeGb int64 `json:"sizeGb"`
	// Type is the disk type's name (pd-balanced, pd-ssd, hyperdisk-balanced, ...), or SCRATCH
	// for a local SSD; empty is Compute Engine's default (pd-standard).
	Type string `json:"type"`
	// Interface of a SCRATCH disk: NVME or SCSI.
	Interface string `json:"interface"`
	// Image the disk is made from, e.g. projects/debian-cloud/global/images/family/debian-12.
	Image string `json:"image"`
	// Encryption with a Cloud KMS key.
	Encryption *DiskEncryption `json:"encryption"`
	// Labels of the disk.
	Labels map[string]string `json:"labels"`
	// ProvisionedIops of pd-extreme and hyperdisk disks.
	ProvisionedIops int64 `json:"provisionedIops,omitempty"`
	// ProvisionedThroughput (MiB/s) of hyperdisk-balanced and hyperdisk-throughput disks.
	ProvisionedThroughput int64 `json:"provisionedThroughput,omitempty"`
	// StoragePool the disk is created in (a partial or full URL).
	StoragePool *string `json:"storagePool,omitempty"`
}

// DiskEncryption names the Cloud KMS key of a disk.
type DiskEncryption struct {
	// KmsKeyName is projects/P/locations/L/keyRings/R/cryptoKeys/K.
	KmsKeyName string `json:"kmsKeyName"`
	// KmsKeyServiceAccount may use the key; empty means Compute Engine's service agent.
	KmsKeyServiceAccount string `json:"kmsKeyServiceAccount"`
}

// Metadata is one metadata item.
type Metadata struct {
	Key   string  `json:"key"`
	Value *string `json:"value"`
}

// NetworkInterface of the instance.
type NetworkInterface struct {
	// DisableExternalIP leaves the interface without an external IPv4 address.
	DisableExternalIP bool `json:"disableExternalIP,omitempty"`
	// Network is the VPC network's name (in the credentials' project).
	Network string `json:"network,omitempty"`
	// Subnetwork is the subnetwork's name (in Region).
	Subnetwork string `json:"subnetwork,omitempty"`
	// StackType is IPV4_ONLY or IPV4_IPV6.
	StackType string `json:"stackType"`
	// Ipv6AccessType is EXTERNAL or INTERNAL (dual stack).
	Ipv6AccessType string `json:"ipv6accessType"`
	// UseAliasIPs gives the interface an alias IP range (for pods).
	UseAliasIPs bool `json:"useAliasIPs"`
	// IpCidrRange is the alias range's size, e.g. "/24".
	IpCidrRange string `json:"ipCidrRange"` //nolint:revive // Gardener's name
	// SubnetworkRangeName is the subnetwork's secondary range the alias range comes from.
	SubnetworkRangeName string `json:"subnetworkRangeName"`
}

// Scheduling options of the instance.
type Scheduling struct {
	// AutomaticRestart restarts an instance Compute Engine terminated.
	AutomaticRestart bool `json:"automaticRestart"`
	// OnHostMaintenance is MIGRATE or TERMINATE.
	OnHostMaintenance string `json:"onHostMaintenance"`
	// Preemptible makes a (legacy) preemptible VM.
	Preemptible bool `json:"preemptible"`
	// ProvisioningModel is STANDARD or SPOT (machinist's addition; Gardener's spec has no Spot
	// VMs).
	ProvisioningModel string `json:"provisioningModel,omitempty"`
	// InstanceTerminationAction is what happens to a preempted Spot VM: STOP or DELETE
	// (machinist's addition).
	InstanceTerminationAction string `json:"instanceTerminationAction,omitempty"`
}

// ServiceAccount of the instance.
type ServiceAccount struct {
	Email  string   `json:"email"`
	Scopes []string `json:"scopes"`
}

// GPU attaches Count accelerators of AcceleratorType (e.g. nvidia-tesla-t4).
type GPU struct {
	AcceleratorType string `json:"acceleratorType"`
	Count           int64  `json:"count"`
}

// Tag fragments that scope a class to its cluster and role. Gardener's provider matches tags
// containing them (pkg/gcp/machine_controller_util.go, getVMs).
const (
	ClusterTagFragment = "kubernetes-io-cluster-"
	RoleTagFragment    = "kubernetes-io-role-"
)

// Disk types with a special meaning.
const (
	DiskTypeScratch   = "SCRATCH"
	diskInterfaceNVME = "NVME"
	diskInterfaceSCSI = "SCSI"
)

// scopeTags are the class's cluster and role tags: an instance belongs to the class when it
// carries all of them.
func (s *ProviderSpec) scopeTags() []string {
	var out []string
	for _, t := range s.Tags {
		if strings.Contains(t, ClusterTagFragment) || strings.Contains(t, RoleTagFragment) {
			out = append(out, t)
		}
	}
	return out
}

// specs decodes the class's providerSpec as Gardener's provider does (json.Unmarshal,
// pkg/gcp/machine_controller_util.go decodeProviderSpec: names match case-insensitively, unknown
// fields are ignored) in Lenient mode. For DeleteMachine, GetMachineStatus and ListMachines only
// the zone and the scope tags must be valid (validateScope); Gardener's provider checks only that
// the zone is set on these calls (pkg/gcp/machine_controller.go, validateZone).
var specs = kit.Spec[ProviderSpec]{
	Provider: ProviderName, Names: driver.FoldedNames, Validate: validateSpec, Scope: validateScope,
}

// volumes are the Compute Engine disks among persistent volumes: in-tree gcePersistentDisk ones
// (their PD name) and those of the persistent disk CSI driver (their handle), as Gardener's
// provider reads them (pkg/gcp/machine_controller.go, GetVolumeIDs).
var volumes = kit.Volumes{CSIDriver: "pd.csi.storage.gke.io", InTree: func(spec *corev1.PersistentVolumeSpec) string {
	if spec.GCEPersistentDisk == nil {
		return ""
	}
	return spec.GCEPersistentDisk.PDName
}}
