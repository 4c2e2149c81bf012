package eventnote

import (
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/machinist-io/machinist/internal/truncate"
)

func names(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("pool-7d9f4-%05d", i)
	}
	return out
}

func TestList(t *testing.T) {
	if got := List([]string{"a", "b", "c"}, 100); got != "a, b, c" {
		t.Errorf("short list: %q", got)
	}
	if got := List(nil, 100); got != "" {
		t.Errorf("empty list: %q", got)
	}
	// More than ten: ten shown.
	got := List(names(100), ListBudget)
	if want := strings.Join(names(10), ", ") + " … and 90 more"; got != want {
		t.Errorf("100 names:\n got %q\nwant %q", got, want)
	}
	// A tight budget shows what fits, and always says how many are left.
	for _, budget := range []int{40, 60, 80, 200} {
		for _, n := range []int{2, 9, 11, 5000} {
			got := List(names(n), budget)
			if len(got) > budget {
				t.Errorf("List(%d names, %d) is %d bytes: %q", n, budget, len(got), got)
			}
			shown := strings.Count(got, "pool-")
			if shown < 1 {
				t.Errorf("List(%d names, %d) shows none: %q", n, budget, got)
			}
			if shown < n && !strings.HasSuffix(got, fmt.Sprintf(" … and %d more", n-shown)) {
				t.Errorf("List(%d names, %d) shows %d without the rest: %q", n, budget, shown, got)
			}
		}
	}
	// One name longer than the budget is cut.
	long := strings.Repeat("x", 300)
	if got := List([]string{long, "b"}, 100); len(got) > 100 || !strings.HasSuffix(got, " … and 1 more") {
		t.Errorf("a long first name: %q", got)
	}
}

func TestPlural(t *testing.T) {
	if got := Plural(1, "machine"); got != "1 machine" {
		t.Error(got)
	}
	if got := Plural(5000, "machine"); got != "5000 machines" {
		t.Error(got)
	}
}

// captured records what reaches the wrapped recorder.
type captured struct{ eventtype, reason, action, note string }

type captureRecorder struct{ got []captured }

func (c *captureRecorder) Eventf(_, _ runtime.Object, eventtype, reason, action, note string, args ...any) {
	c.got = append(c.got, captured{eventtype, reason, action, fmt.Sprintf(note, args...)})
}

// TestRecorderCuts: the note is formatted once (a '%' in an argument stays as it is) and cut,
// as are reason and action; short events pass unchanged.
func TestRecorderCuts(t *testing.T) {
	c := &captureRecorder{}
	r := Recorder{Next: c}
	r.Eventf(nil, nil, "Normal", "SuccessfulDelete", "Delete", "Deleted %s: %s", Plural(2, "machine"), "100% gone")
	r.Eventf(nil, nil, "Warning", strings.Repeat("R", 200), strings.Repeat("A", 200), "%s", strings.Join(names(5000), ", "))
	r.Eventf(nil, nil, "Normal", "Plain", "Note", "no arguments, 100%")
	want := captured{"Normal", "SuccessfulDelete", "Delete", "Deleted 2 machines: 100% gone"}
	if c.got[0] != want {
		t.Errorf("short event: %+v, want %+v", c.got[0], want)
	}
	long := c.got[1]
	if len(long.reason) > MaxReason || len(long.action) > MaxAction || len(long.note) > MaxNote {
		t.Errorf("long event not cut: reason %d, action %d, note %d bytes", len(long.reason), len(long.action), len(long.note))
	}
	if !strings.HasPrefix(long.note, "pool-7d9f4-00000, ") || !strings.HasSuffix(long.note, truncate.Ellipsis) {
		t.Errorf("long note: %q", long.note)
	}
	if c.got[2].note != "no arguments, 100%" {
		t.Errorf("a note without arguments is taken as it is: %q", c.got[2].note)
	}
}
