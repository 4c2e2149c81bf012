package safety

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// probeName is an object name that cannot exist (MCM's dummy_name), so a probe reads NotFound
// from a reachable API server and costs it nothing.
const probeName = "machinist-apiserver-probe-dummy_name"

// descHealthTimeoutReset is MCM's text for machines whose Unknown state is forgiven after an
// outage of the API server.
const descHealthTimeoutReset = "Machine Health Timeout was reset due to APIServer being unreachable"

// apiServerProbe is the API-server freeze: it probes both API servers and freezes the Machine
// controller while one has been unreachable too long.
type apiServerProbe struct {
	*deps
	frozen atomic.Bool
}

// Frozen reports whether the Machine controller is frozen; a nil probe is never frozen.
func (c *apiServerProbe) Frozen() bool { return c != nil && c.frozen.Load() }

// run is MCM's API-server safety
// (docs/compatibility/mcm-controllers.md#api-server-freeze): both API servers are probed every
// APIServerStatusCheckPeriod (every timeout/5 while one is unreachable). Unreachable for longer
// than APIServerStatusCheckTimeout freezes the Machine controller — no machine is created or
// failed, only deletions go on — because nodes that cannot report look unhealthy and replacing them
// all would be a meltdown. On recovery every Unknown machine is reset to Running so its health
// timeout starts afresh.
func (c *apiServerProbe) run(ctx context.Context) error {
	var unreachableSince time.Time
	for {
		err := c.probe(ctx)
		if ctx.Err() != nil {
			return nil
		}
		now := c.now()
		if err == nil {
			unreachableSince = time.Time{}
			if c.frozen.Load() {
				c.log.Info("safety: API servers reachable again, unfreezing the machine controller")
				if rerr := c.resetUnknownMachines(ctx); rerr != nil {
					// Stay frozen until the reset went through.
					c.log.Warn("safety: reset Unknown machines after the outage", "err", rerr)
					if !c.sleep(ctx, c.opts.APIServerStatusCheckTimeout/5) {
						return nil
					}
					continue
				}
				c.awaitCacheCaughtUp(ctx)
				c.setFrozen(false)
			}
			if !c.sleep(ctx, c.opts.APIServerStatusCheckPeriod) {
				return nil
			}
			continue
		}
		if unreachableSince.IsZero() {
			unreachableSince = now
			c.log.Warn("safety: API server unreachable", "err", err)
		}
		if !c.frozen.Load() && now.Sub(unreachableSince) >= c.opts.APIServerStatusCheckTimeout {
			c.log.Warn("safety: API server unreachable for too long, freezing the machine controller",
				"since", unreachableSince.Format(time.RFC3339), "err", err)
			c.setFrozen(true)
		}
		if !c.sleep(ctx, c.opts.APIServerStatusCheckTimeout/5) {
			return nil
		}
	}
}

func (c *apiServerProbe) setFrozen(v bool) {
	c.frozen.Store(v)
	if v {
		frozenGauge.Set(1)
	} else {
		frozenGauge.Set(0)
	}
}

// probe reads a missing Machine from the control cluster and a missing Node from the target
// cluster, each bounded by the status-check timeout; NotFound means reachable.
func (c *apiServerProbe) probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.APIServerStatusCheckTimeout)
	defer cancel()
	if err := c.apiReader.Get(ctx, client.ObjectKey{Namespace: c.namespace(), Name: probeName}, &v1alpha1.Machine{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("control cluster: %w", err)
	}
	if c.target != nil {
		if err := c.target.GetAPIReader().Get(ctx, client.ObjectKey{Name: probeName}, &corev1.Node{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("target cluster: %w", err)
		}
	}
	return nil
}

// controlPlaneReachable is the orphan collector's last check before deleting anything.
func (c *apiServerProbe) controlPlaneReachable(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.APIServerStatusCheckTimeout)
	defer cancel()
	err := c.apiReader.Get(ctx, client.ObjectKey{Namespace: c.namespace(), Name: probeName}, &v1alpha1.Machine{})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}

// awaitCacheCaughtUp waits (bounded by the status-check timeout, in real time: it waits for the
// informer) until the manager's cache no longer shows a machine Unknown from before the reset,
// so the machine controller does not act on the pre-outage state once unfrozen.
func (c *apiServerProbe) awaitCacheCaughtUp(ctx context.Context) {
	resetAt := c.now().Add(-time.Second)
	_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, c.opts.APIServerStatusCheckTimeout, true, func(ctx context.Context) (bool, error) {
		var list v1alpha1.MachineList
		if err := c.client.List(ctx, &list, client.InNamespace(c.opts.Namespace)); err != nil {
			return false, err
		}
		for _, m := range list.Items {
			if m.DeletionTimestamp == nil && m.Status.CurrentStatus.Phase == v1alpha1.MachineUnknown && m.Status.CurrentStatus.LastUpdateTime.Time.Before(resetAt) {
				return false, nil
			}
		}
		return true, nil
	})
}

// resetUnknownMachines sets every Unknown machine back to Running with a fresh lastUpdateTime,
// so the outage does not count against its health timeout.
func (c *apiServerProbe) resetUnknownMachines(ctx context.Context) error {
	var list v1alpha1.MachineList
	if err := c.apiReader.List(ctx, &list, client.InNamespace(c.opts.Namespace)); err != nil {
		return err
	}
	now := c.now()
	for i := range list.Items {
		m := &list.Items[i]
		if m.Status.CurrentStatus.Phase != v1alpha1.MachineUnknown || m.DeletionTimestamp != nil {
			continue
		}
		key := client.ObjectKeyFromObject(m)
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur := &v1alpha1.Machine{}
			if err := c.apiReader.Get(ctx, key, cur); err != nil {
				return err
			}
			if cur.Status.CurrentStatus.Phase != v1alpha1.MachineUnknown {
				return nil
			}
			cur.Status.CurrentStatus.Phase = v1alpha1.MachineRunning
			cur.Status.CurrentStatus.TimeoutActive = false
			cur.Status.CurrentStatus.LastUpdateTime = metav1.NewTime(now)
			cur.Status.LastOperation = v1alpha1.LastOperation{
				Type: v1alpha1.MachineOperationHealthCheck, State: v1alpha1.MachineStateProcessing,
				Description: descHealthTimeoutReset, LastUpdateTime: metav1.NewTime(now),
			}
			return c.client.Status().Update(ctx, cur)
		})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("reset machine %s: %w", m.Name, err)
		}
		c.recorder.Eventf(m, nil, corev1.EventTypeNormal, "HealthTimeoutReset", "HealthCheck", descHealthTimeoutReset)
	}
	return nil
}
