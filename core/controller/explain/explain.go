// Package explain tells the story of a Machine or a MachineDeployment for `machinist explain`:
// why it was created, every event about it in order, where it stands, and what it waits for now.
// It is built from what the cluster keeps (the objects' own fields, their conditions, their
// lastOperation and the events about them), so it works for objects made before it existed. The
// functions here are pure; Reader reads the cluster.
package explain

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/machineset"
	"github.com/machinist-io/machinist/core/controller/rollout"
	"github.com/machinist-io/machinist/core/drain"
)

// Line is one entry of a story.
type Line struct {
	Time time.Time `json:"time,omitzero"`
	What string    `json:"what"`
}

// Story is what explain prints: the object's history, where it stands, what it waits for.
type Story struct {
	Kind      string   `json:"kind"`
	Namespace string   `json:"namespace"`
	Name      string   `json:"name"`
	Origin    []string `json:"origin,omitempty"`
	History   []Line   `json:"history,omitempty"`
	Now       []string `json:"now,omitempty"`
	WaitsFor  []string `json:"waitsFor,omitempty"`
}

// MachineWorld is what a machine's story reads. Machine is nil when it is gone (its events
// remain for a while).
type MachineWorld struct {
	Namespace, Name string
	Machine         *v1alpha1.Machine
	// Set is the machine's MachineSet, when it has one.
	Set *v1alpha1.MachineSet
	// Events are the events about the machine or naming it as related.
	Events []eventsv1.Event
	// Pods on its node and every PodDisruptionBudget of the target cluster (its drain).
	Pods []corev1.Pod
	PDBs []policyv1.PodDisruptionBudget
	// ProblemConditions are the node condition types that make a machine unhealthy when True
	// (--node-conditions).
	ProblemConditions []string
}

// Machine tells a machine's story.
func Machine(w MachineWorld) Story {
	s := Story{Kind: "Machine", Namespace: w.Namespace, Name: w.Name}
	s.History = eventLines(w.Events, w.Name)
	m := w.Machine
	if m == nil {
		s.Now = []string{"the machine is gone; the events about it are all that is left"}
		return s
	}
	s.Origin = machineOrigin(m, w.Set)
	st := m.Status
	s.Now = append(s.Now, fmt.Sprintf("phase %s since %s", orUnknown(string(st.CurrentStatus.Phase)), stamp(st.CurrentStatus.LastUpdateTime)))
	if op := st.LastOperation; op.Type != "" || op.Description != "" {
		line := fmt.Sprintf("last operation %s %s: %s", op.Type, op.State, op.Description)
		if op.ErrorCode != "" {
			line += " (" + op.ErrorCode + ")"
		}
		s.Now = append(s.Now, line)
	}
	s.Now = append(s.Now, FailedHealthConditions(st.Conditions, w.ProblemConditions)...)
	if t := st.CurrentStatus.PreserveExpiryTime; t != nil && !t.IsZero() {
		s.WaitsFor = append(s.WaitsFor, "preserved until "+stamp(*t))
	}
	if m.DeletionTimestamp != nil {
		s.WaitsFor = append(s.WaitsFor, drainWaits(m, w.Pods, w.PDBs)...)
	}
	return s
}

// FailedHealthConditions names the conditions that make a machine unhealthy: Ready not True, or
// a problem condition True.
func FailedHealthConditions(conds []corev1.NodeCondition, problems []string) []string {
	var out []string
	for _, c := range conds {
		bad := (c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue) ||
			(slices.Contains(problems, string(c.Type)) && c.Status == corev1.ConditionTrue)
		if bad {
			out = append(out, fmt.Sprintf("failed health condition %s=%s since %s (%s: %s)", c.Type, c.Status, stamp(c.LastTransitionTime), c.Reason, c.Message))
		}
	}
	return out
}

func machineOrigin(m *v1alpha1.Machine, ms *v1alpha1.MachineSet) []string {
	out := []string{fmt.Sprintf("created %s on class %s", stamp(m.CreationTimestamp), m.Spec.Class.Name)}
	out = append(out, ownerLine(m, ms))
	if r := replacedLine(m); r != "" {
		out = append(out, r)
	}
	return out
}

// ownerLine says who created the machine: its MachineSet and that set's deployment and revision.
func ownerLine(m *v1alpha1.Machine, ms *v1alpha1.MachineSet) string {
	ref := metav1.GetControllerOf(m)
	if ref == nil {
		return "no MachineSet owns it: it was created on its own"
	}
	line := fmt.Sprintf("by %s %s", ref.Kind, ref.Name)
	if ms != nil {
		if d := metav1.GetControllerOf(ms); d != nil {
			line += fmt.Sprintf(" of %s %s (revision %s)", d.Kind, d.Name, orUnknown(ms.Annotations["deployment.kubernetes.io/revision"]))
		}
		if tc := ms.Spec.Template.Spec.Class.Name; tc != "" && tc != m.Spec.Class.Name {
			line += fmt.Sprintf("; on a fallback class: the template's class %s had no capacity", tc)
		}
	}
	return line
}

// replacedLine says which failed machine m replaces and how that one failed, from the pairing
// its MachineSet recorded when it created m ("" for a machine that replaces none, or was created
// before the set recorded pairings).
func replacedLine(m *v1alpha1.Machine) string {
	old := m.Annotations[machineset.AnnotationReplaces]
	if old == "" {
		return ""
	}
	line := "created to replace machine " + old
	if why := m.Annotations[machineset.AnnotationReplacesReason]; why != "" {
		return line + ", which " + why
	}
	return line + ", which had failed"
}

