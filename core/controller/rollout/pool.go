package rollout

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	machinistv1alpha1 "github.com/machinist-io/machinist/core/apis/machinist/v1alpha1"
)

// PoolGates are what a pool-wide policy (machinist.io PoolPolicy) puts on a deployment's
// rollout besides its share of the pool's budget (Input.Budget). Each gate stops the rollout
// from starting new replacements; none undoes what is in flight, except Halted, which gives up
// the new machines that are not available.
type PoolGates struct {
	// From names the policy, for messages: "PoolPolicy ns/name".
	From string `json:"from"`
	// Paused: no new machine of the rollout is started; what is in flight finishes.
	Paused bool `json:"paused,omitempty"`
	// WaitForTurn, when set, says whose turn it is (a Sequential pool rolls one deployment at a
	// time): this deployment starts nothing new.
	WaitForTurn string `json:"waitForTurn,omitempty"`
	// Halted, when set, names the failures that stopped the pool's rollout: the new set keeps
	// only its available machines and the newest old set grows back to cover the replicas.
	Halted string `json:"halted,omitempty"`
	// ManualApproval: an outdated machine is replaced only once its node carries
	// node.machine.sapcloud.io/selected-for-update (a machine without a node may always go).
	ManualApproval bool `json:"manualApproval,omitempty"`
	// ReadySeconds: a new machine counts as available for decisions only once it has been
	// Running and Ready that long, so the budget it uses is freed no earlier.
	ReadySeconds int32 `json:"readySeconds,omitempty"`
	// SoakSeconds: the next step starts only once every machine of the new set has been Running
	// and Ready that long.
	SoakSeconds int32 `json:"soakSeconds,omitempty"`
	// CordonUndrainable: a terminating machine whose node was left cordoned because it could not
	// be drained (machinist.io/undrainable) counts against no budget.
	CordonUndrainable bool `json:"cordonUndrainable,omitempty"`
}

// The pool's gates as reasons a deployment is held back.
const (
	// BlockedWaitingForTurn: a Sequential pool rolls another deployment out first.
	BlockedWaitingForTurn BlockReason = "WaitingForTurn"
	// BlockedHealthGate: a new machine has not been Ready for readySeconds yet.
	BlockedHealthGate BlockReason = "HealthGate"
	// BlockedSoaking: the last step's new machines soak before the next step.
	BlockedSoaking BlockReason = "Soaking"
	// BlockedHalted: the pool's rollout stopped after failures of its new machines.
	BlockedHalted BlockReason = "Halted"
)

// gates returns the input's pool gates (none without a pool).
func (p *planner) gates() PoolGates {
	if p.in.Pool == nil {
		return PoolGates{}
	}
	return *p.in.Pool
}

// ReadySince is when a machine became Running with a Ready node (the later of the two), and
// whether it is both now. A machine without a copy of its node's Ready condition (no target
// cluster) is Ready since it became Running.
func ReadySince(m *v1alpha1.Machine) (time.Time, bool) {
	if m.DeletionTimestamp != nil || m.Status.CurrentStatus.Phase != v1alpha1.MachineRunning {
		return time.Time{}, false
	}
	since := m.Status.CurrentStatus.LastUpdateTime.Time
	for _, c := range m.Status.Conditions {
		if c.Type != corev1.NodeReady {
			continue
		}
		if c.Status != corev1.ConditionTrue {
			return time.Time{}, false
		}
		if c.LastTransitionTime.After(since) {
			since = c.LastTransitionTime.Time
		}
	}
	return since, true
}

// recheckAt asks for another decision at t (the earliest asked for wins).
func (p *planner) recheckAt(t time.Time) {
	if p.recheck.IsZero() || t.Before(p.recheck) {
		p.recheck = t
	}
}

// hold stops new replacements for a gate: the budget is 0 and 0, so the new set grows only to
// fill the replicas and old sets shrink only by their surplus of available machines. The sets'
// max-replicas annotation keeps the share (limits.annotated), so a gate writes no set.
func (p *planner) hold(b Block) {
	p.lim.surge, p.lim.unavailable = 0, 0
	p.gateBlocks = append(p.gateBlocks, b)
}

