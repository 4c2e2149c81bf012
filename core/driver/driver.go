// Package driver is the contract between machinist's controllers and a cloud provider: six
// machine operations, compatible in meaning with Gardener MCM's driver, and the 18 machine codes
// their errors carry (MCM's contract with its sources: docs/compatibility/mcm-driver-contract.md).
//
// Every method takes a context that bounds it: a driver must return promptly (Canceled or
// DeadlineExceeded) once the context is done, and must leave nothing half-created. Errors are
// *Status values (see Error, Errorf, Wrap) read with errors.As, CodeOf and MessageOf. Methods a
// driver does not support return Unimplemented. Messages are shown to users in
// Machine.status.lastOperation: make them say what went wrong and what to do, and never put a
// secret in them.
package driver

import (
	"context"

	corev1 "k8s.io/api/core/v1"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// Driver manages the VMs of one provider.
//
// A driver must map each Machine to at most one VM (the VM is named after the machine or tagged
// with it) and scope everything it touches to the cluster and role named in the class (tags,
// resource group, name prefix), so it never sees or deletes another cluster's VMs.
//
// Before acting, a driver checks MachineClass.provider against its name (InvalidArgument when it
// differs) and decodes MachineClass.providerSpec strictly (InvalidArgument naming the field that
// is unknown or invalid); DecodeProviderSpec and CheckProvider do both.
//
// Requests are read-only: a driver must not change a request or the objects it carries (Machine,
// MachineClass, Secret, PVSpecs), not even to write the value that is there. Callers share them:
// the controllers hand the objects of their informer cache, as MCM's machine controller hands
// its listers' objects, and the bridge's server hands one decoded copy to every call that
// carries the same object. A driver copies (DeepCopy) what it needs to change. The conformance
// kit's RequestsAreReadOnly rule checks it (docs/compatibility/mcm-driver-contract.md#requests-are-read-only).
type Driver interface {
	// CreateMachine creates the VM of req.Machine, or returns the existing one: it is idempotent
	// by machine name, so a second call for the same machine returns the same ProviderID and the
	// backend still holds one VM. It may resume a half-done create from
	// Machine.Status.LastKnownState. On failure it deletes whatever it created on the way and
	// returns the cloud's message. Required.
	CreateMachine(ctx context.Context, req *CreateMachineRequest) (*CreateMachineResponse, error)

	// InitializeMachine runs post-create initialization of a VM CreateMachine made (or that
	// GetMachineStatus reported Uninitialized). Optional: drivers without it return Unimplemented
	// and the controller proceeds.
	InitializeMachine(ctx context.Context, req *InitializeMachineRequest) (*InitializeMachineResponse, error)

	// DeleteMachine deletes the VM of req.Machine (found by Spec.ProviderID, else by name) and
	// every artefact the driver created for it (ports, NICs, disks). A VM that does not exist is
	// OK, so the call is idempotent. Required.
	DeleteMachine(ctx context.Context, req *DeleteMachineRequest) (*DeleteMachineResponse, error)

	// GetMachineStatus reports the VM of req.Machine without changing anything. It returns
	// NotFound when there is no VM, OutOfRange when several VMs match the machine, and
	// Uninitialized when the VM exists but InitializeMachine has not completed. Optional.
	GetMachineStatus(ctx context.Context, req *GetMachineStatusRequest) (*GetMachineStatusResponse, error)

	// ListMachines returns every VM of req.MachineClass's cluster and role as ProviderID ->
	// machine name, filtered server-side, including leftovers (ports, disks, NICs) whose VM is
	// gone, so the orphan collector can delete them. It must never list another cluster's VMs.
	// Optional.
	ListMachines(ctx context.Context, req *ListMachinesRequest) (*ListMachinesResponse, error)

	// GetVolumeIDs maps each persistent volume spec to this provider's volume ID, skipping volumes
	// of other drivers (other CSI drivers, NFS, ...). It is idempotent. Optional.
	GetVolumeIDs(ctx context.Context, req *GetVolumeIDsRequest) (*GetVolumeIDsResponse, error)
}

// CreateMachineRequest asks for the VM of a machine.
type CreateMachineRequest struct {
	// Machine to create a VM for.
	Machine *v1alpha1.Machine
	// MachineClass of the machine.
	MachineClass *v1alpha1.MachineClass
	// Secret holds the data of the class's secretRef overlaid by its credentialsSecretRef;
	// userData has its placeholders already substituted.
	Secret *corev1.Secret
}

// CreateMachineResponse describes the created (or existing) VM.
type CreateMachineResponse struct {
	// ProviderID of the VM, equal to the spec.providerID its node will carry.
	ProviderID string
	// NodeName the VM's node registers with.
	NodeName string
	// LastKnownState is opaque state stored in Machine.status for the next call.
	LastKnownState string
	// Addresses of the VM; used only when the controller runs without a target cluster.
	Addresses []corev1.NodeAddress
}

// InitializeMachineRequest asks for post-create initialization of a VM.
type InitializeMachineRequest struct {
	Machine      *v1alpha1.Machine
	MachineClass *v1alpha1.MachineClass
	Secret       *corev1.Secret
}

// InitializeMachineResponse describes the initialized VM.
type InitializeMachineResponse struct {
	ProviderID string
	NodeName   string
	Addresses  []corev1.NodeAddress
}

// DeleteMachineRequest asks for the deletion of a machine's VM.
type DeleteMachineRequest struct {
	Machine      *v1alpha1.Machine
	MachineClass *v1alpha1.MachineClass
	Secret       *corev1.Secret
}

// DeleteMachineResponse reports a deletion.
type DeleteMachineResponse struct {
	// LastKnownState is opaque state stored in Machine.status for the next call.
	LastKnownState string
}

// GetMachineStatusRequest asks for the VM of a machine.
type GetMachineStatusRequest struct {
	Machine      *v1alpha1.Machine
	MachineClass *v1alpha1.MachineClass
	Secret       *corev1.Secret
}

// GetMachineStatusResponse describes an existing VM.
type GetMachineStatusResponse struct {
	ProviderID string
	NodeName   string
	Addresses  []corev1.NodeAddress
}

// ListMachinesRequest asks for the VMs of a class's cluster and role.
type ListMachinesRequest struct {
	MachineClass *v1alpha1.MachineClass
	Secret       *corev1.Secret
}

// ListMachinesResponse maps ProviderID to machine name.
type ListMachinesResponse struct {
	MachineList map[string]string
}

// GetVolumeIDsRequest asks for the provider volume IDs of persistent volumes.
type GetVolumeIDsRequest struct {
	PVSpecs []*corev1.PersistentVolumeSpec
}

// GetVolumeIDsResponse lists the volume IDs of this provider's volumes, in request order.
type GetVolumeIDsResponse struct {
	VolumeIDs []string
}
