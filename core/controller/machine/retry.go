package machine

import (
	"math/rand/v2"
	"sync"
	"time"

	"github.com/machinist-io/machinist/core/driver"
)

// backoff spaces the retries of a failing machine by the code of its last error, doubling the
// wait with each consecutive failure and adding ±20% jitter so machines that failed together do
// not retry together:
//
//	Unknown, DeadlineExceeded, Aborted, Unavailable, Canceled  ShortRetry  doubling up to MediumRetry
//	ResourceExhausted                                         ResourceExhaustedRetry  doubling up to 4×
//	every other code (needs a fix: InvalidArgument, ...)       MediumRetry doubling up to LongRetry
//
// Counts live in memory per machine and reset on success; a restart starts again at the base.
type backoff struct {
	mu       sync.Mutex
	failures map[string]int
}

func newBackoff() *backoff { return &backoff{failures: map[string]int{}} }

// next records a failure of key with code and returns the wait before the next attempt.
func (b *backoff) next(key string, code driver.Code, o Options) time.Duration {
	b.mu.Lock()
	b.failures[key]++
	n := b.failures[key]
	b.mu.Unlock()
	base, ceiling := retryBounds(code, o)
	d := base
	for i := 1; i < n && d < ceiling; i++ {
		d *= 2
	}
	if d > ceiling {
		d = ceiling
	}
	return jitter(d)
}

// forget resets key after a success.
func (b *backoff) forget(key string) {
	b.mu.Lock()
	delete(b.failures, key)
	b.mu.Unlock()
}

// retryBounds returns the first wait and the largest wait for an error code.
func retryBounds(code driver.Code, o Options) (base, ceiling time.Duration) {
	switch {
	case code == driver.ResourceExhausted:
		return o.ResourceExhaustedRetry, 4 * o.ResourceExhaustedRetry
	case code.Retryable() || code == driver.Canceled:
		return o.ShortRetry, max(o.MediumRetry, o.ShortRetry)
	default:
		return o.MediumRetry, max(o.LongRetry, o.MediumRetry)
	}
}

func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}