// applyGates applies the pool's gates before a step is planned; it reports whether the rollout
// is halted (the caller then halts instead of rolling).
func (p *planner) applyGates() (halted bool) {
	g := p.gates()
	newMS, old := p.split()
	if p.in.Pool == nil || !p.oldLeft(old) {
		return false
	}
	switch {
	case g.Halted != "":
		p.hold(Block{Reason: BlockedHalted, Message: g.Halted})
		return true
	case g.Paused:
		p.hold(Block{Reason: BlockedPaused, Message: g.From + ": spec.rollout.paused is true: no new machine of the rollout starts until it is false (what is in flight finishes)"})
	case g.WaitForTurn != "":
		p.hold(Block{Reason: BlockedWaitingForTurn, Message: g.WaitForTurn})
	}
	if g.SoakSeconds > 0 && newMS != nil {
		if why := p.soaking(newMS, time.Duration(g.SoakSeconds)*time.Second); why != "" {
			p.hold(Block{Reason: BlockedSoaking, Message: g.From + ": spec.rollout.healthGate.soakSeconds " + fmt.Sprint(g.SoakSeconds) + ": " + why})
		}
	}
	return false
}

// split returns the set of the deployment's template (nil when there is none yet) and the others,
// without planning anything.
func (p *planner) split() (*v1alpha1.MachineSet, []*v1alpha1.MachineSet) {
	sortByCreation(p.sets)
	var cur *v1alpha1.MachineSet
	var old []*v1alpha1.MachineSet
	for _, ms := range p.sets {
		if cur == nil && ms.DeletionTimestamp == nil && TemplateMatches(p.d, ms) {
			cur = ms
			continue
		}
		old = append(old, ms)
	}
	return cur, old
}

// oldLeft reports whether old sets still have replicas or machines.
func (p *planner) oldLeft(old []*v1alpha1.MachineSet) bool {
	for _, ms := range old {
		if ms.Spec.Replicas > 0 || len(p.machinesOf(ms)) > 0 {
			return true
		}
	}
	return false
}

// soaking says why the next step waits, or "": a machine of the new set is not Ready yet (the
// step is in flight), or one has been Ready for less than soak.
func (p *planner) soaking(newMS *v1alpha1.MachineSet, soak time.Duration) string {
	var until time.Time
	var young []string
	for _, m := range p.machinesOf(newMS) {
		if m.DeletionTimestamp != nil {
			continue
		}
		since, ok := ReadySince(m)
		if !ok {
			return "new machine " + m.Name + " is not Running and Ready yet"
		}
		if t := since.Add(soak); t.After(p.in.Now) {
			young = append(young, m.Name)
			if t.After(until) {
				until = t
			}
		}
	}
	if until.IsZero() {
		return ""
	}
	p.recheckAt(until)
	sort.Strings(young)
	return fmt.Sprintf("new machines %s soak until %s before the next step", strings.Join(young, ", "), until.UTC().Format(time.RFC3339))
}

// availableOf counts a set's available machines for decisions: for the new set under a health
// gate only those Ready for readySeconds (asking for a decision when the next one will be).
func (p *planner) availableOf(ms *v1alpha1.MachineSet) int32 {
	a := availableForDecisions(ms)
	r := p.gates().ReadySeconds
	if ms == nil || ms != p.newMS || r <= 0 {
		return a
	}
	gate := time.Duration(r) * time.Second
	var ready int32
	for _, m := range p.machinesOf(ms) {
		since, ok := ReadySince(m)
		if !ok {
			continue
		}
		if t := since.Add(gate); t.After(p.in.Now) {
			p.recheckAt(t)
			p.young = append(p.young, m.Name)
			continue
		}
		ready++
	}
	return min(a, ready)
}

func (p *planner) availableSum(sets []*v1alpha1.MachineSet) int32 {
	var n int32
	for _, ms := range sets {
		n += p.availableOf(ms)
	}
	return n
}

