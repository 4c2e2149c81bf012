package local

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/machinist-io/machinist/internal/eventually"
)

func testAgent(name string) *agent {
	return &agent{rec: &record{Name: name}, index: -1}
}

// TestSchedulerRunsBeatsInDueOrderWithoutOverlap: beats are handed out in due order. One worker,
// so the order the beats run in is the order they were handed out (with several, a worker
// delayed on a loaded machine could run the earlier beat after a later one).
func TestSchedulerRunsBeatsInDueOrderWithoutOverlap(t *testing.T) {
	var mu sync.Mutex
	var order []string
	running := map[string]bool{}
	s := newScheduler(1, func(_ context.Context, a *agent) time.Time {
		mu.Lock()
		if running[a.rec.Name] {
			t.Errorf("two beats of %s at once", a.rec.Name)
		}
		running[a.rec.Name] = true
		order = append(order, a.rec.Name)
		mu.Unlock()
		time.Sleep(time.Millisecond)
		mu.Lock()
		running[a.rec.Name] = false
		mu.Unlock()
		return time.Now().Add(time.Hour) // once
	})
	s.start()
	defer s.stop()
	now := time.Now()
	agents := []*agent{testAgent("c"), testAgent("a"), testAgent("b")}
	s.schedule(agents[0], now.Add(300*time.Millisecond))
	s.schedule(agents[1], now.Add(100*time.Millisecond))
	s.schedule(agents[2], now.Add(200*time.Millisecond))
	eventually.Explained(t, 5*time.Second, "three beats", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return len(order) == 3, fmt.Sprint(order)
	})
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(order) != "[a b c]" {
		t.Fatalf("beats ran in order %v, want [a b c]", order)
	}
}

func TestSchedulerRescheduleAndRemove(t *testing.T) {
	var beats atomic.Int32
	s := newScheduler(2, func(_ context.Context, a *agent) time.Time {
		// As agent.beat: under the agent's lock (unschedule waits for a running beat) and
		// nothing once removed (a beat handed out just before unschedule runs after it).
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.removed.Load() {
			return time.Now().Add(time.Hour)
		}
		beats.Add(1)
		return time.Now().Add(20 * time.Millisecond)
	})
	s.start()
	defer s.stop()
	a := testAgent("a")
	s.schedule(a, time.Now().Add(time.Hour))
	s.schedule(a, time.Now()) // moved earlier
	eventually.Explained(t, 5*time.Second, "repeating beats", func() (bool, string) { return beats.Load() >= 3, fmt.Sprint(beats.Load()) })
	s.unschedule(a)
	after := beats.Load()
	time.Sleep(100 * time.Millisecond)
	if got := beats.Load(); got != after {
		t.Fatalf("%d beats after unschedule", got-after)
	}
	if s.len() != 0 {
		t.Fatalf("queue holds %d agents after unschedule", s.len())
	}
}

// TestSchedulerGrows: beats wait for the API server, so the workers bound the beats in flight;
// growing the pool lets more run at once, and it never shrinks.
func TestSchedulerGrows(t *testing.T) {
	release := make(chan struct{})
	var inFlight, peak atomic.Int32
	s := newScheduler(1, func(_ context.Context, a *agent) time.Time {
		n := inFlight.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		<-release
		inFlight.Add(-1)
		return time.Now().Add(time.Hour)
	})
	s.start()
	defer s.stop()
	defer close(release)
	for i := range 4 {
		s.schedule(testAgent(fmt.Sprint(i)), time.Now())
	}
	eventually.Explained(t, 5*time.Second, "one beat in flight", func() (bool, string) { return inFlight.Load() == 1, fmt.Sprint(inFlight.Load()) })
	s.grow(3)
	eventually.Explained(t, 5*time.Second, "three beats in flight", func() (bool, string) { return inFlight.Load() == 3, fmt.Sprint(inFlight.Load()) })
	s.grow(2) // never lowers
	s.mu.Lock()
	workers := s.workers
	s.mu.Unlock()
	if workers != 3 || peak.Load() != 3 {
		t.Fatalf("%d workers, at most %d beats in flight; want 3 and 3", workers, peak.Load())
	}
}

// BenchmarkSchedulerDispatch measures the scheduler's own cost per beat (no API calls) with
// 1000 agents due at once: the overhead a heartbeat adds on top of its API requests.
func BenchmarkSchedulerDispatch(b *testing.B) {
	const agents = 1000
	var done atomic.Int64
	target := int64(b.N)
	finished := make(chan struct{})
	s := newScheduler(defaultWorkers, func(_ context.Context, a *agent) time.Time {
		if done.Add(1) == target {
			close(finished)
		}
		return time.Now() // due again at once: the queue never empties
	})
	all := make([]*agent, agents)
	for i := range all {
		all[i] = testAgent(fmt.Sprint(i))
	}
	b.ResetTimer()
	s.start()
	now := time.Now()
	for _, a := range all {
		s.schedule(a, now)
	}
	<-finished
	b.StopTimer()
	s.stop()
}
