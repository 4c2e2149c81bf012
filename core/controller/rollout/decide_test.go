package rollout

import (
	"time"

	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// decideCase is one row of TestDecide: a world, and what Decide must make of it.
type decideCase struct {
	name   string
	in     func() Input
	action Action
	// blocked lists the reasons of BlockedBy, in order.
	blocked []BlockReason
	// ops is the step as ops() renders it.
	ops string
	// surge, unavailable and replaced are the summary's budget and machines to replace.
	surge, unavailable, replaced int32
	// fields are the paths of Decision.Fields; nodes the nodes they reach.
	fields, nodes []string
	// await: the step waits for deletion marks.
	await bool
}

// current and old are the two kinds of set of the table: the deployment's class "a", another.
func current(name string, replicas, available int32, machines int) setSpec {
	return setSpec{name: name, class: "a", replicas: replicas, available: available, machines: machines}
}

func old(name string, replicas, available int32, machines int) setSpec {
	return setSpec{name: name, class: "old", replicas: replicas, available: available, machines: machines}
}

func TestDecide(t *testing.T) {
	var cases []decideCase
	for _, set := range [][]decideCase{rollingCases(), scalingCases(), triggerCases(), proportionalCases(), inPlaceCases(), otherCases(), poolCases()} {
		cases = append(cases, set...)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in()
			before := fingerprint(in)
			dec := Decide(in)
			if fingerprint(in) != before {
				t.Fatal("Decide modified its input")
			}
			var blocked []BlockReason
			for _, b := range dec.BlockedBy {
				blocked = append(blocked, b.Reason)
				if b.Message == "" {
					t.Errorf("block %s has no message", b.Reason)
				}
			}
			if dec.Action != tc.action || !slices.Equal(blocked, tc.blocked) {
				t.Errorf("action %s blocked by %v (%v), want %s blocked by %v", dec.Action, blocked, dec.BlockedBy, tc.action, tc.blocked)
			}
			if got := ops(dec); got != tc.ops {
				t.Errorf("step:\n got  %s\n want %s", got, tc.ops)
			}
			if dec.MaxSurge != tc.surge || dec.MaxUnavailable != tc.unavailable || dec.MachinesReplaced != tc.replaced {
				t.Errorf("maxSurge %d maxUnavailable %d machinesReplaced %d, want %d %d %d", dec.MaxSurge, dec.MaxUnavailable, dec.MachinesReplaced, tc.surge, tc.unavailable, tc.replaced)
			}
			var fields []string
			for _, f := range dec.Fields {
				fields = append(fields, f.Path+" → "+f.Reaches)
			}
			if !slices.Equal(fields, tc.fields) || !slices.Equal(dec.Nodes, tc.nodes) {
				t.Errorf("fields %v nodes %v, want %v %v", fields, dec.Nodes, tc.fields, tc.nodes)
			}
			if dec.Step.AwaitMarks != tc.await {
				t.Errorf("awaitMarks %v, want %v", dec.Step.AwaitMarks, tc.await)
			}
			// The same input decides the same (no hidden state, no clock).
			if again := Decide(tc.in()); ops(again) != ops(dec) || again.Action != dec.Action {
				t.Errorf("a second decision differs: %s %s", again.Action, ops(again))
			}
		})
	}
}

