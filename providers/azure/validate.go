package azure

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v8"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/kit"
)

var (
	// Azure resource names: letters, digits, '.', '-' and '_'.
	resourceNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,78}[A-Za-z0-9_]$|^[A-Za-z0-9]$`)
	resourceIDPattern   = regexp.MustCompile(`(?i)^/subscriptions/[^/]+/resourceGroups/[^/]+/providers/[^/]+/.+[^/]$`)
	tagKeyForbidden     = "<>%&\\?/"
)

// validateSpec checks a decoded spec the way Gardener's validation does, naming each bad field.
func validateSpec(s *ProviderSpec) field.ErrorList {
	var errs field.ErrorList
	p := driver.ProviderSpecPath
	if strings.TrimSpace(s.Location) == "" {
		errs = append(errs, field.Required(p.Child("location"), "set the Azure region, e.g. westeurope"))
	}
	if strings.TrimSpace(s.ResourceGroup) == "" {
		errs = append(errs, field.Required(p.Child("resourceGroup"), "set the resource group of the machines"))
	} else if !validResourceGroup(s.ResourceGroup) {
		errs = append(errs, field.Invalid(p.Child("resourceGroup"), s.ResourceGroup, "must be 1-90 letters, digits, '.', '_', '-', '(' or ')' and not end with '.'"))
	}
	sub := p.Child("subnetInfo")
	if s.SubnetInfo.VnetName == "" {
		errs = append(errs, field.Required(sub.Child("vnetName"), "set the virtual network of the subnet"))
	}
	if s.SubnetInfo.SubnetName == "" {
		errs = append(errs, field.Required(sub.Child("subnetName"), "set the subnet of the machines' NICs"))
	}
	errs = append(errs, validateTags(s.Tags, p.Child("tags"))...)
	if cc := s.CloudConfiguration; cc != nil {
		known := []string{CloudAzurePublic, CloudAzureChina, CloudAzureGovernment}
		if !slices.Contains(known, cc.Name) {
			errs = append(errs, field.NotSupported(p.Child("cloudConfiguration", "name"), cc.Name, known))
		}
	}
	errs = append(errs, validateProperties(&s.Properties, p.Child("properties"))...)
	return errs
}

func validateProperties(props *VirtualMachineProperties, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if props.HardwareProfile.VMSize == "" {
		errs = append(errs, field.Required(p.Child("hardwareProfile", "vmSize"), "set the VM size, e.g. Standard_D4s_v5"))
	}
	sp := p.Child("storageProfile")
	errs = append(errs, validateImage(&props.StorageProfile.ImageReference, sp.Child("imageReference"))...)
	os := props.StorageProfile.OsDisk
	osp := sp.Child("osDisk")
	if os.CreateOption == "" {
		errs = append(errs, field.Required(osp.Child("createOption"), "set FromImage"))
	} else if !strings.EqualFold(os.CreateOption, string(armcompute.DiskCreateOptionTypesFromImage)) {
		errs = append(errs, field.NotSupported(osp.Child("createOption"), os.CreateOption, []string{string(armcompute.DiskCreateOptionTypesFromImage)}))
	}
	if os.DiskSizeGB <= 0 {
		errs = append(errs, field.Invalid(osp.Child("diskSizeGB"), os.DiskSizeGB, "must be a positive number of GiB"))
	}
	errs = append(errs, validateCaching(os.Caching, osp.Child("caching"))...)
	errs = append(errs, validateStorageType(os.ManagedDisk.StorageAccountType, osp.Child("managedDisk", "storageAccountType"), false)...)
	if sec := os.ManagedDisk.SecurityProfile; sec != nil && sec.SecurityEncryptionType != nil && *sec.SecurityEncryptionType != "" {
		valid := kit.EnumStrings(armcompute.PossibleSecurityEncryptionTypesValues())
		if !slices.Contains(valid, *sec.SecurityEncryptionType) {
			errs = append(errs, field.NotSupported(osp.Child("managedDisk", "securityProfile", "securityEncryptionType"), *sec.SecurityEncryptionType, valid))
		}
	}
	if ct := props.StorageProfile.DiskControllerType; ct != nil && *ct != "" {
		valid := kit.EnumStrings(armcompute.PossibleDiskControllerTypesValues())
		if !slices.Contains(valid, *ct) {
			errs = append(errs, field.NotSupported(sp.Child("diskControllerType"), *ct, valid))
		}
	}
	errs = append(errs, validateDataDisks(props.StorageProfile.DataDisks, sp.Child("dataDisks"))...)

	op := p.Child("osProfile")
	if props.OsProfile.AdminUsername == "" {
		errs = append(errs, field.Required(op.Child("adminUsername"), "set the admin user, e.g. core"))
	}
	if key := props.OsProfile.LinuxConfiguration.SSH.PublicKeys.KeyData; key != "" && !strings.HasPrefix(key, "ssh-") && !strings.HasPrefix(key, "ecdsa-") {
		errs = append(errs, field.Invalid(op.Child("linuxConfiguration", "ssh", "publicKeys", "keyData"), "<key>", "must be an OpenSSH public key (ssh-rsa ..., ssh-ed25519 ... or ecdsa-...)"))
	}

	placements := 0
	if props.Zone != nil {
		placements++
		if *props.Zone < 1 || *props.Zone > 3 {
			errs = append(errs, field.Invalid(p.Child("zone"), *props.Zone, "must be 1, 2 or 3"))
		}
	}
	if props.AvailabilitySet != nil && props.AvailabilitySet.ID != "" {
		placements++
		errs = append(errs, validateResourceID(props.AvailabilitySet.ID, p.Child("availabilitySet", "id"))...)
	}
	if props.VirtualMachineScaleSet != nil && props.VirtualMachineScaleSet.ID != "" {
		placements++
		errs = append(errs, validateResourceID(props.VirtualMachineScaleSet.ID, p.Child("virtualMachineScaleSet", "id"))...)
	}
	if ms := props.MachineSet; ms != nil {
		kinds := []string{"availabilityset", "vmo"}
		if !slices.Contains(kinds, ms.Kind) {
			errs = append(errs, field.NotSupported(p.Child("machineSet", "kind"), ms.Kind, kinds))
		}
		errs = append(errs, validateResourceID(ms.ID, p.Child("machineSet", "id"))...)
		if (props.AvailabilitySet != nil && props.AvailabilitySet.ID != "") || (props.VirtualMachineScaleSet != nil && props.VirtualMachineScaleSet.ID != "") {
			errs = append(errs, field.Forbidden(p.Child("machineSet"), "deprecated: remove it when availabilitySet or virtualMachineScaleSet is set"))
		}
	}
	if placements > 1 {
		errs = append(errs, field.Forbidden(p.Child("zone"), "set only one of zone, availabilitySet and virtualMachineScaleSet"))
	}
	if props.IdentityID != nil && *props.IdentityID != "" {
		errs = append(errs, validateResourceID(*props.IdentityID, p.Child("identityID"))...)
	}
	if sec := props.SecurityProfile; sec != nil && sec.SecurityType != nil && *sec.SecurityType != "" {
		valid := kit.EnumStrings(armcompute.PossibleSecurityTypesValues())
		if !slices.Contains(valid, *sec.SecurityType) {
			errs = append(errs, field.NotSupported(p.Child("securityProfile", "securityType"), *sec.SecurityType, valid))
		}
	}
	if cr := props.CapacityReservation; cr != nil && cr.CapacityReservationGroupID != nil && *cr.CapacityReservationGroupID != "" {
		errs = append(errs, validateResourceID(*cr.CapacityReservationGroupID, p.Child("capacityReservation", "capacityReservationGroupID"))...)
	}
	return errs
}

func validateImage(img *ImageReference, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	set := 0
	for _, b := range []bool{img.ID != "", img.URN != nil && *img.URN != "", img.CommunityGalleryImageID != nil && *img.CommunityGalleryImageID != "", img.SharedGalleryImageID != nil && *img.SharedGalleryImageID != ""} {
		if b {
			set++
		}
	}
	if set != 1 {
		return append(errs, field.Invalid(p, "", "set exactly one of id, urn, communityGalleryImageID and sharedGalleryImageID"))
	}
	if img.URN != nil && *img.URN != "" {
		parts := strings.Split(*img.URN, ":")
		if len(parts) != 4 {
			return append(errs, field.Invalid(p.Child("urn"), *img.URN, "must be publisher:offer:sku:version"))
		}
		for i, part := range parts {
			if strings.TrimSpace(part) == "" {
				errs = append(errs, field.Invalid(p.Child("urn"), *img.URN, fmt.Sprintf("the %s part is empty; the form is publisher:offer:sku:version", []string{"publisher", "offer", "sku", "version"}[i])))
			}
		}
	}
	if img.ID != "" {
		errs = append(errs, validateResourceID(img.ID, p.Child("id"))...)
	}
	return errs
}

func validateDataDisks(disks []DataDisk, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	luns := map[int32]bool{}
	names := map[string]bool{}
	for i, d := range disks {
		dp := p.Index(i)
		switch {
		case d.Lun == nil:
			errs = append(errs, field.Required(dp.Child("lun"), "set the disk's logical unit number (0-63)"))
		case *d.Lun < 0 || *d.Lun > 63:
			errs = append(errs, field.Invalid(dp.Child("lun"), *d.Lun, "must be between 0 and 63"))
		case luns[*d.Lun]:
			errs = append(errs, field.Duplicate(dp.Child("lun"), *d.Lun))
		default:
			luns[*d.Lun] = true
		}
		if d.Name != "" {
			if !resourceNamePattern.MatchString(d.Name) {
				errs = append(errs, field.Invalid(dp.Child("name"), d.Name, "must be letters, digits, '.', '-' or '_'"))
			} else if names[strings.ToLower(d.Name)] {
				errs = append(errs, field.Duplicate(dp.Child("name"), d.Name))
			}
			names[strings.ToLower(d.Name)] = true
		}
		if d.DiskSizeGB <= 0 {
			errs = append(errs, field.Invalid(dp.Child("diskSizeGB"), d.DiskSizeGB, "must be a positive number of GiB"))
		}
		errs = append(errs, validateStorageType(d.StorageAccountType, dp.Child("storageAccountType"), true)...)
		errs = append(errs, validateCaching(d.Caching, dp.Child("caching"))...)
		if d.ImageRef != nil {
			errs = append(errs, validateImage(d.ImageRef, dp.Child("imageRef"))...)
			if d.ImageRef.URN != nil && *d.ImageRef.URN != "" {
				errs = append(errs, field.Invalid(dp.Child("imageRef", "urn"), *d.ImageRef.URN, "a data disk image must be an id, communityGalleryImageID or sharedGalleryImageID"))
			}
		}
	}
	return errs
}

func validateTags(tags map[string]string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	cluster, role := false, false
	for k, v := range tags {
		if hasPrefixFold(k, ClusterTagPrefix) && len(k) > len(ClusterTagPrefix) {
			cluster = true
		}
		if hasPrefixFold(k, RoleTagPrefix) && len(k) > len(RoleTagPrefix) {
			role = true
		}
		if k == "" || len(k) > 512 || strings.ContainsAny(k, tagKeyForbidden) {
			errs = append(errs, field.Invalid(p.Key(k), k, "a tag name is 1-512 characters without < > % & \\ ? /"))
		}
		if len(v) > 256 {
			errs = append(errs, field.TooLong(p.Key(k), "", 256))
		}
	}
	if len(tags) > 50 {
		errs = append(errs, field.TooMany(p, len(tags), 50))
	}
	if !cluster {
		errs = append(errs, field.Required(p.Key(ClusterTagPrefix+"<cluster>"), "add a tag "+ClusterTagPrefix+"<cluster name>: it scopes the class to its cluster"))
	}
	if !role {
		errs = append(errs, field.Required(p.Key(RoleTagPrefix+"<role>"), "add a tag "+RoleTagPrefix+"<role>, e.g. "+RoleTagPrefix+"node: it scopes the class to its role"))
	}
	return errs
}

func validateCaching(v string, p *field.Path) field.ErrorList {
	if v == "" {
		return nil
	}
	valid := kit.EnumStrings(armcompute.PossibleCachingTypesValues())
	if !slices.Contains(valid, v) {
		return field.ErrorList{field.NotSupported(p, v, valid)}
	}
	return nil
}

func validateStorageType(v string, p *field.Path, required bool) field.ErrorList {
	if v == "" {
		if required {
			return field.ErrorList{field.Required(p, "set the disk type, e.g. Premium_LRS")}
		}
		return nil
	}
	valid := kit.EnumStrings(armcompute.PossibleStorageAccountTypesValues())
	if !slices.Contains(valid, v) {
		return field.ErrorList{field.NotSupported(p, v, valid)}
	}
	return nil
}

func validateResourceID(id string, p *field.Path) field.ErrorList {
	if !resourceIDPattern.MatchString(id) {
		return field.ErrorList{field.Invalid(p, id, "must be an Azure resource ID: /subscriptions/<id>/resourceGroups/<group>/providers/<namespace>/<type>/<name>")}
	}
	return nil
}

func validResourceGroup(name string) bool {
	if len(name) > 90 || strings.HasSuffix(name, ".") {
		return false
	}
	for _, r := range name {
		if !(r == '.' || r == '_' || r == '-' || r == '(' || r == ')' || (r >= '0' && r <= '9') || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z')) {
			return false
		}
	}
	return true
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

func sortStrings(s []string) { sort.Strings(s) }