// drainWaits says what the drain of a terminating machine waits for now.
func drainWaits(m *v1alpha1.Machine, pods []corev1.Pod, pdbs []policyv1.PodDisruptionBudget) []string {
	node := m.Labels[v1alpha1.LabelNode]
	if node == "" {
		return []string{"the machine is being deleted; it has no node to drain"}
	}
	var on []corev1.Pod
	for _, p := range pods {
		if p.Spec.NodeName == node {
			on = append(on, p)
		}
	}
	blockers := drain.Blockers(drain.Evicted(on), pdbs)
	if len(blockers) == 0 {
		return []string{fmt.Sprintf("the machine is being deleted; no PodDisruptionBudget holds the drain of node %s now", node)}
	}
	out := make([]string, 0, len(blockers))
	for _, b := range blockers {
		out = append(out, fmt.Sprintf("the drain of node %s waits for %s", node, b))
	}
	return out
}

// DeploymentWorld is what a deployment's story reads.
type DeploymentWorld struct {
	Deployment *v1alpha1.MachineDeployment
	Events     []eventsv1.Event
	// Decision is what the controller decides now (rollout.Decide on the live world).
	Decision rollout.Decision
}

// Deployment tells a deployment's story: its events, its conditions, and what its rollout
// waits for now, from the controller's own decision.
func Deployment(w DeploymentWorld) Story {
	d := w.Deployment
	s := Story{Kind: "MachineDeployment", Namespace: d.Namespace, Name: d.Name}
	s.Origin = []string{fmt.Sprintf("created %s; %d replicas of class %s, strategy %s", stamp(d.CreationTimestamp), d.Spec.Replicas, d.Spec.Template.Spec.Class.Name, w.Decision.Strategy)}
	s.History = eventLines(w.Events, d.Name)
	st := d.Status
	s.Now = append(s.Now, fmt.Sprintf("%d machines, %d updated, %d available (generation %d, observed %d)", st.Replicas, st.UpdatedReplicas, st.AvailableReplicas, d.Generation, st.ObservedGeneration))
	for _, c := range st.Conditions {
		s.Now = append(s.Now, fmt.Sprintf("condition %s=%s (%s): %s", c.Type, c.Status, c.Reason, c.Message))
	}
	dec := w.Decision
	switch dec.Action {
	case rollout.None:
		s.Now = append(s.Now, "nothing to do: the deployment is where its spec wants it")
	case rollout.Blocked:
		for _, b := range dec.BlockedBy {
			s.WaitsFor = append(s.WaitsFor, fmt.Sprintf("%s: %s", b.Reason, b.Message))
		}
	default:
		s.Now = append(s.Now, fmt.Sprintf("%s in progress: %d machines of old templates left, maxSurge %d, maxUnavailable %d (from %s)", dec.Action, dec.MachinesReplaced, dec.MaxSurge, dec.MaxUnavailable, dec.BudgetFrom))
	}
	return s
}

// eventLines lists events oldest first, each once with its count. An event about another object
// that names the story's object as related (a replacement naming the machine it replaced) names
// that other object.
func eventLines(events []eventsv1.Event, name string) []Line {
	out := make([]Line, 0, len(events))
	for _, e := range events {
		about := e.Regarding.Kind
		if e.Regarding.Name != name {
			about += " " + e.Regarding.Name
		}
		what := fmt.Sprintf("%s %s %s: %s", about, e.Type, e.Reason, e.Note)
		if e.Series != nil && e.Series.Count > 1 {
			what += fmt.Sprintf(" (%d times, last %s)", e.Series.Count, e.Series.LastObservedTime.UTC().Format(time.RFC3339))
		} else if e.DeprecatedCount > 1 {
			what += fmt.Sprintf(" (%d times)", e.DeprecatedCount)
		}
		out = append(out, Line{Time: eventTime(e), What: what})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Time.Before(out[j].Time) })
	// Recorders that retry write the same event again: one line per repetition says nothing.
	merged := out[:0]
	seen := map[string]int{}
	for _, l := range out {
		if i, ok := seen[l.What]; ok && merged[i].Time.Truncate(time.Second).Equal(l.Time.Truncate(time.Second)) {
			continue
		}
		seen[l.What] = len(merged)
		merged = append(merged, l)
	}
	return merged
}

func eventTime(e eventsv1.Event) time.Time {
	switch {
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	case !e.DeprecatedFirstTimestamp.IsZero():
		return e.DeprecatedFirstTimestamp.Time
	}
	return e.CreationTimestamp.Time
}

func stamp(t metav1.Time) string {
	if t.IsZero() {
		return "an unknown time"
	}
	return t.UTC().Format(time.RFC3339)
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// String writes a story for people.
func (s Story) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s/%s\n", s.Kind, s.Namespace, s.Name)
	section := func(title string, lines []string) {
		if len(lines) == 0 {
			return
		}
		fmt.Fprintf(&b, "%s:\n", title)
		for _, l := range lines {
			fmt.Fprintf(&b, "  %s\n", l)
		}
	}
	section("Origin", s.Origin)
	hist := make([]string, 0, len(s.History))
	for _, l := range s.History {
		hist = append(hist, l.Time.UTC().Format(time.RFC3339)+"  "+l.What)
	}
	section("History", hist)
	section("Now", s.Now)
	section("Waits for", s.WaitsFor)
	return b.String()
}
