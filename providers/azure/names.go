package azure

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
)

// Names of what the driver makes for a VM, as in Gardener's Azure provider, so machines created
// by either are recognised by both.
const (
	nicSuffix      = "-nic"
	osDiskSuffix   = "-os-disk"
	dataDiskSuffix = "-data-disk"
)

func nicName(vm string) string    { return vm + nicSuffix }
func osDiskName(vm string) string { return vm + osDiskSuffix }

// dataDiskName is <vm>-<name>-<lun>-data-disk, or <vm>-<lun>-data-disk for an unnamed disk.
func dataDiskName(vm string, d DataDisk) string { return vm + dataDiskNameSuffix(d) }

func dataDiskNameSuffix(d DataDisk) string {
	lun := int32(0)
	if d.Lun != nil {
		lun = *d.Lun
	}
	if d.Name == "" {
		return fmt.Sprintf("-%d%s", lun, dataDiskSuffix)
	}
	return fmt.Sprintf("-%s-%d%s", d.Name, lun, dataDiskSuffix)
}

// diskNames are the OS and data disk names of a VM.
func diskNames(vm string, spec *ProviderSpec) []string {
	names := []string{osDiskName(vm)}
	for _, d := range spec.Properties.StorageProfile.DataDisks {
		names = append(names, dataDiskName(vm, d))
	}
	return names
}

// providerID is azure:///<location>/<vm>, what the Azure cloud provider puts on the node.
func providerID(location, vm string) string { return "azure:///" + location + "/" + vm }

// vmFromProviderID returns the VM name of an azure:/// provider ID.
func vmFromProviderID(id string) (string, bool) {
	rest, ok := strings.CutPrefix(id, "azure:///")
	if !ok {
		return "", false
	}
	i := strings.LastIndex(rest, "/")
	if i < 0 || i == len(rest)-1 {
		return "", false
	}
	return rest[i+1:], true
}

// vmNameOf derives the VM a listed resource belongs to: the VM itself, its NIC, or one of its
// disks (named by this driver or Gardener's).
func vmNameOf(resourceType, name string, spec *ProviderSpec) (string, bool) {
	switch strings.ToLower(resourceType) {
	case "microsoft.compute/virtualmachines":
		return name, true
	case "microsoft.network/networkinterfaces":
		return trimSuffixFold(name, nicSuffix)
	case "microsoft.compute/disks":
		if vm, ok := trimSuffixFold(name, osDiskSuffix); ok {
			return vm, true
		}
		for _, d := range spec.Properties.StorageProfile.DataDisks {
			if vm, ok := trimSuffixFold(name, dataDiskNameSuffix(d)); ok {
				return vm, true
			}
		}
	}
	return "", false
}

func trimSuffixFold(s, suffix string) (string, bool) {
	if len(s) > len(suffix) && strings.EqualFold(s[len(s)-len(suffix):], suffix) {
		return s[:len(s)-len(suffix)], true
	}
	return "", false
}

// A VM name is also the Linux host name: letters, digits and '-', not starting or ending with '-'.
var vmNamePattern = regexp.MustCompile(`^[a-zA-Z0-9]([a-zA-Z0-9-]{0,62}[a-zA-Z0-9])?$`)

// vmName is the VM of a machine: the machine's name.
func vmName(m *v1alpha1.Machine) (string, error) {
	if m == nil {
		return "", driver.Error(driver.InvalidArgument, "azure: the request carries no machine")
	}
	if !vmNamePattern.MatchString(m.Name) {
		return "", driver.Errorf(driver.InvalidArgument,
			"azure: machine name %q cannot name an Azure VM: it becomes the VM and host name, so use at most 64 letters, digits and '-' (no '.'), not starting or ending with '-'", m.Name)
	}
	return m.Name, nil
}

// vmNameForDelete prefers the VM named by the machine's provider ID, so a machine whose VM was
// adopted under another name is still cleaned up.
func vmNameForDelete(m *v1alpha1.Machine) (string, error) {
	if m != nil {
		if name, ok := vmFromProviderID(m.Spec.ProviderID); ok && vmNamePattern.MatchString(name) {
			return name, nil
		}
	}
	return vmName(m)
}
