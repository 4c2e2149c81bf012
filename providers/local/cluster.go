package local

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/machinist-io/machinist/internal/kubeclient"
)

const (
	// controllerManagerLease is the leader-election Lease kube-controller-manager holds in
	// kube-system while it runs (leader election is on by default).
	controllerManagerLease = "kube-controller-manager"
	// lifecycleCheckEvery is how long the answer to "does a node lifecycle controller run?" is
	// reused: one GET per cluster per period, whatever the number of nodes.
	lifecycleCheckEvery = 10 * time.Second
)

// cluster is one target cluster of the node agents: the typed clients they use (nodes, pods
// and leases through internal/kubeclient, not client-go's clientset and its scheme of every API
// group), the pod tracker that plays kubelet for the pods bound
// to their nodes, and whether a node lifecycle controller runs there.
type cluster struct {
	// limit is the client's rate limit, growing with the agents of the cluster.
	limit *agentLimiter
	core  *kubeclient.CoreV1
	coord *kubeclient.CoordinationV1
	log   *slog.Logger
	pods  *podTracker
	// updates watches the nodes selected for an in-place update (update.go), once an agent runs.
	updates     *updateWatcher
	updatesOnce sync.Once

	mu          sync.Mutex
	checkedAt   time.Time
	controller  bool // a kube-controller-manager holds its lease
	checkFailed bool // the last check failed (logged once)
}

func newCluster(cfg *rest.Config, log *slog.Logger, lookup func(node string) *agent) (*cluster, error) {
	limit := newAgentLimiter()
	cfg = rest.CopyConfig(cfg)
	cfg.RateLimiter = limit
	cs, err := kubeclient.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("local: target client: %w", err)
	}
	c := &cluster{limit: limit, core: cs.CoreV1(), coord: cs.CoordinationV1(), log: log}
	c.pods = newPodTracker(c, lookup, log)
	return c, nil
}

// emulatesLifecycle reports whether the node agents must play the node lifecycle controller
// (mark silent nodes Unknown, manage the not-ready and unreachable taints) because no
// kube-controller-manager runs in the cluster. When one runs, its node lifecycle controller does
// that and the agents step back to what kubelet does, so the two never write the same fields.
// A kube-controller-manager is detected by its fresh leader-election Lease; a cluster where it
// runs without leader election, or without its node lifecycle controller, is not detected.
func (c *cluster) emulatesLifecycle(ctx context.Context, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now.Sub(c.checkedAt) < lifecycleCheckEvery && !c.checkedAt.IsZero() {
		return !c.controller
	}
	c.checkedAt = now
	lease, err := c.coord.Leases(metav1.NamespaceSystem).Get(ctx, controllerManagerLease, metav1.GetOptions{})
	switch {
	case err == nil:
		c.controller = leaseHeld(lease, now)
	case apierrors.IsNotFound(err):
		c.controller = false
	default:
		// Keep the last answer; without one the agents emulate the lifecycle.
		if !c.checkFailed {
			c.log.Warn("local: cannot tell whether kube-controller-manager runs (reading its lease); assuming it does not", "error", err)
			c.checkFailed = true
		}
		return !c.controller
	}
	c.checkFailed = false
	return !c.controller
}

// leaseHeld reports whether a leader-election lease has a holder that renewed it within its
// duration (plus one check period, so a renewal racing the check does not flip the answer).
func leaseHeld(l *coordinationv1.Lease, now time.Time) bool {
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" || l.Spec.RenewTime == nil {
		return false
	}
	d := 15 * time.Second
	if l.Spec.LeaseDurationSeconds != nil {
		d = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	return now.Sub(l.Spec.RenewTime.Time) < d+lifecycleCheckEvery
}

// deleteNode deletes a machine's Node and Lease, logging failures.
func (c *cluster) deleteNode(log *slog.Logger, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), nodeDeleteTimeout)
	defer cancel()
	if err := c.core.Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		log.Warn("local: delete node; the machine controller deletes it too", "machine", name, "error", err)
	}
	err := c.coord.Leases(corev1.NamespaceNodeLease).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		log.Warn("local: delete node lease", "machine", name, "error", err)
	}
}
