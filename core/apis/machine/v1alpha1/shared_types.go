package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ClassSpec references the class of a machine.
type ClassSpec struct {
	// APIGroup of the class, machine.sapcloud.io.
	// +optional
	APIGroup string `json:"apiGroup,omitempty"`
	// Kind of the class, MachineClass.
	// +optional
	Kind string `json:"kind,omitempty"`
	// Name of the class in the machine's namespace. The controllers need it on a MachineDeployment's
	// template and on a Machine (they report an empty one), but the schema does not require it:
	// MCM's CRDs do not, and MCM writes MachineSets with an empty spec.machineClass.
	// +optional
	Name string `json:"name,omitempty"`
}

// MachineState is the state of the last operation.
type MachineState string

// States of a LastOperation.
const (
	MachineStatePending    MachineState = "Pending"
	MachineStateProcessing MachineState = "Processing"
	MachineStateFailed     MachineState = "Failed"
	MachineStateSuccessful MachineState = "Successful"
)

// MachineOperationType is the kind of the last operation.
type MachineOperationType string

// Operation types of a LastOperation.
const (
	MachineOperationCreate        MachineOperationType = "Create"
	MachineOperationUpdate        MachineOperationType = "Update"
	MachineOperationInPlaceUpdate MachineOperationType = "InPlaceUpdate"
	MachineOperationDrainNode     MachineOperationType = "DrainNode"
	MachineOperationHealthCheck   MachineOperationType = "HealthCheck"
	MachineOperationDelete        MachineOperationType = "Delete"
)

// LastOperation records the most recent operation on a machine (or set) and its outcome; the
// description carries the provider's message and errorCode the driver's code name.
type LastOperation struct {
	// Description is a human-readable account of the operation.
	// +optional
	Description string `json:"description,omitempty"`
	// ErrorCode is the machine code name (e.g. ResourceExhausted) of the last failure.
	// +optional
	ErrorCode string `json:"errorCode,omitempty"`
	// LastUpdateTime of this record.
	// +optional
	LastUpdateTime metav1.Time `json:"lastUpdateTime,omitempty"`
	// State of the operation.
	// +optional
	State MachineState `json:"state,omitempty"`
	// Type of the operation.
	// +optional
	Type MachineOperationType `json:"type,omitempty"`
}

// MachineSummary describes a failed machine of a set or deployment.
type MachineSummary struct {
	// Name of the machine.
	// +optional
	Name string `json:"name,omitempty"`
	// ProviderID of the machine.
	// +optional
	ProviderID string `json:"providerID,omitempty"`
	// LastOperation of the machine.
	// +optional
	LastOperation LastOperation `json:"lastOperation,omitempty"`
	// OwnerRef is the name of the owning MachineSet.
	// +optional
	OwnerRef string `json:"ownerRef,omitempty"`
}
