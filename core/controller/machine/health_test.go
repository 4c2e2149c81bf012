package machine

import (
	"os"
	"strings"
	"testing"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

var (
	healthPhases = []v1alpha1.MachinePhase{"", v1alpha1.MachinePending, v1alpha1.MachineAvailable, v1alpha1.MachineRunning,
		v1alpha1.MachineUnknown, v1alpha1.MachineInPlaceUpdateSuccessful, v1alpha1.MachineFailed}
	nodeStates  = []nodeHealth{nodeGone, nodeUnhealthy, nodeStarting, nodeHealthy}
	timerStates = []timer{timerRunning, timerElapsed, timerOff}
)

// TestHealthTableIsComplete: exactly one rule applies to every phase the health check runs on,
// every state of the node and every state of the timer, and every rule that changes the phase
// records an event.
func TestHealthTableIsComplete(t *testing.T) {
	for _, p := range healthPhases {
		for _, n := range nodeStates {
			for _, tm := range timerStates {
				var matches int
				for _, r := range healthTable {
					if r.node&n != 0 && r.timer&tm != 0 && phaseIn(p, r.from) {
						matches++
					}
				}
				if matches != 1 {
					t.Errorf("phase %q, node %s, timer %s: %d rules apply, want 1", p, nodeName(n), timerName(tm), matches)
				}
			}
		}
	}
	for _, r := range healthTable {
		if (r.to == "") != (r.event == "") {
			t.Errorf("rule %s: a phase change records an event, staying records none", renderRule(r))
		}
	}
}

// TestHealthTransitions spells out the transitions the table makes.
func TestHealthTransitions(t *testing.T) {
	cases := []struct {
		phase v1alpha1.MachinePhase
		node  nodeHealth
		timer timer
		to    v1alpha1.MachinePhase
		v     verdict
	}{
		{v1alpha1.MachinePending, nodeHealthy, timerRunning, v1alpha1.MachineRunning, joined},
		{v1alpha1.MachinePending, nodeHealthy, timerElapsed, v1alpha1.MachineRunning, joined}, // joined beats the timeout
		{v1alpha1.MachinePending, nodeStarting, timerRunning, "", waitJoin},                   // still tainted
		{v1alpha1.MachinePending, nodeStarting, timerElapsed, v1alpha1.MachineFailed, failedToJoin},
		{v1alpha1.MachinePending, nodeGone, timerElapsed, v1alpha1.MachineFailed, failedToJoin},
		{v1alpha1.MachineAvailable, nodeHealthy, timerRunning, v1alpha1.MachineRunning, joined},
		{v1alpha1.MachineRunning, nodeStarting, timerOff, "", stay}, // the taint does not make it unhealthy
		{v1alpha1.MachineRunning, nodeUnhealthy, timerOff, v1alpha1.MachineUnknown, unhealthy},
		{v1alpha1.MachineRunning, nodeGone, timerOff, v1alpha1.MachineUnknown, unhealthy},
		{v1alpha1.MachineUnknown, nodeHealthy, timerElapsed, v1alpha1.MachineRunning, recovered},
		{v1alpha1.MachineUnknown, nodeUnhealthy, timerRunning, "", waitHealthy},
		{v1alpha1.MachineUnknown, nodeUnhealthy, timerElapsed, v1alpha1.MachineFailed, healthTimedOut},
		{v1alpha1.MachineUnknown, nodeGone, timerOff, "", stay}, // spec.disableHealthTimeout
		{v1alpha1.MachineInPlaceUpdateSuccessful, nodeHealthy, timerOff, v1alpha1.MachineRunning, rejoined},
		{v1alpha1.MachineInPlaceUpdateSuccessful, nodeUnhealthy, timerOff, "", stay},
		{v1alpha1.MachineFailed, nodeStarting, timerOff, v1alpha1.MachineRunning, recovered}, // preserved
		{v1alpha1.MachineFailed, nodeGone, timerOff, "", stay},
		{v1alpha1.MachineTerminating, nodeHealthy, timerOff, "", stay}, // not the health check's
	}
	for _, c := range cases {
		r := healthRuleFor(c.phase, c.node, c.timer)
		if r.to != c.to || r.verdict != c.v {
			t.Errorf("phase %q, node %s, timer %s: to %q verdict %d, want %q verdict %d", c.phase, nodeName(c.node), timerName(c.timer), r.to, r.verdict, c.to, c.v)
		}
	}
}

// TestHealthTableDocumented: docs/machine-controller.md shows every rule of the table as it is.
func TestHealthTableDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/machine-controller.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range healthTable {
		if row := renderRule(r); !strings.Contains(string(doc), row) {
			t.Errorf("docs/machine-controller.md lacks the health rule row\n%s", row)
		}
	}
}

// renderRule is a rule as a row of the table in docs/machine-controller.md.
func renderRule(r healthRule) string {
	var from []string
	for _, p := range r.from {
		if p == "" {
			from = append(from, "(none)")
		} else {
			from = append(from, string(p))
		}
	}
	to, event := string(r.to), r.event
	if to == "" {
		to = "(stays)"
	}
	if event == "" {
		event = "—"
	}
	return "| " + strings.Join(from, ", ") + " | " + nodeName(r.node) + " | " + timerName(r.timer) + " | " + to + " | " + event + " |"
}

func nodeName(n nodeHealth) string {
	if n == anyNodeSays {
		return "any"
	}
	names := map[nodeHealth]string{nodeGone: "gone", nodeUnhealthy: "unhealthy", nodeStarting: "starting", nodeHealthy: "healthy"}
	var out []string
	for _, s := range nodeStates {
		if n&s != 0 {
			out = append(out, names[s])
		}
	}
	return strings.Join(out, ", ")
}

func timerName(tm timer) string {
	if tm == anyTimer {
		return "any"
	}
	names := map[timer]string{timerRunning: "running", timerElapsed: "elapsed", timerOff: "off"}
	var out []string
	for _, s := range timerStates {
		if tm&s != 0 {
			out = append(out, names[s])
		}
	}
	return strings.Join(out, ", ")
}
