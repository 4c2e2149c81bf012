package machine

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// markTTL bounds how long a machine this process marked Failed counts as being replaced before
// the cache shows it Failed.
const markTTL = time.Minute

// replacementLimiter is MCM's meltdown protection
// (docs/compatibility/mcm-controllers.md#replacement-rate-limit): an unhealthy machine of a
// MachineDeployment (see deploymentOf) is marked Failed — which makes its MachineSet replace it —
// only while fewer than MaxReplacements machines of that deployment are already being replaced (in
// any phase other than Running, Unknown or Available, and not preserved). A network outage that
// makes every node Unknown thus replaces machines one at a time instead of all at once.
type replacementLimiter struct {
	mu sync.Mutex
	// marked are machines marked Failed by this process that the cache may not show yet; they
	// count as being replaced so two workers cannot both take the last permit.
	marked map[string]mark
	// pools: PoolPolicies are served, so a pool's spec.repair.maxInFlight may replace the
	// per-deployment limit (poolrepair.go).
	pools bool
}

// mark is when a machine was marked Failed, and the deployment it was counted in.
type mark struct {
	at    time.Time
	group string
}

func newReplacementLimiter() *replacementLimiter {
	return &replacementLimiter{marked: map[string]mark{}}
}

// mayFail decides whether m may be marked Failed now and, if so, counts it as being replaced.
// When it may not, it says why.
func (l *replacementLimiter) mayFail(ctx context.Context, c client.Reader, m *v1alpha1.Machine, maxReplacing intstr.IntOrString, now time.Time) (bool, string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	group, members, err := deploymentOf(ctx, c, m)
	if err != nil || group == "" {
		return err == nil, "", err
	}
	what := "MachineDeployment " + group
	limit := maxReplacements(maxReplacing, len(members))
	if l.pools {
		// A pool's repair budget spans its deployments (spec.repair.maxInFlight).
		if group, members, limit, err = repairGroup(ctx, c, m.Namespace, group, members, maxReplacing); err != nil {
			return false, "", err
		}
		if p, ok := strings.CutPrefix(group, "pool "); ok {
			what = "PoolPolicy " + p + " (spec.repair.maxInFlight)"
		}
	}
	present := map[string]bool{}
	inFlight := 0
	for _, o := range members {
		key := o.Namespace + "/" + o.Name
		present[key] = true
		if o.Name == m.Name {
			continue
		}
		phase := o.Status.CurrentStatus.Phase
		if mk, ok := l.marked[key]; ok {
			// Any phase but Unknown means the cache caught up (Failed, Terminating, or a
			// preserved machine that has already recovered to Running).
			if phase != v1alpha1.MachineUnknown || o.DeletionTimestamp != nil || now.Sub(mk.at) > markTTL {
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
	// Marks of this deployment's machines that are gone; other deployments' marks are theirs.
	for key, mk := range l.marked {
		if mk.group == m.Namespace+"/"+group && !present[key] {
			delete(l.marked, key)
		}
	}
	if inFlight >= limit {
		return false, fmt.Sprintf("%d machines of %s are being replaced, at most %d at a time", inFlight, what, limit), nil
	}
	l.marked[m.Namespace+"/"+m.Name] = mark{at: now, group: m.Namespace + "/" + group}
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

// IndexMachineController indexes Machines by the UID of their controller (their MachineSet).
const IndexMachineController = "machinist.controllerUID"

func addControllerIndex(ctx context.Context, mgr manager.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(ctx, &v1alpha1.Machine{}, IndexMachineController, func(o client.Object) []string {
		if ref := metav1.GetControllerOf(o); ref != nil {
			return []string{string(ref.UID)}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("machine: index machines by controller: %w", err)
	}
	return nil
}

// deploymentOf returns the name of the MachineDeployment m belongs to and that deployment's
// machines (m included), read from the cache. The deployment is found through the owners:
// m's controlling MachineSet and that set's controlling MachineDeployment. MCM reads the label
// "name" instead, which Gardener puts in every template but machinist does not add; it is still
// read for a machine without that chain of owners. "" means m belongs to no deployment.
func deploymentOf(ctx context.Context, c client.Reader, m *v1alpha1.Machine) (string, []*v1alpha1.Machine, error) {
	if set := metav1.GetControllerOf(m); set != nil && set.Kind == "MachineSet" {
		ms := &v1alpha1.MachineSet{}
		err := c.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: set.Name}, ms, client.UnsafeDisableDeepCopy)
		if err != nil && !apierrors.IsNotFound(err) {
			return "", nil, fmt.Errorf("machine: read machine set %s of %s: %w", set.Name, m.Name, err)
		}
		if d := metav1.GetControllerOf(ms); err == nil && d != nil && d.Kind == "MachineDeployment" {
			members, err := machinesOfDeployment(ctx, c, m.Namespace, d.UID)
			return d.Name, members, err
		}
	}
	group := m.Labels[v1alpha1.LabelMachineDeploymentName]
	if group == "" {
		return "", nil, nil
	}
	var list v1alpha1.MachineList
	if err := c.List(ctx, &list, client.InNamespace(m.Namespace), client.MatchingLabels{v1alpha1.LabelMachineDeploymentName: group}, client.UnsafeDisableDeepCopy); err != nil {
		return "", nil, fmt.Errorf("machine: list machines of deployment %s: %w", group, err)
	}
	out := make([]*v1alpha1.Machine, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, &list.Items[i])
	}
	return group, out, nil
}

// machinesOfDeployment lists the machines controlled by the sets the deployment controls.
func machinesOfDeployment(ctx context.Context, c client.Reader, ns string, deployment types.UID) ([]*v1alpha1.Machine, error) {
	var sets v1alpha1.MachineSetList
	if err := c.List(ctx, &sets, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("machine: list machine sets: %w", err)
	}
	var out []*v1alpha1.Machine
	for i := range sets.Items {
		ms := &sets.Items[i]
		if ref := metav1.GetControllerOf(ms); ref == nil || ref.UID != deployment {
			continue
		}
		var list v1alpha1.MachineList
		if err := c.List(ctx, &list, client.InNamespace(ns), client.MatchingFields{IndexMachineController: string(ms.UID)}, client.UnsafeDisableDeepCopy); err != nil {
			return nil, fmt.Errorf("machine: list machines of set %s: %w", ms.Name, err)
		}
		for j := range list.Items {
			out = append(out, &list.Items[j])
		}
	}
	return out, nil
}
