package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// MachineDeployment rolls out MachineSets, like a Deployment rolls out ReplicaSets.
//
// +genclient
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.labelSelector
// +kubebuilder:resource:shortName=mcd
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyReplicas`,description="Total number of ready machines targeted by this machine deployment."
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=`.spec.replicas`,description="Number of desired machines."
// +kubebuilder:printcolumn:name="Up-to-date",type=integer,JSONPath=`.status.updatedReplicas`,description="Total number of non-terminated machines targeted by this machine deployment that have the desired template spec."
// +kubebuilder:printcolumn:name="Available",type=integer,JSONPath=`.status.availableReplicas`,description="Total number of available machines (ready for at least minReadySeconds) targeted by this machine deployment."
// +kubebuilder:printcolumn:name="Fallback",type=integer,JSONPath=`.status.fallbackReplicas`,description="Machines running on a fallback class (machinist.io/fallback-classes) instead of the template's class."
// +kubebuilder:printcolumn:name="Standby",type=integer,JSONPath=`.status.standbyReady`,description="Standby machines (machinist.io/standby) stopped and ready to resume."
// +kubebuilder:printcolumn:name="Standby-Starting",type=integer,priority=1,JSONPath=`.status.standbyStarting`,description="Standby machines (machinist.io/standby) booting or stopping, on their way to standby."
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type MachineDeployment struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec of the deployment.
	// +optional
	Spec MachineDeploymentSpec `json:"spec,omitempty"`
	// Status of the deployment.
	// +optional
	Status MachineDeploymentStatus `json:"status,omitempty"`
}

// MachineDeploymentList is a list of MachineDeployments.
//
// +kubebuilder:object:root=true
type MachineDeploymentList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MachineDeployment `json:"items"`
}

// MachineDeploymentSpec is the desired state of a deployment.
type MachineDeploymentSpec struct {
	// Replicas is the desired number of machines.
	// +optional
	Replicas int32 `json:"replicas,omitempty"`
	// Selector over the labels of the deployment's machines.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
	// Template of the machines; any change rolls out a new MachineSet.
	Template MachineTemplateSpec `json:"template"`
	// Strategy replacing old machines with new ones.
	// +optional
	Strategy MachineDeploymentStrategy `json:"strategy,omitempty"`
	// MinReadySeconds a machine must be Running to count as available.
	// +optional
	MinReadySeconds int32 `json:"minReadySeconds,omitempty"`
	// RevisionHistoryLimit is how many old MachineSets are kept for rollback.
	// +optional
	RevisionHistoryLimit *int32 `json:"revisionHistoryLimit,omitempty"`
	// Paused stops the rollout.
	// +optional
	Paused bool `json:"paused,omitempty"`
	// RollbackTo is deprecated and ignored.
	// +optional
	RollbackTo *RollbackConfig `json:"rollbackTo,omitempty"`
	// ProgressDeadlineSeconds after which a stalled rollout is reported; unset means no deadline.
	// +optional
	ProgressDeadlineSeconds *int32 `json:"progressDeadlineSeconds,omitempty"`
	// AutoPreserveFailedMachineMax is how many Failed machines are kept for debugging.
	// +optional
	AutoPreserveFailedMachineMax int32 `json:"autoPreserveFailedMachineMax,omitempty"`
}

// RollbackConfig is the deprecated rollback target.
type RollbackConfig struct {
	// Revision to roll back to; 0 means the last one.
	// +optional
	Revision int64 `json:"revision,omitempty"`
}

// MachineDeploymentStrategyType names a rollout strategy.
type MachineDeploymentStrategyType string

// Rollout strategies.
const (
	// RecreateMachineDeploymentStrategyType deletes all old machines before creating new ones.
	RecreateMachineDeploymentStrategyType MachineDeploymentStrategyType = "Recreate"
	// RollingUpdateMachineDeploymentStrategyType replaces machines gradually (the default).
	RollingUpdateMachineDeploymentStrategyType MachineDeploymentStrategyType = "RollingUpdate"
	// InPlaceUpdateMachineDeploymentStrategyType updates machines without replacing their VMs.
	InPlaceUpdateMachineDeploymentStrategyType MachineDeploymentStrategyType = "InPlaceUpdate"
)

// MachineDeploymentStrategy is how a deployment replaces machines.
type MachineDeploymentStrategy struct {
	// Type is Recreate, RollingUpdate (default) or InPlaceUpdate.
	// +optional
	Type MachineDeploymentStrategyType `json:"type,omitempty"`
	// RollingUpdate parameters, when Type is RollingUpdate.
	// +optional
	RollingUpdate *RollingUpdateMachineDeployment `json:"rollingUpdate,omitempty"`
	// InPlaceUpdate parameters, when Type is InPlaceUpdate.
	// +optional
	InPlaceUpdate *InPlaceUpdateMachineDeployment `json:"inPlaceUpdate,omitempty"`
}

// UpdateConfiguration bounds how many machines are unavailable or extra during an update.
type UpdateConfiguration struct {
	// MaxUnavailable machines during the update (count or percentage, rounded down).
	// +optional
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`
	// MaxSurge machines above replicas during the update (count or percentage, rounded up).
	// +optional
	MaxSurge *intstr.IntOrString `json:"maxSurge,omitempty"`
}