func rollingCases() []decideCase {
	return []decideCase{
		{name: "settled: nothing to do", action: None, surge: 1,
			in: func() Input { return input(rollingMD(3, "1", "0"), false, current("cur", 3, 3, 3)) }},
		{name: "new deployment: the first set takes every replica", action: Scale, surge: 1,
			ops: "create NEW(3)",
			in:  func() Input { return input(rollingMD(3, "1", "0"), false) }},
		{name: "class change, maxSurge 1 maxUnavailable 0: one new machine first", action: Rollout, surge: 1, replaced: 3,
			ops: "create NEW(1)",
			in:  func() Input { return input(rollingMD(3, "1", "0"), false, old("old", 3, 3, 3)) }},
		{name: "class change, maxSurge 0 maxUnavailable 1: the oldest machine goes first", action: Rollout, unavailable: 1, replaced: 3,
			ops: "create NEW(0); scale old 3→2 goes old-0",
			in:  func() Input { return input(rollingMD(3, "0", "1"), false, old("old", 3, 3, 3)) }},
		{name: "both 0 resolve to 1 unavailable (MCM)", action: Rollout, unavailable: 1, replaced: 3,
			ops: "create NEW(0); scale old 3→2 goes old-0",
			in:  func() Input { return input(rollingMD(3, "0", "0"), false, old("old", 3, 3, 3)) }},
		{name: "unset budgets are 0 and 0, so 1 unavailable", action: Rollout, unavailable: 1, replaced: 3,
			ops: "create NEW(0); scale old 3→2 goes old-0",
			in:  func() Input { return input(rollingMD(3, "", ""), false, old("old", 3, 3, 3)) }},
		{name: "percents: maxSurge rounds up, maxUnavailable down", action: Rollout, surge: 3, unavailable: 2, replaced: 10,
			ops: "create NEW(3); scale old 10→8 goes old-0,old-1",
			in:  func() Input { return input(rollingMD(10, "25%", "25%"), false, old("old", 10, 10, 10)) }},
		{name: "a small percent still surges one", action: Rollout, surge: 1, replaced: 1,
			ops: "create NEW(1)",
			in:  func() Input { return input(rollingMD(1, "10%", "10%"), false, old("old", 1, 1, 1)) }},
		{name: "maxUnavailable above replicas is capped at replicas", action: Rollout, unavailable: 2, replaced: 2,
			ops: "create NEW(0); scale old 2→0 goes old-0,old-1",
			in:  func() Input { return input(rollingMD(2, "0", "5"), false, old("old", 2, 2, 2)) }},
		{name: "the surge machine is available: an old one goes", action: Rollout, surge: 1, replaced: 3,
			ops: "scale old 3→2 goes old-0",
			in: func() Input {
				return input(rollingMD(3, "1", "0"), false, old("old", 3, 3, 3), current("cur", 1, 1, 1))
			}},
		{name: "room again: the new set grows", action: Rollout, surge: 1, replaced: 2,
			ops: "scale cur 1→2",
			in: func() Input {
				return input(rollingMD(3, "1", "0"), false, old("old", 2, 2, 2), current("cur", 1, 1, 1))
			}},
		{name: "a new machine not available yet: the budget is used up", action: Blocked, blocked: []BlockReason{BlockedBudgetExhausted},
			surge: 1, replaced: 2,
			in: func() Input {
				return input(rollingMD(3, "1", "0"), false, old("old", 2, 2, 2), current("cur", 2, 1, 2))
			}},
		{name: "a terminating old machine still holds surge", action: Blocked, blocked: []BlockReason{BlockedBudgetExhausted},
			surge: 1, replaced: 2,
			in: func() Input {
				o := old("old", 2, 2, 2)
				o.dying = 1
				return input(rollingMD(3, "1", "0"), false, o, current("cur", 1, 1, 1))
			}},
		{name: "unhealthy old machines go first, costing no availability", action: Rollout, unavailable: 2, replaced: 4,
			ops: "create NEW(0); scale old 4→2 goes old-0,old-1",
			in:  func() Input { return input(rollingMD(4, "0", "2"), false, old("old", 4, 2, 4)) }},
		{name: "older old sets shrink first", action: Rollout, unavailable: 1, replaced: 3,
			ops: "scale older 1→0 goes older-0",
			in: func() Input {
				return input(rollingMD(3, "0", "1"), false, old("older", 1, 1, 1), old("old", 2, 2, 2), current("cur", 0, 0, 0))
			}},
		{name: "rollout done, old machines terminating: waiting for them", action: Rollout, surge: 1,
			in: func() Input {
				return input(rollingMD(3, "1", "0"), false, setSpec{name: "old", class: "old", dying: 2}, current("cur", 3, 3, 3))
			}},
		{name: "the new set above replicas shrinks first", action: Rollout, surge: 1, replaced: 1,
			ops: "scale cur 4→3 goes cur-0",
			in: func() Input {
				return input(rollingMD(3, "1", "0"), false, old("old", 1, 1, 1), current("cur", 4, 4, 4))
			}},
		{name: "recreate: every old machine goes first", action: Rollout, replaced: 3,
			ops: "scale old 3→0 goes old-0,old-1,old-2",
			in:  func() Input { return input(recreateMD(3), false, old("old", 3, 3, 3)) }},
		{name: "recreate: the new set waits until the old machines are gone", action: Rollout,
			in: func() Input { return input(recreateMD(3), false, setSpec{name: "old", class: "old", dying: 3}) }},
		{name: "recreate: then the new set gets every replica", action: Scale,
			ops: "create NEW(3)",
			in:  func() Input { return input(recreateMD(3), false, old("old", 0, 0, 0)) }},
	}
}

