package rollout

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	machinistv1alpha1 "github.com/machinist-io/machinist/core/apis/machinist/v1alpha1"
)

// pooled gives an input the pool's share of its budget and its gates.
func pooled(in Input, surge, unavailable int32, g PoolGates) Input {
	g.From = "PoolPolicy ns/pool"
	in.Budget = &Budget{MaxSurge: surge, MaxUnavailable: unavailable, From: g.From}
	in.Pool = &g
	in.NoScaleDownAnnotation = true // as the controller decides for a governed deployment
	return in
}

// readyFor makes every live machine of a set Running with a Ready node since age before t0.
func readyFor(in Input, set string, age time.Duration) {
	for _, m := range in.Machines[typesUID(set)] {
		since := metav1.NewTime(t0.Add(-age))
		m.Status.CurrentStatus.LastUpdateTime = since
		m.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastTransitionTime: since}}
	}
}

// selectNode labels the node of a machine selected-for-update.
func selectNode(in Input, machine string) {
	in.Nodes[machine].Labels[v1alpha1.LabelNodeSelectedForUpdate] = "true"
}

// approve selects the node of a machine and gives the machine the marks of an approval.
func approve(in Input, set, machine string) {
	selectNode(in, machine)
	for _, m := range in.Machines[typesUID(set)] {
		if m.Name == machine {
			Prioritize{Machine: machine, Approved: true}.Apply(m)
		}
	}
}