// parked reports whether a machine is a terminating one whose node was left cordoned, which
// counts against no budget under CordonUndrainable.
func (p *planner) parked(m *v1alpha1.Machine) bool {
	if !p.gates().CordonUndrainable || m.DeletionTimestamp == nil {
		return false
	}
	_, ok := m.Annotations[machinistv1alpha1.AnnotationUndrainable]
	return ok
}

// halt gives up the rollout's new machines that are not available and grows the newest old set
// back to cover the replicas: its machines worked before the rollout.
func (p *planner) halt(newMS *v1alpha1.MachineSet, old []*v1alpha1.MachineSet) {
	keep := min(newMS.Spec.Replicas, availableForDecisions(newMS))
	p.scaleSet(newMS, keep)
	missing := p.d.Spec.Replicas - keep - replicaSum(old)
	if missing <= 0 {
		return
	}
	var back *v1alpha1.MachineSet
	for _, ms := range old { // oldest first
		if ms.DeletionTimestamp == nil {
			back = ms
		}
	}
	if back != nil {
		p.scaleSet(back, back.Spec.Replicas+missing)
	}
}

// approved reports whether an old machine may be replaced under Manual approval: its node
// carries selected-for-update; a machine without a node (it never joined) may always go.
func (p *planner) approved(m *v1alpha1.Machine) bool {
	node := p.node(m)
	if node == nil {
		return true
	}
	_, ok := node.Labels[v1alpha1.LabelNodeSelectedForUpdate]
	return ok
}

// manualApproval reports whether old machines wait for approval (RollingUpdate and Recreate;
// an InPlaceUpdate deployment takes it as Manual orchestration).
func (p *planner) manualApproval() bool {
	return p.gates().ManualApproval && !IsInPlaceUpdate(p.d)
}

// manualInPlace reports whether the nodes of an in-place update are selected by people: the
// deployment's orchestration says Manual, or its pool's approval does.
func (p *planner) manualInPlace() bool {
	return isManualInPlace(p.d) || (IsInPlaceUpdate(p.d) && p.gates().ManualApproval)
}

// floor is how many replicas an old set keeps under Manual approval: its live machines not
// approved; 0 otherwise.
func (p *planner) floor(ms *v1alpha1.MachineSet) int32 {
	if !p.manualApproval() || ms == p.newMS {
		return 0
	}
	var n int32
	for _, m := range p.machinesOf(ms) {
		if m.DeletionTimestamp == nil && !p.approved(m) {
			n++
		}
	}
	return n
}

// approvalCap is how many replicas the new set may have under Manual approval: the machines
// the old sets keep stay, so the new set takes only the rest of the replicas.
func (p *planner) approvalCap(old []*v1alpha1.MachineSet) int32 {
	var keep int32
	for _, ms := range old {
		keep += p.floor(ms)
	}
	return max(p.d.Spec.Replicas-keep, 0)
}

// approvalBlock says what waits for approval when nothing approved is left to replace.
func (p *planner) approvalBlock(old []*v1alpha1.MachineSet) *Block {
	if !p.manualApproval() {
		return nil
	}
	var waiting, approved int
	for _, ms := range old {
		for _, m := range p.machinesOf(ms) {
			if m.DeletionTimestamp != nil {
				continue
			}
			if p.approved(m) {
				approved++
			} else {
				waiting++
			}
		}
	}
	if waiting == 0 || approved > 0 {
		return nil
	}
	return &Block{Reason: BlockedWaitingForApproval, Message: fmt.Sprintf(
		"%s: spec.rollout.approval Manual: %d outdated machines wait: label the nodes to replace %s=true",
		p.gates().From, waiting, v1alpha1.LabelNodeSelectedForUpdate)}
}