func scalingCases() []decideCase {
	return []decideCase{
		{name: "scale up", action: Scale, surge: 1,
			ops: "scale cur 3→5",
			in: func() Input {
				return input(rollingMD(5, "1", "0"), false, setSpec{name: "cur", class: "a", replicas: 3, available: 3, machines: 3, desired: 3})
			}},
		{name: "scale down: the set's scale-down order names who goes", action: Scale, surge: 1,
			ops: "scale cur 3→1 goes cur-0,cur-1",
			in: func() Input {
				return input(rollingMD(1, "1", "0"), false, setSpec{name: "cur", class: "a", replicas: 3, available: 3, machines: 3, desired: 3})
			}},
	}
}

// triggerCases: the Cluster Autoscaler's deletion requests (trigger-deletion-by-mcm).
func triggerCases() []decideCase {
	marked := func(in Input) {
		m := in.Machines["cur"][1]
		m.Annotations = map[string]string{v1alpha1.AnnotationMachinePriority: "1", v1alpha1.AnnotationMarkedForDeletionTime: "2026-01-01T00:00:00Z"}
	}
	return []decideCase{
		{name: "a scaler's trigger: mark first, scale once the mark is visible", action: Scale, surge: 1, await: true,
			ops: "mark cur-1 at 2026-01-01T00:00:00Z",
			in: func() Input {
				in := input(rollingMD(2, "1", "0"), false, setSpec{name: "cur", class: "a", replicas: 3, available: 3, machines: 3, desired: 3})
				in.Deployment.Annotations = map[string]string{v1alpha1.AnnotationTriggerDeletionByMCM: "cur-1~2026-01-01T00:00:00Z"}
				return in
			}},
		{name: "a trigger entry without a time is marked now", action: Scale, surge: 1, await: true,
			ops: "mark cur-1 at 2026-01-01T00:00:00Z",
			in: func() Input {
				in := input(rollingMD(2, "1", "0"), false, setSpec{name: "cur", class: "a", replicas: 3, available: 3, machines: 3, desired: 3})
				in.Deployment.Annotations = map[string]string{v1alpha1.AnnotationTriggerDeletionByMCM: "[cur-1]"}
				return in
			}},
		{name: "the marked machine goes first", action: Scale, surge: 1,
			ops: "scale cur 3→2 goes cur-1",
			in: func() Input {
				in := input(rollingMD(2, "1", "0"), false, setSpec{name: "cur", class: "a", replicas: 3, available: 3, machines: 3, desired: 3})
				in.Deployment.Annotations = map[string]string{v1alpha1.AnnotationTriggerDeletionByMCM: "cur-1~2026-01-01T00:00:00Z"}
				marked(in)
				return in
			}},
		{name: "entries of gone and foreign machines are pruned", action: Scale, surge: 1,
			ops: `prune "cur-1~2026-01-01T00:00:00Z"; scale cur 3→2 goes cur-1`,
			in: func() Input {
				in := input(rollingMD(2, "1", "0"), false, setSpec{name: "cur", class: "a", replicas: 3, available: 3, machines: 3, desired: 3})
				in.Deployment.Annotations = map[string]string{v1alpha1.AnnotationTriggerDeletionByMCM: "gone,cur-1~2026-01-01T00:00:00Z,theirs"}
				in.Triggers = map[string]TriggerLookup{"gone": TriggerGone, "theirs": TriggerOtherDeployment}
				marked(in)
				return in
			}},
		{name: "an entry the cache does not show yet holds every scale", action: Scale, surge: 1, await: true,
			in: func() Input {
				in := input(rollingMD(2, "1", "0"), false, setSpec{name: "cur", class: "a", replicas: 3, available: 3, machines: 3, desired: 3})
				in.Deployment.Annotations = map[string]string{v1alpha1.AnnotationTriggerDeletionByMCM: "new-machine"}
				return in
			}},
	}
}

