package pool

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	machinistv1alpha1 "github.com/machinist-io/machinist/core/apis/machinist/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/rollout"
)

func TestBudgets(t *testing.T) {
	cases := []struct {
		surge, unavailable string
		replicas           int32
		want               PoolBudgets
	}{
		{"", "", 6, PoolBudgets{1, 0}},       // defaults: one surge machine, none unavailable
		{"1", "0", 6, PoolBudgets{1, 0}},     // the pool's, not 1 per deployment
		{"25%", "25%", 6, PoolBudgets{2, 1}}, // surge rounds up, unavailable down
		{"0", "50%", 3, PoolBudgets{0, 1}},
		{"0", "10", 3, PoolBudgets{0, 3}}, // never more unavailable than replicas
		{"0", "0", 6, PoolBudgets{0, 0}},  // stays 0 and 0: Assign refuses it
		{"bogus", "", 6, PoolBudgets{0, 0}},
	}
	for _, c := range cases {
		if got := Budgets(policy(c.surge, c.unavailable), c.replicas); got != c.want {
			t.Errorf("maxSurge %q maxUnavailable %q of %d: %+v, want %+v", c.surge, c.unavailable, c.replicas, got, c.want)
		}
	}
}

func TestRepairLimit(t *testing.T) {
	cases := []struct {
		v        string
		replicas int32
		want     int32
	}{{"1", 3, 1}, {"50%", 4, 2}, {"10%", 4, 1}, {"0", 4, 1}, {"3", 2, 3}}
	for _, c := range cases {
		p := policy("", "")
		p.Spec.Repair.MaxInFlight = ptr.To(intstr.Parse(c.v))
		if got, ok := RepairLimit(p, c.replicas); !ok || got != c.want {
			t.Errorf("maxInFlight %s of %d: %d %v, want %d", c.v, c.replicas, got, ok, c.want)
		}
	}
	if _, ok := RepairLimit(policy("", ""), 3); ok {
		t.Error("a policy without spec.repair.maxInFlight has a repair limit")
	}
}

func TestAssign(t *testing.T) {
	a, b := md("a", "c1", 2), md("b", "c1", 2)
	other := policy("1", "0")
	other.Name = "other"
	zero := policy("0", "0")
	zero.Name = "zero"
	zero.Spec.Selector.MatchLabels = map[string]string{"pool": "zero"}
	z := md("z", "c1", 2)
	z.Labels = map[string]string{"pool": "zero"}
	none := policy("1", "0")
	none.Name = "none"
	none.Spec.Selector.MatchLabels = map[string]string{"pool": "nothing"}
	bad := policy("lots", "0")
	bad.Name = "bad"
	cases := []struct {
		name        string
		policies    []*machinistv1alpha1.PoolPolicy
		governed    map[string]string // deployment → policy ("" none)
		problem     map[string]string // policy → reason
		messageHint string
	}{
		{"one policy governs its pool", []*machinistv1alpha1.PoolPolicy{policy("1", "0")},
			map[string]string{"a": "workers", "b": "workers"}, nil, ""},
		{"selected by two: governed by neither", []*machinistv1alpha1.PoolPolicy{policy("1", "0"), other},
			map[string]string{"a": "", "b": ""}, map[string]string{"workers": ReasonConflict, "other": ReasonConflict}, "selected by PoolPolicies other and workers"},
		{"selects nothing", []*machinistv1alpha1.PoolPolicy{none}, map[string]string{"a": ""}, map[string]string{"none": ReasonSelectsNothing}, "matches no MachineDeployment"},
		{"0 and 0 never progresses", []*machinistv1alpha1.PoolPolicy{zero}, map[string]string{"z": ""}, map[string]string{"zero": ReasonNeverProgresses}, "could never progress"},
		{"invalid budget", []*machinistv1alpha1.PoolPolicy{bad}, map[string]string{"a": ""}, map[string]string{"bad": ReasonInvalidSpec}, "spec.rollout.maxSurge"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			as := Assign(c.policies, []*v1alpha1.MachineDeployment{a, b, z})
			for d, want := range c.governed {
				got := ""
				if p := as.Governing(d); p != nil {
					got = p.Name
				}
				if got != want {
					t.Errorf("%s governed by %q, want %q", d, got, want)
				}
			}
			for p, reason := range c.problem {
				pr := as.Problem(p)
				if pr == nil || pr.Reason != reason || !strings.Contains(pr.Message, c.messageHint) {
					t.Errorf("policy %s problem %+v, want %s mentioning %q", p, pr, reason, c.messageHint)
				}
			}
		})
	}
}