func poolCases() []decideCase {
	return []decideCase{
		{name: "pool: its share of the pool's surge makes the first new machine", action: Rollout, surge: 1, replaced: 2,
			ops: "create NEW(1)",
			in: func() Input {
				return pooled(input(rollingMD(2, "5", "5"), false, old("old", 2, 2, 2)), 1, 0, PoolGates{})
			}},
		{name: "pool: another zone uses the surge: this one waits", action: Blocked, blocked: []BlockReason{BlockedBudgetExhausted}, replaced: 2,
			ops: "create NEW(0)",
			in: func() Input {
				return pooled(input(rollingMD(2, "5", "5"), false, old("old", 2, 2, 2)), 0, 0, PoolGates{})
			}},
		{name: "pool paused: the new machine in flight is not joined by another", action: Blocked, blocked: []BlockReason{BlockedPaused},
			surge: 1, replaced: 2,
			in: func() Input {
				return pooled(input(rollingMD(3, "1", "0"), false, old("old", 2, 2, 2), current("cur", 1, 0, 1)), 1, 0, PoolGates{Paused: true})
			}},
		{name: "pool paused: a replacement in flight finishes (its old machine goes)", action: Blocked, blocked: []BlockReason{BlockedPaused},
			surge: 1, replaced: 2,
			ops: "scale old 2→1 goes old-0",
			in: func() Input {
				return pooled(input(rollingMD(2, "1", "0"), false, old("old", 2, 2, 2), current("cur", 1, 1, 1)), 1, 0, PoolGates{Paused: true})
			}},
		{name: "pool paused: a deployment short of its replicas still fills them", action: Blocked, blocked: []BlockReason{BlockedPaused},
			unavailable: 1, replaced: 1,
			ops: "scale cur 0→1",
			in: func() Input {
				return pooled(input(rollingMD(2, "0", "1"), false, old("old", 1, 1, 1), current("cur", 0, 0, 0)), 0, 1, PoolGates{Paused: true})
			}},
		{name: "pool sequential: not its turn", action: Blocked, blocked: []BlockReason{BlockedWaitingForTurn}, surge: 1, replaced: 2,
			ops: "create NEW(0)",
			in: func() Input {
				return pooled(input(rollingMD(2, "1", "0"), false, old("old", 2, 2, 2)), 1, 0, PoolGates{WaitForTurn: "md-a rolls out first"})
			}},
		{name: "pool halted: the failing new machine is given up", action: Blocked, blocked: []BlockReason{BlockedHalted}, surge: 1, replaced: 2,
			ops: "scale cur 1→0 goes cur-0",
			in: func() Input {
				return pooled(input(rollingMD(2, "1", "0"), false, old("old", 2, 2, 2), current("cur", 1, 0, 1)), 1, 0, PoolGates{Halted: "2 new machines failed"})
			}},
		{name: "pool halted: the old set grows back to the replicas", action: Blocked, blocked: []BlockReason{BlockedHalted}, unavailable: 1, replaced: 1,
			ops: "scale cur 1→0 goes cur-0; scale old 1→2",
			in: func() Input {
				return pooled(input(rollingMD(2, "0", "1"), false, old("old", 1, 1, 1), current("cur", 1, 0, 1)), 0, 1, PoolGates{Halted: "2 new machines failed"})
			}},
		{name: "pool manual approval: nothing selected, nothing replaced", action: Blocked, blocked: []BlockReason{BlockedWaitingForApproval}, surge: 1, replaced: 2,
			ops: "create NEW(0); marknode old-0 taint=true annotate=false; marknode old-1 taint=true annotate=false",
			in: func() Input {
				return pooled(input(rollingMD(2, "1", "0"), true, old("old", 2, 2, 2)), 1, 0, PoolGates{ManualApproval: true})
			}},
		{name: "pool manual approval: a selected node's machine is marked first", action: Rollout, surge: 1, replaced: 2, await: true,
			ops: "Prioritize",
			in: func() Input {
				in := pooled(input(rollingMD(2, "1", "0"), true, old("old", 2, 2, 2)), 1, 0, PoolGates{ManualApproval: true})
				selectNode(in, "old-1")
				return in
			}},
		{name: "pool manual approval: one approved machine, one new machine", action: Rollout, surge: 1, replaced: 2,
			ops: "create NEW(1); marknode old-0 taint=true annotate=false; marknode old-1 taint=true annotate=false",
			in: func() Input {
				in := pooled(input(rollingMD(2, "1", "0"), true, old("old", 2, 2, 2)), 1, 0, PoolGates{ManualApproval: true})
				approve(in, "old", "old-1")
				return in
			}},
		{name: "pool manual approval: the approved machine goes, not the older one", action: Rollout, surge: 1, replaced: 2,
			ops: "scale old 2→1 goes old-1; marknode old-0 taint=true annotate=false; marknode old-1 taint=true annotate=false; marknode cur-0 taint=false annotate=false",
			in: func() Input {
				in := pooled(input(rollingMD(2, "1", "0"), true, old("old", 2, 2, 2), current("cur", 1, 1, 1)), 1, 0, PoolGates{ManualApproval: true})
				approve(in, "old", "old-1")
				return in
			}},
		{name: "pool manual approval: a lost label takes the mark back", action: Rollout, surge: 1, replaced: 2, await: true,
			ops: "Prioritize",
			in: func() Input {
				in := pooled(input(rollingMD(2, "1", "0"), true, old("old", 2, 2, 2), current("cur", 1, 1, 1)), 1, 0, PoolGates{ManualApproval: true})
				approve(in, "old", "old-1")
				delete(in.Nodes["old-1"].Labels, v1alpha1.LabelNodeSelectedForUpdate)
				return in
			}},
		{name: "pool manual approval, Recreate: waits until every old machine is approved", action: Blocked, blocked: []BlockReason{BlockedWaitingForApproval}, replaced: 2,
			ops: "marknode old-0 taint=true annotate=false; marknode old-1 taint=true annotate=false",
			in: func() Input {
				in := pooled(input(recreateMD(2), true, old("old", 2, 2, 2)), 1, 0, PoolGates{ManualApproval: true})
				approve(in, "old", "old-1")
				return in
			}},
		{name: "pool health gate: a new machine Ready for 10s of 30s frees nothing", action: Blocked, blocked: []BlockReason{BlockedHealthGate}, surge: 1, replaced: 2,
			in: func() Input {
				in := pooled(input(rollingMD(2, "1", "0"), false, old("old", 2, 2, 2), current("cur", 1, 1, 1)), 1, 0, PoolGates{ReadySeconds: 30})
				readyFor(in, "cur", 10*time.Second)
				return in
			}},
		{name: "pool health gate: Ready for 40s of 30s: the old machine goes", action: Rollout, surge: 1, replaced: 2,
			ops: "scale old 2→1 goes old-0",
			in: func() Input {
				in := pooled(input(rollingMD(2, "1", "0"), false, old("old", 2, 2, 2), current("cur", 1, 1, 1)), 1, 0, PoolGates{ReadySeconds: 30})
				readyFor(in, "cur", 40*time.Second)
				return in
			}},
		{name: "pool soak: the next new machine waits for the last one's soak", action: Blocked, blocked: []BlockReason{BlockedSoaking}, surge: 1, replaced: 1,
			in: func() Input {
				in := pooled(input(rollingMD(2, "1", "0"), false, old("old", 1, 1, 1), current("cur", 1, 1, 1)), 1, 0, PoolGates{SoakSeconds: 60})
				readyFor(in, "cur", 10*time.Second)
				return in
			}},
		{name: "pool soak passed: the next new machine", action: Rollout, surge: 1, replaced: 1,
			ops: "scale cur 1→2",
			in: func() Input {
				in := pooled(input(rollingMD(2, "1", "0"), false, old("old", 1, 1, 1), current("cur", 1, 1, 1)), 1, 0, PoolGates{SoakSeconds: 60})
				readyFor(in, "cur", 61*time.Second)
				return in
			}},
		{name: "pool undrainable Wait: a terminating old machine holds the surge", action: Blocked, blocked: []BlockReason{BlockedBudgetExhausted}, surge: 1, replaced: 1,
			in: func() Input {
				return pooled(parkedOld(), 1, 0, PoolGates{})
			}},
		{name: "pool undrainable Cordon: the parked machine counts against nothing", action: Rollout, surge: 1, replaced: 1,
			ops: "scale cur 1→2",
			in: func() Input {
				return pooled(parkedOld(), 1, 0, PoolGates{CordonUndrainable: true})
			}},
		{name: "a scaler's marked machine whose replicas were put back is deleted (MCM #1078)", action: None, surge: 1,
			ops: "DeleteMachine",
			in: func() Input {
				in := input(rollingMD(3, "1", "0"), false, current("cur", 3, 3, 3))
				in.Deployment.Annotations = map[string]string{v1alpha1.AnnotationTriggerDeletionByMCM: "cur-1~2026-01-01T00:00:00Z"}
				MarkForDeletion{Machine: "cur-1", At: "2026-01-01T00:00:00Z"}.Apply(in.Machines["cur"][1])
				return in
			}},
	}
}