// proportionalCases: scaling while a rollout is under way, paused or not.
func proportionalCases() []decideCase {
	return []decideCase{
		{name: "scale down during a rollout: proportional, old set first", action: Rollout, surge: 2, replaced: 4,
			ops: "scale old 4→2 goes old-0,old-1; scale cur 6→4 goes cur-0,cur-1",
			in: func() Input {
				return input(rollingMD(4, "2", "0"), false,
					setSpec{name: "old", class: "old", replicas: 4, available: 4, machines: 4, desired: 8},
					setSpec{name: "cur", class: "a", replicas: 6, available: 6, machines: 6, desired: 8})
			}},
		{name: "scale down during a rollout takes marked machines first", action: Rollout, surge: 2, replaced: 4,
			ops: "scale old 4→1 goes old-0,old-1,old-2; scale cur 6→5 goes cur-0",
			in: func() Input {
				in := input(rollingMD(4, "2", "0"), false,
					setSpec{name: "old", class: "old", replicas: 4, available: 4, machines: 4, desired: 8},
					setSpec{name: "cur", class: "a", replicas: 6, available: 6, machines: 6, desired: 8})
				for _, m := range in.Machines["old"][:3] {
					m.Annotations = map[string]string{v1alpha1.AnnotationMachinePriority: "1"}
				}
				return in
			}},
		{name: "scale up during a rollout goes to the new set alone (MCM #754)", action: Rollout, surge: 2, replaced: 4,
			ops: "scale old 4→4; scale cur 6→10",
			in: func() Input {
				return input(rollingMD(12, "2", "0"), false,
					setSpec{name: "old", class: "old", replicas: 4, available: 4, machines: 4, desired: 8},
					setSpec{name: "cur", class: "a", replicas: 6, available: 6, machines: 6, desired: 8})
			}},
		{name: "paused: the rollout waits", action: Blocked, blocked: []BlockReason{BlockedPaused}, surge: 1, replaced: 3,
			in: func() Input {
				in := input(rollingMD(3, "1", "0"), false, old("old", 3, 3, 3))
				in.Deployment.Spec.Paused = true
				return in
			}},
		{name: "paused mid-rollout, scaled up: the active sets share the additions", action: Blocked, blocked: []BlockReason{BlockedPaused},
			surge: 2, replaced: 6,
			ops: "sync a; scale b 4→7; scale stuck 2→3",
			in: func() Input {
				in := input(rollingMD(8, "2", "0"), false,
					setSpec{name: "a", class: "a", desired: 4},
					setSpec{name: "b", class: "old", replicas: 4, available: 4, machines: 4, desired: 4},
					setSpec{name: "stuck", class: "old2", replicas: 2, available: 2, machines: 2, desired: 4})
				in.Deployment.Spec.Paused = true
				return in
			}},
		{name: "paused, settled: old sets beyond the history limit go", action: None, surge: 1,
			ops: "delete h1",
			in: func() Input {
				in := input(rollingMD(3, "1", "0"), false, old("h1", 0, 0, 0), old("h2", 0, 0, 0), current("cur", 3, 3, 3))
				in.Deployment.Spec.Paused = true
				in.Deployment.Spec.RevisionHistoryLimit = ptr.To(int32(1))
				return in
			}},
		{name: "rolling: old sets beyond the default history limit go, a set with machines stays", action: Rollout, surge: 1,
			ops: "delete h1",
			in: func() Input {
				in := input(rollingMD(3, "1", "0"), false, old("h1", 0, 0, 0), setSpec{name: "h2", class: "old", dying: 1}, old("h3", 0, 0, 0), current("cur", 3, 3, 3))
				in.DefaultRevisionHistoryLimit = ptr.To(int32(1))
				return in
			}},
	}
}

