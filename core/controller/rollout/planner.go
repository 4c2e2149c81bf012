package rollout

import (
	"maps"
	"sort"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/machineset"
)

// planner plans one step on copies of the input's sets (and of the nodes it labels), so each
// planned operation sees the ones before it, as their writes would.
type planner struct {
	in    Input
	d     *v1alpha1.MachineDeployment // the input's: read only
	lim   limits
	sets  []*v1alpha1.MachineSet // copies, changed as operations are planned
	nodes map[string]*corev1.Node
	newMS *v1alpha1.MachineSet // the current template's set, once known
	ops   []Op
	// progress: the step moves the deployment (a size, a new set, a node selected or a machine
	// moved), not only its bookkeeping.
	progress bool
	// moved are the machines the step moves to another set: their old set does not delete them.
	moved map[string]bool
	// gateBlocks are what the pool's gates hold back in this step (pool.go); recheck is when a
	// gate's time passes and young the new machines the health gate does not count yet.
	gateBlocks []Block
	recheck    time.Time
	young      []string
}

func newPlanner(in Input) *planner {
	p := &planner{in: in, d: in.Deployment, lim: limitsOf(in.Deployment, in.Budget, in.Pool),
		nodes: map[string]*corev1.Node{}, moved: map[string]bool{}}
	p.sets = make([]*v1alpha1.MachineSet, len(in.Sets))
	for i, ms := range in.Sets {
		p.sets[i] = ms.DeepCopy()
	}
	return p
}

func (p *planner) add(op Op) { p.ops = append(p.ops, op) }

// machinesOf returns a set's machines, terminating ones included (the input's: read only).
func (p *planner) machinesOf(ms *v1alpha1.MachineSet) []*v1alpha1.Machine {
	return p.in.Machines[ms.UID]
}

// machineCount counts a set's machines for surge: its replicas or the machines it still has
// (terminating ones hold VMs too, but not those parked as undrainable), whichever is larger.
func (p *planner) machineCount(ms *v1alpha1.MachineSet) int32 {
	if ms == nil {
		return 0
	}
	var n int32
	for _, m := range p.machinesOf(ms) {
		if !p.pool().parked(m) {
			n++
		}
	}
	return max(ms.Spec.Replicas, n)
}

// node returns a machine's node as the step has left it; nil when the machine has none (yet)
// or it is not known.
func (p *planner) node(m *v1alpha1.Machine) *corev1.Node {
	name := m.Labels[v1alpha1.LabelNode]
	if name == "" {
		return nil
	}
	if n, ok := p.nodes[name]; ok {
		return n
	}
	return p.in.Nodes[name]
}

// writableNode returns the step's own copy of a node, made on the first write.
func (p *planner) writableNode(n *corev1.Node) *corev1.Node {
	if c, ok := p.nodes[n.Name]; ok {
		return c
	}
	c := n.DeepCopy()
	p.nodes[n.Name] = c
	return c
}

// scaleSet plans a set's replicas (and the deployment's replica annotations on it); it reports
// whether the size changes.
func (p *planner) scaleSet(ms *v1alpha1.MachineSet, replicas int32) bool {
	op := ScaleSet{Set: ms.Name, From: ms.Spec.Replicas, To: replicas,
		DesiredReplicas: p.d.Spec.Replicas, MaxReplicas: p.d.Spec.Replicas + p.lim.annotationSurge(p.d)}
	sizeChanged := ms.Spec.Replicas != replicas
	if replicas < ms.Spec.Replicas {
		op.Goes = p.goesFirst(ms, replicas)
	}
	if !op.Apply(ms) {
		return false
	}
	if sizeChanged {
		ms.Generation++ // as the API server does for a change of spec
		p.progress = true
	}
	p.add(op)
	return sizeChanged
}

// goesFirst names the machines a set's controller deletes first when it shrinks to replicas
// (machineset.SortForDeletion, terminating machines aside).
func (p *planner) goesFirst(ms *v1alpha1.MachineSet, replicas int32) []string {
	var live []*v1alpha1.Machine
	for _, m := range p.machinesOf(ms) {
		if m.DeletionTimestamp == nil && !p.moved[m.Name] {
			live = append(live, m)
		}
	}
	n := len(live) - int(replicas)
	if n <= 0 {
		return nil
	}
	if n < len(live) {
		machineset.SortForDeletion(live, p.in.Now)
	}
	out := make([]string, n)
	for i, m := range live[:n] {
		out[i] = m.Name
	}
	return out
}

