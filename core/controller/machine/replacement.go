package machine

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// markTTL bounds how long a machine this process marked Failed counts as being replaced before
// the cache shows it Failed.
const markTTL = time.Minute

// replacementLimiter is the meltdown protection of reference §4.4: an unhealthy machine of a
// MachineDeployment (label "name") is marked Failed — which makes its MachineSet replace it —
// only while fewer than MaxReplacements machines of that deployment are already being replaced
// (in any phase other than Running, Unknown or Available, and not preserved). A network outage
// that makes every node Unknown thus replaces machines one at a time instead of all at once.
type replacementLimiter struct {
	mu sync.Mutex
	// marked are machines marked Failed by this process that the cache may not show yet; they
	// count as being replaced so two workers cannot both take the last permit.
	marked map[string]time.Time
}

func newReplacementLimiter() *replacementLimiter {
	return &replacementLimiter{marked: map[string]time.Time{}}
}

// mayFail decides whether m may be marked Failed now and, if so, counts it as being replaced.
// When it may not, it says why.
func (l *replacementLimiter) mayFail(ctx context.Context, r *reconciler, m *v1alpha1.Machine) (bool, string, error) {
	group := m.Labels[v1alpha1.LabelMachineDeploymentName]
	if group == "" {
		return true, "", nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()

	var list v1alpha1.MachineList
	if err := r.client.List(ctx, &list, client.InNamespace(m.Namespace), client.MatchingLabels{v1alpha1.LabelMachineDeploymentName: group}); err != nil {
		return false, "", fmt.Errorf("machine: list machines of deployment %s: %w", group, err)
	}
	now := r.now()
	present := map[string]bool{}
	inFlight := 0
	for i := range list.Items {
		o := &list.Items[i]
		key := o.Namespace + "/" + o.Name
		present[key] = true
		if o.Name == m.Name {
			continue
		}
		phase := o.Status.CurrentStatus.Phase
		if at, ok := l.marked[key]; ok {
			// Any phase but Unknown means the cache caught up (Failed, Terminating, or a
			// preserved machine that has already recovered to Running).
			if phase != v1alpha1.MachineUnknown || o.DeletionTimestamp != nil || now.Sub(at) > markTTL {
				delete(l.marked, key) // counted by phase below
			} else {
				inFlight++
				continue
			}
		}
		if preserved(o) {
			continue
		}
		switch phase {
		case v1alpha1.MachineRunning, v1alpha1.MachineUnknown, v1alpha1.MachineAvailable:
		default:
			inFlight++
		}
	}
	for key := range l.marked {
		if !present[key] {
			delete(l.marked, key)
		}
	}
	limit := maxReplacements(r.opts.MaxReplacements, len(list.Items))
	if inFlight >= limit {
		return false, fmt.Sprintf("%d machines of MachineDeployment %s are being replaced, at most %d at a time", inFlight, group, limit), nil
	}
	l.marked[m.Namespace+"/"+m.Name] = now
	return true, "", nil
}

// unmark forgets a mark whose status write failed.
func (l *replacementLimiter) unmark(m *v1alpha1.Machine) {
	l.mu.Lock()
	delete(l.marked, m.Namespace+"/"+m.Name)
	l.mu.Unlock()
}

// maxReplacements resolves the option against the deployment's size (percentages round down)
// and never returns less than 1: the first replacement is never blocked.
func maxReplacements(v intstr.IntOrString, total int) int {
	n, err := intstr.GetScaledValueFromIntOrPercent(&v, total, false)
	if err != nil || n < 1 {
		return 1
	}
	return n
}

// preserved reports whether the machine is preserved (its preserveExpiryTime is set, as MCM's
// canMarkMachineFailed reads it): a preserved Failed machine is kept, not being replaced.
func preserved(m *v1alpha1.Machine) bool {
	return m.DeletionTimestamp == nil && m.Status.CurrentStatus.PreserveExpiryTime != nil
}
