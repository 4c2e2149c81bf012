package v1alpha1

// The in-place update protocol between the controllers and the agent on the node that performs
// the update (Gardener's gardener-node-agent, the local provider's node agent), as MCM defines
// it (pkg/apis/machine/v1alpha1: constants.go, machine_types.go). The labels and annotation
// named here are in constants.go (LabelNodeCandidateForUpdate, LabelNodeSelectedForUpdate,
// LabelNodeUpdateResult, AnnotationUpdateFailedReason, LabelScaleUpDisabled); the node condition
// type is NodeConditionInPlaceUpdate.
const (
	// LabelValueNodeUpdateSuccessful is the update-result label the agent sets after an update.
	LabelValueNodeUpdateSuccessful = "successful"
	// LabelValueNodeUpdateFailed is the update-result label the agent sets when the update
	// failed; the update-failed-reason annotation says why.
	LabelValueNodeUpdateFailed = "failed"

	// Reasons of the node condition InPlaceUpdate, in the order a node goes through them.

	// ReasonCandidateForUpdate: the node's machine belongs to an old MachineSet of an
	// InPlaceUpdate MachineDeployment.
	ReasonCandidateForUpdate = "CandidateForUpdate"
	// ReasonSelectedForUpdate: the node was labelled selected-for-update (by the
	// MachineDeployment controller, or by the user with orchestration Manual).
	ReasonSelectedForUpdate = "SelectedForUpdate"
	// ReasonDrainSuccessful: the Machine controller cordoned and drained the node.
	ReasonDrainSuccessful = "DrainSuccessful"
	// ReasonReadyForUpdate: the agent on the node may now update it.
	ReasonReadyForUpdate = "ReadyForUpdate"
	// ReasonUpdateSuccessful: the agent labelled the node update-result=successful.
	ReasonUpdateSuccessful = "UpdateSuccessful"
	// ReasonUpdateFailed: the agent labelled the node update-result=failed.
	ReasonUpdateFailed = "UpdateFailed"
)