// currentAndOld splits the sets into the current template's (planning its creation when create
// is set and there is none) and the old ones, and keeps the current one's revision, annotations
// and in-place fields in step with the deployment.
func (p *planner) currentAndOld(create bool) (*v1alpha1.MachineSet, []*v1alpha1.MachineSet) {
	sortByCreation(p.sets)
	var newMS *v1alpha1.MachineSet
	var old []*v1alpha1.MachineSet
	for _, ms := range p.sets {
		if newMS == nil && ms.DeletionTimestamp == nil && TemplateMatches(p.d, ms) {
			newMS = ms
			continue
		}
		old = append(old, ms)
	}
	rev := maxRevision(old) + 1
	p.newMS = newMS
	if newMS != nil {
		before := newMS.Spec.DeepCopy()
		op := SyncSet{Set: newMS.Name, Revision: rev, d: p.d}
		if op.Apply(newMS) {
			if !equality.Semantic.DeepEqual(*before, newMS.Spec) {
				newMS.Generation++
			}
			p.add(op)
		}
		return newMS, old
	}
	if !create {
		return nil, old
	}
	ms := p.createSet(old, rev)
	p.sets = append(p.sets, ms)
	p.newMS = ms
	return ms, old
}

// createSet plans the MachineSet of the current template, as MCM writes it.
func (p *planner) createSet(old []*v1alpha1.MachineSet, rev int64) *v1alpha1.MachineSet {
	d := p.d
	hash := TemplateHash(&d.Spec.Template, d.Status.CollisionCount)
	tmpl := setTemplate(d, hash)
	sel := d.Spec.Selector.DeepCopy()
	if sel.MatchLabels == nil {
		sel.MatchLabels = map[string]string{}
	}
	sel.MatchLabels[v1alpha1.LabelMachineTemplateHash] = hash
	ms := &v1alpha1.MachineSet{
		ObjectMeta: metav1.ObjectMeta{
			Name:      SetName(d, hash),
			Namespace: d.Namespace,
			Labels:    maps.Clone(tmpl.Labels),
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion:         v1alpha1.SchemeGroupVersion.String(),
				Kind:               "MachineDeployment",
				Name:               d.Name,
				UID:                d.UID,
				Controller:         ptr.To(true),
				BlockOwnerDeletion: ptr.To(true),
			}},
		},
		// As MCM writes it: no spec.machineClass (the template names the class).
		Spec: v1alpha1.MachineSetSpec{
			Selector:                     sel,
			Template:                     tmpl,
			MinReadySeconds:              d.Spec.MinReadySeconds,
			AutoPreserveFailedMachineMax: d.Spec.AutoPreserveFailedMachineMax,
		},
	}
	copyAnnotations(d, ms)
	setRevision(ms, rev)
	setReplicaAnnotations(ms, d.Spec.Replicas, d.Spec.Replicas+p.lim.annotationSurge(d))
	ms.Spec.Replicas = p.newSetReplicas(append(old, ms), nil)
	p.add(CreateSet{Set: ms.DeepCopy(), Name: ms.Name, Replicas: ms.Spec.Replicas, Revision: rev})
	p.progress = p.progress || ms.Spec.Replicas > 0
	return ms
}

// newSetReplicas is how many replicas the new set may have now. Rolling: as many as keep the
// deployment's machines within replicas + maxSurge. Recreate: all of them. InPlaceUpdate: see
// inPlaceNewSetReplicas.
func (p *planner) newSetReplicas(all []*v1alpha1.MachineSet, newMS *v1alpha1.MachineSet) int32 {
	d := p.d
	if IsInPlaceUpdate(d) {
		return p.inPlaceNewSetReplicas(all, newMS)
	}
	if !IsRollingUpdate(d) {
		return d.Spec.Replicas
	}
	n := p.withinSurge(all, newMS)
	if p.pool().manualApproval() {
		var old []*v1alpha1.MachineSet
		for _, ms := range all {
			if ms != newMS {
				old = append(old, ms)
			}
		}
		var cur int32
		if newMS != nil {
			cur = newMS.Spec.Replicas
		}
		n = min(n, max(cur, p.pool().approvalCap(old)))
	}
	return n
}

// inPlaceNewSetReplicas is the size of a new set of an in-place update (MCM's NewISNewReplicas):
// 0 with Manual orchestration (machines only come from old sets), else as many fresh machines as
// maxSurge allows on top of the machines there are.
func (p *planner) inPlaceNewSetReplicas(all []*v1alpha1.MachineSet, newMS *v1alpha1.MachineSet) int32 {
	if p.pool().manualInPlace() {
		if newMS == nil {
			return 0
		}
		return newMS.Spec.Replicas
	}
	return p.withinSurge(all, newMS)
}

