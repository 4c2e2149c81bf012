package v1alpha1

// Machine preservation (MCM's node.machine.sapcloud.io/preserve): the texts of the node
// condition Preserved (NodeConditionPreserved) as Gardener's machine-controller-manager writes
// them. They are API: MCM reads a preserved node's drain state back from the message, so a node
// preserved by either controller is understood by the other.
const (
	// PreservedReasonByMCM is the Preserved condition's reason on an auto-preserved machine's node.
	PreservedReasonByMCM = "Preserved by MCM."
	// PreservedReasonByUser is the reason when the preserve annotation was set by someone.
	PreservedReasonByUser = "Preserved by user."
	// PreservedReasonStopped is the reason (status False) once preservation ended: the
	// annotation changed or was removed, the machine recovered, or the preservation expired.
	PreservedReasonStopped = "Preservation stopped."
	// PreservedMessageDrained starts the message once a preserved Failed machine's node is
	// drained.
	PreservedMessageDrained = "Preserved node drained successfully."
	// PreservedMessageNotDrained starts the message while that drain has not succeeded.
	PreservedMessageNotDrained = "Preserved node could not be drained."
	// PreservedMessageUntil precedes the expiry time in the message.
	PreservedMessageUntil = "Machine preserved until"

	// LabelForceDrain ("True") on a preserved Failed machine drains its node forcefully (pods
	// deleted without eviction), as MCM's preservation drain reads it.
	LabelForceDrain = "force-drain"
)

// PreserveValues are the values of AnnotationPreserve the controllers act on; any other value
// is ignored (on a Machine) or leaves the machine alone (on a Node), as in MCM.
var PreserveValues = []string{PreserveNow, PreserveWhenFailed, PreserveAuto, PreserveFalse}

// ValidPreserveValue reports whether v is one of PreserveValues.
func ValidPreserveValue(v string) bool {
	for _, p := range PreserveValues {
		if v == p {
			return true
		}
	}
	return false
}
