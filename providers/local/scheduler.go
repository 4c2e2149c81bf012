package local

import (
	"container/heap"
	"context"
	"sync"
	"time"
)

// scheduler runs the heartbeats of every node agent of a driver with a pool of workers: one
// timer and a heap ordered by due time, not a goroutine per machine, so a thousand machines
// cost a thousand heap entries. An agent is in the heap or being run by one worker, never both,
// so its beats never overlap. A beat waits for the API server, so the workers bound the requests
// in flight: the driver grows the pool with its agents (grow), or thousands of heartbeats would
// queue behind a few slow answers on a loaded API server.
type scheduler struct {
	beat func(ctx context.Context, a *agent) time.Time // runs one beat, returns the next due time

	mu      sync.Mutex
	workers int
	queue   agentHeap
	wake    chan struct{}
	work    chan *agent
	stopped bool

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newScheduler(workers int, beat func(context.Context, *agent) time.Time) *scheduler {
	return &scheduler{
		beat:    beat,
		workers: workers,
		wake:    make(chan struct{}, 1),
		work:    make(chan *agent),
	}
}

func (s *scheduler) start() {
	ctx, cancel := context.WithCancel(context.Background())
	s.mu.Lock()
	s.ctx, s.cancel = ctx, cancel
	workers := s.workers
	s.wg.Add(1 + workers)
	s.mu.Unlock()
	go s.dispatch(ctx)
	for range workers {
		go s.worker(ctx)
	}
}

// grow raises the number of workers to n; it never lowers it (an idle worker is one parked
// goroutine).
func (s *scheduler) grow(n int) {
	s.mu.Lock()
	if s.stopped || s.ctx == nil || n <= s.workers {
		s.mu.Unlock()
		return
	}
	add := n - s.workers
	s.workers = n
	s.wg.Add(add)
	ctx := s.ctx
	s.mu.Unlock()
	for range add {
		go s.worker(ctx)
	}
}

// stop ends dispatching and waits for running beats to finish.
func (s *scheduler) stop() {
	s.mu.Lock()
	s.stopped = true
	cancel := s.cancel
	s.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	s.wg.Wait()
}

// schedule queues a for its beat at due, or moves it there if already queued. An agent being run
// is rescheduled by its worker instead (see runAgain).
func (s *scheduler) schedule(a *agent, due time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped || a.removed.Load() {
		return
	}
	switch {
	case a.index >= 0:
		if due.Before(a.due) {
			a.due = due
			heap.Fix(&s.queue, a.index)
		}
	case a.running:
		if a.runAgain.IsZero() || due.Before(a.runAgain) {
			a.runAgain = due
		}
		return
	default:
		a.due = due
		heap.Push(&s.queue, a)
	}
	s.poke()
}

// unschedule takes a out of the queue; a beat already running finishes first (the caller holds
// a.mu after this returns to wait for it).
func (s *scheduler) unschedule(a *agent) {
	a.removed.Store(true)
	s.mu.Lock()
	if a.index >= 0 {
		heap.Remove(&s.queue, a.index)
	}
	s.mu.Unlock()
	a.mu.Lock()
	a.mu.Unlock() //nolint:staticcheck // an empty critical section on purpose: it waits for a running beat
}

func (s *scheduler) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queue.Len()
}

func (s *scheduler) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *scheduler) dispatch(ctx context.Context) {
	defer s.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		s.mu.Lock()
		var next *agent
		wait := time.Hour
		if s.queue.Len() > 0 {
			head := s.queue[0]
			if d := time.Until(head.due); d <= 0 {
				next = heap.Pop(&s.queue).(*agent)
				next.running = true
			} else {
				wait = d
			}
		}
		s.mu.Unlock()

		if next != nil {
			select {
			case s.work <- next:
				continue
			case <-ctx.Done():
				return
			}
		}
		timer.Reset(wait)
		select {
		case <-timer.C:
		case <-s.wake:
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
		case <-ctx.Done():
			return
		}
	}
}

func (s *scheduler) worker(ctx context.Context) {
	defer s.wg.Done()
	for {
		select {
		case a := <-s.work:
			due := s.beat(ctx, a)
			s.mu.Lock()
			a.running = false
			if !a.runAgain.IsZero() && a.runAgain.Before(due) {
				due = a.runAgain
			}
			a.runAgain = time.Time{}
			s.mu.Unlock()
			s.schedule(a, due)
		case <-ctx.Done():
			return
		}
	}
}

// agentHeap orders agents by due time.
type agentHeap []*agent

func (h agentHeap) Len() int           { return len(h) }
func (h agentHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h agentHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}

func (h *agentHeap) Push(x any) {
	a := x.(*agent)
	a.index = len(*h)
	*h = append(*h, a)
}

func (h *agentHeap) Pop() any {
	old := *h
	n := len(old)
	a := old[n-1]
	old[n-1] = nil
	a.index = -1
	*h = old[:n-1]
	return a
}
