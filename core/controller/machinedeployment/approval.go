package machinedeployment

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// approvals wakes the deployment of a node's machine when someone selects the node for update
// (or takes the selection back): under a pool's `approval: Manual`, and an InPlaceUpdate with
// orchestration Manual, that label is the go-ahead, and nothing else would tell the deployment
// until its resync. Only the label's changes pass, so node heartbeats cost nothing here.
func (r *Reconciler) approvals() source.Source {
	return source.Kind(r.opts.TargetCache, &corev1.Node{},
		handler.TypedEnqueueRequestsFromMapFunc(r.deploymentsOfNode), selectionChanged())
}

// selectionChanged passes a node that appears selected for update or whose selection changes.
func selectionChanged() predicate.TypedPredicate[*corev1.Node] {
	selection := func(n *corev1.Node) (string, bool) {
		v, ok := n.Labels[v1alpha1.LabelNodeSelectedForUpdate]
		return v, ok
	}
	return predicate.TypedFuncs[*corev1.Node]{
		CreateFunc: func(e event.TypedCreateEvent[*corev1.Node]) bool {
			_, ok := selection(e.Object)
			return ok
		},
		UpdateFunc: func(e event.TypedUpdateEvent[*corev1.Node]) bool {
			ov, ook := selection(e.ObjectOld)
			nv, nok := selection(e.ObjectNew)
			return ook != nok || ov != nv
		},
		DeleteFunc:  func(event.TypedDeleteEvent[*corev1.Node]) bool { return false },
		GenericFunc: func(event.TypedGenericEvent[*corev1.Node]) bool { return false },
	}
}

// deploymentsOfNode maps a node to the deployment of the machine recorded on it (by the
// machine's node label, read from the cache).
func (r *Reconciler) deploymentsOfNode(ctx context.Context, n *corev1.Node) []reconcile.Request {
	var machines v1alpha1.MachineList
	if err := r.client.List(ctx, &machines, client.MatchingLabels{v1alpha1.LabelNode: n.Name}, client.UnsafeDisableDeepCopy); err != nil {
		r.log.Warn("machines of a node selected for update", "node", n.Name, "err", err)
		return nil
	}
	var out []reconcile.Request
	for i := range machines.Items {
		out = append(out, r.deploymentOfMachine(ctx, &machines.Items[i])...)
	}
	return out
}
