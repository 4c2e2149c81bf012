// Package plan previews what applying a manifest would make the controllers do, without
// changing anything: `machinist plan` reads the live cluster into a World (Read), and Deployment
// plays the change forward with the MachineDeployment controller's own rules (rollout.Decide,
// through rollout.Project), adding what the deployment controller does not decide but a person
// needs to know before applying: the drains the replacements imply and the PodDisruptionBudgets
// that would refuse them now (drain.Blockers), the class a new machine would get now (capacity
// fallback, from the marks the Machine controller publishes on the classes), and an estimate of
// the duration from the deployment's recent creations.
package plan

import (
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/fallback"
	"github.com/machinist-io/machinist/core/controller/rollout"
	"github.com/machinist-io/machinist/core/drain"
)

// What blocks a plan besides the deployment controller's own reasons (rollout.BlockReason).
const (
	// BlockedByPodDisruptionBudget: a machine the change replaces runs pods whose budget allows
	// no eviction now; its drain would wait.
	BlockedByPodDisruptionBudget rollout.BlockReason = "PodDisruptionBudget"
	// BlockedByClass: the class the machines would be created on does not exist.
	BlockedByClass rollout.BlockReason = "InvalidClass"
	// BlockedByCapacity: every class of the fallback list is marked out of capacity now.
	BlockedByCapacity rollout.BlockReason = "CapacityExhausted"
)

// MaxSteps bounds the projection: a rollout of N machines takes about 2N decisions.
const MaxSteps = 400

// World is what a plan of one deployment reads; Read fills it from the cluster.
type World struct {
	// Input is the deployment as the manifest would leave it, with its live sets and machines.
	Input rollout.Input
	// Exists: the deployment is in the cluster (a new one is created by the apply).
	Exists bool
	// Classes are the deployment's classes by name (the template's and its fallback list's);
	// a class missing here does not exist.
	Classes map[string]*v1alpha1.MachineClass
	// Pods are the pods on the nodes of the deployment's machines, PDBs every budget of the
	// target cluster: the drains read them.
	Pods []corev1.Pod
	PDBs []policyv1.PodDisruptionBudget
}

// Result is the plan of one object. The JSON names are stable: CI pipelines read them.
type Result struct {
	Kind      string         `json:"kind"`
	Namespace string         `json:"namespace"`
	Name      string         `json:"name"`
	Action    rollout.Action `json:"action"`
	// Fields are the fields applied in place and what they reach (nodes or machines).
	Fields []rollout.FieldChange `json:"fields,omitempty"`
	// Nodes are the nodes in-place node-template fields reach.
	Nodes            []string `json:"nodes,omitempty"`
	MachinesReplaced int32    `json:"machinesReplaced"`
	MaxSurge         int32    `json:"maxSurge"`
	MaxUnavailable   int32    `json:"maxUnavailable"`
	BudgetFrom       string   `json:"budgetFrom,omitempty"`
	// Steps are the sizes of the deployment's MachineSets after each write the controller
	// would make, in order ("name=replicas", sets at 0 left out).
	Steps []string `json:"steps,omitempty"`
	// Drains are the machines the change takes down, with the budgets that would refuse them.
	Drains []Drain `json:"drains,omitempty"`
	// NewMachineClass is the class a machine created now would get ("" when none would be).
	NewMachineClass string          `json:"newMachineClass,omitempty"`
	BlockedBy       []rollout.Block `json:"blockedBy,omitempty"`
	// Estimate is how long the change would take, from the deployment's recent creations
	// ("" when there is nothing to go by); EstimateBasis says from what.
	Estimate      string `json:"estimate,omitempty"`
	EstimateBasis string `json:"estimateBasis,omitempty"`
	// Notes say what else applying the object does, in words.
	Notes []string `json:"notes,omitempty"`
}

// Drain is a machine a change takes down and what would hold its drain now.
type Drain struct {
	Machine  string          `json:"machine"`
	Node     string          `json:"node,omitempty"`
	Blockers []drain.Blocker `json:"blockers,omitempty"`
}

// Deployment plans a deployment: the controller's decisions played forward (rollout.Project),
// the drains of the machines it replaces, the class of its new machines and the estimate.
func Deployment(w World) Result {
	d := w.Input.Deployment
	r := Result{Kind: "MachineDeployment", Namespace: d.Namespace, Name: d.Name}
	decs := rollout.Project(w.Input, MaxSteps)
	first, last := decs[0], decs[len(decs)-1]
	r.Action, r.Fields, r.Nodes = first.Action, first.Fields, first.Nodes
	r.MachinesReplaced, r.MaxSurge, r.MaxUnavailable, r.BudgetFrom = first.MachinesReplaced, first.MaxSurge, first.MaxUnavailable, first.BudgetFrom
	if r.Action == rollout.Blocked && onlyBudget(first) {
		r.Action = rollout.Rollout // a rollout in flight waits for machines; it still rolls
	}
	if last.Action == rollout.Blocked && !onlyBudget(last) {
		r.Action, r.BlockedBy = rollout.Blocked, last.BlockedBy
	}
	r.Steps = steps(w.Input, decs)
	creates := createsMachines(w.Input, decs)
	if creates {
		r.NewMachineClass = newMachineClass(w, &r)
	}
	if r.MachinesReplaced > 0 && r.Action != rollout.Blocked {
		r.Drains = drains(w)
		for _, dr := range r.Drains {
			for _, b := range dr.Blockers {
				r.BlockedBy = append(r.BlockedBy, rollout.Block{Reason: BlockedByPodDisruptionBudget,
					Message: fmt.Sprintf("the drain of machine %s (node %s) would wait: %s", dr.Machine, dr.Node, b)})
			}
		}
	}
	if len(r.BlockedBy) > 0 {
		r.Action = rollout.Blocked
	}
	if r.Action == rollout.Rollout || r.Action == rollout.Scale {
		r.Estimate, r.EstimateBasis = estimate(w.Input, waves(w.Input, decs))
	}
	return r
}

