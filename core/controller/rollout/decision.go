package rollout

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// Action is what a change of a deployment does, as a plan shows it.
type Action string

// The actions, from the one that says most: a Blocked rollout is still a rollout, and a rollout
// may scale and apply fields in place too.
const (
	// None: the deployment is where its spec wants it.
	None Action = "None"
	// InPlace: fields that apply without replacing machines (nodeTemplate, machine
	// configuration, class kind) reach the machines and their nodes (Decision.Fields).
	InPlace Action = "InPlace"
	// Scale: machines are added or removed, none replaced.
	Scale Action = "Scale"
	// Rollout: machines of old templates are replaced (Decision.MachinesReplaced).
	Rollout Action = "Rollout"
	// Blocked: the deployment cannot go on now (Decision.BlockedBy).
	Blocked Action = "Blocked"
)

// BlockReason names what holds a deployment back.
type BlockReason string

// What may block a deployment.
const (
	// BlockedInvalidSpec: the spec cannot be acted on (the message names the field).
	BlockedInvalidSpec BlockReason = "InvalidSpec"
	// BlockedPaused: spec.paused holds the rollout (scaling goes on).
	BlockedPaused BlockReason = "Paused"
	// BlockedNoTargetCluster: an InPlaceUpdate needs the target cluster's nodes.
	BlockedNoTargetCluster BlockReason = "NoTargetCluster"
	// BlockedBudgetExhausted: surge and unavailability are used up until machines in flight
	// become available.
	BlockedBudgetExhausted BlockReason = "BudgetExhausted"
	// BlockedWaitingForApproval: a Manual in-place update waits for nodes to be labelled
	// selected-for-update.
	BlockedWaitingForApproval BlockReason = "WaitingForApproval"
)

// Block is one thing that holds a deployment back, in words a person understands.
type Block struct {
	Reason  BlockReason `json:"reason"`
	Message string      `json:"message"`
}

// FieldChange is one field of the deployment's template that applies in place, and what it
// reaches: "nodes" (the node template's labels, annotations and taints, synced onto the nodes)
// or "machines" (machine configuration, class kind).
type FieldChange struct {
	Path    string `json:"path"`
	Reaches string `json:"reaches"`
}

// Decision is what Decide decided: a summary for people and plans, and the step to take now.
type Decision struct {
	Action   Action                                 `json:"action"`
	Strategy v1alpha1.MachineDeploymentStrategyType `json:"strategy"`
	// CurrentSet names the MachineSet of the deployment's template ("" while there is none).
	CurrentSet string `json:"currentSet,omitempty"`
	// Fields are the in-place fields the current MachineSet does not carry yet.
	Fields []FieldChange `json:"fields,omitempty"`
	// Nodes are the nodes the node-template fields reach: those of the current set's machines.
	Nodes []string `json:"nodes,omitempty"`
	// MachinesReplaced counts the machines of old templates still to be replaced (updated in
	// place, with InPlaceUpdate), terminating ones not included.
	MachinesReplaced int32 `json:"machinesReplaced"`
	// MaxSurge and MaxUnavailable are the budget the decision worked with, in machines:
	// RollingUpdate's and InPlaceUpdate's resolved against the replicas (maxUnavailable at most
	// replicas), or Input.Budget's; 0 and 0 for Recreate, as MCM's MaxSurge and MaxUnavailable
	// (it takes every old machine down before creating new ones).
	MaxSurge       int32  `json:"maxSurge"`
	MaxUnavailable int32  `json:"maxUnavailable"`
	BudgetFrom     string `json:"budgetFrom"`
	// BlockedBy lists what holds the deployment back; the step still does what it can (a
	// paused deployment scales).
	BlockedBy []Block `json:"blockedBy,omitempty"`
	// RecheckAt is when a pool gate's time passes (a health gate, a soak): decide again then.
	RecheckAt *time.Time `json:"recheckAt,omitempty"`
	Step      Step       `json:"step"`
}

// Blocked reports whether a reason blocks the decision.
func (d Decision) Blocked(r BlockReason) bool {
	for _, b := range d.BlockedBy {
		if b.Reason == r {
			return true
		}
	}
	return false
}

// Step is what to do now, in order. An executor stops at the first operation that fails; the
// next decision, on fresh data, finishes the step. MarkNode operations come last and stand
// alone: an executor applies each it can.
type Step struct {
	Ops []Op `json:"ops"`
	// AwaitMarks: deletion marks are not visible yet, so the step stops after them; decide again
	// once the marks' watch events arrive.
	AwaitMarks bool `json:"awaitMarks,omitempty"`
	// NodesClean: once the step's node marks are applied, the deployment's nodes need no other
	// pass until its next rollout (Input.NodesClean).
	NodesClean bool `json:"-"`
}

// MarshalJSON writes each operation with its kind under "op".
func (s Step) MarshalJSON() ([]byte, error) {
	ops := make([]json.RawMessage, 0, len(s.Ops))
	for _, op := range s.Ops {
		b, err := json.Marshal(op)
		if err != nil {
			return nil, err
		}
		kind, _ := json.Marshal(op.Kind())
		if bytes.Equal(b, []byte("{}")) {
			b = []byte(fmt.Sprintf(`{"op":%s}`, kind))
		} else {
			b = append([]byte(fmt.Sprintf(`{"op":%s,`, kind)), b[1:]...)
		}
		ops = append(ops, b)
	}
	type step struct {
		Ops        []json.RawMessage `json:"ops"`
		AwaitMarks bool              `json:"awaitMarks,omitempty"`
	}
	return json.Marshal(step{Ops: ops, AwaitMarks: s.AwaitMarks})
}
