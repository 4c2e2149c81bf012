package machine

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/fallback"
)

// errSurplus: the machine is about to be deleted, so no VM is created for it.
type errSurplus struct{ why string }

func (e *errSurplus) Error() string { return e.why }

// aboutToBeDeleted says why a machine without a VM must not get one, or "": it is being deleted,
// or its MachineSet is being deleted or has more live machines than replicas (it was scaled down,
// and its controller deletes machines without a VM first). Such a machine waits; its MachineSet
// deletes it or, once it is no longer surplus, it is created. A VM made now would be billed, take
// a quota slot and be drained and deleted moments later. A capacity fallback's surge machine is
// one more than replicas on purpose: it is neither surplus nor counted. The cache is read; when
// it cannot be, the machine is created as it would be without this check.
func (r *creator) aboutToBeDeleted(ctx context.Context, m *v1alpha1.Machine) string {
	if m.DeletionTimestamp != nil {
		return "the machine is being deleted"
	}
	ref := metav1.GetControllerOf(m)
	if ref == nil || ref.Kind != "MachineSet" || fallback.IsSurge(m) {
		return ""
	}
	ms := &v1alpha1.MachineSet{}
	if err := r.client.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: ref.Name}, ms, client.UnsafeDisableDeepCopy); err != nil {
		if !apierrors.IsNotFound(err) {
			r.log(m).Warn("cannot tell whether the machine is surplus: creating it", "set", ref.Name, "err", err)
		}
		return ""
	}
	if ms.UID != ref.UID {
		return ""
	}
	if ms.DeletionTimestamp != nil {
		return fmt.Sprintf("its machine set %s is being deleted", ms.Name)
	}
	// m was read when the reconcile began, before the driver was asked for its VM; the set may
	// have deleted it since, and its status below may already count it out. The cache's copy,
	// read after the set's, has that deletion when the set's status was computed from the same
	// cache (one manager), so the status cannot be ahead of it.
	cur := &v1alpha1.Machine{}
	switch err := r.client.Get(ctx, client.ObjectKeyFromObject(m), cur, client.UnsafeDisableDeepCopy); {
	case apierrors.IsNotFound(err):
		return "the machine is gone"
	case err == nil && cur.UID == m.UID && cur.DeletionTimestamp != nil:
		return "the machine is being deleted"
	}
	if ms.Status.ObservedGeneration >= ms.Generation && ms.Status.Replicas <= ms.Spec.Replicas {
		// The set's status has seen its current replicas and counts no more live machines (surge
		// machines included) than those: no surplus, without reading every machine of the set —
		// a scale-up creates thousands, each looking here. A status lagging behind creations
		// errs low, which is only possible while the set grows; a scale-down changes the
		// generation, and then the machines are counted.
		return ""
	}
	var list v1alpha1.MachineList
	if err := r.client.List(ctx, &list, client.InNamespace(m.Namespace), client.MatchingFields{IndexMachineController: string(ms.UID)}, client.UnsafeDisableDeepCopy); err != nil {
		r.log(m).Warn("cannot tell whether the machine is surplus: creating it", "set", ms.Name, "err", err)
		return ""
	}
	live := 0
	for i := range list.Items {
		if o := &list.Items[i]; o.DeletionTimestamp == nil && !fallback.IsSurge(o) {
			live++
		}
	}
	if int32(live) > ms.Spec.Replicas {
		return fmt.Sprintf("its machine set %s has %d machines for %d replicas and is scaling down", ms.Name, live, ms.Spec.Replicas)
	}
	return ""
}
