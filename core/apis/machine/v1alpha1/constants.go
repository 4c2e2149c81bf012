package v1alpha1

// Labels, annotations, taints, finalizers and node conditions shared with Gardener's
// machine-controller-manager. The strings are API: other tools (Gardener, Cluster Autoscaler's
// MCM provider, dashboards) read and write them, so they must not change.
const (
	// LabelNode on a Machine names its Node.
	LabelNode = "node"
	// LabelMachineDeploymentName on a Machine names its MachineDeployment in MCM, which reads it
	// for its replacement rate limit and its metrics. Gardener puts it in every template;
	// machinist never adds it (MCM compares template labels) and finds a machine's deployment
	// through its owners, reading this label only for machines that have none.
	LabelMachineDeploymentName = "name"
	// LabelMachineTemplateHash on MachineSets and Machines is the hash of the template.
	LabelMachineTemplateHash = "machine-template-hash"
	// LabelForceDeletion ("True") on a Machine skips the graceful drain.
	LabelForceDeletion = "force-deletion"
	// LabelFreeze ("True") on MachineSets and MachineDeployments is set while frozen.
	LabelFreeze = "freeze"
	// LabelScaleUpDisabled on a MachineSet keeps it from creating machines (in-place update).
	LabelScaleUpDisabled = "node.machine.sapcloud.io/scale-up-disabled"
	// LabelNodeMachineName on a Node names its Machine.
	LabelNodeMachineName = "node.gardener.cloud/machine-name"
	// LabelNodeCandidateForUpdate marks a node as a candidate of an in-place update.
	LabelNodeCandidateForUpdate = "node.machine.sapcloud.io/candidate-for-update"
	// LabelNodeSelectedForUpdate marks a node selected for an in-place update.
	LabelNodeSelectedForUpdate = "node.machine.sapcloud.io/selected-for-update"
	// LabelNodeUpdateResult on a node is successful or failed after an in-place update.
	LabelNodeUpdateResult = "node.machine.sapcloud.io/update-result"

	// AnnotationMachinePriority on a Machine orders scale-down: "1" is deleted first; default "3".
	AnnotationMachinePriority = "machinepriority.machine.sapcloud.io"
	// DefaultMachinePriority is set on machines that have no priority.
	DefaultMachinePriority = "3"
	// DeletionCandidateMachinePriority marks a machine to be deleted first.
	DeletionCandidateMachinePriority = "1"
	// AnnotationMarkedForDeletionTime (RFC3339) on a Machine records when a scaler chose it.
	AnnotationMarkedForDeletionTime = "machine.sapcloud.io/marked-for-deletion-time"
	// AnnotationTriggerDeletionByMCM on a MachineDeployment lists machines a scaler wants gone:
	// "[m1~t1,m2~t2]" (machine~RFC3339 time).
	AnnotationTriggerDeletionByMCM = "node.machine.sapcloud.io/trigger-deletion-by-mcm"
	// AnnotationLastReplicaChangeByScaler records when a scaler last changed replicas.
	AnnotationLastReplicaChangeByScaler = "machine.sapcloud.io/last-deployment-replica-change-by-scaler-time"
	// AnnotationEffectiveCreationTimeout (a Go duration) on a MachineDeployment is copied to new
	// machines and overrides their creation timeout.
	AnnotationEffectiveCreationTimeout = "node.machine.sapcloud.io/effective-creation-timeout"
	// AnnotationMachineJoinDuration on a Machine records how long its node took to join.
	AnnotationMachineJoinDuration = "node.machine.sapcloud.io/machine-join-duration"
	// AnnotationPreserve on a Node (wins) or Machine: now, when-failed, auto-preserved or false.
	AnnotationPreserve = "node.machine.sapcloud.io/preserve"
	// AnnotationLastAppliedNodePreserveValue records the preserve value last applied.
	AnnotationLastAppliedNodePreserveValue = "node.machine.sapcloud.io/last-applied-node-preserve-value"
	// AnnotationUnfreeze on a MachineDeployment or MachineSet lifts a safety freeze by hand.
	AnnotationUnfreeze = "safety.machine.sapcloud.io/unfreeze"
	// AnnotationNotManagedByMCM ("1") on a Node marks a node with no machine.
	AnnotationNotManagedByMCM = "node.machine.sapcloud.io/not-managed-by-mcm"
	// AnnotationLastAppliedALT on a Node is the JSON of the last synced labels/annotations/taints.
	AnnotationLastAppliedALT = "node.machine.sapcloud.io/last-applied-anno-labels-taints"
	// AnnotationLastAppliedVirtualCapacity on a Node is the last synced virtual capacity.
	AnnotationLastAppliedVirtualCapacity = "node.machine.sapcloud.io/last-applied-virtual-capacity"
	// AnnotationUpdateFailedReason on a Node explains a failed in-place update.
	AnnotationUpdateFailedReason = "node.machine.sapcloud.io/update-failed-reason"
	// AnnotationCAScaleDownDisabled tells Cluster Autoscaler not to scale the node down.
	AnnotationCAScaleDownDisabled = "cluster-autoscaler.kubernetes.io/scale-down-disabled"
	// AnnotationCAScaleDownDisabledByMCM records that the controller, not a user, set
	// AnnotationCAScaleDownDisabled; it is MCM's key, so either controller removes the other's mark.
	AnnotationCAScaleDownDisabledByMCM = "cluster-autoscaler.kubernetes.io/scale-down-disabled-by-mcm"
	// LegacyAnnotationCAScaleDownDisabledByMCM is the key machinist used before it used MCM's.
	// A node carrying it was marked by machinist: the mark is removed like MCM's, and the key dropped.
	LegacyAnnotationCAScaleDownDisabledByMCM = "node.machine.sapcloud.io/scale-down-disabled-by-mcm"
	// AnnotationRevision on a MachineSet is its deployment revision.
	AnnotationRevision = "deployment.kubernetes.io/revision"
	// AnnotationRevisionHistory on a MachineSet lists revisions it has had.
	AnnotationRevisionHistory = "deployment.kubernetes.io/revision-history"
	// AnnotationDesiredReplicas on a MachineSet is its deployment's replicas.
	AnnotationDesiredReplicas = "deployment.kubernetes.io/desired-replicas"
	// AnnotationMaxReplicas on a MachineSet is replicas + maxSurge of its deployment.
	AnnotationMaxReplicas = "deployment.kubernetes.io/max-replicas"

	// PreserveNow preserves a machine immediately.
	PreserveNow = "now"
	// PreserveWhenFailed preserves a machine once it fails.
	PreserveWhenFailed = "when-failed"
	// PreserveAuto is set by the MachineSet controller on auto-preserved machines.
	PreserveAuto = "auto-preserved"
	// PreserveFalse disables preservation.
	PreserveFalse = "false"

	// TaintPreferNoSchedule is put on nodes of old MachineSets during a rollout.
	TaintPreferNoSchedule = "deployment.machine.sapcloud.io/prefer-no-schedule"
	// TaintPreserved cordons a preserved failed node.
	TaintPreserved = "node.machine.sapcloud.io/preserved"
	// TaintCriticalComponentsNotReady (NoSchedule) keeps a machine Pending until removed.
	TaintCriticalComponentsNotReady = "node.gardener.cloud/critical-components-not-ready"

	// FinalizerMachineControllerManager is put on Machines, MachineClasses, MachineSets and
	// MachineDeployments.
	FinalizerMachineControllerManager = "machine.sapcloud.io/machine-controller-manager"
	// FinalizerNode is put on the Nodes of live machines.
	FinalizerNode = "node.machine.sapcloud.io/machine-controller"
	// FinalizerSecret is put on Secrets referenced by a MachineClass.
	FinalizerSecret = "machine.sapcloud.io/machine-controller"

	// NodeConditionTerminating is set on a node being drained for deletion.
	NodeConditionTerminating = "Terminating"
	// NodeConditionPreserved is set on a preserved node.
	NodeConditionPreserved = "Preserved"
	// NodeConditionInPlaceUpdate is set on a node during an in-place update.
	NodeConditionInPlaceUpdate = "InPlaceUpdate"
	// NodeTerminationReasonUnhealthy is the Terminating reason for a Failed machine.
	NodeTerminationReasonUnhealthy = "Unhealthy"
	// NodeTerminationReasonScaleDown is the Terminating reason for a scale-down.
	NodeTerminationReasonScaleDown = "ScaleDown"

	// UserDataBootstrapTokenPlaceholder in userData is replaced with the machine's bootstrap token.
	UserDataBootstrapTokenPlaceholder = "<<BOOTSTRAP_TOKEN>>"
	// UserDataMachineNamePlaceholder in userData is replaced with the machine's name.
	UserDataMachineNamePlaceholder = "<<MACHINE_NAME>>"
)

// The condition of a MachineClass's providerSpec (MachineClassStatus.Conditions) and its reasons.
const (
	// ClassConditionProviderSpecValid says whether the class's providerSpec decodes and validates
	// for its driver: True when it does (reason ProviderSpecValid, or ProviderSpecFieldWarnings
	// when decoding ignored or loosely matched some fields, which the message names), False when
	// the driver refuses it (ProviderSpecInvalid), Unknown when this controller cannot check it
	// (ProviderSpecNotChecked: the provider is served by a driver server or a dialled-in
	// provider, or not at all).
	ClassConditionProviderSpecValid = "ProviderSpecValid"

	ReasonProviderSpecValid         = "ProviderSpecValid"
	ReasonProviderSpecFieldWarnings = "ProviderSpecFieldWarnings"
	ReasonProviderSpecInvalid       = "ProviderSpecInvalid"
	ReasonProviderSpecNotChecked    = "ProviderSpecNotChecked"
)