// parkedOld: the rollout's last old machine is terminating, its node left cordoned.
func parkedOld() Input {
	o := old("old", 0, 0, 0)
	o.dying = 1
	in := input(rollingMD(2, "1", "0"), false, o, current("cur", 1, 1, 1))
	m := in.Machines["old"][0]
	m.Annotations = map[string]string{machinistv1alpha1.AnnotationUndrainable: "2026-01-01T00:00:00Z"}
	// A second old set keeps one machine to replace.
	return withOld(in, "older", 1)
}

// withOld adds an old set of n available machines, older than the others.
func withOld(in Input, name string, n int) Input {
	extra := input(in.Deployment, in.TargetCluster, old(name, int32(n), int32(n), n))
	ms := extra.Sets[0]
	ms.CreationTimestamp = metav1.NewTime(t0.Add(-24 * time.Hour))
	in.Sets = append([]*v1alpha1.MachineSet{ms}, in.Sets...)
	in.Machines[ms.UID] = extra.Machines[ms.UID]
	return in
}

func typesUID(set string) types.UID { return types.UID(set) }

// TestPoolRecheck: the health gate and the soak ask for a decision when their time passes.
func TestPoolRecheck(t *testing.T) {
	in := pooled(input(rollingMD(2, "1", "0"), false, old("old", 2, 2, 2), current("cur", 1, 1, 1)), 1, 0, PoolGates{ReadySeconds: 30})
	readyFor(in, "cur", 10*time.Second)
	if dec := Decide(in); dec.RecheckAt == nil || !dec.RecheckAt.Equal(t0.Add(20*time.Second)) {
		t.Errorf("health gate: recheck at %v, want %v", dec.RecheckAt, t0.Add(20*time.Second))
	}
	in = pooled(input(rollingMD(2, "1", "0"), false, old("old", 1, 1, 1), current("cur", 1, 1, 1)), 1, 0, PoolGates{SoakSeconds: 60})
	readyFor(in, "cur", 10*time.Second)
	if dec := Decide(in); dec.RecheckAt == nil || !dec.RecheckAt.Equal(t0.Add(50*time.Second)) {
		t.Errorf("soak: recheck at %v, want %v", dec.RecheckAt, t0.Add(50*time.Second))
	}
	if dec := Decide(input(rollingMD(2, "1", "0"), false, old("old", 2, 2, 2))); dec.RecheckAt != nil {
		t.Errorf("no pool: recheck at %v", dec.RecheckAt)
	}
}

