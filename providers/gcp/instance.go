package gcp

import (
	"fmt"
	"slices"
	"strings"

	compute "google.golang.org/api/compute/v1"
	"k8s.io/utils/ptr"
)

// buildInstance makes the instance of a machine from the spec as Gardener's provider makes it
// (pkg/gcp/machine_controller_util.go at f192d12, CreateMachineUtil and createAttachedDisks),
// and lists the resources it names with their spec fields for error messages.
func buildInstance(spec *ProviderSpec, project, name, userDataKey, userData string) (*compute.Instance, []reference) {
	zone := spec.Zone
	var refs []reference
	machineType := refValue(spec.MachineType, machineTypes, project, zone)
	refs = append(refs, reference{kind: "machineTypes", name: refName(spec.MachineType, machineTypes), field: "providerSpec.machineType", value: spec.MachineType})
	in := &compute.Instance{
		Name:               name,
		CanIpForward:       spec.CanIPForward,
		DeletionProtection: spec.DeletionProtection,
		Labels:             spec.Labels,
		MachineType:        machineType,
		MinCpuPlatform:     spec.MinCPUPlatform,
		Scheduling: &compute.Scheduling{
			AutomaticRestart:          ptr.To(spec.Scheduling.AutomaticRestart),
			OnHostMaintenance:         spec.Scheduling.OnHostMaintenance,
			Preemptible:               spec.Scheduling.Preemptible,
			ProvisioningModel:         spec.Scheduling.ProvisioningModel,
			InstanceTerminationAction: spec.Scheduling.InstanceTerminationAction,
		},
		Tags: &compute.Tags{Items: spec.Tags},
	}
	if spec.Description != nil {
		in.Description = *spec.Description
	}
	if g := spec.Gpu; g != nil {
		in.GuestAccelerators = []*compute.AcceleratorConfig{{
			AcceleratorType:  fmt.Sprintf("projects/%s/zones/%s/acceleratorTypes/%s", project, zone, g.AcceleratorType),
			AcceleratorCount: g.Count,
		}}
		refs = append(refs, reference{kind: "acceleratorTypes", name: g.AcceleratorType, field: "providerSpec.gpu.acceleratorType", value: g.AcceleratorType})
	}
	if s := spec.ShieldedInstanceConfiguration; s != nil {
		in.ShieldedInstanceConfig = &compute.ShieldedInstanceConfig{
			EnableIntegrityMonitoring: ptr.Deref(s.IntegrityMonitoring, false),
			EnableSecureBoot:          ptr.Deref(s.SecureBoot, false),
			EnableVtpm:                ptr.Deref(s.Vtpm, false),
		}
	}
	if a := spec.AdvancedMachineFeatures; a != nil {
		in.AdvancedMachineFeatures = &compute.AdvancedMachineFeatures{EnableNestedVirtualization: a.EnableNestedVirtualization}
	}
	for i, d := range spec.Disks {
		ad, ref := attachedDisk(d, project, zone, i)
		in.Disks = append(in.Disks, ad)
		refs = append(refs, ref...)
	}
	items := []*compute.MetadataItems{{Key: userDataKey, Value: ptr.To(userData)}}
	for _, m := range spec.Metadata {
		items = append(items, &compute.MetadataItems{Key: m.Key, Value: m.Value})
	}
	in.Metadata = &compute.Metadata{Items: items}
	for i, nic := range spec.NetworkInterfaces {
		n := &compute.NetworkInterface{}
		if !nic.DisableExternalIP {
			n.AccessConfigs = []*compute.AccessConfig{{}}
		}
		if nic.Network != "" {
			n.Network = refValue(nic.Network, networks, project, "")
			refs = append(refs, reference{kind: "networks", name: refName(nic.Network, networks), field: fmt.Sprintf("providerSpec.networkInterfaces[%d].network", i), value: nic.Network})
		}
		if nic.Subnetwork != "" {
			n.Subnetwork = refValue(nic.Subnetwork, subnetworks, project, spec.Region)
			refs = append(refs, reference{kind: "subnetworks", name: refName(nic.Subnetwork, subnetworks), field: fmt.Sprintf("providerSpec.networkInterfaces[%d].subnetwork", i), value: nic.Subnetwork})
		}
		if nic.StackType == "IPV4_IPV6" || nic.UseAliasIPs {
			n.StackType = nic.StackType
			n.Ipv6AccessType = nic.Ipv6AccessType
			n.AliasIpRanges = []*compute.AliasIpRange{{IpCidrRange: nic.IpCidrRange, SubnetworkRangeName: nic.SubnetworkRangeName}}
		}
		in.NetworkInterfaces = append(in.NetworkInterfaces, n)
	}
	for _, sa := range spec.ServiceAccounts {
		in.ServiceAccounts = append(in.ServiceAccounts, &compute.ServiceAccount{Email: sa.Email, Scopes: sa.Scopes})
	}
	return in, refs
}

