package safety

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	orphansFound = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "machinist_orphan_vms_found",
		Help: "VMs without a Machine found by the last orphan pass (deleted after the grace period unless --orphan-dry-run).",
	})
	orphansDeleted = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "machinist_orphan_vms_deleted_total",
		Help: "Orphan VMs deleted by the safety controller.",
	})
	orphanSkips = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "machinist_orphan_collection_skipped_total",
		Help: "Orphan passes (or deletions) skipped for safety, by reason: frozen, apiserver-unreachable, cache-unsynced.",
	}, []string{"reason"})
	frozenGauge = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "machinist_machine_controller_frozen",
		Help: "1 while the machine controller is frozen because an API server is unreachable.",
	})
	metricsOnce sync.Once
)

func registerMetrics() {
	metricsOnce.Do(func() {
		metrics.Registry.MustRegister(orphansFound, orphansDeleted, orphanSkips, frozenGauge)
	})
}
