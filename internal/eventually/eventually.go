// Package eventually is how tests wait for a condition: poll it, and fail the test with what was
// awaited (and what the condition last said) when it does not come true in time. Tests wait for
// the condition an assertion needs, never for a fixed time. Tests import it; the product never
// does.
package eventually

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Interval is how often a condition is polled.
const Interval = 50 * time.Millisecond

// True polls cond until it holds and returns how long that took; after timeout it fails the test
// naming what was awaited. cond runs on the test's goroutine, so it may call t.Fatal.
func True(t testing.TB, timeout time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	return Explained(t, timeout, what, func() (bool, string) { return cond(), "" })
}

// Explained is True for a condition that says, when it does not hold, what it saw instead; the
// failure quotes the last of it.
func Explained(t testing.TB, timeout time.Duration, what string, cond func() (ok bool, state string)) time.Duration {
	t.Helper()
	start := time.Now()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), Interval, timeout, true, func(context.Context) (bool, error) {
		ok, state := cond()
		last = state
		return ok, nil
	})
	switch {
	case err != nil && last != "":
		t.Fatalf("timed out after %s waiting for %s; last state: %s", timeout, what, last)
	case err != nil:
		t.Fatalf("timed out after %s waiting for %s", timeout, what)
	}
	return time.Since(start)
}
