package pool

import (
	"fmt"
	"hash/fnv"
	"sort"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	machinistv1alpha1 "github.com/machinist-io/machinist/core/apis/machinist/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/rollout"
)

// Pool is a policy and the worlds of the deployments it governs, each as rollout reads it (its
// sets and machines, and its nodes where Manual approval needs them). Its methods are pure.
type Pool struct {
	Policy *machinistv1alpha1.PoolPolicy
	// Members are the governed deployments' worlds (Assignment.Members), in any order.
	Members []rollout.Input
	// Now is the time of the decisions.
	Now time.Time
}

// From names the policy in messages: "PoolPolicy ns/name".
func (p Pool) From() string { return "PoolPolicy " + p.Policy.Namespace + "/" + p.Policy.Name }

// Replicas is the members' spec.replicas, summed.
func (p Pool) Replicas() int32 {
	var n int32
	for _, in := range p.Members {
		n += in.Deployment.Spec.Replicas
	}
	return n
}

// Budgets are the policy's budgets against the pool's replicas.
func (p Pool) Budgets() PoolBudgets { return Budgets(p.Policy, p.Replicas()) }

// member is what the pool knows of one governed deployment.
type member struct {
	in                 rollout.Input
	current            *v1alpha1.MachineSet // the set of its template, nil before there is one
	surge, unavailable int32                // its use of the pool's budgets
	// outdated: machines of older templates are left (or its template has no set yet).
	outdated bool
	// started: its rollout has new machines (its current set has replicas or machines).
	started          bool
	updated, oldLeft int32 // live machines of the current and of older templates
}

// members sizes up every member, in the pool's order: Sequential by the orderBy label's value
// (deployments without it last), then by name; Parallel by name.
func (p Pool) members() []member {
	base := p.baseGates()
	out := make([]member, 0, len(p.Members))
	for _, in := range p.Members {
		in.Pool = &base
		m := member{in: in}
		m.surge, m.unavailable = rollout.Usage(in)
		sets := append([]*v1alpha1.MachineSet{}, in.Sets...)
		sort.SliceStable(sets, func(i, j int) bool { return sets[i].CreationTimestamp.Before(&sets[j].CreationTimestamp) })
		for _, ms := range sets {
			if m.current == nil && ms.DeletionTimestamp == nil && rollout.TemplateMatches(in.Deployment, ms) {
				m.current = ms
				continue
			}
			if ms.Spec.Replicas > 0 || len(in.Machines[ms.UID]) > 0 {
				m.outdated = true
			}
			m.oldLeft += live(in.Machines[ms.UID])
		}
		if m.current == nil {
			m.outdated = m.outdated || in.Deployment.Spec.Replicas > 0
		} else {
			m.updated = live(in.Machines[m.current.UID])
			m.started = m.current.Spec.Replicas > 0 || len(in.Machines[m.current.UID]) > 0
		}
		out = append(out, m)
	}
	key := p.Policy.Spec.Rollout.OrderBy
	sequential := p.Policy.Spec.Rollout.Order == machinistv1alpha1.OrderSequential
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i].in.Deployment, out[j].in.Deployment
		if sequential && key != "" {
			va, oka := a.Labels[key]
			vb, okb := b.Labels[key]
			if oka != okb {
				return oka
			}
			if va != vb {
				return va < vb
			}
		}
		return a.Name < b.Name
	})
	return out
}

func live(ms []*v1alpha1.Machine) int32 {
	var n int32
	for _, m := range ms {
		if m.DeletionTimestamp == nil {
			n++
		}
	}
	return n
}

// baseGates are the gates every member shares.
func (p Pool) baseGates() rollout.PoolGates {
	r := p.Policy.Spec.Rollout
	return rollout.PoolGates{
		From:              p.From(),
		Paused:            r.Paused,
		ManualApproval:    r.Approval == machinistv1alpha1.ApprovalManual,
		ReadySeconds:      r.HealthGate.ReadySeconds,
		SoakSeconds:       r.HealthGate.SoakSeconds,
		CordonUndrainable: r.Undrainable == machinistv1alpha1.UndrainableCordon,
	}
}

// turn names the deployment a Sequential pool rolls out now: the one whose rollout has started,
// else the first in order with machines to replace; "" when none has any (or the pool is
// Parallel).
func (p Pool) turn(ms []member) string {
	if p.Policy.Spec.Rollout.Order != machinistv1alpha1.OrderSequential {
		return ""
	}
	for _, m := range ms {
		if m.outdated && m.started {
			return m.in.Deployment.Name
		}
	}
	for _, m := range ms {
		if m.outdated {
			return m.in.Deployment.Name
		}
	}
	return ""
}

