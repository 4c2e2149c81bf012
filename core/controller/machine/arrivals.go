package machine

import (
	"context"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/registry"
)

// arrivals wakes the machines that wait for a driver when a dialled-in provider starts serving a
// provider name: those of its classes that still need their VM, whether they wait out the grace
// period of a preferred provider or failed on the driver that served the name before. Without it
// they would wait for their requeue, up to their backoff. Nil when the resolver's dialled-in
// providers cannot tell when they change.
func (r *machineReconciler) arrivals() source.Source {
	if r.drivers.RemoteChanged() == nil {
		return nil
	}
	return source.Func(func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		go r.watchArrivals(ctx, q)
		return nil
	})
}

// watchArrivals adds the machines of each provider that becomes served remotely to q, until ctx
// ends.
func (r *machineReconciler) watchArrivals(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	served := map[string]bool{}
	changed := r.drivers.RemoteChanged()
	r.arrived(ctx, served) // the machines served already were listed when the controller started
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
		changed = r.drivers.RemoteChanged()
		for _, req := range r.arrived(ctx, served) {
			q.Add(req)
		}
	}
}

// arrived updates served (provider name → served by dialled-in replicas) from the classes in the
// cache and returns the machines needing creation of the providers that became served.
func (r *machineReconciler) arrived(ctx context.Context, served map[string]bool) []reconcile.Request {
	var classes v1alpha1.MachineClassList
	if err := r.client.List(ctx, &classes, r.inNamespace()...); err != nil {
		r.opts.Log.Warn("machine: list classes after a provider change", "err", err)
		return nil
	}
	now := map[string]bool{}
	for i := range classes.Items {
		p := registry.Normalize(classes.Items[i].Provider)
		if _, seen := now[p]; !seen {
			now[p] = r.drivers.ServedRemotely(p)
		}
	}
	var out []reconcile.Request
	for i := range classes.Items {
		c := &classes.Items[i]
		p := registry.Normalize(c.Provider)
		if !now[p] || served[p] {
			continue
		}
		var machines v1alpha1.MachineList
		if err := r.client.List(ctx, &machines, client.InNamespace(c.Namespace), client.MatchingFields{IndexMachineClassName: c.Name}); err != nil {
			continue
		}
		for j := range machines.Items {
			if m := &machines.Items[j]; m.DeletionTimestamp == nil && m.Spec.ProviderID == "" && needsCreation(m) {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(m)})
			}
		}
	}
	for p, v := range now {
		served[p] = v
	}
	return out
}

func (r *machineReconciler) inNamespace() []client.ListOption {
	if r.opts.Namespace == "" {
		return nil
	}
	return []client.ListOption{client.InNamespace(r.opts.Namespace)}
}