// withinSurge grows the new set as far as the deployment's machines stay within replicas +
// maxSurge, never beyond replicas.
func (p *planner) withinSurge(all []*v1alpha1.MachineSet, newMS *v1alpha1.MachineSet) int32 {
	d := p.d
	var current int32
	for _, ms := range all {
		current += p.machineCount(ms)
	}
	var newSpec int32
	if newMS != nil {
		newSpec = newMS.Spec.Replicas
	}
	maxTotal := d.Spec.Replicas + p.lim.surge
	if current >= maxTotal {
		return newSpec
	}
	return newSpec + max(min(maxTotal-current, d.Spec.Replicas-newSpec), 0)
}

// cleanup plans the deletion of old sets beyond the revision history limit, oldest first, when
// they have no replicas and no machines left.
func (p *planner) cleanup(old []*v1alpha1.MachineSet) {
	lim := p.d.Spec.RevisionHistoryLimit
	if lim == nil {
		lim = p.in.DefaultRevisionHistoryLimit
	}
	if lim == nil || *lim < 0 {
		return
	}
	var alive []*v1alpha1.MachineSet
	for _, ms := range old {
		if ms.DeletionTimestamp == nil {
			alive = append(alive, ms)
		}
	}
	diff := len(alive) - int(*lim)
	if diff <= 0 {
		return
	}
	sortByCreation(alive)
	for _, ms := range alive[:diff] {
		if ms.Spec.Replicas != 0 || ms.Status.Replicas != 0 || ms.Generation > ms.Status.ObservedGeneration || len(p.machinesOf(ms)) > 0 {
			continue
		}
		p.add(DeleteSet{Set: ms.Name, HistoryLimit: *lim})
	}
}

// revision reads a MachineSet's revision annotation (0 when absent or unreadable).
func revision(ms *v1alpha1.MachineSet) int64 {
	v, err := strconv.ParseInt(ms.Annotations[v1alpha1.AnnotationRevision], 10, 64)
	if err != nil {
		return 0
	}
	return v
}

func maxRevision(sets []*v1alpha1.MachineSet) int64 {
	var m int64
	for _, ms := range sets {
		m = max(m, revision(ms))
	}
	return m
}

// replicaSum is the sum of spec.replicas.
func replicaSum(sets []*v1alpha1.MachineSet) int32 {
	var n int32
	for _, ms := range sets {
		if ms != nil {
			n += ms.Spec.Replicas
		}
	}
	return n
}

// availableForDecisions counts a set's available machines for scaling decisions: never more
// than its spec, so a status the MachineSet controller has not refreshed since a scale-down
// cannot make old machines look available twice.
func availableForDecisions(ms *v1alpha1.MachineSet) int32 {
	if ms == nil {
		return 0
	}
	return min(ms.Status.AvailableReplicas, ms.Spec.Replicas)
}

func availableSum(sets []*v1alpha1.MachineSet) int32 {
	var n int32
	for _, ms := range sets {
		n += availableForDecisions(ms)
	}
	return n
}

// activeSets are the sets with replicas.
func activeSets(sets []*v1alpha1.MachineSet) []*v1alpha1.MachineSet {
	var out []*v1alpha1.MachineSet
	for _, ms := range sets {
		if ms != nil && ms.Spec.Replicas > 0 {
			out = append(out, ms)
		}
	}
	return out
}

// sortByCreation orders sets oldest first (by name on ties).
func sortByCreation(sets []*v1alpha1.MachineSet) {
	sort.SliceStable(sets, func(i, j int) bool {
		a, b := sets[i], sets[j]
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		return a.Name < b.Name
	})
}

// sortBySize orders sets largest first; on equal size newer first when newerFirst, else older.
func sortBySize(sets []*v1alpha1.MachineSet, newerFirst bool) {
	sort.SliceStable(sets, func(i, j int) bool {
		a, b := sets[i], sets[j]
		if a.Spec.Replicas != b.Spec.Replicas {
			return a.Spec.Replicas > b.Spec.Replicas
		}
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			if newerFirst {
				return b.CreationTimestamp.Before(&a.CreationTimestamp)
			}
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		return a.Name < b.Name
	})
}

// annotationInt reads an integer annotation.
func annotationInt(ms *v1alpha1.MachineSet, key string) (int32, bool) {
	v, ok := ms.Annotations[key]
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil {
		return 0, false
	}
	return int32(n), true
}

// Complete reports whether a deployment's status shows every replica updated and available and
// no old one left.
func Complete(d *v1alpha1.MachineDeployment, st *v1alpha1.MachineDeploymentStatus) bool {
	return st.UpdatedReplicas == d.Spec.Replicas && st.Replicas == d.Spec.Replicas &&
		st.AvailableReplicas == d.Spec.Replicas && st.ObservedGeneration >= d.Generation
}
