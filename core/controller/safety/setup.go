package safety

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/internal/eventnote"
	"github.com/machinist-io/machinist/core/registry"
	"github.com/machinist-io/machinist/internal/waitctx"
)

// indexMachineOwner indexes Machines by the UID of their controlling owner (a MachineSet).
const indexMachineOwner = "safety.machinist.io/controller-uid"

// Controller is the running safety controller. Pass it as machine.Options.Freeze so the Machine
// controller holds still while an API server is unreachable.
type Controller struct {
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

	frozen atomic.Bool

	// orphan collection state
	trigger    chan struct{}
	orphansMu  sync.Mutex
	candidates map[string]*candidate // providerID → first sighting

	// manualUnfreeze remembers, per MachineSet UID, the machine count at a manual unfreeze: the
	// set is not frozen again for the same overshoot, only if it grows further.
	unfreezeMu     sync.Mutex
	manualUnfreeze map[types.UID]int32

	// histories remembers what the overshoot check saw of each MachineSet (overshoot.go).
	historiesMu sync.Mutex
	histories   map[client.ObjectKey]*setHistory
}

// Frozen reports whether the control plane or the target cluster's API server has been
// unreachable for longer than APIServerStatusCheckTimeout. A nil Controller is never frozen.
func (c *Controller) Frozen() bool { return c != nil && c.frozen.Load() }

// Setup adds the orphan collector, the overshoot freeze and the API-server probe to mgr (those
// Options.WithoutMachineSafety and WithoutOvershoot leave out). target is the cluster the nodes
// join (nil = none); the caller adds it to mgr. Call it before machine.Setup and pass the result
// as machine.Options.Freeze.
func Setup(mgr manager.Manager, target cluster.Cluster, drivers *registry.Resolver, opts Options) (*Controller, error) {
	if drivers == nil {
		return nil, fmt.Errorf("safety: setup: no driver resolver given")
	}
	opts = opts.withDefaults()
	c := &Controller{
		opts:           opts,
		log:            opts.Log,
		mgr:            mgr,
		client:         mgr.GetClient(),
		apiReader:      mgr.GetAPIReader(),
		target:         target,
		drivers:        drivers,
		recorder:       eventnote.For(mgr, "machine-safety-controller"),
		clock:          opts.Clock,
		started:        opts.Clock.Now(),
		trigger:        make(chan struct{}, 1),
		candidates:     map[string]*candidate{},
		manualUnfreeze: map[types.UID]int32{},
		histories:      map[client.ObjectKey]*setHistory{},
	}
	if !opts.WithoutMachineSafety {
		if err := mgr.Add(manager.RunnableFunc(c.probeAPIServers)); err != nil {
			return nil, fmt.Errorf("safety: add API server probe: %w", err)
		}
		if err := mgr.Add(manager.RunnableFunc(c.collectOrphans)); err != nil {
			return nil, fmt.Errorf("safety: add orphan collector: %w", err)
		}
		if err := c.setupOrphanTriggers(mgr); err != nil {
			return nil, err
		}
	}
	if !opts.WithoutOvershoot {
		if err := mgr.GetFieldIndexer().IndexField(context.Background(), &v1alpha1.Machine{}, indexMachineOwner, func(o client.Object) []string {
			for _, ref := range o.GetOwnerReferences() {
				if ref.Controller != nil && *ref.Controller {
					return []string{string(ref.UID)}
				}
			}
			return nil
		}); err != nil {
			return nil, fmt.Errorf("safety: index machines by owner: %w", err)
		}
		if err := c.setupOvershoot(mgr); err != nil {
			return nil, err
		}
	}
	registerMetrics()
	return c, nil
}

func (c *Controller) namespace() string {
	if c.opts.Namespace != "" {
		return c.opts.Namespace
	}
	return "default"
}

func (c *Controller) now() time.Time { return c.clock.Now() }

// sleep waits d by the controller's clock or until ctx is done; it reports whether ctx is still
// alive.
func (c *Controller) sleep(ctx context.Context, d time.Duration) bool {
	return waitctx.Sleep(ctx, c.clock, d) == nil
}