// poolBlocks lists what the pool's gates hold back once the step is planned: a pause, a turn, a
// halt or a soak always; approval and the health gate when they are why nothing moved.
func (p *planner) poolBlocks(s summary) []Block {
	if p.in.Pool == nil || !s.rolloutPending(p.d) {
		return nil
	}
	out := p.gateBlocks
	if len(out) > 0 || p.progress {
		return out
	}
	var old []*v1alpha1.MachineSet
	for _, ms := range p.sets {
		if ms != p.newMS {
			old = append(old, ms)
		}
	}
	if b := p.approvalBlock(old); b != nil {
		out = append(out, *b)
	}
	if len(p.young) > 0 {
		young := slices.Compact(slices.Sorted(slices.Values(p.young)))
		out = append(out, Block{Reason: BlockedHealthGate, Message: fmt.Sprintf(
			"%s: spec.rollout.healthGate.readySeconds %d: new machines %s have not been Ready that long yet; the budget they use is freed at %s",
			p.gates().From, p.gates().ReadySeconds, strings.Join(young, ", "), p.recheck.UTC().Format(time.RFC3339))})
	}
	return out
}

// recreateApproval says what a Recreate deployment waits for under Manual approval: it takes
// every old machine down at once, so it starts once all of them are approved.
func (p *planner) recreateApproval(old []*v1alpha1.MachineSet) *Block {
	if !p.manualApproval() {
		return nil
	}
	var waiting, all int
	for _, ms := range old {
		for _, m := range p.machinesOf(ms) {
			if m.DeletionTimestamp == nil {
				all++
				if !p.approved(m) {
					waiting++
				}
			}
		}
	}
	if waiting == 0 {
		return nil
	}
	return &Block{Reason: BlockedWaitingForApproval, Message: fmt.Sprintf(
		"%s: spec.rollout.approval Manual: strategy Recreate replaces all %d outdated machines at once and %d of them wait: label their nodes %s=true",
		p.gates().From, all, waiting, v1alpha1.LabelNodeSelectedForUpdate)}
}

// Prioritize marks an approved old machine to go first when its set shrinks (priority 1 and
// machinist.io/approved-for-update), or takes the mark away when its node lost the approval.
type Prioritize struct {
	Machine  string `json:"machine"`
	Approved bool   `json:"approved"`
}

// Kind implements Op.
func (Prioritize) Kind() string { return "Prioritize" }

// Apply marks the machine, or unmarks it.
func (o Prioritize) Apply(m *v1alpha1.Machine) {
	if m.Annotations == nil {
		m.Annotations = map[string]string{}
	}
	if o.Approved {
		m.Annotations[v1alpha1.AnnotationMachinePriority] = v1alpha1.DeletionCandidateMachinePriority
		m.Annotations[machinistv1alpha1.AnnotationApprovedForUpdate] = "true"
		return
	}
	m.Annotations[v1alpha1.AnnotationMachinePriority] = v1alpha1.DefaultMachinePriority
	delete(m.Annotations, machinistv1alpha1.AnnotationApprovedForUpdate)
}

// approvals plans the marks of Manual approval on the old machines of a RollingUpdate or
// Recreate deployment; it reports whether every mark is visible (until then no set may shrink,
// or its MachineSet could delete a machine nobody approved).
func (p marks) approvals(current *v1alpha1.MachineSet) bool {
	if !p.manualApproval() {
		return true
	}
	visible := true
	for _, ms := range p.in.Sets {
		if current != nil && ms.UID == current.UID {
			continue
		}
		for _, m := range p.machinesOf(ms) {
			if m.DeletionTimestamp != nil {
				continue
			}
			want := p.approved(m)
			marked := m.Annotations[machinistv1alpha1.AnnotationApprovedForUpdate] == "true"
			prio := m.Annotations[v1alpha1.AnnotationMachinePriority] == v1alpha1.DeletionCandidateMachinePriority
			if want == (marked && prio) && (want || !marked) {
				continue
			}
			p.add(Prioritize{Machine: m.Name, Approved: want})
			visible = false
		}
	}
	return visible
}

// Usage is how much of a budget a deployment uses now: its machines above its replicas
// (terminating ones included, but not those parked as undrainable under CordonUndrainable) and
// its replicas that are not available (a new machine counts once the health gate let it).
func Usage(in Input) (surge, unavailable int32) {
	p := newPlanner(in)
	p.newMS, _ = p.split()
	var machines int32
	for _, ms := range p.sets {
		machines += p.machineCount(ms)
	}
	return max(machines-p.d.Spec.Replicas, 0), max(p.d.Spec.Replicas-p.availableSum(p.sets), 0)
}
