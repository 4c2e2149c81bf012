package azure

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/kit"
)

// ProviderSpec is the providerSpec of an Azure MachineClass. Its JSON field names are those of
// Gardener's AzureProviderSpec (machine-controller-manager-provider-azure, pkg/azure/api), so
// existing MachineClasses decode unchanged. Decoding is strict: an unknown field is an error.
type ProviderSpec struct {
	// Location is the Azure region of the VM and everything made for it.
	Location string `json:"location,omitempty"`
	// Tags go on the VM, its NIC and its disks. A key starting with "kubernetes.io-cluster-" and
	// one starting with "kubernetes.io-role-" are required: they scope the class to its cluster.
	Tags map[string]string `json:"tags,omitempty"`
	// Properties of the VM.
	Properties VirtualMachineProperties `json:"properties,omitempty"`
	// ResourceGroup holds the VMs, NICs and disks.
	ResourceGroup string `json:"resourceGroup,omitempty"`
	// SubnetInfo names the existing subnet of the VMs' NICs.
	SubnetInfo SubnetInfo `json:"subnetInfo,omitempty"`
	// CloudConfiguration selects the Azure cloud; nil means AzurePublic.
	CloudConfiguration *CloudConfiguration `json:"cloudConfiguration,omitempty"`
}

// VirtualMachineProperties describes the VM.
type VirtualMachineProperties struct {
	HardwareProfile HardwareProfile `json:"hardwareProfile,omitempty"`
	StorageProfile  StorageProfile  `json:"storageProfile,omitempty"`
	OsProfile       OSProfile       `json:"osProfile,omitempty"`
	NetworkProfile  NetworkProfile  `json:"networkProfile,omitempty"`
	// AvailabilitySet puts the VM in an availability set. At most one of Zone, AvailabilitySet
	// and VirtualMachineScaleSet may be set.
	AvailabilitySet *SubResource `json:"availabilitySet,omitempty"`
	// IdentityID is the resource ID of a user-assigned managed identity for the VM.
	IdentityID *string `json:"identityID,omitempty"`
	// Zone is the availability zone (1, 2 or 3).
	Zone *int `json:"zone,omitempty"`
	// VirtualMachineScaleSet puts the VM in a Flexible orchestration scale set.
	VirtualMachineScaleSet *SubResource `json:"virtualMachineScaleSet,omitempty"`
	// DiagnosticsProfile configures boot diagnostics.
	DiagnosticsProfile *DiagnosticsProfile `json:"diagnosticsProfile,omitempty"`
	// MachineSet is deprecated: use AvailabilitySet or VirtualMachineScaleSet.
	MachineSet *MachineSetConfig `json:"machineSet,omitempty"`
	// SecurityProfile selects Trusted Launch or Confidential VMs.
	SecurityProfile *SecurityProfile `json:"securityProfile,omitempty"`
	// CapacityReservation places the VM in a capacity reservation group.
	CapacityReservation *CapacityReservation `json:"capacityReservation,omitempty"`
}

// HardwareProfile holds the VM size.
type HardwareProfile struct {
	VMSize string `json:"vmSize,omitempty"`
}

// MachineSetConfig is the deprecated way to name an availability set ("availabilityset") or a
// Flexible scale set ("vmo").
type MachineSetConfig struct {
	ID   string `json:"id"`
	Kind string `json:"kind"`
}

// StorageProfile holds the image and disks.
type StorageProfile struct {
	ImageReference ImageReference `json:"imageReference,omitempty"`
	OsDisk         OSDisk         `json:"osDisk,omitempty"`
	DataDisks      []DataDisk     `json:"dataDisks,omitempty"`
	// DiskControllerType is SCSI or NVMe; empty lets Azure choose.
	DiskControllerType *string `json:"diskControllerType,omitempty"`
}

