package safety

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// TestSetHistory: what the overshoot check takes for new machines and which limit it applies.
func TestSetHistory(t *testing.T) {
	started := time.Date(2026, 1, 1, 12, 0, 0, 600_000_000, time.UTC)
	machine := func(uid string, created time.Time) v1alpha1.Machine {
		return v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), CreationTimestamp: metav1.NewTime(created.Truncate(time.Second))}}
	}
	old := func(n int) []v1alpha1.Machine {
		var out []v1alpha1.Machine
		for i := range n {
			out = append(out, machine(fmt.Sprintf("old-%d", i), started.Add(-time.Hour)))
		}
		return out
	}
	window := time.Minute
	h := &setHistory{seen: map[types.UID]uint64{}}

	// First check: machines from before the start are not new; one created in the second the
	// controller started is (creation times are whole seconds).
	ms := append(old(300), machine("racer-1", started.Add(-500*time.Millisecond)))
	now := started.Add(time.Second)
	if n, limit := h.observe(ms, 302, now, started, window); n != 1 || limit != 302 {
		t.Fatalf("first check: %d new, limit %d; want 1, 302", n, limit)
	}
	// Replicas lowered to 0: the limit stays 302 for the window, and nothing is new.
	now = now.Add(10 * time.Second)
	if n, limit := h.observe(ms, 3, now, started, window); n != 0 || limit != 302 {
		t.Fatalf("lowered: %d new, limit %d; want 0, 302", n, limit)
	}
	// After the window the lowered limit applies; machines going away are not new.
	now = now.Add(window)
	ms = ms[100:]
	if n, limit := h.observe(ms, 3, now, started, window); n != 0 || limit != 3 {
		t.Fatalf("after the window: %d new, limit %d; want 0, 3", n, limit)
	}
	if len(h.seen) != len(ms) {
		t.Fatalf("history keeps %d machines, the set has %d", len(h.seen), len(ms))
	}
	// Two created since: new, whatever else went meanwhile.
	ms = append(ms[50:], machine("racer-2", now), machine("racer-3", now))
	now = now.Add(time.Second)
	if n, _ := h.observe(ms, 3, now, started, window); n != 2 {
		t.Fatalf("%d new; want 2", n)
	}
	if n, _ := h.observe(ms, 3, now.Add(time.Second), started, window); n != 0 {
		t.Fatalf("%d new at an unchanged set; want 0", n)
	}
	// A raised limit applies at once.
	if _, limit := h.observe(ms, 500, now.Add(2*time.Second), started, window); limit != 500 {
		t.Fatalf("raised limit %d; want 500", limit)
	}
}

// TestSetHistoryLowersTheLimitAPeriodAfterSeeingIt is the flake of
// TestOvershootScaleDownDoesNotFreeze made deterministic: checks a period apart (the requeue is
// the window) saw 273 of a set's 300 machines; the deployment is scaled to 0 before the next
// check, which sees the other 27 and the lowered limit. Those 27 were created under the higher
// limit: the set is held to it until a period after that check.
func TestSetHistoryLowersTheLimitAPeriodAfterSeeingIt(t *testing.T) {
	started := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	window := 300 * time.Millisecond
	var ms []v1alpha1.Machine
	for i := range 300 {
		ms = append(ms, v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{UID: types.UID(fmt.Sprint(i)), CreationTimestamp: metav1.NewTime(started.Add(time.Second))}})
	}
	h := &setHistory{seen: map[types.UID]uint64{}}
	now := started.Add(2 * time.Second)
	if n, limit := h.observe(ms[:273], 303, now, started, window); n != 273 || limit != 303 {
		t.Fatalf("scale-up: %d new, limit %d; want 273, 303", n, limit)
	}
	now = now.Add(window + 100*time.Millisecond) // a check a period and a bit later
	if n, limit := h.observe(ms, 3, now, started, window); n != 27 || limit != 303 {
		t.Fatalf("first check at the lowered limit: %d new, limit %d; want 27 and the higher limit 303", n, limit)
	}
	now = now.Add(window)
	if n, limit := h.observe(ms[:250], 3, now, started, window); n != 0 || limit != 3 {
		t.Fatalf("a period later: %d new, limit %d; want 0, 3", n, limit)
	}
}
