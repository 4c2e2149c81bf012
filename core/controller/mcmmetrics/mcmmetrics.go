// Package mcmmetrics exports Gardener machine-controller-manager's metrics with MCM's names,
// types, label names and label values, next to machinist's own, so MCM's dashboards and
// alerts keep working against `machinist run`:
//
//   - mcm_machine_*, mcm_machine_set_*, mcm_machine_deployment_* and
//     mcm_machine_controller_frozen: read from the manager's informer cache at scrape time, as
//     MCM's collectors read their listers (collect.go);
//   - mcm_machine_stale_machines_total, the per-MachineDeployment duration gauges and
//     mcm_machine_num_failed_join: recorded by the controllers when the event happens, as in
//     MCM (events.go);
//   - mcm_workqueue_*: derived at scrape time from controller-runtime's workqueue_* metrics,
//     with MCM's queue names and buckets (workqueue.go);
//   - mcm_cloud_api_*: core/cloudmetrics, recorded by the driver calls and the providers;
//   - mcm_misc_scrape_failure_total: failures of the scrape-time collectors.
//
// docs/controllers.md lists every family and where in MCM's source it was verified.
package mcmmetrics

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/machinist-io/machinist/core/cloudmetrics/cloudmetricsprom"
)

// Options of the collectors of one manager.
type Options struct {
	// Namespace of the Machine* objects the manager controls.
	Namespace string
	// Frozen reports whether the machine controller is frozen (mcm_machine_controller_frozen);
	// nil reports never.
	Frozen func() bool
	// WithoutMachines leaves out the families of MCM's provider machine-controller
	// (mcm_machine_* of Machines and mcm_machine_controller_frozen), WithoutSets those of its
	// core machine-controller-manager (mcm_machine_set_*, mcm_machine_deployment_*): each of
	// MCM's two processes serves its own, and so does each of machinist's halves. Neither set
	// (the all-in-one) serves both.
	WithoutMachines, WithoutSets bool
}

// source is one running manager's cache the scrape-time collectors read.
type source struct {
	reader         client.Reader
	namespace      string
	frozen         func() bool
	machines, sets bool
}

// served says which scrape-time families the process serves: those of every manager set up in
// it, so a family is there (at zero) before the caches sync and stays across restarts.
var served struct{ machines, sets atomic.Bool }

// sources are the caches of the managers running in the process: one in `machinist run`,
// several in tests.
var sources = struct {
	sync.Mutex
	set map[*source]struct{}
}{set: map[*source]struct{}{}}

// activeSources returns the running managers' caches that serve the families of machines (or,
// with machines false, of sets and deployments).
func activeSources(machines bool) []*source {
	sources.Lock()
	defer sources.Unlock()
	out := make([]*source, 0, len(sources.set))
	for s := range sources.set {
		if (machines && s.machines) || (!machines && s.sets) {
			out = append(out, s)
		}
	}
	return out
}

var (
	registerOnce sync.Once
	registerErr  error
)

// register adds every MCM family to controller-runtime's registry, once per process.
func register() error {
	registerOnce.Do(func() {
		cs := []prometheus.Collector{&collector{}, staleMachines, createDuration, initializeDuration,
			joinDuration, drainDuration, deleteDuration, failedJoins, coreScrapeFailures, providerScrapeFailures}
		cs = append(cs, cloudmetricsprom.Collector())
		for _, c := range cs {
			if err := metrics.Registry.Register(c); err != nil {
				registerErr = err
				return
			}
		}
		// MCM creates these series on the first failure; at zero from the start, rate() and
		// alerts on them work before anything failed.
		coreScrapeFailures.WithLabelValues(kindMachineSet)
		coreScrapeFailures.WithLabelValues(kindMachineDeployment)
		providerScrapeFailures.WithLabelValues(kindMachine)
	})
	return registerErr
}

// Setup registers MCM's metrics in controller-runtime's registry (served by the manager) and
// makes mgr's cache a source of the scrape-time collectors while mgr leads: like MCM, which
// registers its collectors when it starts its controllers, only the leader reports machines.
func Setup(mgr manager.Manager, opts Options) error {
	if err := register(); err != nil {
		return err
	}
	src := &source{reader: mgr.GetCache(), namespace: opts.Namespace, frozen: opts.Frozen, machines: !opts.WithoutMachines, sets: !opts.WithoutSets}
	if src.machines {
		served.machines.Store(true)
	}
	if src.sets {
		served.sets.Store(true)
	}
	return mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return nil
		}
		sources.Lock()
		sources.set[src] = struct{}{}
		sources.Unlock()
		<-ctx.Done()
		sources.Lock()
		delete(sources.set, src)
		sources.Unlock()
		return nil
	}))
}
