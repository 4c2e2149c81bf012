package drivertest

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"
)

// tester is what the rules need from a test: *testing.T through testingT, or a recorder.
type tester interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Skipf(format string, args ...any)
	Logf(format string, args ...any)
	Run(name string, f func(tester)) bool
	Cleanup(f func())
	Context() context.Context
}

// testingT adapts *testing.T.
type testingT struct{ *testing.T }

func (t testingT) Run(name string, f func(tester)) bool {
	t.Helper()
	return t.T.Run(name, func(tt *testing.T) { f(testingT{tt}) })
}

// recorder is a tester outside `go test`. Run executes a subtest in its own goroutine and waits
// for it, so Fatalf and Skipf end the subtest with runtime.Goexit as they do under testing.
// A panic fails the subtest instead of the process.
type recorder struct {
	name   string
	ctx    context.Context
	cancel context.CancelFunc
	// done is called with each finished child of this recorder.
	done func(*recorder)

	mu       sync.Mutex
	failed   bool
	skipped  bool
	messages []string
	cleanups []func()
	children []*recorder
	elapsed  time.Duration
}

func newRecorder(ctx context.Context, name string) *recorder {
	ctx, cancel := context.WithCancel(ctx)
	return &recorder{name: name, ctx: ctx, cancel: cancel}
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = true
	r.messages = append(r.messages, fmt.Sprintf(format, args...))
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	runtime.Goexit()
}

func (r *recorder) Skipf(format string, args ...any) {
	r.mu.Lock()
	r.skipped = true
	r.messages = append(r.messages, "skip: "+fmt.Sprintf(format, args...))
	r.mu.Unlock()
	runtime.Goexit()
}

func (r *recorder) Logf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.messages = append(r.messages, "log: "+fmt.Sprintf(format, args...))
}

func (r *recorder) Cleanup(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cleanups = append(r.cleanups, f)
}

func (r *recorder) Context() context.Context { return r.ctx }

func (r *recorder) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}

func (r *recorder) Run(name string, f func(tester)) bool {
	child := newRecorder(r.ctx, name)
	start := time.Now()
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		defer child.finish()
		defer func() {
			if p := recover(); p != nil {
				child.Errorf("panic: %v\n%s", p, debug.Stack())
			}
		}()
		f(child)
	}()
	<-finished
	child.elapsed = time.Since(start)

	failed := child.Failed()
	r.mu.Lock()
	r.children = append(r.children, child)
	if failed {
		r.failed = true
	}
	r.mu.Unlock()
	if r.done != nil {
		r.done(child)
	}
	return !failed
}

// finish cancels the context and runs the cleanups, last registered first, each in its own
// goroutine so that a Fatalf or panic in one does not skip the others.
func (r *recorder) finish() {
	r.cancel()
	r.mu.Lock()
	cleanups := r.cleanups
	r.cleanups = nil
	r.mu.Unlock()
	for i := len(cleanups) - 1; i >= 0; i-- {
		ran := make(chan struct{})
		go func() {
			defer close(ran)
			defer func() {
				if p := recover(); p != nil {
					r.Errorf("panic in cleanup: %v\n%s", p, debug.Stack())
				}
			}()
			cleanups[i]()
		}()
		<-ran
	}
}

// result summarizes a finished recorder.
func (r *recorder) result() Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	res := Result{Rule: r.name, Outcome: Passed, Messages: append([]string(nil), r.messages...), Duration: r.elapsed}
	switch {
	case r.failed:
		res.Outcome = Failed
	case r.skipped:
		res.Outcome = Skipped
	}
	for _, c := range r.children {
		for _, m := range c.result().Messages {
			res.Messages = append(res.Messages, c.name+": "+m)
		}
	}
	return res
}

// Outcome is how a rule ended.
type Outcome int

// Outcomes of a rule.
const (
	Passed Outcome = iota
	Failed
	Skipped
)

func (o Outcome) String() string {
	switch o {
	case Passed:
		return "passed"
	case Failed:
		return "failed"
	case Skipped:
		return "skipped"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Result is the outcome of one rule run by Check.
type Result struct {
	// Rule is the rule's name, as listed by RuleNames.
	Rule    string
	Outcome Outcome
	// Messages are the rule's failures, its skip reason (prefixed "skip: ") and its log lines
	// (prefixed "log: "), in order.
	Messages []string
	// Duration is how long the rule took.
	Duration time.Duration
}

// CheckError is the error of Check when a rule failed. It holds every rule's result.
type CheckError struct {
	Results []Result
}

// Failed returns the results of the failed rules.
func (e *CheckError) Failed() []Result {
	var out []Result
	for _, r := range e.Results {
		if r.Outcome == Failed {
			out = append(out, r)
		}
	}
	return out
}

func (e *CheckError) Error() string {
	failed := e.Failed()
	var b strings.Builder
	fmt.Fprintf(&b, "drivertest: %d of %d rules failed:", len(failed), len(e.Results))
	for _, r := range failed {
		fmt.Fprintf(&b, "\n--- %s", r.Rule)
		for _, m := range r.Messages {
			b.WriteString("\n    " + strings.ReplaceAll(m, "\n", "\n    "))
		}
	}
	return b.String()
}