// RollingUpdateMachineDeployment parameterizes a rolling update.
type RollingUpdateMachineDeployment struct {
	UpdateConfiguration `json:",inline"`
}

// OrchestrationType selects who chooses the machines of an in-place update.
type OrchestrationType string

// Orchestration types of an in-place update.
const (
	OrchestrationTypeAuto   OrchestrationType = "Auto"
	OrchestrationTypeManual OrchestrationType = "Manual"
)

// InPlaceUpdateMachineDeployment parameterizes an in-place update.
type InPlaceUpdateMachineDeployment struct {
	UpdateConfiguration `json:",inline"`
	// OrchestrationType is Auto or Manual (Manual forces maxSurge 0).
	// +optional
	OrchestrationType OrchestrationType `json:"orchestrationType,omitempty"`
}

// MachineDeploymentConditionType names a condition of a deployment.
type MachineDeploymentConditionType string

// Conditions of a MachineDeployment.
const (
	// MachineDeploymentAvailable: at least replicas - maxUnavailable machines are available.
	MachineDeploymentAvailable MachineDeploymentConditionType = "Available"
	// MachineDeploymentProgressing: the rollout is making progress or has completed.
	MachineDeploymentProgressing MachineDeploymentConditionType = "Progressing"
	// MachineDeploymentReplicaFailure: machines could not be created or deleted.
	MachineDeploymentReplicaFailure MachineDeploymentConditionType = "ReplicaFailure"
	// MachineDeploymentFrozen: the safety controller froze the deployment.
	MachineDeploymentFrozen MachineDeploymentConditionType = "Frozen"
)

// MachineDeploymentCondition describes one aspect of a deployment's state.
type MachineDeploymentCondition struct {
	// Type of the condition.
	Type MachineDeploymentConditionType `json:"type"`
	// Status of the condition.
	Status ConditionStatus `json:"status"`
	// LastUpdateTime is when the condition was last probed.
	// +optional
	LastUpdateTime metav1.Time `json:"lastUpdateTime,omitempty"`
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

// MachineDeploymentStatus is the observed state of a deployment.
type MachineDeploymentStatus struct {
	// ObservedGeneration is the generation last acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Replicas is the number of non-terminated machines of all its sets.
	// +optional
	Replicas int32 `json:"replicas,omitempty"`
	// UpdatedReplicas carry the current template.
	// +optional
	UpdatedReplicas int32 `json:"updatedReplicas,omitempty"`
	// ReadyReplicas are Running.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`
	// AvailableReplicas are Running for at least minReadySeconds.
	// +optional
	AvailableReplicas int32 `json:"availableReplicas,omitempty"`
	// UnavailableReplicas are still needed to reach 100% availability.
	// +optional
	UnavailableReplicas int32 `json:"unavailableReplicas,omitempty"`
	// PreservedFailedReplicas are Failed and preserved.
	// +optional
	PreservedFailedReplicas int32 `json:"preservedFailedReplicas,omitempty"`
	// Conditions of the deployment.
	// +optional
	Conditions []MachineDeploymentCondition `json:"conditions,omitempty"`
	// CollisionCount disambiguates template hashes that collide.
	// +optional
	CollisionCount *int32 `json:"collisionCount,omitempty"`
	// FailedMachines lists machines whose last operation failed.
	// +optional
	FailedMachines []*MachineSummary `json:"failedMachines,omitempty"`
	// LabelSelector is the deployment's selector in string form, for the scale subresource.
	// +optional
	LabelSelector string `json:"labelSelector,omitempty"`
	// FallbackReplicas counts the non-terminated machines running on a fallback class
	// (annotation machinist.io/fallback-classes) instead of the template's class. machinist's
	// own field: Gardener MCM's CRD has no such field and prunes it.
	// +optional
	FallbackReplicas int32 `json:"fallbackReplicas,omitempty"`

	// StandbyReady counts the standby machines (annotation machinist.io/standby) of the current
	// template that are stopped, ready to be claimed and resumed, up to the wanted count.
	// machinist's own field, written by the standby pool controller with the StandbyReady
	// condition; absent without a pool. Gardener MCM's CRD has no such field and prunes it.
	// +optional
	StandbyReady int32 `json:"standbyReady,omitempty"`

	// StandbyStarting counts the standby machines of the current template on their way to
	// StandbyReady: booting (created, their node not Ready yet) or stopping (drained, their VM
	// being stopped). A claimed machine has left the pool and is counted by the replica fields.
	// Same ownership and pruning as StandbyReady.
	// +optional
	StandbyStarting int32 `json:"standbyStarting,omitempty"`
}
