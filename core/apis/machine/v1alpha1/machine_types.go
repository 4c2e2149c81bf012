package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Machine is one cloud machine and the node it becomes.
//
// +genclient
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=mc
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.currentStatus.phase`,description="Current status of the machine."
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.metadata.labels.node`,description="Node backing the machine"
// +kubebuilder:printcolumn:name="Last Operation",type=string,JSONPath=`.status.lastOperation.description`,description="What the last operation did, or why the machine is not Running (machinist explain machine NAME tells the whole story)"
// +kubebuilder:printcolumn:name="Standby",type=string,JSONPath=`.metadata.annotations.machinist\.io/standby-state`,description="A standby machine's state (Booting, Stopping, Stopped): machinist keeps it out of the replicas until a scale-up claims it"
// +kubebuilder:printcolumn:name="ProviderID",type=string,JSONPath=`.spec.providerID`,priority=1,description="Provider ID of the machine"
type Machine struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec of the machine.
	// +optional
	Spec MachineSpec `json:"spec,omitempty"`
	// Status of the machine.
	// +optional
	Status MachineStatus `json:"status,omitempty"`
}

// MachineList is a list of Machines.
//
// +kubebuilder:object:root=true
type MachineList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Machine `json:"items"`
}

// MachineSpec is the desired state of a machine.
type MachineSpec struct {
	// Class is the MachineClass the machine is created from.
	// +optional
	Class ClassSpec `json:"class,omitempty"`
	// ProviderID identifies the VM (<scheme>:///<region>/<id>); set once the VM exists and equal
	// to the node's spec.providerID.
	// +optional
	ProviderID string `json:"providerID,omitempty"`
	// NodeTemplateSpec holds labels, annotations and taints synced onto the node.
	// +optional
	NodeTemplateSpec NodeTemplateSpec `json:"nodeTemplate,omitempty"`
	// MachineConfiguration overrides the controller's timeouts for this machine.
	// +optional
	*MachineConfiguration `json:",inline"`
}

// NodeTemplateSpec is the metadata and spec applied to a machine's node.
type NodeTemplateSpec struct {
	// Metadata of the node: labels and annotations are synced. Unknown fields are kept, as MCM's
	// CRDs keep them.
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// Spec of the node (taints are synced).
	// +optional
	Spec corev1.NodeSpec `json:"spec,omitempty"`
}

// MachineConfiguration holds per-machine overrides of controller-wide settings.
type MachineConfiguration struct {
	// MachineDrainTimeout bounds the graceful drain before it turns forceful.
	// +optional
	MachineDrainTimeout *metav1.Duration `json:"drainTimeout,omitempty"`
	// MachineHealthTimeout is how long a machine may stay Unknown before it is Failed.
	// +optional
	MachineHealthTimeout *metav1.Duration `json:"healthTimeout,omitempty"`
	// MachineCreationTimeout is how long a machine may take to join before it is Failed.
	// +optional
	MachineCreationTimeout *metav1.Duration `json:"creationTimeout,omitempty"`
	// MachineInPlaceUpdateTimeout bounds an in-place update.
	// +optional
	MachineInPlaceUpdateTimeout *metav1.Duration `json:"inPlaceUpdateTimeout,omitempty"`
	// MachinePreserveTimeout is how long a preserved machine is kept.
	// +optional
	MachinePreserveTimeout *metav1.Duration `json:"machinePreserveTimeout,omitempty"`
	// DisableHealthTimeout keeps an unhealthy machine from being failed by the health timeout.
	// +optional
	DisableHealthTimeout *bool `json:"disableHealthTimeout,omitempty"`
	// MaxEvictRetries bounds eviction retries during drain.
	// +optional
	MaxEvictRetries *int32 `json:"maxEvictRetries,omitempty"`
	// NodeConditions is a comma-separated list of node condition types that mark the machine
	// unhealthy when True.
	// +optional
	NodeConditions *string `json:"nodeConditions,omitempty"`
}

// MachineStatus is the observed state of a machine.
type MachineStatus struct {
	// Addresses of the machine; reported only when there is no target cluster.
	// +optional
	Addresses []corev1.NodeAddress `json:"addresses,omitempty"`
	// Conditions are copied from the node.
	// +optional
	Conditions []corev1.NodeCondition `json:"conditions,omitempty"`
	// LastOperation performed on the machine.
	// +optional
	LastOperation LastOperation `json:"lastOperation,omitempty"`
	// CurrentStatus of the machine.
	// +optional
	CurrentStatus CurrentStatus `json:"currentStatus,omitempty"`
	// LastKnownState is opaque provider state that lets a driver resume a half-done operation.
	// +optional
	LastKnownState string `json:"lastKnownState,omitempty"`
}

// CurrentStatus is the phase of a machine and the time it last changed.
type CurrentStatus struct {
	// Phase of the machine.
	// +optional
	Phase MachinePhase `json:"phase,omitempty"`
	// TimeoutActive is true while a creation or health timeout runs.
	// +optional
	TimeoutActive bool `json:"timeoutActive,omitempty"`
	// LastUpdateTime of the phase.
	// +optional
	LastUpdateTime metav1.Time `json:"lastUpdateTime,omitempty"`
	// PreserveExpiryTime is when preservation of this machine ends.
	// +optional
	PreserveExpiryTime *metav1.Time `json:"preserveExpiryTime,omitempty"`
}

// MachinePhase is the lifecycle phase of a machine.
type MachinePhase string

// Machine phases. The empty phase means the machine is being created.
const (
	// MachinePending: the VM exists and the node has not joined yet.
	MachinePending MachinePhase = "Pending"
	// MachineAvailable: the VM exists and there is no target cluster to join.
	MachineAvailable MachinePhase = "Available"
	// MachineRunning: the node joined and is healthy.
	MachineRunning MachinePhase = "Running"
	// MachineTerminating: the machine is being deleted.
	MachineTerminating MachinePhase = "Terminating"
	// MachineUnknown: health checks are failing.
	MachineUnknown MachinePhase = "Unknown"
	// MachineFailed: creation or health timed out; the machine will be replaced.
	MachineFailed MachinePhase = "Failed"
	// MachineCrashLoopBackOff: creating the VM keeps failing.
	MachineCrashLoopBackOff MachinePhase = "CrashLoopBackOff"
	// MachineInPlaceUpdating: an in-place update is running.
	MachineInPlaceUpdating MachinePhase = "InPlaceUpdating"
	// MachineInPlaceUpdateSuccessful: the in-place update finished.
	MachineInPlaceUpdateSuccessful MachinePhase = "InPlaceUpdateSuccessful"
	// MachineInPlaceUpdateFailed: the in-place update failed.
	MachineInPlaceUpdateFailed MachinePhase = "InPlaceUpdateFailed"
)
