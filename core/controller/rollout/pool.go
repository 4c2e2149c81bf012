package rollout

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

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

// poolGate holds the planner's rules for a pool's gates and Manual approval (a type of its
// own keeps the planner's method set small: every step type embeds the planner).
type poolGate struct{ p *planner }

// pool returns the planner's pool rules.
func (p *planner) pool() poolGate { return poolGate{p} }

// gates returns the input's pool gates (none without a pool).
func (g poolGate) gates() PoolGates { return ptr.Deref(g.p.in.Pool, PoolGates{}) }

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
func (g poolGate) recheckAt(t time.Time) {
	if g.p.recheck.IsZero() || t.Before(g.p.recheck) {
		g.p.recheck = t
	}
}

// hold stops new replacements for a gate: the budget is 0 and 0, so the new set grows only to
// fill the replicas and old sets shrink only by their surplus of available machines. The sets'
// max-replicas annotation keeps the share (limits.annotated), so a gate writes no set.
func (g poolGate) hold(b Block) {
	g.p.lim.surge, g.p.lim.unavailable = 0, 0
	g.p.gateBlocks = append(g.p.gateBlocks, b)
}

// applyGates applies the pool's gates before a step is planned; it reports whether the rollout
// is halted (the caller then halts instead of rolling).
func (g poolGate) applyGates() (halted bool) {
	gs := g.gates()
	newMS, old := g.split()
	if g.p.in.Pool == nil || !g.oldLeft(old) {
		return false
	}
	switch {
	case gs.Halted != "":
		g.hold(Block{Reason: BlockedHalted, Message: gs.Halted})
		return true
	case gs.Paused:
		g.hold(Block{Reason: BlockedPaused, Message: gs.From + ": spec.rollout.paused is true: no new machine of the rollout starts until it is false (what is in flight finishes)"})
	case gs.WaitForTurn != "":
		g.hold(Block{Reason: BlockedWaitingForTurn, Message: gs.WaitForTurn})
	}
	if gs.SoakSeconds > 0 && newMS != nil {
		if why := g.soaking(newMS, time.Duration(gs.SoakSeconds)*time.Second); why != "" {
			g.hold(Block{Reason: BlockedSoaking, Message: gs.From + ": spec.rollout.healthGate.soakSeconds " + fmt.Sprint(gs.SoakSeconds) + ": " + why})
		}
	}
	return false
}

// split returns the set of the deployment's template (nil when there is none yet) and the others,
// without planning anything.
func (g poolGate) split() (*v1alpha1.MachineSet, []*v1alpha1.MachineSet) {
	sortByCreation(g.p.sets)
	var cur *v1alpha1.MachineSet
	var old []*v1alpha1.MachineSet
	for _, ms := range g.p.sets {
		if cur == nil && ms.DeletionTimestamp == nil && TemplateMatches(g.p.d, ms) {
			cur = ms
			continue
		}
		old = append(old, ms)
	}
	return cur, old
}

// oldLeft reports whether old sets still have replicas or machines.
func (g poolGate) oldLeft(old []*v1alpha1.MachineSet) bool {
	for _, ms := range old {
		if ms.Spec.Replicas > 0 || len(g.p.machinesOf(ms)) > 0 {
			return true
		}
	}
	return false
}

// soaking says why the next step waits, or "": a machine of the new set is not Ready yet (the
// step is in flight), or one has been Ready for less than soak.
func (g poolGate) soaking(newMS *v1alpha1.MachineSet, soak time.Duration) string {
	var until time.Time
	var young []string
	for _, m := range g.p.machinesOf(newMS) {
		if m.DeletionTimestamp != nil {
			continue
		}
		since, ok := ReadySince(m)
		if !ok {
			return "new machine " + m.Name + " is not Running and Ready yet"
		}
		if t := since.Add(soak); t.After(g.p.in.Now) {
			young = append(young, m.Name)
			if t.After(until) {
				until = t
			}
		}
	}
	if until.IsZero() {
		return ""
	}
	g.recheckAt(until)
	sort.Strings(young)
	return fmt.Sprintf("new machines %s soak until %s before the next step", strings.Join(young, ", "), until.UTC().Format(time.RFC3339))
}

// availableOf counts a set's available machines for decisions: for the new set under a health
// gate only those Ready for readySeconds (asking for a decision when the next one will be).
func (g poolGate) availableOf(ms *v1alpha1.MachineSet) int32 {
	a := availableForDecisions(ms)
	r := g.gates().ReadySeconds
	if ms == nil || ms != g.p.newMS || r <= 0 {
		return a
	}
	gate := time.Duration(r) * time.Second
	var ready int32
	for _, m := range g.p.machinesOf(ms) {
		since, ok := ReadySince(m)
		if !ok {
			continue
		}
		if t := since.Add(gate); t.After(g.p.in.Now) {
			g.recheckAt(t)
			g.p.young = append(g.p.young, m.Name)
			continue
		}
		ready++
	}
	return min(a, ready)
}

func (g poolGate) availableSum(sets []*v1alpha1.MachineSet) int32 {
	var n int32
	for _, ms := range sets {
		n += g.availableOf(ms)
	}
	return n
}