// Inputs returns every member's input with its share of the pool's budgets and its gates, in
// the pool's order. A member's share is the pool's budget less what the others use now, so the
// decisions of all members together stay within the pool's budgets as long as they are made one
// after another on what the previous ones left.
func (p Pool) Inputs() []rollout.Input {
	ms := p.members()
	b := p.Budgets()
	var surge, unavailable int32
	for _, m := range ms {
		surge += m.surge
		unavailable += m.unavailable
	}
	turn := p.turn(ms)
	halted := p.Halted()
	out := make([]rollout.Input, len(ms))
	for i, m := range ms {
		in := m.in
		g := *in.Pool
		g.Halted = halted
		if turn != "" && turn != in.Deployment.Name {
			g.WaitForTurn = fmt.Sprintf("%s: spec.rollout.order Sequential: MachineDeployment %s rolls out first", p.From(), turn)
		}
		in.Pool = &g
		in.Budget = &rollout.Budget{
			MaxSurge:       max(b.MaxSurge-(surge-m.surge), 0),
			MaxUnavailable: max(b.MaxUnavailable-(unavailable-m.unavailable), 0),
			From:           p.From(),
		}
		// The pool keeps Cluster Autoscaler's scale-down working during its rollouts.
		in.NoScaleDownAnnotation = true
		out[i] = in
	}
	return out
}

// Input returns a member's input with its share and gates; ok is false for a deployment the
// pool does not govern.
func (p Pool) Input(deployment string) (rollout.Input, bool) {
	for _, in := range p.Inputs() {
		if in.Deployment.Name == deployment {
			return in, true
		}
	}
	return rollout.Input{}, false
}

// RolloutID names the pool's current rollout by its members' templates: it changes when one of
// them changes.
func (p Pool) RolloutID() string {
	parts := make([]string, 0, len(p.Members))
	for _, in := range p.Members {
		parts = append(parts, in.Deployment.Name+"="+rollout.RevisionHash(&in.Deployment.Spec.Template))
	}
	sort.Strings(parts)
	h := fnv.New64a()
	h.Write([]byte(strings.Join(parts, ",")))
	return strconv.FormatUint(h.Sum64(), 16)
}

// FailedMachine is a machine seen going Failed, as the PoolPolicy controller saw it (it may be
// gone by the time the failure is recorded).
type FailedMachine struct {
	Machine, Set, Reason string
	At                   time.Time
}

// Failures are the new machines of the current rollout that failed: those recorded in the
// policy's status for this rollout and this haltAfterFailures, those seen (if their set is
// still its deployment's current one and it rolls out), and the current sets' machines that
// are Failed now; oldest first, each machine once.
func (p Pool) Failures(seen []FailedMachine) []machinistv1alpha1.PoolFailure {
	byName := map[string]machinistv1alpha1.PoolFailure{}
	if r := p.Policy.Status.Rollout; r != nil && r.ID == p.RolloutID() && r.HaltAfterFailures == p.Policy.Spec.Rollout.HaltAfterFailures {
		for _, f := range r.Failures {
			byName[f.Machine] = f
		}
	}
	ms := p.members()
	for _, m := range ms {
		if !m.outdated || m.current == nil {
			continue
		}
		for _, s := range seen {
			if s.Set == m.current.Name {
				if _, ok := byName[s.Machine]; !ok {
					byName[s.Machine] = machinistv1alpha1.PoolFailure{Machine: s.Machine, Deployment: m.in.Deployment.Name, Reason: s.Reason, Time: metav1.NewTime(s.At)}
				}
			}
		}
		for _, mc := range m.in.Machines[m.current.UID] {
			if mc.Status.CurrentStatus.Phase != v1alpha1.MachineFailed {
				continue
			}
			if _, ok := byName[mc.Name]; !ok {
				at := mc.Status.CurrentStatus.LastUpdateTime
				if at.IsZero() {
					at = metav1.NewTime(p.Now)
				}
				byName[mc.Name] = machinistv1alpha1.PoolFailure{Machine: mc.Name, Deployment: m.in.Deployment.Name,
					Reason: mc.Status.LastOperation.Description, Time: at}
			}
		}
	}
	out := make([]machinistv1alpha1.PoolFailure, 0, len(byName))
	for _, f := range byName {
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Time.Equal(&out[j].Time) {
			return out[i].Time.Before(&out[j].Time)
		}
		return out[i].Machine < out[j].Machine
	})
	return out
}

// Halted says why the pool's rollout stopped itself, "" while it may go on: haltAfterFailures
// new machines of the rollout failed.
func (p Pool) Halted() string { return p.halted(p.Failures(nil)) }

func (p Pool) halted(failures []machinistv1alpha1.PoolFailure) string {
	k := p.Policy.Spec.Rollout.HaltAfterFailures
	if k <= 0 || int32(len(failures)) < k {
		return ""
	}
	names := make([]string, len(failures))
	for i, f := range failures {
		names[i] = f.Machine + " (MachineDeployment " + f.Deployment + ")"
	}
	return fmt.Sprintf("%s: %d new machines of the rollout failed: %s; spec.rollout.haltAfterFailures is %d, so the rollout stopped and the old machines stay: fix the cause, then change the template (a new rollout) or spec.rollout.haltAfterFailures",
		p.From(), len(failures), strings.Join(names, ", "), k)
}
