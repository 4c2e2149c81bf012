package rollout

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/machineset"
)

// Project plays a deployment's rollout forward on a simulated world: it decides, applies the
// step (Apply), lets the world settle as the other controllers would (Settle), and decides
// again, until the deployment has nothing left to do (None), something other than its budget
// blocks it, the world stops changing, or maxSteps decisions were made. It returns every
// decision in order; the input is not modified.
func Project(in Input, maxSteps int) []Decision {
	var out []Decision
	for len(out) < maxSteps {
		dec := Decide(in)
		out = append(out, dec)
		if dec.Action == None || (dec.Action == Blocked && !onlyBudget(dec)) {
			break
		}
		next := Settle(Apply(in, dec))
		if fingerprint(next) == fingerprint(in) {
			break
		}
		in = next
	}
	return out
}

// onlyBudget: the decision is blocked by its budget alone, which machines in flight free.
func onlyBudget(dec Decision) bool {
	for _, b := range dec.BlockedBy {
		if b.Reason != BlockedBudgetExhausted {
			return false
		}
	}
	return true
}

// fingerprint sums up a world for Project's "did anything change": the sets' sizes, labels and
// revisions, the machines and their marks, the nodes' labels.
func fingerprint(in Input) string {
	var b strings.Builder
	for _, ms := range in.Sets {
		fmt.Fprintf(&b, "%s:%d:%d:%v:%v;", ms.Name, ms.Spec.Replicas, ms.Status.AvailableReplicas, ms.Labels, ms.Annotations)
		for _, m := range in.Machines[ms.UID] {
			fmt.Fprintf(&b, "%s:%v:%v,", m.Name, m.Annotations, m.DeletionTimestamp != nil)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(in.Nodes)) {
		fmt.Fprintf(&b, "%s:%v:%v;", name, in.Nodes[name].Labels, in.Nodes[name].Spec.Taints)
	}
	fmt.Fprintf(&b, "%v", in.Deployment.Annotations)
	return b.String()
}

// world is a copy of an input the simulation changes.
type world struct{ Input }

func clone(in Input) *world {
	w := &world{Input: in}
	w.Deployment = in.Deployment.DeepCopy()
	w.Sets = make([]*v1alpha1.MachineSet, len(in.Sets))
	for i, ms := range in.Sets {
		w.Sets[i] = ms.DeepCopy()
	}
	w.Machines = make(map[types.UID][]*v1alpha1.Machine, len(in.Machines))
	for uid, ms := range in.Machines {
		c := make([]*v1alpha1.Machine, len(ms))
		for i, m := range ms {
			c[i] = m.DeepCopy()
		}
		w.Machines[uid] = c
	}
	w.Nodes = make(map[string]*corev1.Node, len(in.Nodes))
	for name, n := range in.Nodes {
		w.Nodes[name] = n.DeepCopy()
	}
	return w
}

func (w *world) set(name string) *v1alpha1.MachineSet {
	for _, ms := range w.Sets {
		if ms.Name == name {
			return ms
		}
	}
	return nil
}

func (w *world) machine(name string) *v1alpha1.Machine {
	for _, ms := range w.Machines {
		for _, m := range ms {
			if m.Name == name {
				return m
			}
		}
	}
	return nil
}

// Apply returns the world after a step: a copy of the input with each operation made as its
// write would make it. A set the step creates gets its name for a UID and is the newest.
func Apply(in Input, dec Decision) Input {
	w := clone(in)
	for _, op := range dec.Step.Ops {
		w.apply(op)
	}
	w.NodesClean = dec.Step.NodesClean
	return w.Input
}

func (w *world) apply(op Op) {
	switch op := op.(type) {
	case MarkForDeletion:
		if m := w.machine(op.Machine); m != nil {
			op.Apply(m)
		}
	case ClearUpdateResult:
		if m := w.machine(op.Machine); m != nil {
			op.Apply(m)
		}
	case Prioritize:
		if m := w.machine(op.Machine); m != nil {
			op.Apply(m)
		}
	case DeleteMachine:
		if m := w.machine(op.Machine); m != nil {
			m.DeletionTimestamp = ptr.To(metav1.NewTime(w.Now))
		}
	case PruneTrigger:
		op.Apply(w.Deployment)
	case CreateSet:
		w.create(op)
	case SyncSet, ScaleSet, SetScaleUpDisabled, DeleteSet:
		w.applySet(op)
	case LabelNode, FinishInPlaceUpdate, Uncordon, MarkNode:
		w.applyNode(op)
	case MoveMachine:
		w.move(op)
	}
}

func (w *world) create(op CreateSet) {
	ms := op.Set.DeepCopy()
	if ms.UID == "" {
		ms.UID = types.UID(ms.Name)
	}
	newest := w.Now
	for _, s := range w.Sets {
		if t := s.CreationTimestamp.Time; !t.Before(newest) {
			newest = t.Add(time.Second)
		}
	}
	ms.CreationTimestamp = metav1.NewTime(newest)
	ms.Generation = 1
	w.Sets = append(w.Sets, ms)
}

func (w *world) applySet(op Op) {
	switch op := op.(type) {
	case SyncSet:
		if ms := w.set(op.Set); ms != nil {
			op.Apply(ms)
		}
	case ScaleSet:
		if ms := w.set(op.Set); ms != nil {
			from := ms.Spec.Replicas
			if op.Apply(ms) && from != ms.Spec.Replicas {
				ms.Generation++
			}
		}
	case SetScaleUpDisabled:
		if ms := w.set(op.Set); ms != nil {
			op.Apply(ms)
		}
	case DeleteSet:
		w.Sets = slices.DeleteFunc(w.Sets, func(ms *v1alpha1.MachineSet) bool { return ms.Name == op.Set })
	}
}

func (w *world) applyNode(op Op) {
	var name string
	switch op := op.(type) {
	case LabelNode:
		name = op.Node
	case FinishInPlaceUpdate:
		name = op.Node
	case Uncordon:
		name = op.Node
	case MarkNode:
		name = op.Node
	}
	node := w.Nodes[name]
	if node == nil {
		return
	}
	switch op := op.(type) {
	case LabelNode:
		op.Apply(node)
	case FinishInPlaceUpdate:
		op.Apply(node)
	case Uncordon:
		op.Apply(node)
	case MarkNode:
		op.Apply(node)
	}
}

func (w *world) move(op MoveMachine) {
	from, to := w.set(op.From), w.set(op.To)
	if from == nil || to == nil {
		return
	}
	ms := w.Machines[from.UID]
	for i, m := range ms {
		if m.Name == op.Machine {
			op.Apply(m, from, to)
			w.Machines[from.UID] = slices.Delete(ms, i, i+1)
			w.Machines[to.UID] = append(w.Machines[to.UID], m)
			return
		}
	}
}

// Settle returns the world as the MachineSet, Machine and node controllers would leave it with
// nothing going wrong: terminating machines are gone, every set has its replicas (the surplus
// deleted in its scale-down order; frozen and scale-up-disabled sets create none), every
// machine is Running and available, nodes selected for an in-place update are updated, and the
// statuses say so.
func Settle(in Input) Input {
	w := clone(in)
	for _, ms := range w.Sets {
		w.settleSet(ms)
	}
	w.Sets = slices.DeleteFunc(w.Sets, func(ms *v1alpha1.MachineSet) bool {
		return ms.DeletionTimestamp != nil && len(w.Machines[ms.UID]) == 0
	})
	w.updateNodes()
	w.settleDeployment()
	return w.Input
}

func (w *world) settleSet(ms *v1alpha1.MachineSet) {
	live := slices.DeleteFunc(w.Machines[ms.UID], func(m *v1alpha1.Machine) bool { return m.DeletionTimestamp != nil })
	if n := len(live) - int(ms.Spec.Replicas); n > 0 {
		machineset.SortForDeletion(live, w.Now)
		live = live[n:]
	}
	_, noScaleUp := ms.Labels[v1alpha1.LabelScaleUpDisabled]
	for len(live) < int(ms.Spec.Replicas) && !noScaleUp && !machineset.Frozen(ms) && ms.DeletionTimestamp == nil {
		live = append(live, w.newMachine(ms))
	}
	w.Machines[ms.UID] = live
	n := int32(len(live))
	ms.Status.Replicas, ms.Status.ReadyReplicas, ms.Status.AvailableReplicas = n, n, n
	ms.Status.ObservedGeneration = ms.Generation
}

// newMachine is a Running machine of a set with a node of the same name.
func (w *world) newMachine(ms *v1alpha1.MachineSet) *v1alpha1.Machine {
	name := ms.Name + "-1"
	for i := 2; w.machine(name) != nil; i++ {
		name = fmt.Sprintf("%s-%d", ms.Name, i)
	}
	labels := maps.Clone(ms.Spec.Template.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[v1alpha1.LabelNode] = name
	m := &v1alpha1.Machine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ms.Namespace, Labels: labels,
			CreationTimestamp: metav1.NewTime(w.Now),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "MachineSet",
				Name: ms.Name, UID: ms.UID, Controller: ptr.To(true)}}},
		Spec: ms.Spec.Template.Spec,
	}
	m.Status.CurrentStatus.Phase = v1alpha1.MachineRunning
	if w.TargetCluster {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
			Labels: maps.Clone(ms.Spec.Template.Spec.NodeTemplateSpec.Labels)}}
		w.Nodes[name] = node
	}
	return m
}