// parked reports whether a machine is a terminating one whose node was left cordoned, which
// counts against no budget under CordonUndrainable.
func (g poolGate) parked(m *v1alpha1.Machine) bool {
	if !g.gates().CordonUndrainable || m.DeletionTimestamp == nil {
		return false
	}
	_, ok := m.Annotations[machinistv1alpha1.AnnotationUndrainable]
	return ok
}

// halt gives up the rollout's new machines that are not available and grows the newest old set
// back to cover the replicas: its machines worked before the rollout.
func (g poolGate) halt(newMS *v1alpha1.MachineSet, old []*v1alpha1.MachineSet) {
	keep := min(newMS.Spec.Replicas, availableForDecisions(newMS))
	g.p.scaleSet(newMS, keep)
	missing := g.p.d.Spec.Replicas - keep - replicaSum(old)
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
		g.p.scaleSet(back, back.Spec.Replicas+missing)
	}
}

// approved reports whether an old machine may be replaced under Manual approval: its node
// carries selected-for-update; a machine without a node (it never joined) may always go.
func (g poolGate) approved(m *v1alpha1.Machine) bool {
	node := g.p.node(m)
	if node == nil {
		return true
	}
	_, ok := node.Labels[v1alpha1.LabelNodeSelectedForUpdate]
	return ok
}

// manualApproval reports whether old machines wait for approval (RollingUpdate and Recreate;
// an InPlaceUpdate deployment takes it as Manual orchestration).
func (g poolGate) manualApproval() bool {
	return g.gates().ManualApproval && !IsInPlaceUpdate(g.p.d)
}

// manualInPlace reports whether the nodes of an in-place update are selected by people: the
// deployment's orchestration says Manual, or its pool's approval does.
func (g poolGate) manualInPlace() bool {
	return isManualInPlace(g.p.d) || (IsInPlaceUpdate(g.p.d) && g.gates().ManualApproval)
}

// floor is how many replicas an old set keeps under Manual approval: its live machines not
// approved; 0 otherwise.
func (g poolGate) floor(ms *v1alpha1.MachineSet) int32 {
	if !g.manualApproval() || ms == g.p.newMS {
		return 0
	}
	var n int32
	for _, m := range g.p.machinesOf(ms) {
		if m.DeletionTimestamp == nil && !g.approved(m) {
			n++
		}
	}
	return n
}

// approvalCap is how many replicas the new set may have under Manual approval: the machines
// the old sets keep stay, so the new set takes only the rest of the replicas.
func (g poolGate) approvalCap(old []*v1alpha1.MachineSet) int32 {
	var keep int32
	for _, ms := range old {
		keep += g.floor(ms)
	}
	return max(g.p.d.Spec.Replicas-keep, 0)
}

// approvalBlock says what waits for approval when nothing approved is left to replace.
func (g poolGate) approvalBlock(old []*v1alpha1.MachineSet) *Block {
	if !g.manualApproval() {
		return nil
	}
	var waiting, approved int
	for _, ms := range old {
		for _, m := range g.p.machinesOf(ms) {
			if m.DeletionTimestamp != nil {
				continue
			}
			if g.approved(m) {
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
		g.gates().From, waiting, v1alpha1.LabelNodeSelectedForUpdate)}
}

// poolBlocks lists what the pool's gates hold back once the step is planned: a pause, a turn, a
// halt or a soak always; approval and the health gate when they are why nothing moved.
func (g poolGate) poolBlocks(s summary) []Block {
	if g.p.in.Pool == nil || !s.rolloutPending(g.p.d) {
		return nil
	}
	out := g.p.gateBlocks
	if len(out) > 0 || g.p.progress {
		return out
	}
	var old []*v1alpha1.MachineSet
	for _, ms := range g.p.sets {
		if ms != g.p.newMS {
			old = append(old, ms)
		}
	}
	if b := g.approvalBlock(old); b != nil {
		out = append(out, *b)
	}
	if len(g.p.young) > 0 {
		young := slices.Compact(slices.Sorted(slices.Values(g.p.young)))
		out = append(out, Block{Reason: BlockedHealthGate, Message: fmt.Sprintf(
			"%s: spec.rollout.healthGate.readySeconds %d: new machines %s have not been Ready that long yet; the budget they use is freed at %s",
			g.gates().From, g.gates().ReadySeconds, strings.Join(young, ", "), g.p.recheck.UTC().Format(time.RFC3339))})
	}
	return out
}

// recreateApproval says what a Recreate deployment waits for under Manual approval: it takes
// every old machine down at once, so it starts once all of them are approved.
func (g poolGate) recreateApproval(old []*v1alpha1.MachineSet) *Block {
	if !g.manualApproval() {
		return nil
	}
	var waiting, all int
	for _, ms := range old {
		for _, m := range g.p.machinesOf(ms) {
			if m.DeletionTimestamp == nil {
				all++
				if !g.approved(m) {
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
		g.gates().From, all, waiting, v1alpha1.LabelNodeSelectedForUpdate)}
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
	if !p.pool().manualApproval() {
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
			want := p.pool().approved(m)
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
	p.newMS, _ = p.pool().split()
	var machines int32
	for _, ms := range p.sets {
		machines += p.machineCount(ms)
	}
	return max(machines-p.d.Spec.Replicas, 0), max(p.d.Spec.Replicas-p.pool().availableSum(p.sets), 0)
}