// TestInputsShareThePoolsBudget: a member using the pool's one surge machine leaves the others
// none; Sequential names whose turn it is; the pool's gates reach every member.
func TestInputsShareThePoolsBudget(t *testing.T) {
	a, b, c := md("a", "new", 2), md("b", "new", 2), md("c", "new", 2)
	rolling := world(a, settled(a, "old"), setOf{class: "new", replicas: 1, running: 1})
	rolling.Sets[0].Spec.Replicas = 2
	p := Pool{Policy: policy("1", "0"), Now: t0, Members: []rollout.Input{
		rolling, world(b, settled(b, "old")), world(c, settled(c, "old")),
	}}
	in := p.Inputs()
	want := map[string]int32{"a": 1, "b": 0, "c": 0}
	for _, i := range in {
		if i.Budget == nil || i.Budget.MaxSurge != want[i.Deployment.Name] || i.Budget.MaxUnavailable != 0 {
			t.Errorf("%s budget %+v, want surge %d and unavailable 0", i.Deployment.Name, i.Budget, want[i.Deployment.Name])
		}
		if i.Pool == nil || i.Pool.WaitForTurn != "" {
			t.Errorf("%s gates %+v: a Parallel pool makes no one wait for a turn", i.Deployment.Name, i.Pool)
		}
		if !i.NoScaleDownAnnotation {
			t.Errorf("%s: a pool keeps Cluster Autoscaler's scale-down working", i.Deployment.Name)
		}
	}

	p.Policy.Spec.Rollout.Order = machinistv1alpha1.OrderSequential
	p.Members = []rollout.Input{world(c, settled(c, "old")), world(b, settled(b, "old")), rolling}
	for _, i := range p.Inputs() {
		waits := i.Pool.WaitForTurn != ""
		if waits != (i.Deployment.Name != "a") {
			t.Errorf("Sequential: %s waits %v (%q); the started deployment a rolls, the others wait", i.Deployment.Name, waits, i.Pool.WaitForTurn)
		}
	}
	p.Members = []rollout.Input{world(c, settled(c, "old")), world(b, settled(b, "old"))}
	for _, i := range p.Inputs() {
		if waits := i.Pool.WaitForTurn != ""; waits != (i.Deployment.Name == "c") {
			t.Errorf("Sequential by name: %s waits %v; b goes first", i.Deployment.Name, waits)
		}
	}
}

// TestHaltAndStatus: failed new machines of the rollout halt it at haltAfterFailures, named in
// the Progressing condition; the status counts the budget in use and left.
func TestHaltAndStatus(t *testing.T) {
	a, b := md("a", "new", 2), md("b", "new", 2)
	pol := policy("1", "0")
	pol.Spec.Rollout.HaltAfterFailures = 2
	p := Pool{Policy: pol, Now: t0, Members: []rollout.Input{
		world(a, settled(a, "old"), setOf{class: "new", replicas: 1, failed: 1}),
		world(b, settled(b, "old")),
	}}
	if h := p.Halted(); h != "" {
		t.Fatalf("halted after 1 failure: %s", h)
	}
	st := p.Status(nil, nil)
	if st.Budget.SurgeInUse != 1 || st.Budget.SurgeLeft != 0 || st.OutdatedReplicas != 4 || st.UpdatedReplicas != 1 {
		t.Errorf("budget %+v outdated %d updated %d: want surge 1 in use, 0 left, 4 outdated, 1 updated", st.Budget, st.OutdatedReplicas, st.UpdatedReplicas)
	}
	if c := meta.FindStatusCondition(st.Conditions, machinistv1alpha1.PoolProgressing); c == nil || c.Reason != ReasonRollingOut {
		t.Errorf("Progressing %+v: want RollingOut", c)
	}
	// The first failure is recorded; its machine goes and a second fails.
	pol.Status = st
	p.Members[0] = world(a, settled(a, "old"), setOf{class: "new", replicas: 1})
	seen := []FailedMachine{{Machine: "a-new-9", Set: "a-new", Reason: "did not join", At: t0.Add(time.Minute)}}
	st = p.Status(nil, seen)
	c := meta.FindStatusCondition(st.Conditions, machinistv1alpha1.PoolProgressing)
	if c == nil || c.Reason != ReasonHalted || !strings.Contains(c.Message, "a-new-0") || !strings.Contains(c.Message, "a-new-9") {
		t.Fatalf("Progressing %+v: want Halted naming a-new-0 and a-new-9", c)
	}
	pol.Status = st
	if h := p.Halted(); h == "" {
		t.Error("the recorded failures do not halt the members' decisions")
	}
	// A new rollout (another template) starts with no failures.
	a.Spec.Template.Spec.Class.Name = "newer"
	if h := p.Halted(); h != "" {
		t.Errorf("a new rollout is halted by the last one's failures: %s", h)
	}
}