// updated marks a machine's node as updated in place (the agent's label, the condition on node
// and machine).
func updated(in Input, machine string) {
	done := corev1.NodeCondition{Type: v1alpha1.NodeConditionInPlaceUpdate, Reason: v1alpha1.ReasonUpdateSuccessful}
	in.Nodes[machine].Labels[v1alpha1.LabelNodeUpdateResult] = v1alpha1.LabelValueNodeUpdateSuccessful
	in.Nodes[machine].Labels[v1alpha1.LabelNodeSelectedForUpdate] = "true"
	in.Nodes[machine].Status.Conditions = []corev1.NodeCondition{done}
	for _, ms := range in.Machines {
		for _, m := range ms {
			if m.Name == machine {
				m.Status.Conditions = []corev1.NodeCondition{done}
			}
		}
	}
}

func inPlaceCases() []decideCase {
	auto, manual := v1alpha1.OrchestrationTypeAuto, v1alpha1.OrchestrationTypeManual
	oldSet := func() setSpec { s := old("old", 3, 3, 3); return s }
	return []decideCase{
		{name: "in place without a target cluster is blocked", action: Blocked, blocked: []BlockReason{BlockedNoTargetCluster}, unavailable: 1, replaced: 3,
			in: func() Input { return input(inPlaceMD(3, "0", "1", auto), false, oldSet()) }},
		{name: "in place, auto: old sets stop scaling up, nodes become candidates, one is selected", action: Rollout, unavailable: 1, replaced: 3,
			ops: "create NEW(0); scale-up-disabled old true; label old-0 candidate-for-update; label old-1 candidate-for-update; label old-2 candidate-for-update; label old-0 selected-for-update; " +
				"marknode old-0 taint=true annotate=true; marknode old-1 taint=true annotate=true; marknode old-2 taint=true annotate=true",
			in: func() Input { return input(inPlaceMD(3, "0", "1", auto), true, oldSet()) }},
		{name: "in place, auto with maxSurge: fresh machines first", action: Rollout, surge: 2, unavailable: 1, replaced: 3,
			ops: "create NEW(2); scale-up-disabled old true; label old-0 candidate-for-update; label old-1 candidate-for-update; label old-2 candidate-for-update; label old-0 selected-for-update; " +
				"marknode old-0 taint=true annotate=true; marknode old-1 taint=true annotate=true; marknode old-2 taint=true annotate=true",
			in: func() Input { return input(inPlaceMD(3, "2", "1", auto), true, oldSet()) }},
		{name: "in place, manual: waits for the user's selection", action: Blocked, blocked: []BlockReason{BlockedWaitingForApproval}, unavailable: 1, replaced: 3,
			ops: "create NEW(0); scale-up-disabled old true; label old-0 candidate-for-update; label old-1 candidate-for-update; label old-2 candidate-for-update; " +
				"marknode old-0 taint=true annotate=true; marknode old-1 taint=true annotate=true; marknode old-2 taint=true annotate=true",
			in: func() Input { return input(inPlaceMD(3, "2", "1", manual), true, oldSet()) }},
		{name: "in place, manual, a node selected: the rollout goes on", action: Rollout, unavailable: 1, replaced: 3,
			ops: "marknode old-0 taint=true annotate=true; marknode old-1 taint=true annotate=true; marknode old-2 taint=true annotate=true",
			in: func() Input {
				in := input(inPlaceMD(3, "0", "1", manual), true, oldSet(), current("cur", 0, 0, 0))
				in.Sets[0].Labels = map[string]string{v1alpha1.LabelScaleUpDisabled: "true"}
				for _, n := range in.Nodes {
					n.Labels[v1alpha1.LabelNodeCandidateForUpdate] = "true"
				}
				in.Nodes["old-1"].Labels[v1alpha1.LabelNodeSelectedForUpdate] = "true"
				return in
			}},
		{name: "in place: an updated machine moves to the new set", action: Rollout, unavailable: 1, replaced: 3,
			ops: "move old-0 old→cur; scale old 3→2; scale cur 0→1; " +
				"marknode old-0 taint=true annotate=true; marknode old-1 taint=true annotate=true; marknode old-2 taint=true annotate=true",
			in: func() Input {
				in := input(inPlaceMD(3, "0", "1", auto), true, oldSet(), current("cur", 0, 0, 0))
				in.Sets[0].Labels = map[string]string{v1alpha1.LabelScaleUpDisabled: "true"}
				for _, n := range in.Nodes {
					n.Labels[v1alpha1.LabelNodeCandidateForUpdate] = "true"
				}
				updated(in, "old-0")
				return in
			}},
		{name: "in place: a moved machine's node is finished", action: Rollout, unavailable: 1, replaced: 2,
			ops: "clear old-0; finish old-0; label old-1 selected-for-update; " +
				"marknode old-1 taint=true annotate=true; marknode old-2 taint=true annotate=true; marknode old-0 taint=false annotate=true",
			in: func() Input {
				in := input(inPlaceMD(3, "0", "1", auto), true, old("old", 2, 2, 2), current("cur", 1, 1, 0))
				in.Sets[0].Labels = map[string]string{v1alpha1.LabelScaleUpDisabled: "true"}
				in.Nodes["old-2"] = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "old-2", Labels: map[string]string{}}}
				for _, n := range in.Nodes {
					n.Labels[v1alpha1.LabelNodeCandidateForUpdate] = "true"
				}
				// old-0 moved to cur last pass: its labels say so.
				m := in.Machines["old"][0]
				in.Machines["old"] = append(in.Machines["old"][1:], machine("old-2", in.Sets[0], t0.Add(-time.Minute)))
				m.Labels[v1alpha1.LabelNodeUpdateResult] = v1alpha1.LabelValueNodeUpdateSuccessful
				in.Machines["cur"] = []*v1alpha1.Machine{m}
				updated(in, "old-0")
				return in
			}},
	}
}

