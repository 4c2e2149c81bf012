package drivertest

import (
	"context"

	corev1 "k8s.io/api/core/v1"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
)

// Target is one driver under test and the inputs the rules need.
type Target struct {
	// Driver under test.
	Driver driver.Driver
	// Class is a valid MachineClass for the driver. Its providerSpec scopes machines to one
	// cluster and role.
	Class *v1alpha1.MachineClass
	// Secret of Class (credentials and userData).
	Secret *corev1.Secret
	// OtherClass is a valid class of the same driver and backend scoped to a different cluster or
	// role. ListMachines of Class must not show its machines. Nil skips that part of the rule.
	OtherClass *v1alpha1.MachineClass
	// InvalidProviderSpec is a providerSpec the driver must reject with InvalidArgument. Nil uses
	// Class's spec with the first top-level field's value of another JSON type.
	InvalidProviderSpec []byte
	// CountVMs counts the VMs of a machine name directly in the backend, bypassing the driver.
	// Nil falls back to the driver's own ListMachines/GetMachineStatus.
	CountVMs func(ctx context.Context, machineName string) (int, error)
	// Volumes are persistent volumes of this provider with the IDs GetVolumeIDs must return for
	// them. Volumes of other drivers are added by the kit and must be skipped.
	Volumes []Volume
	// Close releases the target; nil means nothing to release. It runs when the subtest ends.
	Close func()
}

// Volume is a persistent volume spec and the ID GetVolumeIDs must map it to.
type Volume struct {
	Spec *corev1.PersistentVolumeSpec
	ID   string
}
