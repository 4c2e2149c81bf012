package pool

import (
	"fmt"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	machinistv1alpha1 "github.com/machinist-io/machinist/core/apis/machinist/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/rollout"
)

// Condition reasons of a PoolPolicy besides Assign's.
const (
	ReasonRollingOut         = "RollingOut"
	ReasonComplete           = "Complete"
	ReasonHalted             = "Halted"
	ReasonPaused             = "Paused"
	ReasonNotPaused          = "NotPaused"
	ReasonWaitingForApproval = "WaitingForApproval"
	ReasonApproved           = "NothingWaiting"
	ReasonBudgetExhausted    = "BudgetExhausted"
	ReasonBudgetLeft         = "BudgetLeft"
)

// maxFailures bounds the failures a status keeps.
const maxFailures = 20

// BeingReplaced reports whether a machine counts against a repair budget: any phase but
// Running, Unknown and Available, unless it is preserved (the Machine controller's rule, MCM's).
func BeingReplaced(m *v1alpha1.Machine) bool {
	if m.DeletionTimestamp == nil && m.Status.CurrentStatus.PreserveExpiryTime != nil {
		return false
	}
	switch m.Status.CurrentStatus.Phase {
	case v1alpha1.MachineRunning, v1alpha1.MachineUnknown, v1alpha1.MachineAvailable:
		return false
	}
	return true
}

// Status is the policy's status: the pool's budgets used and left, each member's part (why it
// waits, from rollout.Decide on its input), the rollout's failures (recorded, seen, and Failed
// now) and the conditions. problem is Assign's for the policy; prev's conditions keep their
// transition times where their status did not change.
func (p Pool) Status(problem *Problem, seen []FailedMachine) machinistv1alpha1.PoolPolicyStatus {
	prev := p.Policy.Status
	st := machinistv1alpha1.PoolPolicyStatus{ObservedGeneration: p.Policy.Generation, Replicas: p.Replicas()}
	ms := p.members()
	inputs := p.Inputs()
	b := p.Budgets()
	st.Budget.MaxSurge, st.Budget.MaxUnavailable = b.MaxSurge, b.MaxUnavailable
	if limit, ok := RepairLimit(p.Policy, st.Replicas); ok {
		st.Budget.RepairMaxInFlight = &limit
	}
	var rolling, waiting, exhausted []string
	for i, m := range ms {
		st.UpdatedReplicas += m.updated
		st.OutdatedReplicas += m.oldLeft
		st.Budget.SurgeInUse += m.surge
		st.Budget.UnavailableInUse += m.unavailable
		for _, machines := range m.in.Machines {
			for _, mc := range machines {
				if BeingReplaced(mc) {
					st.Budget.RepairInFlight++
				}
			}
		}
		part := machinistv1alpha1.PoolDeploymentStatus{Name: m.in.Deployment.Name, Replicas: m.in.Deployment.Spec.Replicas,
			Updated: m.updated, Outdated: m.oldLeft, SurgeInUse: m.surge, UnavailableInUse: m.unavailable, State: machinistv1alpha1.MemberUpToDate}
		if m.outdated {
			dec := rollout.Decide(inputs[i])
			part.State = machinistv1alpha1.MemberRolling
			if dec.Action == rollout.Blocked && len(dec.BlockedBy) > 0 {
				part.State, part.Message = machinistv1alpha1.MemberWaiting, dec.BlockedBy[0].Message
				waiting = append(waiting, fmt.Sprintf("%s (%s)", part.Name, dec.BlockedBy[0].Reason))
				if dec.Blocked(rollout.BlockedBudgetExhausted) {
					exhausted = append(exhausted, part.Name)
				}
			} else {
				rolling = append(rolling, part.Name)
			}
		}
		st.Deployments = append(st.Deployments, part)
	}
	st.Budget.SurgeLeft = max(b.MaxSurge-st.Budget.SurgeInUse, 0)
	st.Budget.UnavailableLeft = max(b.MaxUnavailable-st.Budget.UnavailableInUse, 0)

	failures := p.Failures(seen)
	if len(failures) > maxFailures {
		failures = failures[len(failures)-maxFailures:]
	}
	st.Rollout = &machinistv1alpha1.PoolRolloutStatus{ID: p.RolloutID(), HaltAfterFailures: p.Policy.Spec.Rollout.HaltAfterFailures, Failures: failures}

	c := conditions{now: metav1.NewTime(p.Now), gen: p.Policy.Generation, prev: prev.Conditions}
	c.accepted(problem, ms, st.Replicas)
	outdated := st.OutdatedReplicas > 0 || len(waiting)+len(rolling) > 0
	halted := p.halted(failures)
	switch {
	case halted != "":
		c.set(machinistv1alpha1.PoolProgressing, false, ReasonHalted, halted)
	case outdated && p.Policy.Spec.Rollout.Paused:
		c.set(machinistv1alpha1.PoolProgressing, true, ReasonPaused, fmt.Sprintf("%d of %d machines updated; paused: no new machine starts until spec.rollout.paused is false", st.UpdatedReplicas, st.Replicas))
	case outdated:
		c.set(machinistv1alpha1.PoolProgressing, true, ReasonRollingOut, progressMessage(st, rolling, waiting))
	default:
		c.set(machinistv1alpha1.PoolProgressing, false, ReasonComplete, fmt.Sprintf("all %d machines of the pool are up to date", st.UpdatedReplicas))
	}
	if p.Policy.Spec.Rollout.Paused {
		c.set(machinistv1alpha1.PoolPaused, true, ReasonPaused, "spec.rollout.paused is true: no new machine of a rollout starts; what is in flight finishes")
	} else {
		c.set(machinistv1alpha1.PoolPaused, false, ReasonNotPaused, "spec.rollout.paused is false")
	}
	c.approval(p, ms)
	if len(exhausted) > 0 {
		c.set(machinistv1alpha1.PoolBudgetExhausted, true, ReasonBudgetExhausted, fmt.Sprintf(
			"surge %d of %d and unavailable %d of %d machines are in use (%s): %s wait until machines in flight become available and their old machines go",
			st.Budget.SurgeInUse, b.MaxSurge, st.Budget.UnavailableInUse, b.MaxUnavailable, usageText(st), strings.Join(exhausted, ", ")))
	} else {
		c.set(machinistv1alpha1.PoolBudgetExhausted, false, ReasonBudgetLeft, fmt.Sprintf("surge %d of %d and unavailable %d of %d machines are in use",
			st.Budget.SurgeInUse, b.MaxSurge, st.Budget.UnavailableInUse, b.MaxUnavailable))
	}
	st.Conditions = c.out
	return st
}

