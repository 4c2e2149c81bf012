package machine

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	machinistv1alpha1 "github.com/machinist-io/machinist/core/apis/machinist/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/pool"
)

// parkedDrainTimeout bounds each graceful drain attempt of a parked machine: it waits for a
// disruption budget to allow an eviction, not for a whole drain timeout again.
const parkedDrainTimeout = 10 * time.Second

// parkedRetry is the longest a parked machine waits before its next graceful drain attempt.
const parkedRetry = time.Minute

// undrainable is the terminating machine's side of spec.rollout.undrainable: Cordon (a type of
// its own over the controller's deps, so the termination reconciler stays small).
type undrainable struct{ *deps }

// cordonPolicy returns the PoolPolicy that governs m's deployment with spec.rollout.undrainable:
// Cordon, or nil. Such a machine is never drained by force when its drain timeout passes: its
// node stays cordoned with the pods its budgets protect, the machine is marked
// machinist.io/undrainable (the pool's budgets then leave it out) and the drain goes on trying
// gracefully, as AKS's undrainableNodeBehavior: Cordon does.
func (r undrainable) cordonPolicy(ctx context.Context, m *v1alpha1.Machine) (*machinistv1alpha1.PoolPolicy, error) {
	if !r.limiter.pools {
		return nil, nil
	}
	group, _, err := deploymentOf(ctx, r.client, m)
	if err != nil || group == "" {
		return nil, err
	}
	a, _, err := pool.Reader{Client: r.client}.Assign(ctx, m.Namespace)
	if err != nil {
		return nil, err
	}
	if p := a.Governing(group); p != nil && p.Spec.Rollout.Undrainable == machinistv1alpha1.UndrainableCordon {
		return p, nil
	}
	return nil, nil
}

// park marks m undrainable (once: the event says so when the mark is new), naming the policy
// and what blocks the drain.
func (r undrainable) park(ctx context.Context, m *v1alpha1.Machine, p *machinistv1alpha1.PoolPolicy, node string, blocked error) error {
	if _, ok := m.Annotations[machinistv1alpha1.AnnotationUndrainable]; ok {
		return nil
	}
	why := fmt.Sprintf("node %s could not be drained within the drain timeout and is left cordoned (PoolPolicy %s, undrainable: Cordon): %v", node, p.Name, blocked)
	orig := m.DeepCopy()
	metav1.SetMetaDataAnnotation(&m.ObjectMeta, machinistv1alpha1.AnnotationUndrainable, truncateNote(why))
	if err := r.client.Patch(ctx, m, client.MergeFrom(orig)); err != nil {
		return fmt.Errorf("mark %s undrainable: %w", m.Name, err)
	}
	r.event(m, corev1.EventTypeWarning, "Undrainable", "Drain", why)
	return nil
}

// truncateNote keeps an annotation value readable (a drain error may list many pods).
func truncateNote(s string) string {
	const limit = 1024
	if len(s) <= limit {
		return s
	}
	return s[:limit-3] + "..."
}