// TestUsage: what a deployment takes of its pool's budgets, by the rules Decide counts with.
func TestUsage(t *testing.T) {
	cases := []struct {
		name               string
		in                 func() Input
		surge, unavailable int32
	}{
		{"settled", func() Input { return input(rollingMD(2, "1", "0"), false, current("cur", 2, 2, 2)) }, 0, 0},
		{"a surge machine starting", func() Input {
			return input(rollingMD(2, "1", "0"), false, old("old", 2, 2, 2), current("cur", 1, 0, 1))
		}, 1, 0},
		{"an old machine gone before its replacement", func() Input {
			return input(rollingMD(2, "0", "1"), false, old("old", 1, 1, 1), current("cur", 1, 0, 1))
		}, 0, 1},
		{"a terminating machine holds surge", func() Input {
			o := old("old", 1, 1, 1)
			o.dying = 1
			return input(rollingMD(2, "1", "0"), false, o, current("cur", 1, 1, 1))
		}, 1, 0},
		{"a parked machine does not, under Cordon", func() Input {
			in := pooled(parkedOld(), 1, 0, PoolGates{CordonUndrainable: true})
			return in
		}, 0, 0},
		{"the health gate keeps a young machine unavailable", func() Input {
			in := pooled(input(rollingMD(2, "1", "0"), false, old("old", 1, 1, 1), current("cur", 1, 1, 1)), 1, 0, PoolGates{ReadySeconds: 30})
			readyFor(in, "cur", 10*time.Second)
			return in
		}, 0, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, u := Usage(tc.in())
			if s != tc.surge || u != tc.unavailable {
				t.Errorf("usage surge %d unavailable %d, want %d %d", s, u, tc.surge, tc.unavailable)
			}
		})
	}
}

// TestReadySince: Running and Ready, since the later of the two.
func TestReadySince(t *testing.T) {
	m := &v1alpha1.Machine{}
	if _, ok := ReadySince(m); ok {
		t.Error("a machine without a phase is not Ready")
	}
	m.Status.CurrentStatus.Phase = v1alpha1.MachineRunning
	m.Status.CurrentStatus.LastUpdateTime = metav1.NewTime(t0)
	if since, ok := ReadySince(m); !ok || !since.Equal(t0) {
		t.Errorf("Running without conditions: %v %v", since, ok)
	}
	m.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(t0.Add(time.Minute))}}
	if since, ok := ReadySince(m); !ok || !since.Equal(t0.Add(time.Minute)) {
		t.Errorf("Ready after Running: %v %v", since, ok)
	}
	m.Status.Conditions[0].Status = corev1.ConditionFalse
	if _, ok := ReadySince(m); ok {
		t.Error("a NotReady node is not Ready")
	}
	m.Status.Conditions[0].Status = corev1.ConditionTrue
	m.DeletionTimestamp = ptr.To(metav1.NewTime(t0))
	if _, ok := ReadySince(m); ok {
		t.Error("a terminating machine is not Ready")
	}
}