func otherCases() []decideCase {
	return []decideCase{
		{name: "invalid spec: no class", action: Blocked, blocked: []BlockReason{BlockedInvalidSpec},
			in: func() Input {
				in := input(rollingMD(3, "1", "0"), false, current("cur", 3, 3, 3))
				in.Deployment.Spec.Template.Spec.Class.Name = ""
				return in
			}},
		{name: "invalid spec: unknown strategy", action: Blocked, blocked: []BlockReason{BlockedInvalidSpec},
			in: func() Input {
				in := input(rollingMD(3, "1", "0"), false, current("cur", 3, 3, 3))
				in.Deployment.Spec.Strategy.Type = "BlueGreen"
				return in
			}},
		{name: "node template labels apply in place, reaching the current set's nodes", action: InPlace, surge: 1,
			fields: []string{"spec.template.spec.nodeTemplate.metadata.labels.zone → nodes"}, nodes: []string{"cur-0", "cur-1", "cur-2"},
			ops: "sync cur",
			in: func() Input {
				in := input(rollingMD(3, "1", "0"), false, current("cur", 3, 3, 3))
				in.Deployment.Spec.Template.Spec.NodeTemplateSpec.Labels = map[string]string{"zone": "b"}
				return in
			}},
		{name: "node taints and machine configuration apply in place", action: InPlace, surge: 1,
			fields: []string{"spec.template.spec.nodeTemplate.spec.taints → nodes", "spec.template.spec.machineConfiguration → machines"},
			nodes:  []string{"cur-0"},
			ops:    "sync cur",
			in: func() Input {
				in := input(rollingMD(1, "1", "0"), false, current("cur", 1, 1, 1))
				in.Deployment.Spec.Template.Spec.NodeTemplateSpec.Spec.Taints = []corev1.Taint{{Key: "k", Effect: corev1.TaintEffectNoSchedule}}
				in.Deployment.Spec.Template.Spec.MachineConfiguration = &v1alpha1.MachineConfiguration{MaxEvictRetries: ptr.To(int32(3))}
				return in
			}},
		{name: "a pool's budget replaces the deployment's", action: Rollout, surge: 2, unavailable: 0, replaced: 3,
			ops: "create NEW(2)",
			in: func() Input {
				in := input(rollingMD(3, "1", "0"), false, old("old", 3, 3, 3))
				in.Budget = &Budget{MaxSurge: 2, From: "PoolPolicy ns/pool"}
				return in
			}},
		{name: "a pool's budget of 0 and 0 holds the deployment", action: Blocked, blocked: []BlockReason{BlockedBudgetExhausted}, replaced: 3,
			ops: "create NEW(0)",
			in: func() Input {
				in := input(rollingMD(3, "1", "0"), false, old("old", 3, 3, 3))
				in.Budget = &Budget{From: "PoolPolicy ns/pool"}
				return in
			}},
		{name: "rolling with a target cluster: old nodes tainted, all annotated", action: Rollout, surge: 1, replaced: 1,
			ops: "scale cur 2→3; marknode old-0 taint=true annotate=true; marknode cur-0 taint=false annotate=true; marknode cur-1 taint=false annotate=true",
			in:  func() Input { return input(rollingMD(3, "1", "0"), true, old("old", 1, 1, 1), current("cur", 2, 2, 2)) }},
		{name: "rollout over: the marks come off once", action: None, surge: 1,
			ops: "marknode cur-0 taint=false annotate=false",
			in:  func() Input { return input(rollingMD(1, "1", "0"), true, current("cur", 1, 1, 1)) }},
		{name: "rollout over, nodes clean: nothing", action: None, surge: 1,
			in: func() Input {
				in := input(rollingMD(1, "1", "0"), true, current("cur", 1, 1, 1))
				in.NodesClean = true
				return in
			}},
		{name: "without the autoscaler annotation option, only the taint", action: Rollout, surge: 1, replaced: 1,
			ops: "scale cur 2→3; marknode old-0 taint=true annotate=false; marknode cur-0 taint=false annotate=false; marknode cur-1 taint=false annotate=false",
			in: func() Input {
				in := input(rollingMD(3, "1", "0"), true, old("old", 1, 1, 1), current("cur", 2, 2, 2))
				in.NoScaleDownAnnotation = true
				return in
			}},
	}
}

