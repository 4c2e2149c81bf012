package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MachineSet keeps a number of identical machines running.
//
// +genclient
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.labelSelector
// +kubebuilder:resource:shortName=mcs
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=`.spec.replicas`,description="Number of desired replicas."
// +kubebuilder:printcolumn:name="Current",type=integer,JSONPath=`.status.replicas`,description="Number of actual replicas."
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyReplicas`,description="Number of ready replicas for this machine set."
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type MachineSet struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec of the set.
	// +optional
	Spec MachineSetSpec `json:"spec,omitempty"`
	// Status of the set.
	// +optional
	Status MachineSetStatus `json:"status,omitempty"`
}

// MachineSetList is a list of MachineSets.
//
// +kubebuilder:object:root=true
type MachineSetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MachineSet `json:"items"`
}

// MachineTemplateSpec is the template of the machines a set creates.
type MachineTemplateSpec struct {
	// Metadata of the machines. Unknown fields are kept, as MCM's CRDs keep them.
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// Spec of the machines.
	// +optional
	Spec MachineSpec `json:"spec,omitempty"`
}

// MachineSetSpec is the desired state of a set.
type MachineSetSpec struct {
	// Replicas is the desired number of machines.
	// +optional
	Replicas int32 `json:"replicas,omitempty"`
	// Selector over the labels of the set's machines.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
	// MachineClass of the set's machines when the template names none. MCM never sets it (it
	// writes an empty object); neither does machinist. Kept for sets written by older tools.
	// +optional
	MachineClass ClassSpec `json:"machineClass,omitempty"`
	// Template of the machines.
	// +optional
	Template MachineTemplateSpec `json:"template,omitempty"`
	// MinReadySeconds a machine must be Running to count as available.
	// +optional
	MinReadySeconds int32 `json:"minReadySeconds,omitempty"`
	// AutoPreserveFailedMachineMax is how many Failed machines are kept for debugging.
	// +optional
	AutoPreserveFailedMachineMax int32 `json:"autoPreserveFailedMachineMax,omitempty"`
}

// MachineSetConditionType names a condition of a set.
type MachineSetConditionType string

// Conditions of a MachineSet.
const (
	// MachineSetReplicaFailure: machines could not be created or deleted.
	MachineSetReplicaFailure MachineSetConditionType = "ReplicaFailure"
	// MachineSetFrozen: the safety controller froze the set (too many machines).
	MachineSetFrozen MachineSetConditionType = "Frozen"
)

// ConditionStatus is True, False or Unknown.
type ConditionStatus string

// Condition statuses.
const (
	ConditionTrue    ConditionStatus = "True"
	ConditionFalse   ConditionStatus = "False"
	ConditionUnknown ConditionStatus = "Unknown"
)

// MachineSetCondition describes one aspect of a set's state.
type MachineSetCondition struct {
	// Type of the condition.
	Type MachineSetConditionType `json:"type"`
	// Status of the condition.
	Status ConditionStatus `json:"status"`
	// LastTransitionTime is when the status last changed.
	// +optional
	LastTransitionTime metav1.Time `json:"lastTransitionTime,omitempty"`
	// Reason is a machine-readable cause.
	// +optional
	Reason string `json:"reason,omitempty"`
	// Message is a human-readable account.
	// +optional
	Message string `json:"message,omitempty"`
}

// MachineSetStatus is the observed state of a set.
type MachineSetStatus struct {
	// Replicas is the number of machines that are not terminating.
	// +optional
	Replicas int32 `json:"replicas,omitempty"`
	// FullyLabeledReplicas carry every label of the template.
	// +optional
	FullyLabeledReplicas int32 `json:"fullyLabeledReplicas,omitempty"`
	// ReadyReplicas are Running.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`
	// AvailableReplicas are Running for at least minReadySeconds.
	// +optional
	AvailableReplicas int32 `json:"availableReplicas,omitempty"`
	// PreservedFailedReplicas are Failed and preserved.
	// +optional
	PreservedFailedReplicas int32 `json:"preservedFailedReplicas,omitempty"`
	// ObservedGeneration is the generation last acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions of the set (the JSON name is MCM's).
	// +optional
	Conditions []MachineSetCondition `json:"machineSetCondition,omitempty"`
	// LastOperation of the set.
	// +optional
	LastOperation LastOperation `json:"lastOperation,omitempty"`
	// FailedMachines lists machines whose last operation failed.
	// +optional
	FailedMachines *[]MachineSummary `json:"failedMachines,omitempty"`
	// AutoPreserveFailedMachineCount is how many Failed machines are auto-preserved.
	// +optional
	AutoPreserveFailedMachineCount int32 `json:"autoPreserveFailedMachineCount,omitempty"`
	// LabelSelector is the set's selector in string form, for the scale subresource.
	// +optional
	LabelSelector string `json:"labelSelector,omitempty"`
}
