package safety

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/machinist-io/machinist/core/eventnote"
	"github.com/machinist-io/machinist/core/registry"
	"github.com/machinist-io/machinist/internal/waitctx"
)

// deps are what the three safety controllers share.
type deps struct {
	opts      Options
	log       *slog.Logger
	mgr       manager.Manager
	client    client.Client
	apiReader client.Reader
	target    cluster.Cluster
	drivers   *registry.Resolver
	recorder  events.EventRecorder
	clock     clock.Clock
	started   time.Time // when Setup ran
}

func (d *deps) namespace() string {
	if d.opts.Namespace != "" {
		return d.opts.Namespace
	}
	return "default"
}

func (d *deps) now() time.Time { return d.clock.Now() }

// sleep waits by the controllers' clock or until ctx is done; it reports whether ctx is still
// alive.
func (d *deps) sleep(ctx context.Context, wait time.Duration) bool {
	return waitctx.Sleep(ctx, d.clock, wait) == nil
}

// Controller is the running safety controllers: the API-server probe and freeze, the orphan
// collector and the overshoot freeze, each with its own state. Pass it as
// machine.Options.Freeze so the Machine controller holds still while an API server is
// unreachable.
type Controller struct {
	probe     *apiServerProbe
	orphans   *orphanCollector
	overshoot *overshootFreeze
}

// Frozen reports whether the control plane or the target cluster's API server has been
// unreachable for longer than APIServerStatusCheckTimeout. A nil Controller is never frozen.
func (c *Controller) Frozen() bool { return c != nil && c.probe.Frozen() }

// Setup adds the orphan collector, the overshoot freeze and the API-server probe to mgr (those
// Options.WithoutMachineSafety and WithoutOvershoot leave out). target is the cluster the nodes
// join (nil = none); the caller adds it to mgr. Call it before machine.Setup and pass the result
// as machine.Options.Freeze.
func Setup(mgr manager.Manager, target cluster.Cluster, drivers *registry.Resolver, opts Options) (*Controller, error) {
	if drivers == nil {
		return nil, fmt.Errorf("safety: setup: no driver resolver given")
	}
	opts = opts.withDefaults()
	d := &deps{
		opts:      opts,
		log:       opts.Log,
		mgr:       mgr,
		client:    mgr.GetClient(),
		apiReader: mgr.GetAPIReader(),
		target:    target,
		drivers:   drivers,
		recorder:  eventnote.For(mgr, "machine-safety-controller"),
		clock:     opts.Clock,
		started:   opts.Clock.Now(),
	}
	probe := &apiServerProbe{deps: d}
	c := &Controller{
		probe:     probe,
		orphans:   &orphanCollector{deps: d, probe: probe, trigger: make(chan struct{}, 1), candidates: map[string]*candidate{}},
		overshoot: &overshootFreeze{deps: d, manualUnfreeze: map[types.UID]int32{}, histories: map[client.ObjectKey]*setHistory{}},
	}
	if !opts.WithoutMachineSafety {
		if err := mgr.Add(manager.RunnableFunc(c.probe.run)); err != nil {
			return nil, fmt.Errorf("safety: add API server probe: %w", err)
		}
		if err := mgr.Add(manager.RunnableFunc(c.orphans.run)); err != nil {
			return nil, fmt.Errorf("safety: add orphan collector: %w", err)
		}
		if err := c.orphans.setupTriggers(mgr); err != nil {
			return nil, err
		}
	}
	if !opts.WithoutOvershoot {
		if err := c.overshoot.setup(mgr); err != nil {
			return nil, err
		}
	}
	registerMetrics()
	return c, nil
}
