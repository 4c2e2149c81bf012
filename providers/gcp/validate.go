package gcp

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/kit"
)

// validateScope checks what reaching a class's existing VMs needs: the zone they are in, and the
// cluster and role tags without which the driver cannot tell the class's VMs from others'.
func validateScope(s *ProviderSpec) field.ErrorList {
	p := driver.ProviderSpecPath
	errs := validateZone(s.Zone, p.Child("zone"))
	tags := p.Child("tags")
	errs = append(errs, scopeTags.Errors(s.Tags, func(string) *field.Path { return tags })...)
	return errs
}

// validateZone requires a zone that can be a path segment of the Compute API (the discovery
// document's zone pattern). Which zones exist is Compute Engine's answer.
func validateZone(zone string, p *field.Path) field.ErrorList {
	switch {
	case zone == "":
		return field.ErrorList{field.Required(p, "set the zone, e.g. europe-west1-b")}
	case !resourceNamePattern.MatchString(zone):
		return field.ErrorList{field.Invalid(p, zone, "must be a Compute Engine zone's name, e.g. europe-west1-b")}
	}
	return nil
}

// scopeTags are the network tags of Gardener's GCP provider that scope a class.
var scopeTags = kit.ScopeTags{Cluster: ClusterTagFragment, Role: RoleTagFragment}

