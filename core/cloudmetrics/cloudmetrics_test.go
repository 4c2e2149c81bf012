package cloudmetrics

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/machinist-io/machinist/core/driver"
)

// TestErrorCode: the error_code label is the code's number, as MCM's Azure provider writes it
// (strconv.Itoa of the status code), and Internal's for an error without a code.
func TestErrorCode(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{driver.Error(driver.Unavailable, "busy"), "14"},
		{fmt.Errorf("azure: %w", driver.Error(driver.ResourceExhausted, "quota")), "8"},
		{driver.Error(driver.Uninitialized, "not yet"), "17"},
		{errors.New("plain"), "13"},
		{context.DeadlineExceeded, "13"},
	} {
		if got := ErrorCode(tc.err); got != tc.want {
			t.Errorf("ErrorCode(%v) = %s, want %s", tc.err, got, tc.want)
		}
	}
}

// TestMetricSeries: counters count per label values; histograms keep a sum, a count and
// cumulative buckets over Prometheus' default bounds, as a Prometheus histogram exposes them.
func TestMetricSeries(t *testing.T) {
	c := newMetric("c_total", "", false, "provider", "service")
	c.add(0, "p", "compute")
	c.add(0, "p", "compute")
	c.add(0, "p", "network")
	counts := map[string]uint64{}
	for _, s := range c.Snapshot() {
		counts[s.Values[1]] = s.Count
	}
	if counts["compute"] != 2 || counts["network"] != 1 || len(counts) != 2 {
		t.Errorf("counter series = %v, want compute 2, network 1", counts)
	}

	h := newMetric("h_seconds", "", true, "provider", "service")
	for _, v := range []float64{0.003, 0.2, 0.2, 7, 60} {
		h.add(v, "p", "compute")
	}
	snap := h.Snapshot()
	if len(snap) != 1 {
		t.Fatalf("histogram series = %d, want 1", len(snap))
	}
	s := snap[0]
	if s.Count != 5 || s.Sum != 0.003+0.2+0.2+7+60 {
		t.Errorf("count %d sum %v, want 5 and %v", s.Count, s.Sum, 0.003+0.2+0.2+7+60)
	}
	want := map[float64]uint64{.005: 1, .1: 1, .25: 3, 5: 3, 10: 4}
	for i, le := range Buckets {
		if w, ok := want[le]; ok && s.Buckets[i] != w {
			t.Errorf("bucket le=%v = %d, want %d", le, s.Buckets[i], w)
		}
	}
	s.Buckets[0] = 99 // a snapshot is a copy
	if h.Snapshot()[0].Buckets[0] != 1 {
		t.Error("changing a snapshot changed the metric")
	}
}
