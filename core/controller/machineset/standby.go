package machineset

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/internal/ownership"
	"github.com/machinist-io/machinist/core/controller/standby"
)

// ReasonResumedStandby: a scale-up claimed standby machines instead of creating machines.
const ReasonResumedStandby = "ResumedStandby"

// claimStandby claims up to n standby machines of the set's deployment of the set's template
// (docs/machine-controller.md, "Standby machines") and reports how many it claimed; the set
// creates only the rest. A claim that conflicts (the machine changed meanwhile) is skipped: the
// set creates one more instead, and the pool reconciler deals with the standby machine.
func (r *Reconciler) claimStandby(ctx context.Context, ms *v1alpha1.MachineSet, n int) (int, error) {
	owner := metav1.GetControllerOf(ms)
	if owner == nil || owner.Kind != "MachineDeployment" || n <= 0 {
		return 0, nil
	}
	// Standby machines are controlled by the deployment itself: the cache's index finds them
	// without a scan of the namespace's machines on every scale-up.
	var list v1alpha1.MachineList
	if err := ownership.Controlled(ctx, r.client, &list, ms.Namespace, owner.UID); err != nil {
		return 0, fmt.Errorf("machineset: list standby machines of %s: %w", owner.Name, err)
	}
	byName := map[string]*v1alpha1.Machine{}
	var members []standby.Member
	for i := range list.Items {
		m := &list.Items[i]
		if o := metav1.GetControllerOf(m); o == nil || o.UID != owner.UID {
			continue
		}
		if mem, ok := standby.MemberOf(m, owner.Name); ok {
			members = append(members, mem)
			byName[m.Name] = m
		}
	}
	names := standby.Claimable(members, ms.Labels[v1alpha1.LabelMachineTemplateHash], n)
	if len(names) == 0 {
		return 0, nil
	}
	key := client.ObjectKeyFromObject(ms)
	defer r.exp.pass(key)()
	claimed := 0
	var errs []error
	for _, name := range names {
		err := r.client.Update(ctx, standby.Claim(byName[name], ms))
		if apierrors.IsConflict(err) {
			// The cache was behind (the machine just became Stopped): claim the current one.
			err = r.claimFresh(ctx, ms, name, owner.Name)
		}
		if err != nil {
			if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) && !errors.Is(err, errNotClaimable) {
				errs = append(errs, fmt.Errorf("machineset: claim standby machine %s: %w", name, err))
			}
			continue
		}
		r.exp.created(key, name)
		claimed++
	}
	if claimed > 0 {
		log.FromContext(ctx).Info("claimed standby machines", "set", ms.Name, "claimed", claimed, "wanted", n)
		r.recorder.Eventf(ms, nil, "Normal", ReasonResumedStandby, "Create", "Claimed %d standby machines instead of creating them", claimed)
	}
	return claimed, errors.Join(errs...)
}

var errNotClaimable = errors.New("no longer a claimable standby machine")

// claimFresh claims machine name read from the API server, if it is still claimable.
func (r *Reconciler) claimFresh(ctx context.Context, ms *v1alpha1.MachineSet, name, deployment string) error {
	m := &v1alpha1.Machine{}
	if err := r.reader.Get(ctx, client.ObjectKey{Namespace: ms.Namespace, Name: name}, m); err != nil {
		return err
	}
	mem, ok := standby.MemberOf(m, deployment)
	if !ok || len(standby.Claimable([]standby.Member{mem}, ms.Labels[v1alpha1.LabelMachineTemplateHash], 1)) == 0 {
		return errNotClaimable
	}
	return r.client.Update(ctx, standby.Claim(m, ms))
}
