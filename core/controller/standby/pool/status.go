package pool

import (
	"context"
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// setCondition writes ConditionStandbyReady when it changed; its times move only with a change.
// A conflict returns an error, so the deployment is looked at again with the newer object.
func (r *Reconciler) setCondition(ctx context.Context, md *v1alpha1.MachineDeployment, status v1alpha1.ConditionStatus, reason, msg string) error {
	now := metav1.NewTime(r.opts.Now())
	upd := md.DeepCopy()
	var c *v1alpha1.MachineDeploymentCondition
	for i := range upd.Status.Conditions {
		if upd.Status.Conditions[i].Type == ConditionStandbyReady {
			c = &upd.Status.Conditions[i]
		}
	}
	switch {
	case c == nil:
		upd.Status.Conditions = append(upd.Status.Conditions, v1alpha1.MachineDeploymentCondition{
			Type: ConditionStandbyReady, Status: status, Reason: reason, Message: msg,
			LastUpdateTime: now, LastTransitionTime: now,
		})
	case c.Status == status && c.Reason == reason && c.Message == msg:
		return nil
	default:
		if c.Status != status {
			c.LastTransitionTime = now
		}
		c.Status, c.Reason, c.Message, c.LastUpdateTime = status, reason, msg, now
	}
	if err := r.client.Status().Update(ctx, upd); err != nil {
		return fmt.Errorf("standby pool: condition of %s: %w", md.Name, err)
	}
	return nil
}

// removeCondition drops ConditionStandbyReady from a deployment without a pool.
func (r *Reconciler) removeCondition(ctx context.Context, md *v1alpha1.MachineDeployment) error {
	if !slices.ContainsFunc(md.Status.Conditions, func(c v1alpha1.MachineDeploymentCondition) bool { return c.Type == ConditionStandbyReady }) {
		return nil // nothing to remove: no copy, no write
	}
	upd := md.DeepCopy()
	out := upd.Status.Conditions[:0:0]
	for _, c := range upd.Status.Conditions {
		if c.Type != ConditionStandbyReady {
			out = append(out, c)
		}
	}
	if len(out) == len(upd.Status.Conditions) {
		return nil
	}
	upd.Status.Conditions = out
	if err := r.client.Status().Update(ctx, upd); err != nil {
		return fmt.Errorf("standby pool: condition of %s: %w", md.Name, err)
	}
	return nil
}
