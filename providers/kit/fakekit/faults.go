package fakekit

import "sync"

// Rule is what every fake's Fault embeds: which requests it applies to and how often.
type Rule struct {
	// Op is the operation the fault applies to, in the fake's names of its operations
	// (fakegcp.OpInsertInstance, "RunInstances", …); "" matches every request the fake lets
	// faults apply to.
	Op string `json:"op,omitempty"`
	// Times is how many matching requests the fault applies to; 0 (or less) means every one until
	// the faults are cleared.
	Times int `json:"times,omitempty"`
}

func (r Rule) rule() Rule { return r }

// Matches reports whether the fault applies to requests of op: its Op is op, or empty.
func (r Rule) Matches(op string) bool { return r.Op == "" || r.Op == op }

// Fault is a fake's fault type: a struct that embeds Rule.
type Fault interface{ rule() Rule }

// Faults are the faults injected into a fake, checked in the order they were injected; a fault
// applies until it has applied Times times. It is safe for concurrent use; its zero value has none.
type Faults[F Fault] struct {
	mu   sync.Mutex
	list []*armed[F]
	hits int
}

type armed[F Fault] struct {
	f    F
	used int
}

// Inject adds a fault.
func (fs *Faults[F]) Inject(f F) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.list = append(fs.list, &armed[F]{f: f})
}

// Clear removes every injected fault.
func (fs *Faults[F]) Clear() {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.list = nil
}

// Hits is how many times the injected faults have applied.
func (fs *Faults[F]) Hits() int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.hits
}

// Take returns the first fault with uses left that matches (Rule.Matches, or the fake's own
// matching) and uses it up once.
func (fs *Faults[F]) Take(matches func(F) bool) (F, bool) {
	var found F
	ok := false
	fs.Each(func(f F) bool {
		if ok || !matches(f) {
			return false
		}
		found, ok = f, true
		return true
	})
	return found, ok
}

// Each calls use with each fault with uses left, in order; a fault use returns true for is used up
// once (a request may take several faults of different kinds).
func (fs *Faults[F]) Each(use func(F) bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for _, a := range fs.list {
		if r := a.f.rule(); r.Times > 0 && a.used >= r.Times {
			continue
		}
		if use(a.f) {
			a.used++
			fs.hits++
		}
	}
}

// Set stores v in *dst under mu: a fake's settings change while it serves.
func Set[T any](mu sync.Locker, dst *T, v T) {
	mu.Lock()
	defer mu.Unlock()
	*dst = v
}
