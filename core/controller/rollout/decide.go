package rollout

import (
	"fmt"
	"sort"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// Decide decides what the deployment does now. It is pure: it reads the input, never modifies
// it, and reads no clock (Input.Now) and no client.
func Decide(in Input) Decision {
	d := in.Deployment
	dec := Decision{Strategy: strategyOf(d)}
	if _, err := Validate(d); err != nil {
		dec.Action = Blocked
		dec.BudgetFrom = FromDeployment
		dec.BlockedBy = []Block{{Reason: BlockedInvalidSpec, Message: err.Error()}}
		return dec
	}
	p := newPlanner(in)
	dec.MaxSurge, dec.MaxUnavailable, dec.BudgetFrom = p.lim.surge, p.lim.unavailable, p.lim.from
	before := summarize(in)
	dec.Fields, dec.Nodes, dec.MachinesReplaced = before.fields, before.nodes, before.replaced
	if before.current != nil {
		dec.CurrentSet = before.current.Name
	}

	if IsInPlaceUpdate(d) && !in.TargetCluster {
		dec.Action = Blocked
		dec.BlockedBy = []Block{{Reason: BlockedNoTargetCluster, Message: errInPlaceNoTarget}}
		dec.Step.NodesClean = in.NodesClean
		return dec
	}
	visible := (marks{p}).deletion()
	visible = (marks{p}).approvals(before.current) && visible
	if !visible {
		dec.Step = Step{Ops: p.ops, AwaitMarks: true, NodesClean: in.NodesClean}
		dec.Action = before.action(p)
		return dec
	}
	scaling := p.isScalingEvent()
	p.plan()
	if !scaling {
		(marks{p}).stale()
	}
	clean := marks{p}.nodes()
	dec.Step = Step{Ops: p.ops, NodesClean: clean}
	if p.newMS != nil {
		dec.CurrentSet = p.newMS.Name
	}
	dec.BlockedBy = before.blocks(p)
	if gb := p.pool().poolBlocks(before); len(gb) > 0 {
		dec.BlockedBy = gb
	}
	if !p.recheck.IsZero() {
		dec.RecheckAt = &p.recheck
	}
	dec.Action = before.action(p)
	if len(dec.BlockedBy) > 0 {
		dec.Action = Blocked
	}
	return dec
}

// errInPlaceNoTarget: an in-place update needs the nodes.
const errInPlaceNoTarget = "spec.strategy.type InPlaceUpdate needs the target cluster's nodes, and this controller runs without a target cluster (--target-kubeconfig=none): use RollingUpdate or Recreate, or run with a target cluster"

// plan plans the step of the deployment's strategy; a pause or a change of replicas only
// scales.
func (p *planner) plan() {
	d := p.d
	switch {
	case d.Spec.Paused, p.isScalingEvent():
		scaling{p}.sync()
	case d.Spec.Strategy.Type == v1alpha1.RecreateMachineDeploymentStrategyType:
		replacing{p}.recreate()
	case IsInPlaceUpdate(d):
		inPlace{p}.rollout()
	default:
		replacing{p}.rolling()
	}
}

// summary is what the input says before the step: what is pending.
type summary struct {
	current  *v1alpha1.MachineSet // the current template's set, nil when there is none yet
	fields   []FieldChange
	nodes    []string
	replaced int32
	// oldLeft: an old set still has replicas or machines (terminating ones too).
	oldLeft bool
}

// summarize reads what is pending: the in-place fields the current set lacks (and the nodes
// they reach), and the machines of old templates still to be replaced.
func summarize(in Input) summary {
	d := in.Deployment
	sets := append([]*v1alpha1.MachineSet{}, in.Sets...)
	sortByCreation(sets)
	var s summary
	for _, ms := range sets {
		if s.current == nil && ms.DeletionTimestamp == nil && TemplateMatches(d, ms) {
			s.current = ms
			continue
		}
		live := int32(0)
		for _, m := range in.Machines[ms.UID] {
			if m.DeletionTimestamp == nil {
				live++
			}
		}
		s.replaced += max(ms.Spec.Replicas, live)
		s.oldLeft = s.oldLeft || ms.Spec.Replicas > 0 || len(in.Machines[ms.UID]) > 0
	}
	if s.current == nil {
		return s
	}
	s.fields = inPlaceFields(d, s.current)
	for _, f := range s.fields {
		if f.Reaches != reachesNodes {
			continue
		}
		for _, m := range in.Machines[s.current.UID] {
			if n := m.Labels[v1alpha1.LabelNode]; n != "" && m.DeletionTimestamp == nil {
				s.nodes = append(s.nodes, n)
			}
		}
		sort.Strings(s.nodes)
		break
	}
	return s
}

// rolloutPending: machines of old templates are left, or the deployment has no set for its
// template and wants machines.
func (s summary) rolloutPending(d *v1alpha1.MachineDeployment) bool {
	return s.oldLeft || (s.current == nil && d.Spec.Replicas > 0)
}

// action names what the step does, the rollout before scaling before in-place fields.
func (s summary) action(p *planner) Action {
	d := p.d
	sized := false
	for _, op := range p.ops {
		switch op := op.(type) {
		case ScaleSet:
			sized = sized || op.From != op.To
		case CreateSet:
			sized = sized || op.Replicas > 0
		}
	}
	switch {
	case s.oldLeft:
		return Rollout
	case sized || p.isScalingEvent() || (s.current == nil && d.Spec.Replicas > 0) ||
		(s.current != nil && s.current.Spec.Replicas != d.Spec.Replicas):
		return Scale
	case len(s.fields) > 0:
		return InPlace
	}
	return None
}

// blocks lists what holds the deployment back after the step was planned.
func (s summary) blocks(p *planner) []Block {
	d := p.d
	if !s.rolloutPending(d) {
		return nil
	}
	if d.Spec.Paused {
		return []Block{{Reason: BlockedPaused, Message: "spec.paused is true: the rollout of the deployment's template waits until spec.paused is false (scaling goes on)"}}
	}
	if p.progress || p.newMS == nil {
		return nil
	}
	var old []*v1alpha1.MachineSet
	for _, ms := range p.sets {
		if ms != p.newMS {
			old = append(old, ms)
		}
	}
	if replicaSum(old) == 0 {
		return nil // old machines are going; nothing waits for a budget
	}
	switch {
	case p.pool().manualInPlace():
		if (inPlace{p}).selectedCount(old) == 0 {
			return []Block{{Reason: BlockedWaitingForApproval, Message: fmt.Sprintf(
				"orchestrationType Manual: label the nodes to update %s=true; %d machines of old machine sets wait", v1alpha1.LabelNodeSelectedForUpdate, replicaSum(old))}}
		}
	case IsRollingUpdate(d), IsInPlaceUpdate(d):
		return []Block{{Reason: BlockedBudgetExhausted, Message: budgetMessage(p)}}
	}
	return nil
}

// budgetMessage says how the budget is used.
func budgetMessage(p *planner) string {
	d := p.d
	var machines int32
	for _, ms := range p.sets {
		machines += p.machineCount(ms)
	}
	available := availableSum(p.sets)
	return fmt.Sprintf("maxSurge %d and maxUnavailable %d (from %s) are in use: %d machines of at most %d (replicas %d + maxSurge %d), %d available of at least %d (replicas %d - maxUnavailable %d); the rollout goes on as new machines become available and old ones go",
		p.lim.surge, p.lim.unavailable, p.lim.from, machines, d.Spec.Replicas+p.lim.surge, d.Spec.Replicas, p.lim.surge,
		available, d.Spec.Replicas-p.lim.unavailable, d.Spec.Replicas, p.lim.unavailable)
}
