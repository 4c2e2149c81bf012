package fakekit

import "sync"

// Recorded is a fake's record of one request: it names the request's operation.
type Recorded interface{ Operation() string }

// Journal holds the requests a fake answered, in order. It is safe for concurrent use; its zero
// value is empty.
type Journal[R Recorded] struct {
	mu   sync.Mutex
	list []R
}

// Add records a request.
func (j *Journal[R]) Add(r R) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.list = append(j.list, r)
}

// All returns the requests answered so far, oldest first.
func (j *Journal[R]) All() []R {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]R(nil), j.list...)
}

// For returns the requests of one operation, oldest first.
func (j *Journal[R]) For(op string) []R {
	var out []R
	for _, r := range j.All() {
		if r.Operation() == op {
			out = append(out, r)
		}
	}
	return out
}

// Len is how many requests were answered.
func (j *Journal[R]) Len() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.list)
}

// Reset forgets the requests so far.
func (j *Journal[R]) Reset() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.list = nil
}
