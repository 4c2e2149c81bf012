package machinedeployment

import (
	"strings"
	"testing"

	"github.com/machinist-io/machinist/core/controller/rollout"
)

// TestRolloutCondition: what the Rollout condition says for each kind of decision.
func TestRolloutCondition(t *testing.T) {
	for _, tc := range []struct {
		name   string
		dec    rollout.Decision
		ok     bool
		reason string
		text   string
	}{
		{"done", rollout.Decision{Action: rollout.None}, false, "", ""},
		{"scaling", rollout.Decision{Action: rollout.Scale}, false, "", ""},
		{"rolling", rollout.Decision{Action: rollout.Rollout, MachinesReplaced: 2, MaxSurge: 1, BudgetFrom: rollout.FromDeployment}, true, ReasonRollingOut,
			"replacing 2 machines of old templates with maxSurge 1 and maxUnavailable 0 (from deployment)"},
		{"budget", rollout.Decision{Action: rollout.Blocked, BlockedBy: []rollout.Block{{Reason: rollout.BlockedBudgetExhausted, Message: "maxSurge 1 and maxUnavailable 0 are in use"}}},
			true, string(rollout.BlockedBudgetExhausted), "waits: maxSurge 1 and maxUnavailable 0 are in use"},
		{"paused", rollout.Decision{Action: rollout.Blocked, BlockedBy: []rollout.Block{{Reason: rollout.BlockedPaused, Message: "spec.paused is true"}}},
			true, string(rollout.BlockedPaused), "waits: spec.paused is true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reason, msg, ok := rolloutCondition(tc.dec)
			if ok != tc.ok || reason != tc.reason || !strings.Contains(msg, tc.text) {
				t.Fatalf("got (%q, %q, %v), want (%q, containing %q, %v)", reason, msg, ok, tc.reason, tc.text, tc.ok)
			}
		})
	}
}
