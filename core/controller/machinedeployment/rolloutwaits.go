package machinedeployment

import (
	"fmt"
	"strings"
	"time"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/rollout"
)

// ConditionRollout says, while machines of old templates are left, what the rollout does or
// waits for and the budget it works with (machinist's; MCM has no such condition). It is removed
// once the rollout is done.
const ConditionRollout v1alpha1.MachineDeploymentConditionType = "Rollout"

// ReasonRollingOut: the rollout goes on within its budget.
const ReasonRollingOut = "RollingOut"

// rolloutCondition is the Rollout condition's reason and message for a decision; ok is false
// when there is no rollout to speak of.
func rolloutCondition(dec rollout.Decision) (reason, msg string, ok bool) {
	if len(dec.BlockedBy) > 0 {
		parts := make([]string, 0, len(dec.BlockedBy))
		for _, b := range dec.BlockedBy {
			parts = append(parts, b.Message)
		}
		return string(dec.BlockedBy[0].Reason), "waits: " + strings.Join(parts, "; "), true
	}
	if dec.Action != rollout.Rollout {
		return "", "", false
	}
	return ReasonRollingOut, fmt.Sprintf("replacing %d machines of old templates with maxSurge %d and maxUnavailable %d (from %s)",
		dec.MachinesReplaced, dec.MaxSurge, dec.MaxUnavailable, dec.BudgetFrom), true
}

// applyRolloutCondition sets or removes the Rollout condition.
func (p *pass) applyRolloutCondition(st *v1alpha1.MachineDeploymentStatus, now time.Time) {
	if reason, msg, ok := rolloutCondition(p.dec); ok {
		setCondition(st, ConditionRollout, v1alpha1.ConditionTrue, reason, msg, now)
		return
	}
	removeCondition(st, ConditionRollout)
}