// attachedDisk is a disk created with the instance: a local SSD for type SCRATCH, a persistent
// disk otherwise.
func attachedDisk(d *Disk, project, zone string, i int) (*compute.AttachedDisk, []reference) {
	field := fmt.Sprintf("providerSpec.disks[%d]", i)
	var refs []reference
	var ad *compute.AttachedDisk
	if d.Type == DiskTypeScratch {
		ad = &compute.AttachedDisk{
			Type:             DiskTypeScratch,
			AutoDelete:       ptr.Deref(d.AutoDelete, true),
			Interface:        d.Interface,
			InitializeParams: &compute.AttachedDiskInitializeParams{DiskType: fmt.Sprintf("zones/%s/diskTypes/local-ssd", zone)},
		}
	} else {
		p := &compute.AttachedDiskInitializeParams{
			DiskSizeGb:            d.SizeGb,
			Labels:                d.Labels,
			SourceImage:           d.Image,
			ProvisionedIops:       d.ProvisionedIops,
			ProvisionedThroughput: d.ProvisionedThroughput,
			StoragePool:           ptr.Deref(d.StoragePool, ""),
		}
		// Gardener writes zones/ZONE/diskTypes/ with an empty type; machinist leaves the type
		// out, so Compute Engine's default for the machine series applies.
		if d.Type != "" {
			p.DiskType = refValue(d.Type, diskTypes, project, zone)
			refs = append(refs, reference{kind: "diskTypes", name: refName(d.Type, diskTypes), field: field + ".type", value: d.Type})
		}
		ad = &compute.AttachedDisk{Type: "PERSISTENT", Boot: d.Boot, AutoDelete: ptr.Deref(d.AutoDelete, true), InitializeParams: p}
		if d.Image != "" {
			refs = append(refs, reference{kind: "images", name: imageName(d.Image), field: field + ".image", value: d.Image})
		}
	}
	// AutoDelete false must reach the API: the client leaves false booleans out.
	ad.ForceSendFields = []string{"AutoDelete"}
	if e := d.Encryption; e != nil {
		ad.DiskEncryptionKey = &compute.CustomerEncryptionKey{
			KmsKeyName:           strings.TrimSpace(e.KmsKeyName),
			KmsKeyServiceAccount: strings.TrimSpace(e.KmsKeyServiceAccount),
		}
	}
	return ad, refs
}

// imageName is what follows images/ in an image reference: NAME, or family/FAMILY.
func imageName(ref string) string {
	if i := strings.LastIndex(ref, "/images/"); i >= 0 {
		return ref[i+len("/images/"):]
	}
	if rest, ok := strings.CutPrefix(ref, "images/"); ok {
		return rest
	}
	return lastSegment(ref)
}

func lastSegment(s string) string {
	if i := strings.LastIndex(s, "/"); i >= 0 {
		return s[i+1:]
	}
	return s
}

// owns reports whether an instance is the class's: it carries every cluster and role tag of the
// class and no cluster tag the class lacks. Gardener's provider (pkg/gcp/machine_controller_util.go,
// getVMs) compares the last cluster tag and the last role tag of each; both agree on the
// instances Gardener and machinist create.
func owns(spec *ProviderSpec, in *compute.Instance) bool {
	tags := tagsOf(in)
	scope := spec.scopeTags()
	if len(scope) == 0 {
		return false
	}
	for _, t := range scope {
		if !slices.Contains(tags, t) {
			return false
		}
	}
	for _, t := range tags {
		if strings.Contains(t, ClusterTagFragment) && !slices.Contains(scope, t) {
			return false
		}
	}
	return true
}

// tagsOf is an instance's network tags.
func tagsOf(in *compute.Instance) []string {
	if in.Tags == nil {
		return nil
	}
	return in.Tags.Items
}
