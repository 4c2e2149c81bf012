package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// PoolPolicy gives the MachineDeployments it selects (a worker pool spread over zones as one
// deployment per zone) one rollout budget, one repair budget and the rollout's gates: pause,
// approval by node label, a health gate, a soak time, a halt after failures, and what to do with a
// node that cannot be drained. While a policy selects a deployment, the policy's budget replaces
// the deployment's own maxSurge and maxUnavailable; the deployment's fields stay as they are.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=pool;pools
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.status.replicas`,description="The selected deployments' replicas, summed."
// +kubebuilder:printcolumn:name="Updated",type=integer,JSONPath=`.status.updatedReplicas`,description="Machines on their deployment's current template."
// +kubebuilder:printcolumn:name="Surge",type=integer,JSONPath=`.status.budget.surgeInUse`,description="Machines above the pool's replicas now."
// +kubebuilder:printcolumn:name="Max-Surge",type=integer,JSONPath=`.status.budget.maxSurge`,description="The pool's surge budget in machines."
// +kubebuilder:printcolumn:name="Unavailable",type=integer,JSONPath=`.status.budget.unavailableInUse`,description="Replicas of the pool not available now."
// +kubebuilder:printcolumn:name="Max-Unavailable",type=integer,JSONPath=`.status.budget.maxUnavailable`,description="The pool's unavailability budget in machines."
// +kubebuilder:printcolumn:name="Progressing",type=string,JSONPath=`.status.conditions[?(@.type=="Progressing")].reason`,description="Why the pool's rollout is or is not progressing."
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PoolPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec of the policy.
	Spec PoolPolicySpec `json:"spec"`
	// Status of the pool, as the controller last saw it.
	// +optional
	Status PoolPolicyStatus `json:"status,omitempty"`
}

// PoolPolicyList is a list of PoolPolicies.
//
// +kubebuilder:object:root=true
type PoolPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PoolPolicy `json:"items"`
}

// PoolPolicySpec is what a pool's rollouts and repairs may do.
type PoolPolicySpec struct {
	// Selector selects MachineDeployments of the policy's namespace by their labels. A
	// deployment selected by two policies is governed by neither (both say so in a condition).
	Selector *metav1.LabelSelector `json:"selector"`
	// Rollout is the pool's rollout budget and gates.
	// +optional
	Rollout PoolRollout `json:"rollout,omitempty"`
	// Repair is the pool's repair budget.
	// +optional
	Repair PoolRepair `json:"repair,omitempty"`
}

// RolloutOrder says in which order the pool's deployments roll out.
// +kubebuilder:validation:Enum=Parallel;Sequential
type RolloutOrder string

// The orders.
const (
	// OrderParallel: any deployment of the pool may use the shared budget (the default).
	OrderParallel RolloutOrder = "Parallel"
	// OrderSequential: one deployment rolls out after the other, in the order of the orderBy
	// label's value, then by name.
	OrderSequential RolloutOrder = "Sequential"
)

// Approval says who decides which outdated machine is replaced next.
// +kubebuilder:validation:Enum=Auto;Manual
type Approval string

// The approvals.
const (
	// ApprovalAuto: the controller replaces outdated machines as the budget allows (the default).
	ApprovalAuto Approval = "Auto"
	// ApprovalManual: an outdated machine is replaced only once its Node carries MCM's
	// node.machine.sapcloud.io/selected-for-update label.
	ApprovalManual Approval = "Manual"
)

// UndrainableBehavior says what a rollout does with a node whose drain is blocked (a
// PodDisruptionBudget that allows no eviction) past the drain timeout.
// +kubebuilder:validation:Enum=Wait;Cordon
type UndrainableBehavior string

// The behaviours.
const (
	// UndrainableWait: the drain is MCM's: it turns forceful once the drain timeout passes, and
	// the machine holds its share of the budget until it is gone (the default).
	UndrainableWait UndrainableBehavior = "Wait"
	// UndrainableCordon: the drain is never forced: the node is left cordoned with its pods, the
	// drain goes on trying gracefully, and the rollout goes on without counting the machine
	// against the budget.
	UndrainableCordon UndrainableBehavior = "Cordon"
)

// PoolRollout is the pool's rollout budget and gates.
type PoolRollout struct {
	// MaxSurge is how many machines the pool may have above its replicas during a rollout: a
	// count, or a percentage of the pool's replicas (rounded up). Unset: 1.
	// +optional
	MaxSurge *intstr.IntOrString `json:"maxSurge,omitempty"`
	// MaxUnavailable is how many of the pool's replicas may be unavailable during a rollout: a
	// count, or a percentage of the pool's replicas (rounded down). Unset: 0.
	// +optional
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`
	// Order is Parallel (the default) or Sequential.
	// +optional
	Order RolloutOrder `json:"order,omitempty"`
	// OrderBy names a label of the MachineDeployments whose value orders a Sequential rollout
	// (deployments without it come last); deployments with equal values go by name.
	// +optional
	OrderBy string `json:"orderBy,omitempty"`
	// Paused: while true no new machine of a rollout is started; what is in flight finishes.
	// +optional
	Paused bool `json:"paused,omitempty"`
	// Approval is Auto (the default) or Manual.
	// +optional
	Approval Approval `json:"approval,omitempty"`
	// HealthGate holds the rollout until new machines prove healthy.
	// +optional
	HealthGate HealthGate `json:"healthGate,omitempty"`
	// HaltAfterFailures stops the rollout once that many of its new machines failed (did not
	// join in time, or failed their health check); 0 never halts.
	// +optional
	// +kubebuilder:validation:Minimum=0
	HaltAfterFailures int32 `json:"haltAfterFailures,omitempty"`
	// Undrainable is Wait (the default) or Cordon.
	// +optional
	Undrainable UndrainableBehavior `json:"undrainable,omitempty"`
}

