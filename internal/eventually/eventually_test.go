package eventually

import (
	"strings"
	"sync"
	"testing"
	"time"
)

func TestTrueReturnsOnceTheConditionHolds(t *testing.T) {
	calls := 0
	took := True(t, 10*time.Second, "the third call", func() bool { calls++; return calls == 3 })
	if calls != 3 {
		t.Fatalf("polled %d times after the condition held at the third", calls)
	}
	if took < 2*Interval {
		t.Fatalf("took %s for three polls %s apart", took, Interval)
	}
}

// recorder is a testing.TB that records a Fatalf instead of stopping the test.
type recorder struct {
	testing.TB
	mu     sync.Mutex
	failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.mu.Lock()
	r.failed = format
	for _, a := range args {
		r.failed += " " + toString(a)
	}
	r.mu.Unlock()
}

func toString(a any) string {
	switch v := a.(type) {
	case string:
		return v
	case time.Duration:
		return v.String()
	}
	return ""
}

func TestExplainedFailsWithTheLastState(t *testing.T) {
	r := &recorder{TB: t}
	n := 0
	Explained(r, 200*time.Millisecond, "a green light", func() (bool, string) {
		n++
		if n == 1 {
			return false, "red"
		}
		return false, "amber"
	})
	if !strings.Contains(r.failed, "a green light") || !strings.Contains(r.failed, "amber") {
		t.Fatalf("failure %q does not name what was awaited and the last state", r.failed)
	}
}