var (
	// Compute Engine resource names and network tags (RFC 1035 labels); also the pattern the
	// Compute discovery document gives the region and zone path parameters, so it is all that
	// is checked of them: which regions exist is Compute Engine's answer (S3NS's
	// u-france-east1 and regions newer than machinist included).
	resourceNamePattern = regexp.MustCompile(`^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$`)
	labelKeyPattern     = regexp.MustCompile(`^[\p{Ll}\p{Lo}][\p{Ll}\p{Lo}\p{N}_-]{0,62}$`)
	labelValuePattern   = regexp.MustCompile(`^[\p{Ll}\p{Lo}\p{N}_-]{0,63}$`)
	metadataKeyPattern  = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,128}$`)
	kmsKeyPattern       = regexp.MustCompile(`^projects/[^/]+/locations/[^/]+/keyRings/[^/]+/cryptoKeys/[^/]+$`)
)

// validateSpec checks a decoded spec as Gardener's validation does (pkg/gcp/validation/validation.go
// at f192d12) and what Compute Engine would refuse later, naming each bad field.
func validateSpec(s *ProviderSpec) field.ErrorList {
	var errs field.ErrorList
	p := driver.ProviderSpecPath
	switch {
	case strings.TrimSpace(s.MachineType) == "":
		errs = append(errs, field.Required(p.Child("machineType"), "set the machine type, e.g. n2-standard-4"))
	default:
		if _, err := parseRef(s.MachineType, machineTypes, s.Zone); err != nil {
			errs = append(errs, field.Invalid(p.Child("machineType"), s.MachineType, "must be a machine type's name (e.g. n2-standard-4) or URL: "+err.Error()))
		}
	}
	switch {
	case s.Region == "":
		errs = append(errs, field.Required(p.Child("region"), "set the region, e.g. europe-west1"))
	case !resourceNamePattern.MatchString(s.Region):
		errs = append(errs, field.Invalid(p.Child("region"), s.Region, "must be a Compute Engine region's name, e.g. europe-west1"))
	}
	errs = append(errs, validateZone(s.Zone, p.Child("zone"))...)
	if s.Region != "" && s.Zone != "" && !strings.HasPrefix(s.Zone, s.Region+"-") {
		errs = append(errs, field.Invalid(p.Child("zone"), s.Zone, fmt.Sprintf("must be a zone of region %s, e.g. %s-b", s.Region, s.Region)))
	}
	errs = append(errs, validateDisks(s.Disks, s.Zone, p.Child("disks"))...)
	errs = append(errs, validateNICs(s.NetworkInterfaces, s.Region, p.Child("networkInterfaces"))...)
	errs = append(errs, validateMetadata(s.Metadata, p.Child("metadata"))...)
	errs = append(errs, validateGPU(s.Gpu, p.Child("gpu"))...)
	errs = append(errs, validateScheduling(s.Scheduling, s.Gpu, p.Child("scheduling"))...)
	errs = append(errs, validateLabels(s.Labels, p.Child("labels"))...)
	errs = append(errs, validateTags(s.Tags, p.Child("tags"))...)
	for i, sa := range s.ServiceAccounts {
		if strings.TrimSpace(sa.Email) == "" {
			errs = append(errs, field.Required(p.Child("serviceAccounts").Index(i).Child("email"), "set the service account's email (or remove the entry)"))
		}
	}
	if len(s.ServiceAccounts) > 1 {
		errs = append(errs, field.TooMany(p.Child("serviceAccounts"), len(s.ServiceAccounts), 1))
	}
	return errs
}

func validateDisks(disks []*Disk, zone string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(disks) == 0 {
		return field.ErrorList{field.Required(p, "add at least the boot disk (boot: true with an image)")}
	}
	boots := 0
	for i, d := range disks {
		dp := p.Index(i)
		if d == nil {
			errs = append(errs, field.Required(dp, "a disk cannot be null"))
			continue
		}
		if d.Boot {
			boots++
		}
		if d.Type == DiskTypeScratch {
			if d.Interface != diskInterfaceNVME && d.Interface != diskInterfaceSCSI {
				errs = append(errs, field.NotSupported(dp.Child("interface"), d.Interface, []string{diskInterfaceNVME, diskInterfaceSCSI}))
			}
			if d.Boot {
				errs = append(errs, field.Invalid(dp.Child("boot"), true, "a SCRATCH disk (local SSD) cannot be the boot disk"))
			}
		} else if d.Type != "" {
			if _, err := parseRef(d.Type, diskTypes, zone); err != nil {
				errs = append(errs, field.Invalid(dp.Child("type"), d.Type, "must be a disk type's name (e.g. pd-balanced), SCRATCH, or its URL: "+err.Error()))
			}
		}
		if d.Boot && strings.TrimSpace(d.Image) == "" {
			errs = append(errs, field.Required(dp.Child("image"), "the boot disk needs an image, e.g. projects/debian-cloud/global/images/family/debian-12"))
		}
		if d.SizeGb < 0 {
			errs = append(errs, field.Invalid(dp.Child("sizeGb"), d.SizeGb, "must not be negative (0 takes the image's size)"))
		}
		if d.ProvisionedIops < 0 {
			errs = append(errs, field.Invalid(dp.Child("provisionedIops"), d.ProvisionedIops, "must not be negative"))
		}
		if d.ProvisionedThroughput < 0 {
			errs = append(errs, field.Invalid(dp.Child("provisionedThroughput"), d.ProvisionedThroughput, "must not be negative"))
		}
		if e := d.Encryption; e != nil {
			name := strings.TrimSpace(e.KmsKeyName)
			switch {
			case name == "":
				errs = append(errs, field.Required(dp.Child("encryption", "kmsKeyName"), "set the Cloud KMS key, projects/P/locations/L/keyRings/R/cryptoKeys/K"))
			case !kmsKeyPattern.MatchString(name):
				errs = append(errs, field.Invalid(dp.Child("encryption", "kmsKeyName"), e.KmsKeyName, "must be projects/P/locations/L/keyRings/R/cryptoKeys/K"))
			}
			if e.KmsKeyServiceAccount != "" && strings.TrimSpace(e.KmsKeyServiceAccount) == "" {
				errs = append(errs, field.Invalid(dp.Child("encryption", "kmsKeyServiceAccount"), e.KmsKeyServiceAccount, "set the service account without spaces, or leave it empty for Compute Engine's service agent"))
			}
		}
		errs = append(errs, validateLabels(d.Labels, dp.Child("labels"))...)
	}
	switch {
	case boots == 0:
		errs = append(errs, field.Required(p.Index(0).Child("boot"), "exactly one disk must be the boot disk (boot: true)"))
	case boots > 1:
		errs = append(errs, field.Invalid(p, boots, "exactly one disk must be the boot disk; this class has "+strconv.Itoa(boots)))
	}
	return errs
}

func validateNICs(nics []*NetworkInterface, region string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(nics) == 0 {
		return field.ErrorList{field.Required(p, "add a network interface with a network or subnetwork")}
	}
	for i, nic := range nics {
		np := p.Index(i)
		if nic == nil {
			errs = append(errs, field.Required(np, "a network interface cannot be null"))
			continue
		}
		if nic.Network == "" && nic.Subnetwork == "" {
			errs = append(errs, field.Required(np.Child("subnetwork"), "set the network or the subnetwork (or both)"))
		}
		if nic.Network != "" {
			if _, err := parseRef(nic.Network, networks, ""); err != nil {
				errs = append(errs, field.Invalid(np.Child("network"), nic.Network, "must be the VPC network's name or URL: "+err.Error()))
			}
		}
		if nic.Subnetwork != "" {
			if _, err := parseRef(nic.Subnetwork, subnetworks, region); err != nil {
				errs = append(errs, field.Invalid(np.Child("subnetwork"), nic.Subnetwork, "must be the subnetwork's name or URL: "+err.Error()))
			}
		}
		if !slices.Contains([]string{"", "IPV4_ONLY", "IPV4_IPV6"}, nic.StackType) {
			errs = append(errs, field.NotSupported(np.Child("stackType"), nic.StackType, []string{"IPV4_ONLY", "IPV4_IPV6"}))
		}
		if !slices.Contains([]string{"", "EXTERNAL", "INTERNAL"}, nic.Ipv6AccessType) {
			errs = append(errs, field.NotSupported(np.Child("ipv6accessType"), nic.Ipv6AccessType, []string{"EXTERNAL", "INTERNAL"}))
		}
		if nic.IpCidrRange != "" {
			mask, ok := strings.CutPrefix(nic.IpCidrRange, "/")
			n, err := strconv.Atoi(mask)
			if !ok || err != nil || n < 0 || n > 32 {
				errs = append(errs, field.Invalid(np.Child("ipCidrRange"), nic.IpCidrRange, "must be a mask size /0 to /32, e.g. /24"))
			}
		}
	}
	return errs
}

func validateMetadata(items []*Metadata, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]bool{}
	for i, m := range items {
		mp := p.Index(i).Child("key")
		if m == nil {
			errs = append(errs, field.Required(p.Index(i), "a metadata item cannot be null"))
			continue
		}
		switch {
		case m.Key == userDataKey:
			errs = append(errs, field.Forbidden(mp, "user-data comes from the secret's userData: remove this item"))
		case !metadataKeyPattern.MatchString(m.Key):
			errs = append(errs, field.Invalid(mp, m.Key, "must be 1-128 letters, digits, '-' or '_'"))
		case seen[m.Key]:
			errs = append(errs, field.Duplicate(mp, m.Key))
		}
		seen[m.Key] = true
		if m.Value != nil && len(*m.Value) > 256*1024 {
			errs = append(errs, field.TooLong(p.Index(i).Child("value"), "", 256*1024))
		}
	}
	return errs
}

func validateGPU(gpu *GPU, p *field.Path) field.ErrorList {
	if gpu == nil {
		return nil
	}
	var errs field.ErrorList
	switch {
	case gpu.AcceleratorType == "":
		errs = append(errs, field.Required(p.Child("acceleratorType"), "set the accelerator type, e.g. nvidia-tesla-t4"))
	case !resourceNamePattern.MatchString(gpu.AcceleratorType):
		errs = append(errs, field.Invalid(p.Child("acceleratorType"), gpu.AcceleratorType, "must be an accelerator type's name, e.g. nvidia-tesla-t4"))
	}
	if gpu.Count <= 0 {
		errs = append(errs, field.Invalid(p.Child("count"), gpu.Count, "must be at least 1"))
	}
	return errs
}

func validateScheduling(s Scheduling, gpu *GPU, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if !slices.Contains([]string{"MIGRATE", "TERMINATE"}, s.OnHostMaintenance) {
		errs = append(errs, field.NotSupported(p.Child("onHostMaintenance"), s.OnHostMaintenance, []string{"MIGRATE", "TERMINATE"}))
	}
	if gpu != nil && s.OnHostMaintenance != "TERMINATE" {
		errs = append(errs, field.Forbidden(p.Child("onHostMaintenance"), "instances with a GPU cannot migrate live: use TERMINATE"))
	}
	if !slices.Contains([]string{"", "STANDARD", "SPOT"}, s.ProvisioningModel) {
		errs = append(errs, field.NotSupported(p.Child("provisioningModel"), s.ProvisioningModel, []string{"STANDARD", "SPOT"}))
	}
	spot := s.ProvisioningModel == "SPOT"
	if spot && s.Preemptible {
		errs = append(errs, field.Forbidden(p.Child("preemptible"), "a Spot VM (provisioningModel: SPOT) is not also preemptible: keep one of them"))
	}
	if (spot || s.Preemptible) && s.AutomaticRestart {
		errs = append(errs, field.Invalid(p.Child("automaticRestart"), true, "Spot and preemptible VMs cannot restart automatically: set false"))
	}
	if (spot || s.Preemptible) && s.OnHostMaintenance == "MIGRATE" {
		errs = append(errs, field.Invalid(p.Child("onHostMaintenance"), "MIGRATE", "Spot and preemptible VMs cannot migrate live: use TERMINATE"))
	}
	switch {
	case s.InstanceTerminationAction != "" && !spot:
		errs = append(errs, field.Forbidden(p.Child("instanceTerminationAction"), "applies to Spot VMs only (provisioningModel: SPOT)"))
	case !slices.Contains([]string{"", "STOP", "DELETE"}, s.InstanceTerminationAction):
		errs = append(errs, field.NotSupported(p.Child("instanceTerminationAction"), s.InstanceTerminationAction, []string{"STOP", "DELETE"}))
	}
	return errs
}

func validateLabels(labels map[string]string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(labels) > 64 {
		errs = append(errs, field.TooMany(p, len(labels), 64))
	}
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if !labelKeyPattern.MatchString(k) {
			errs = append(errs, field.Invalid(p.Key(k), k, "a label key starts with a lowercase letter and has at most 63 lowercase letters, digits, '_' and '-'"))
		}
		if !labelValuePattern.MatchString(labels[k]) {
			errs = append(errs, field.Invalid(p.Key(k), labels[k], "a label value has at most 63 lowercase letters, digits, '_' and '-'"))
		}
	}
	return errs
}

func validateTags(tags []string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]bool{}
	for i, t := range tags {
		if !resourceNamePattern.MatchString(t) {
			errs = append(errs, field.Invalid(p.Index(i), t, "a network tag is 1-63 lowercase letters, digits and '-', starting with a letter"))
		}
		if seen[t] {
			errs = append(errs, field.Duplicate(p.Index(i), t))
		}
		seen[t] = true
	}
	if len(tags) > 64 {
		errs = append(errs, field.TooMany(p, len(tags), 64))
	}
	return append(errs, scopeTags.Errors(tags, func(string) *field.Path { return p })...)
}