// HealthGate holds a rollout until new machines have been Ready long enough.
type HealthGate struct {
	// ReadySeconds: a new machine must have been Ready that long before the budget it used is
	// freed for the next replacement.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ReadySeconds int32 `json:"readySeconds,omitempty"`
	// SoakSeconds: after each step, wait that long with the new machines Ready before the next.
	// +optional
	// +kubebuilder:validation:Minimum=0
	SoakSeconds int32 `json:"soakSeconds,omitempty"`
}

// PoolRepair is the pool's repair budget.
type PoolRepair struct {
	// MaxInFlight is how many unhealthy machines of the pool are replaced at once: a count, or a
	// percentage of the pool's replicas (rounded down), never less than 1. Unset: the
	// controller's per-deployment limit (--max-replacements-per-deployment) applies.
	// +optional
	MaxInFlight *intstr.IntOrString `json:"maxInFlight,omitempty"`
}

// PoolPolicyStatus is the pool as the controller last saw it.
type PoolPolicyStatus struct {
	// ObservedGeneration is the policy generation this status is about.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Replicas is the governed deployments' spec.replicas, summed.
	// +optional
	Replicas int32 `json:"replicas"`
	// UpdatedReplicas counts the pool's machines on their deployment's current template (not
	// terminating).
	// +optional
	UpdatedReplicas int32 `json:"updatedReplicas"`
	// OutdatedReplicas counts the pool's machines of older templates still to be replaced.
	// +optional
	OutdatedReplicas int32 `json:"outdatedReplicas"`
	// Budget is the pool's budgets, used and left.
	// +optional
	Budget PoolBudgetStatus `json:"budget"`
	// Deployments is each governed deployment's part.
	// +optional
	Deployments []PoolDeploymentStatus `json:"deployments,omitempty"`
	// Rollout is the current rollout and the failures of its new machines.
	// +optional
	Rollout *PoolRolloutStatus `json:"rollout,omitempty"`
	// Conditions: Accepted, Progressing, Paused, WaitingForApproval, BudgetExhausted.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// PoolBudgetStatus is the pool's budgets in machines: what the policy allows now, what is used
// and what is left.
type PoolBudgetStatus struct {
	MaxSurge         int32 `json:"maxSurge"`
	SurgeInUse       int32 `json:"surgeInUse"`
	SurgeLeft        int32 `json:"surgeLeft"`
	MaxUnavailable   int32 `json:"maxUnavailable"`
	UnavailableInUse int32 `json:"unavailableInUse"`
	UnavailableLeft  int32 `json:"unavailableLeft"`
	// RepairMaxInFlight is spec.repair.maxInFlight resolved; unset when the policy sets none.
	// +optional
	RepairMaxInFlight *int32 `json:"repairMaxInFlight,omitempty"`
	// RepairInFlight counts the pool's machines being replaced (any phase but Running, Unknown
	// and Available).
	RepairInFlight int32 `json:"repairInFlight"`
}

// PoolMemberState is where a governed deployment stands in the pool's rollout.
type PoolMemberState string

// The states.
const (
	// MemberUpToDate: no machine of an older template is left.
	MemberUpToDate PoolMemberState = "UpToDate"
	// MemberRolling: the deployment replaces machines now.
	MemberRolling PoolMemberState = "Rolling"
	// MemberWaiting: the deployment has machines to replace and waits (Message says for what).
	MemberWaiting PoolMemberState = "Waiting"
)

// PoolDeploymentStatus is one governed deployment's part of the pool.
type PoolDeploymentStatus struct {
	Name string `json:"name"`
	// Replicas is the deployment's spec.replicas.
	Replicas int32 `json:"replicas"`
	// Updated and Outdated count its machines of the current and of older templates.
	Updated  int32 `json:"updated"`
	Outdated int32 `json:"outdated"`
	// SurgeInUse and UnavailableInUse are its share of the pool's budgets in use.
	SurgeInUse       int32           `json:"surgeInUse"`
	UnavailableInUse int32           `json:"unavailableInUse"`
	State            PoolMemberState `json:"state"`
	// +optional
	Message string `json:"message,omitempty"`
}

// PoolRolloutStatus is the pool's current rollout: its identity and the failures of its new
// machines, which haltAfterFailures counts.
type PoolRolloutStatus struct {
	// ID names the rollout: it changes when a governed deployment's template changes, which
	// starts a new rollout (and forgets the failures of the last).
	ID string `json:"id"`
	// HaltAfterFailures is the spec value the failures were counted against; changing the spec
	// value starts counting afresh.
	// +optional
	HaltAfterFailures int32 `json:"haltAfterFailures,omitempty"`
	// Failures are the new machines of this rollout that failed, oldest first.
	// +optional
	Failures []PoolFailure `json:"failures,omitempty"`
}

// PoolFailure is a new machine of a rollout that failed.
type PoolFailure struct {
	Machine    string      `json:"machine"`
	Deployment string      `json:"deployment"`
	Reason     string      `json:"reason,omitempty"`
	Time       metav1.Time `json:"time"`
}

// Condition types of a PoolPolicy.
const (
	// PoolAccepted: the policy governs its deployments (False: the message names the bad input,
	// and the deployments it selects keep their own budgets).
	PoolAccepted = "Accepted"
	// PoolProgressing: a rollout is under way (False: complete, or halted after failures).
	PoolProgressing = "Progressing"
	// PoolPaused: spec.rollout.paused holds new replacements.
	PoolPaused = "Paused"
	// PoolWaitingForApproval: outdated machines wait for their nodes to be selected for update.
	PoolWaitingForApproval = "WaitingForApproval"
	// PoolBudgetExhausted: the next replacement waits for budget in use to be freed.
	PoolBudgetExhausted = "BudgetExhausted"
)

// AnnotationUndrainable is set on a terminating Machine whose node could not be drained by the
// drain timeout under a policy with undrainable Cordon: the node stays cordoned, the drain goes
// on trying, and the pool's rollout no longer counts the machine. The value says why (the node,
// the policy and what blocks the drain).
const AnnotationUndrainable = "machinist.io/undrainable"

// AnnotationApprovedForUpdate marks an outdated Machine whose node was selected for update under
// a policy with approval Manual: the controller gave it deletion priority 1 so its MachineSet
// removes it first, and takes both away again if the node loses the label before that.
const AnnotationApprovedForUpdate = "machinist.io/approved-for-update"
