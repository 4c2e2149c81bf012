package rollout

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// count sums up a world: its machines (terminating included), the live ones of the
// deployment's class, and the available replicas.
func count(in Input) (all, current, available int) {
	for _, ms := range in.Sets {
		available += int(ms.Status.AvailableReplicas)
		for _, m := range in.Machines[ms.UID] {
			all++
			if m.DeletionTimestamp == nil && ms.Spec.Template.Spec.Class.Name == in.Deployment.Spec.Template.Spec.Class.Name {
				current++
			}
		}
	}
	return all, current, available
}

// replay applies each decision to the world and settles it, as Project did, calling check
// after each.
func replay(in Input, decs []Decision, check func(i int, w Input)) Input {
	for i, dec := range decs {
		in = Settle(Apply(in, dec))
		check(i, in)
	}
	return in
}

// TestProjectReplacesOneAtATime: a class change on a deployment of 3 with maxSurge 1 and
// maxUnavailable 0 projects 3 replacements one at a time: a new machine, then an old one goes,
// three times, never more than 4 machines and never fewer than 3 available.
func TestProjectReplacesOneAtATime(t *testing.T) {
	in := input(rollingMD(3, "1", "0"), false, old("old", 3, 3, 3))
	decs := Project(in, 50)
	var steps []string
	for _, dec := range decs {
		steps = append(steps, string(dec.Action)+": "+ops(dec))
	}
	t.Logf("projection:\n%s", strings.Join(steps, "\n"))
	created := ""
	if c, ok := decs[0].Step.Ops[0].(CreateSet); ok {
		created = c.Name
	}
	want := []string{
		"Rollout: create NEW(1)",
		"Rollout: scale old 3→2 goes old-0",
		fmt.Sprintf("Rollout: scale %s 1→2", created),
		"Rollout: scale old 2→1 goes old-1",
		fmt.Sprintf("Rollout: scale %s 2→3", created),
		"Rollout: scale old 1→0 goes old-2",
		"None: ",
	}
	if !slices.Equal(steps, want) {
		t.Fatalf("projection:\n%s\nwant:\n%s", strings.Join(steps, "\n"), strings.Join(want, "\n"))
	}
	replaced := 0
	for _, dec := range decs {
		if dec.Action == Rollout && dec.MaxSurge != 1 || dec.MaxUnavailable != 0 {
			t.Errorf("decision with maxSurge %d maxUnavailable %d", dec.MaxSurge, dec.MaxUnavailable)
		}
		for _, op := range dec.Step.Ops {
			if s, ok := op.(ScaleSet); ok && s.Set == "old" {
				if s.From-s.To != 1 {
					t.Errorf("the old set went %d → %d: not one at a time", s.From, s.To)
				}
				replaced += int(s.From - s.To)
			}
		}
	}
	if replaced != 3 || decs[0].MachinesReplaced != 3 {
		t.Fatalf("%d machines replaced (planned %d), want 3", replaced, decs[0].MachinesReplaced)
	}
	end := replay(in, decs, func(i int, w Input) {
		if all, _, available := count(w); all > 4 || available < 3 {
			t.Errorf("after step %d: %d machines (max 4), %d available (min 3)", i, all, available)
		}
	})
	if all, current, _ := count(end); all != 3 || current != 3 {
		t.Fatalf("the projection ends with %d machines, %d of the new class", all, current)
	}
}

// TestProjectStrategies plays other rollouts to their end: each ends with every machine of
// the deployment's template, within its budget at every step.
func TestProjectStrategies(t *testing.T) {
	for _, tc := range []struct {
		name             string
		in               Input
		steps            int
		maxAll, minAvail int
		newVMs           bool // the machines at the end are new ones (not moved)
		endAction        Action
		blocked          BlockReason
	}{
		{name: "rolling 10, 25% / 25%", in: input(rollingMD(10, "25%", "25%"), false, old("old", 10, 10, 10)),
			maxAll: 13, minAvail: 8, newVMs: true, endAction: None},
		{name: "rolling 3, 0 / 1", in: input(rollingMD(3, "0", "1"), false, old("old", 3, 3, 3)),
			maxAll: 3, minAvail: 2, newVMs: true, endAction: None},
		{name: "recreate 3", in: input(recreateMD(3), false, old("old", 3, 3, 3)),
			maxAll: 3, minAvail: 0, newVMs: true, endAction: None},
		{name: "in place, auto, 3, 0 / 1", in: input(inPlaceMD(3, "0", "1", v1alpha1.OrchestrationTypeAuto), true, old("old", 3, 3, 3)),
			maxAll: 3, minAvail: 2, newVMs: false, endAction: None},
		{name: "in place, manual: waits for approval", in: input(inPlaceMD(3, "0", "1", v1alpha1.OrchestrationTypeManual), true, old("old", 3, 3, 3)),
			maxAll: 3, minAvail: 3, endAction: Blocked, blocked: BlockedWaitingForApproval},
		{name: "paused: blocked at once", in: func() Input {
			in := input(rollingMD(3, "1", "0"), false, old("old", 3, 3, 3))
			in.Deployment.Spec.Paused = true
			return in
		}(), maxAll: 3, minAvail: 3, endAction: Blocked, blocked: BlockedPaused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			decs := Project(tc.in, 100)
			last := decs[len(decs)-1]
			if last.Action != tc.endAction || (tc.blocked != "" && !last.Blocked(tc.blocked)) {
				t.Fatalf("the projection ends %s %v after %d decisions, want %s %s", last.Action, last.BlockedBy, len(decs), tc.endAction, tc.blocked)
			}
			end := replay(tc.in, decs, func(i int, w Input) {
				if all, _, available := count(w); all > tc.maxAll || available < tc.minAvail {
					t.Errorf("after step %d: %d machines (max %d), %d available (min %d)", i, all, tc.maxAll, available, tc.minAvail)
				}
			})
			if tc.endAction != None {
				return
			}
			all, current, _ := count(end)
			if all != 3 && all != 10 || current != all {
				t.Fatalf("the projection ends with %d machines, %d of the deployment's class", all, current)
			}
			for _, ms := range end.Machines {
				for _, m := range ms {
					if strings.HasPrefix(m.Name, "old-") == tc.newVMs {
						t.Errorf("machine %s at the end: new VMs %v", m.Name, tc.newVMs)
					}
				}
			}
		})
	}
}