// ImageReference names the OS image: exactly one of ID, URN, CommunityGalleryImageID and
// SharedGalleryImageID.
type ImageReference struct {
	// ID is the resource ID of a custom image or gallery image version.
	ID string `json:"id,omitempty"`
	// URN is a marketplace image "publisher:offer:sku:version" (version may be "latest").
	URN *string `json:"urn,omitempty"`
	// SkipMarketplaceAgreement is accepted for compatibility; machinist never accepts marketplace
	// terms on the subscription's behalf (see README).
	SkipMarketplaceAgreement bool `json:"skipMarketplaceAgreement,omitempty"`
	// CommunityGalleryImageID is an image of an Azure Community Gallery.
	CommunityGalleryImageID *string `json:"communityGalleryImageID,omitempty"`
	// SharedGalleryImageID is an image of a gallery shared with the subscription.
	SharedGalleryImageID *string `json:"sharedGalleryImageID,omitempty"`
}

// OSDisk is the VM's OS disk; it is named <vm>-os-disk.
type OSDisk struct {
	// Name is accepted for compatibility; the disk is always named <vm>-os-disk.
	Name        string                `json:"name,omitempty"`
	Caching     string                `json:"caching,omitempty"`
	ManagedDisk ManagedDiskParameters `json:"managedDisk,omitempty"`
	DiskSizeGB  int32                 `json:"diskSizeGB,omitempty"`
	// CreateOption is FromImage.
	CreateOption string `json:"createOption,omitempty"`
}

// DataDisk is an empty data disk (or one made from ImageRef), named
// <vm>[-<name>]-<lun>-data-disk.
type DataDisk struct {
	Name               string          `json:"name,omitempty"`
	Lun                *int32          `json:"lun,omitempty"`
	Caching            string          `json:"caching,omitempty"`
	StorageAccountType string          `json:"storageAccountType,omitempty"`
	DiskSizeGB         int32           `json:"diskSizeGB,omitempty"`
	ImageRef           *ImageReference `json:"imageRef,omitempty"`
}

// ManagedDiskParameters of the OS disk.
type ManagedDiskParameters struct {
	ID                 string               `json:"id,omitempty"`
	StorageAccountType string               `json:"storageAccountType,omitempty"`
	SecurityProfile    *DiskSecurityProfile `json:"securityProfile,omitempty"`
}

// DiskSecurityProfile selects the encryption of a Confidential VM's OS disk.
type DiskSecurityProfile struct {
	SecurityEncryptionType *string `json:"securityEncryptionType,omitempty"`
}

// OSProfile holds the OS settings. The VM's customData always comes from the secret's userData;
// computerName is always the VM name; adminPassword is never used.
type OSProfile struct {
	ComputerName       string             `json:"computerName,omitempty"`
	AdminUsername      string             `json:"adminUsername,omitempty"`
	AdminPassword      string             `json:"adminPassword,omitempty"`
	CustomData         string             `json:"customData,omitempty"`
	LinuxConfiguration LinuxConfiguration `json:"linuxConfiguration,omitempty"`
}

// LinuxConfiguration holds SSH settings.
type LinuxConfiguration struct {
	DisablePasswordAuthentication bool             `json:"disablePasswordAuthentication,omitempty"`
	SSH                           SSHConfiguration `json:"ssh,omitempty"`
}

// SSHConfiguration holds the SSH public key (a single one, as in Gardener's schema).
type SSHConfiguration struct {
	PublicKeys SSHPublicKey `json:"publicKeys,omitempty"`
}

// SSHPublicKey is an OpenSSH public key and where it is placed.
type SSHPublicKey struct {
	Path    string `json:"path,omitempty"`
	KeyData string `json:"keyData,omitempty"`
}

// NetworkProfile holds NIC settings.
type NetworkProfile struct {
	// NetworkInterfaces is deprecated and ignored, as in Gardener.
	NetworkInterfaces NetworkInterfaceReference `json:"networkInterfaces,omitempty"`
	// AcceleratedNetworking enables accelerated networking on the NIC.
	AcceleratedNetworking *bool `json:"acceleratedNetworking,omitempty"`
}

// NetworkInterfaceReference is deprecated and ignored.
type NetworkInterfaceReference struct {
	ID         string                               `json:"id,omitempty"`
	Properties *NetworkInterfaceReferenceProperties `json:"properties,omitempty"`
}