func onlyBudget(dec rollout.Decision) bool {
	for _, b := range dec.BlockedBy {
		if b.Reason != rollout.BlockedBudgetExhausted {
			return false
		}
	}
	return true
}

// steps are the set sizes after each write of the projected decisions that changes one.
func steps(in rollout.Input, decs []rollout.Decision) []string {
	sizes := map[string]int32{}
	for _, ms := range in.Sets {
		sizes[ms.Name] = ms.Spec.Replicas
	}
	var out []string
	prev := sizesString(sizes)
	for _, dec := range decs {
		for _, op := range dec.Step.Ops {
			switch op := op.(type) {
			case rollout.CreateSet:
				sizes[op.Name] = op.Replicas
			case rollout.ScaleSet:
				sizes[op.Set] = op.To
			case rollout.DeleteSet:
				delete(sizes, op.Set)
			default:
				continue
			}
			if s := sizesString(sizes); s != prev {
				out = append(out, s)
				prev = s
			}
		}
	}
	return out
}

// SizesString writes set sizes as a step shows them: "name=replicas" sorted by name, sets at
// 0 left out.
func SizesString(sizes map[string]int32) string { return sizesString(sizes) }

func sizesString(sizes map[string]int32) string {
	var parts []string
	for name, n := range sizes {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", name, n))
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// createsMachines: some projected write raises a set's size.
func createsMachines(in rollout.Input, decs []rollout.Decision) bool {
	return waves(in, decs) > 0
}

// waves counts the projected decisions that create machines: each waits for its machines to
// become available before the next, so they take one creation each.
func waves(_ rollout.Input, decs []rollout.Decision) int {
	n := 0
	for _, dec := range decs {
		for _, op := range dec.Step.Ops {
			up := false
			switch op := op.(type) {
			case rollout.CreateSet:
				up = op.Replicas > 0
			case rollout.ScaleSet:
				up = op.To > op.From
			}
			if up {
				n++
				break
			}
		}
	}
	return n
}

// newMachineClass is the class a machine created now gets: the template's, or, with a fallback
// list, the first class not marked out of capacity. It adds the block when there is none.
func newMachineClass(w World, r *Result) string {
	d := w.Input.Deployment
	primary := d.Spec.Template.Spec.Class.Name
	chain, _, ok := fallback.ParseAnnotations(d.Namespace, primary, d.Annotations)
	if !ok {
		chain = fallback.Chain{Namespace: d.Namespace, Classes: []string{primary}}
	}
	if !ok && w.Classes[primary] != nil {
		return primary // without a fallback list, marks do not apply: creates try the class
	}
	var usable []string
	for _, name := range chain.Classes {
		if c := w.Classes[name]; c != nil && c.DeletionTimestamp == nil {
			usable = append(usable, name)
		}
	}
	if len(usable) == 0 || w.Classes[primary] == nil {
		r.BlockedBy = append(r.BlockedBy, rollout.Block{Reason: BlockedByClass, Message: fmt.Sprintf(
			"MachineClass %s/%s of spec.template.spec.class.name does not exist: create it before applying, or name an existing class", d.Namespace, primary)})
		return ""
	}
	chain.Classes = usable
	class, skipped, ok := fallback.Pick(chain, publishedMarks{w.Classes, w.Input.Now}, nil)
	if !ok {
		r.BlockedBy = append(r.BlockedBy, rollout.Block{Reason: BlockedByCapacity, Message: fmt.Sprintf(
			"every class a new machine may get is out of capacity now: %s; new machines would wait until a mark expires",
			fallback.Describe(usable, skipped))})
		return ""
	}
	return class
}

// publishedMarks reads the exhausted marks the Machine controller publishes on the classes.
type publishedMarks struct {
	classes map[string]*v1alpha1.MachineClass
	now     time.Time
}

func (p publishedMarks) Exhausted(_, class string) (fallback.Mark, bool) {
	return fallback.PublishedMark(p.classes[class], p.now)
}

var _ fallback.Marks = publishedMarks{}

// drains lists the live machines of old templates with their nodes and what would refuse
// their drain now.
func drains(w World) []Drain {
	in := w.Input
	var out []Drain
	for _, ms := range in.Sets {
		if ms.DeletionTimestamp == nil && rollout.TemplateMatches(in.Deployment, ms) {
			continue
		}
		for _, m := range in.Machines[ms.UID] {
			if m.DeletionTimestamp != nil {
				continue
			}
			node := m.Labels[v1alpha1.LabelNode]
			dr := Drain{Machine: m.Name, Node: node}
			if node != "" {
				dr.Blockers = drain.Blockers(drain.Evicted(podsOn(w.Pods, node)), w.PDBs)
			}
			out = append(out, dr)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Machine < out[j].Machine })
	return out
}

func podsOn(pods []corev1.Pod, node string) []corev1.Pod {
	var out []corev1.Pod
	for _, p := range pods {
		if p.Spec.NodeName == node {
			out = append(out, p)
		}
	}
	return out
}
