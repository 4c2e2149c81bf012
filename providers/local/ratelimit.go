package local

import (
	"context"
	"sync"

	"golang.org/x/time/rate"
	"k8s.io/client-go/util/flowcontrol"
)

// perAgentQPS is the share of a cluster's client rate each node agent adds: five times what a
// node needs at the default 10 s heartbeat (a Lease renewal, and a status report every 30th
// beat), so the agents of one client never queue behind its limit in a heartbeat round or while
// thousands of them register again after a restart.
const perAgentQPS = 0.5

// agentLimiter is the client-side rate limit of one cluster's node agents. Every kubelet has a
// client of its own (kubeAPIQPS 50 by default); the agents of a cluster share one, so its rate
// grows with them: perAgentQPS for every agent, at least minClientQPS. A fixed limit would
// be taken up entirely by the heartbeats of 5000 nodes (500 Lease renewals a second).
type agentLimiter struct {
	l *rate.Limiter

	mu     sync.Mutex
	agents int
}

var _ flowcontrol.RateLimiter = (*agentLimiter)(nil)

func newAgentLimiter() *agentLimiter {
	return &agentLimiter{l: rate.NewLimiter(minClientQPS, minClientBurst)}
}

// add counts agents in (n > 0) or out (n < 0) and sets the rate for them.
func (r *agentLimiter) add(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.agents = max(r.agents+n, 0)
	qps := max(minClientQPS, perAgentQPS*float64(r.agents))
	r.l.SetLimit(rate.Limit(qps))
	r.l.SetBurst(max(minClientBurst, int(2*qps)))
}

func (r *agentLimiter) TryAccept() bool                { return r.l.Allow() }
func (r *agentLimiter) Accept()                        { _ = r.l.Wait(context.Background()) }
func (r *agentLimiter) Wait(ctx context.Context) error { return r.l.Wait(ctx) }
func (r *agentLimiter) QPS() float32                   { return float32(r.l.Limit()) }
func (r *agentLimiter) Stop()                          {}