func progressMessage(st machinistv1alpha1.PoolPolicyStatus, rolling, waiting []string) string {
	msg := fmt.Sprintf("%d of %d machines updated, %d outdated left", st.UpdatedReplicas, st.Replicas, st.OutdatedReplicas)
	if len(rolling) > 0 {
		msg += "; rolling: " + strings.Join(rolling, ", ")
	}
	if len(waiting) > 0 {
		msg += "; waiting: " + strings.Join(waiting, ", ")
	}
	return msg
}

// usageText names who uses the budgets: "md-a surge 1, md-b unavailable 1".
func usageText(st machinistv1alpha1.PoolPolicyStatus) string {
	var parts []string
	for _, d := range st.Deployments {
		if d.SurgeInUse > 0 {
			parts = append(parts, fmt.Sprintf("%s surge %d", d.Name, d.SurgeInUse))
		}
		if d.UnavailableInUse > 0 {
			parts = append(parts, fmt.Sprintf("%s unavailable %d", d.Name, d.UnavailableInUse))
		}
	}
	if len(parts) == 0 {
		return "by machines leaving"
	}
	return strings.Join(parts, ", ")
}

// conditions builds a status's conditions, keeping a condition's transition time while its
// status stays.
type conditions struct {
	now  metav1.Time
	gen  int64
	prev []metav1.Condition
	out  []metav1.Condition
}

func (c *conditions) set(t string, ok bool, reason, msg string) {
	status := metav1.ConditionFalse
	if ok {
		status = metav1.ConditionTrue
	}
	next := metav1.Condition{Type: t, Status: status, Reason: reason, Message: msg, ObservedGeneration: c.gen, LastTransitionTime: c.now}
	for _, old := range c.prev {
		if old.Type == t && old.Status == status {
			next.LastTransitionTime = old.LastTransitionTime
		}
	}
	c.out = append(c.out, next)
}

func (c *conditions) accepted(problem *Problem, ms []member, replicas int32) {
	if problem != nil {
		c.set(machinistv1alpha1.PoolAccepted, false, problem.Reason, problem.Message)
		return
	}
	names := make([]string, len(ms))
	for i, m := range ms {
		names[i] = m.in.Deployment.Name
	}
	c.set(machinistv1alpha1.PoolAccepted, true, ReasonGoverning, fmt.Sprintf("governs MachineDeployments %s (%d replicas); their own maxSurge and maxUnavailable do not apply while it does",
		strings.Join(names, ", "), replicas))
}

// approval sets WaitingForApproval: outdated machines whose nodes are not selected for update
// under Manual approval.
func (c *conditions) approval(p Pool, ms []member) {
	if p.Policy.Spec.Rollout.Approval != machinistv1alpha1.ApprovalManual {
		c.set(machinistv1alpha1.PoolWaitingForApproval, false, ReasonApproved, "spec.rollout.approval is Auto")
		return
	}
	var waiting []string
	for _, m := range ms {
		for _, ms := range m.in.Sets {
			if m.current != nil && ms.UID == m.current.UID {
				continue
			}
			for _, mc := range m.in.Machines[ms.UID] {
				node := mc.Labels[v1alpha1.LabelNode]
				if mc.DeletionTimestamp != nil || node == "" {
					continue
				}
				if n := m.in.Nodes[node]; n != nil {
					if _, ok := n.Labels[v1alpha1.LabelNodeSelectedForUpdate]; ok {
						continue
					}
				}
				waiting = append(waiting, node)
			}
		}
	}
	if len(waiting) == 0 {
		c.set(machinistv1alpha1.PoolWaitingForApproval, false, ReasonApproved, "no outdated machine waits for approval")
		return
	}
	sort.Strings(waiting)
	shown := waiting
	if len(shown) > 5 {
		shown = append(shown[:5:5], fmt.Sprintf("and %d more", len(waiting)-5))
	}
	c.set(machinistv1alpha1.PoolWaitingForApproval, true, ReasonWaitingForApproval, fmt.Sprintf(
		"%d outdated machines wait for approval: label their nodes %s=true to replace them (nodes %s)",
		len(waiting), v1alpha1.LabelNodeSelectedForUpdate, strings.Join(shown, ", ")))
}