// TestDecisionJSON: the field names a plan's -o json shows are stable.
func TestDecisionJSON(t *testing.T) {
	in := input(rollingMD(3, "1", "0"), false, old("old", 3, 3, 3), current("cur", 1, 1, 1))
	in.Deployment.Spec.Template.Spec.NodeTemplateSpec.Labels = map[string]string{"zone": "b"}
	b, err := json.Marshal(Decide(in))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range got {
			if !yield(k) {
				return
			}
		}
	})
	want := []string{"action", "budgetFrom", "currentSet", "fields", "machinesReplaced", "maxSurge", "maxUnavailable", "nodes", "step", "strategy"}
	if !reflect.DeepEqual(keys, want) {
		t.Fatalf("keys %v, want %v (%s)", keys, want, b)
	}
	if !strings.Contains(string(b), `"ops":[{"op":"SyncSet","set":"cur","revision":2},{"op":"ScaleSet","set":"old","from":3,"to":2,"desiredReplicas":3,"maxReplicas":4,"goes":["old-0"]}]`) {
		t.Fatalf("step: %s", b)
	}
	blocked, _ := json.Marshal(Decide(input(rollingMD(3, "1", "0"), false, old("old", 2, 2, 2), current("cur", 2, 1, 2))))
	if !strings.Contains(string(blocked), `"blockedBy":[{"reason":"BudgetExhausted","message":"maxSurge 1 and maxUnavailable 0 (from deployment) are in use: 4 machines of at most 4`) {
		t.Fatalf("blocked: %s", blocked)
	}
}
