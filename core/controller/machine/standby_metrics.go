package machine

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Standby machines' metrics (docs/machine-controller.md, "Metrics and events").
var (
	standbyStops = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "machinist_standby_stops_total",
		Help: "Standby machines whose VM was stopped after their first boot.",
	}, []string{"namespace"})
	standbyResumes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "machinist_standby_resumes_total",
		Help: "Claimed standby machines whose stopped VM was started instead of a machine being created.",
	}, []string{"namespace"})
	standbyFreshCreates = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "machinist_standby_fresh_creates_total",
		Help: "Claimed standby machines deleted because their VM could not start (no capacity, VM gone): their set created a fresh machine.",
	}, []string{"namespace"})
	standbyStartSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "machinist_standby_start_duration_seconds",
		Help:    "How long StartMachine of a claimed standby machine took, successful or not.",
		Buckets: prometheus.ExponentialBuckets(0.05, 2, 14), // 50 ms .. ~7 min
	})
)

func init() {
	metrics.Registry.MustRegister(standbyStops, standbyResumes, standbyFreshCreates, standbyStartSeconds)
}

func observeStart(began, now time.Time) { standbyStartSeconds.Observe(now.Sub(began).Seconds()) }