// NetworkInterfaceReferenceProperties is deprecated and ignored.
type NetworkInterfaceReferenceProperties struct {
	Primary bool `json:"primary,omitempty"`
}

// SubResource is a reference by resource ID.
type SubResource struct {
	ID string `json:"id,omitempty"`
}

// SubnetInfo names an existing subnet.
type SubnetInfo struct {
	VnetName string `json:"vnetName,omitempty"`
	// VnetResourceGroup is the virtual network's resource group; empty means ResourceGroup.
	VnetResourceGroup *string `json:"vnetResourceGroup,omitempty"`
	SubnetName        string  `json:"subnetName,omitempty"`
}

// DiagnosticsProfile configures boot diagnostics.
type DiagnosticsProfile struct {
	Enabled bool `json:"enabled,omitempty"`
	// StorageURI is the storage account for the diagnostics; nil means Azure-managed storage.
	StorageURI *string `json:"storageURI,omitempty"`
}

// SecurityProfile is the VM's security type and UEFI settings.
type SecurityProfile struct {
	SecurityType *string       `json:"securityType,omitempty"`
	UefiSettings *UefiSettings `json:"uefiSettings,omitempty"`
}

// UefiSettings of a Trusted Launch or Confidential VM.
type UefiSettings struct {
	VTpmEnabled       *bool `json:"vtpmEnabled,omitempty"`
	SecureBootEnabled *bool `json:"secureBootEnabled,omitempty"`
}

// CapacityReservation names a capacity reservation group.
type CapacityReservation struct {
	CapacityReservationGroupID *string `json:"capacityReservationGroupID,omitempty"`
}

// CloudConfiguration selects an Azure cloud by name.
type CloudConfiguration struct {
	// Name is AzurePublic, AzureChina or AzureGovernment.
	Name string `json:"name,omitempty"`
}

// Names of the supported clouds.
const (
	CloudAzurePublic     = "AzurePublic"
	CloudAzureChina      = "AzureChina"
	CloudAzureGovernment = "AzureGovernment"
)

// Tag key prefixes that scope a class to its cluster and role.
const (
	ClusterTagPrefix = "kubernetes.io-cluster-"
	RoleTagPrefix    = "kubernetes.io-role-"
)

// vnetResourceGroup is the resource group of the subnet's virtual network.
func (s *ProviderSpec) vnetResourceGroup() string {
	if s.SubnetInfo.VnetResourceGroup != nil && *s.SubnetInfo.VnetResourceGroup != "" {
		return *s.SubnetInfo.VnetResourceGroup
	}
	return s.ResourceGroup
}

// scopeTags are the class's cluster and role tags, sorted by key: a resource belongs to the class
// when it carries all of them.
func (s *ProviderSpec) scopeTags() []string {
	var keys []string
	for k := range s.Tags {
		if hasPrefixFold(k, ClusterTagPrefix) || hasPrefixFold(k, RoleTagPrefix) {
			keys = append(keys, k)
		}
	}
	sortStrings(keys)
	return keys
}

// clusterTag is the first cluster tag key, used to filter listings server-side.
func (s *ProviderSpec) clusterTag() string {
	for _, k := range s.scopeTags() {
		if hasPrefixFold(k, ClusterTagPrefix) {
			return k
		}
	}
	return ""
}

// specs decodes the class's providerSpec as Gardener's provider does (json.Unmarshal: names match
// case-insensitively, unknown fields are ignored) in Lenient mode.
var specs = kit.Spec[ProviderSpec]{Provider: ProviderName, Names: driver.FoldedNames, Validate: validateSpec}

// volumes are the Azure disks among persistent volumes: in-tree AzureDisk ones (their disk name)
// and those of the Azure Disk CSI driver (their handle).
var volumes = kit.Volumes{CSIDriver: "disk.csi.azure.com", InTree: func(spec *corev1.PersistentVolumeSpec) string {
	if spec.AzureDisk == nil {
		return ""
	}
	return spec.AzureDisk.DiskName
}}
