package dialin

import (
	"math"
	"math/rand/v2"
	"time"
)

// Backoff is capped exponential backoff with jitter: attempt n waits Initial·Factor^n, at most
// Max, scaled by a random factor in [1-Jitter, 1+Jitter] so replicas that lost the controller
// together do not come back in lockstep.
type Backoff struct {
	Initial time.Duration
	Max     time.Duration
	Factor  float64
	Jitter  float64
}

// DefaultBackoff reconnects after about 0.5 s, 1 s, 2 s, ... up to 30 s.
var DefaultBackoff = Backoff{Initial: 500 * time.Millisecond, Max: 30 * time.Second, Factor: 2, Jitter: 0.2}

func (b Backoff) orDefault() Backoff {
	if b.Initial <= 0 {
		b.Initial = DefaultBackoff.Initial
	}
	if b.Max < b.Initial {
		b.Max = max(DefaultBackoff.Max, b.Initial)
	}
	if b.Factor < 1 {
		b.Factor = DefaultBackoff.Factor
	}
	if b.Jitter < 0 || b.Jitter > 1 {
		b.Jitter = DefaultBackoff.Jitter
	}
	return b
}

// Delay returns the wait before reconnection attempt n (0-based).
func (b Backoff) Delay(attempt int) time.Duration {
	b = b.orDefault()
	d := float64(b.Initial) * math.Pow(b.Factor, float64(attempt))
	if d > float64(b.Max) || math.IsInf(d, 0) {
		d = float64(b.Max)
	}
	d *= 1 + b.Jitter*(2*rand.Float64()-1)
	return min(time.Duration(d), b.Max)
}
