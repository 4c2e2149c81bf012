// Package rollout decides what a change of a MachineDeployment does, as one pure function:
// Decide reads the world (the deployment, its MachineSets, their machines and, where the
// decision needs them, their nodes; the time is an input too) and returns a Decision: the
// action (None, Scale, InPlace, Rollout or Blocked, and by what), the fields applied in place
// and the nodes they reach, the machines a rollout still replaces, the budget it works with,
// and the step to take now as an ordered list of operations. The MachineDeployment controller
// executes exactly that step; `machinist plan` previews a change with the same function, and
// Project plays a rollout forward step by step on a simulated world.
//
// The rules are MCM's (docs/compatibility/mcm-controllers.md#machinedeployment-controller), a
// port of Kubernetes' Deployment controller: RollingUpdate (maxSurge rounded up, maxUnavailable
// rounded down, both 0 → 1 unavailable), Recreate and InPlaceUpdate (machines move to the new
// MachineSet without new VMs, see inplace.go), pause, revision history, proportional scaling
// during a rollout, and the Cluster Autoscaler contract (machines named in the trigger-deletion
// annotation are marked to be deleted first, and the marks must be visible before any set is
// scaled down).
//
// Surge is counted in machines, not in MachineSet replicas: a machine that is still terminating
// still has a VM, so a new machine is created only when the deployment's machines, terminating
// ones included, stay within replicas + maxSurge.
package rollout

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// Input is the world one decision is made from. Decide reads it and never modifies it: the
// objects may be an informer cache's own.
type Input struct {
	// Deployment is the MachineDeployment to decide for.
	Deployment *v1alpha1.MachineDeployment
	// Sets are the MachineSets the deployment controls (terminating ones included).
	Sets []*v1alpha1.MachineSet
	// Machines are the machines of each set, terminating ones included, by set UID.
	Machines map[types.UID][]*v1alpha1.Machine
	// Nodes are the target cluster's nodes of the machines, by name. An InPlaceUpdate
	// deployment needs them; other decisions do not read them.
	Nodes map[string]*corev1.Node
	// TargetCluster says whether the controller reaches the target cluster's nodes: without it,
	// no node is marked and an InPlaceUpdate deployment is blocked.
	TargetCluster bool
	// Now is the time of the decision (the default time of a scaler's deletion mark, preserved
	// machines in the scale-down order).
	Now time.Time

	// Budget overrides the deployment's own maxSurge and maxUnavailable (a pool-wide policy's
	// share); nil means the deployment's own (DeploymentBudget).
	Budget *Budget
	// Pool holds the gates of a pool-wide policy governing the deployment (pool.go); nil: none.
	Pool *PoolGates
	// DefaultRevisionHistoryLimit applies when spec.revisionHistoryLimit is unset; nil keeps
	// every old MachineSet (MCM's behaviour for an unset limit).
	DefaultRevisionHistoryLimit *int32
	// NoScaleDownAnnotation leaves Cluster Autoscaler's scale-down-disabled annotation off the
	// nodes during a rollout (MCM: --autoscaler-scaledown-annotation-during-rollout=false).
	NoScaleDownAnnotation bool
	// NodesClean says the deployment's nodes had their clean-up pass since the last rollout:
	// outside a rollout they need no other, so the step marks no node.
	NodesClean bool
	// Triggers says, for each machine named in the trigger-deletion annotation that is not
	// among Machines, where it is (see TriggerLookups): the cache may lag a new machine.
	Triggers map[string]TriggerLookup
}

// TriggerLookup is where a machine named in the trigger-deletion annotation, but not among the
// deployment's machines, was found.
type TriggerLookup string

// Where a named machine may be.
const (
	// TriggerPending: it belongs to this deployment but the cache does not show it yet (or it
	// was not looked up): the entry stays and no set is scaled until its mark is visible.
	TriggerPending TriggerLookup = ""
	// TriggerGone: no such machine: the entry is dropped.
	TriggerGone TriggerLookup = "Gone"
	// TriggerNoMachineSet: the machine belongs to no MachineSet: the entry is dropped.
	TriggerNoMachineSet TriggerLookup = "NoMachineSet"
	// TriggerOtherDeployment: the machine belongs to another deployment: the entry is dropped.
	TriggerOtherDeployment TriggerLookup = "OtherDeployment"
)

// TriggerLookups lists the machines named in the deployment's trigger-deletion annotation that
// are not among the input's machines: the caller looks them up and fills Input.Triggers.
func TriggerLookups(in Input) []string {
	raw, ok := in.Deployment.Annotations[v1alpha1.AnnotationTriggerDeletionByMCM]
	if !ok {
		return nil
	}
	ours := map[string]bool{}
	for _, ms := range in.Machines {
		for _, m := range ms {
			ours[m.Name] = true
		}
	}
	var out []string
	for _, e := range parseTrigger(raw) {
		if !ours[e.machine] {
			out = append(out, e.machine)
		}
	}
	return out
}
