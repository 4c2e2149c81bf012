package autoscaler

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
)

// Metrics counts and times the calls Cluster Autoscaler makes, per RPC.
type Metrics struct {
	calls    *prometheus.CounterVec
	errors   *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "machinist", Subsystem: "autoscaler", Name: "calls_total",
			Help: "Calls Cluster Autoscaler made, per RPC.",
		}, []string{"rpc"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "machinist", Subsystem: "autoscaler", Name: "call_errors_total",
			Help: "Calls answered with an error, per RPC and gRPC code (Unimplemented answers to the optional RPCs are expected).",
		}, []string{"rpc", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "machinist", Subsystem: "autoscaler", Name: "call_duration_seconds",
			Help: "Time to answer a call, per RPC.",
			// From 10µs (in-memory lookups) to 10s (Cluster Autoscaler's deadline is 5s by default).
			Buckets: prometheus.ExponentialBuckets(0.00001, 4, 11),
		}, []string{"rpc"}),
	}
	for _, c := range []prometheus.Collector{m.calls, m.errors, m.duration} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) observe(rpc string, code codes.Code, d time.Duration) {
	if m == nil {
		return
	}
	m.calls.WithLabelValues(rpc).Inc()
	if code != codes.OK {
		m.errors.WithLabelValues(rpc, code.String()).Inc()
	}
	m.duration.WithLabelValues(rpc).Observe(d.Seconds())
}