// updateNodes finishes the in-place update of every selected node: the agent labels it
// update-result=successful and the condition, copied to its machine, says UpdateSuccessful.
func (w *world) updateNodes() {
	done := corev1.NodeCondition{Type: v1alpha1.NodeConditionInPlaceUpdate, Status: corev1.ConditionTrue, Reason: v1alpha1.ReasonUpdateSuccessful}
	for _, ms := range w.Machines {
		for _, m := range ms {
			node := w.Nodes[m.Labels[v1alpha1.LabelNode]]
			if node == nil {
				continue
			}
			if _, selected := node.Labels[v1alpha1.LabelNodeSelectedForUpdate]; !selected || updateSucceeded(inPlaceCondition(node.Status.Conditions), node.Labels) {
				continue
			}
			node.Labels[v1alpha1.LabelNodeUpdateResult] = v1alpha1.LabelValueNodeUpdateSuccessful
			node.Status.Conditions = append(node.Status.Conditions, done)
			m.Status.Conditions = append(m.Status.Conditions, done)
		}
	}
}

func (w *world) settleDeployment() {
	d := w.Deployment
	st := &d.Status
	st.ObservedGeneration = d.Generation
	st.Replicas, st.ReadyReplicas, st.AvailableReplicas, st.UpdatedReplicas = 0, 0, 0, 0
	var current *v1alpha1.MachineSet
	sets := append([]*v1alpha1.MachineSet{}, w.Sets...)
	sortByCreation(sets)
	for _, ms := range sets {
		st.Replicas += ms.Status.Replicas
		st.ReadyReplicas += ms.Status.ReadyReplicas
		st.AvailableReplicas += ms.Status.AvailableReplicas
		if current == nil && ms.DeletionTimestamp == nil && TemplateMatches(d, ms) {
			current = ms
		}
	}
	if current != nil {
		st.UpdatedReplicas = current.Status.Replicas
	}
}
