package machine

import (
	"context"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// phaseCollector exports machinist_machines{namespace,phase}: the machines in each phase, read
// from the manager's cache at scrape time (no bookkeeping in the reconcilers to drift).
type phaseCollector struct {
	mu      sync.Mutex
	sources map[*cacheSource]struct{}
	desc    *prometheus.Desc
}

type cacheSource struct{ reader client.Reader }

var (
	phases     = &phaseCollector{sources: map[*cacheSource]struct{}{}, desc: prometheus.NewDesc("machinist_machines", "Machines by namespace and phase (\"Creating\" for machines without a phase yet).", []string{"namespace", "phase"}, nil)}
	phasesOnce sync.Once
)

func (c *phaseCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *phaseCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	srcs := make([]*cacheSource, 0, len(c.sources))
	for s := range c.sources {
		srcs = append(srcs, s)
	}
	c.mu.Unlock()
	counts := map[[2]string]int{}
	for _, s := range srcs {
		var list v1alpha1.MachineList
		if err := s.reader.List(context.Background(), &list, client.UnsafeDisableDeepCopy); err != nil {
			continue
		}
		for _, m := range list.Items {
			p := string(m.Status.CurrentStatus.Phase)
			if p == "" {
				p = "Creating"
			}
			counts[[2]string{m.Namespace, p}]++
		}
	}
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), k[0], k[1])
	}
}

// registerPhaseMetrics adds the manager's cache as a source of the phase gauge for as long as the
// manager runs.
func registerPhaseMetrics(mgr manager.Manager) error {
	var err error
	phasesOnce.Do(func() { err = metrics.Registry.Register(phases) })
	if err != nil {
		return err
	}
	src := &cacheSource{reader: mgr.GetCache()}
	return mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return nil
		}
		phases.mu.Lock()
		phases.sources[src] = struct{}{}
		phases.mu.Unlock()
		<-ctx.Done()
		phases.mu.Lock()
		delete(phases.sources, src)
		phases.mu.Unlock()
		return nil
	}))
}
