package pool

import (
	"context"
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// poolStatus is what the pool reports on its deployment: ConditionStandbyReady and the
// status.standbyReady/standbyStarting counts.
type poolStatus struct {
	status          v1alpha1.ConditionStatus
	reason, msg     string
	ready, starting int32
}

// setStatus writes the pool's condition and counts in one status write, when either changed; the
// condition's times move only with a change of it. A conflict returns an error, so the deployment
// is looked at again with the newer object.
func (r *Reconciler) setStatus(ctx context.Context, md *v1alpha1.MachineDeployment, ps poolStatus) error {
	now := metav1.NewTime(r.opts.Now())
	upd := md.DeepCopy()
	if !r.countsField.Dropped() {
		upd.Status.StandbyReady, upd.Status.StandbyStarting = ps.ready, ps.starting
	}
	var c *v1alpha1.MachineDeploymentCondition
	for i := range upd.Status.Conditions {
		if upd.Status.Conditions[i].Type == ConditionStandbyReady {
			c = &upd.Status.Conditions[i]
		}
	}
	switch {
	case c == nil:
		upd.Status.Conditions = append(upd.Status.Conditions, v1alpha1.MachineDeploymentCondition{
			Type: ConditionStandbyReady, Status: ps.status, Reason: ps.reason, Message: ps.msg,
			LastUpdateTime: now, LastTransitionTime: now,
		})
	case c.Status == ps.status && c.Reason == ps.reason && c.Message == ps.msg:
		if sameCounts(upd.Status, md.Status) {
			return nil
		}
	default:
		if c.Status != ps.status {
			c.LastTransitionTime = now
		}
		c.Status, c.Reason, c.Message, c.LastUpdateTime = ps.status, ps.reason, ps.msg, now
	}
	return r.writeStatus(ctx, md, upd)
}

// clearStatus drops ConditionStandbyReady and the counts from a deployment without a pool.
func (r *Reconciler) clearStatus(ctx context.Context, md *v1alpha1.MachineDeployment) error {
	has := func(c v1alpha1.MachineDeploymentCondition) bool { return c.Type == ConditionStandbyReady }
	if !slices.ContainsFunc(md.Status.Conditions, has) && md.Status.StandbyReady == 0 && md.Status.StandbyStarting == 0 {
		return nil // nothing to remove: no copy, no write
	}
	upd := md.DeepCopy()
	upd.Status.Conditions = slices.DeleteFunc(upd.Status.Conditions, has)
	upd.Status.StandbyReady, upd.Status.StandbyStarting = 0, 0
	return r.writeStatus(ctx, md, upd)
}

// writeStatus updates md's status to upd's and notes, once, a server that drops the counts
// (Gardener MCM's CRD prunes fields it lacks): they are not sent again, so the status stops
// changing and no write repeats the server's "unknown field" warning.
func (r *Reconciler) writeStatus(ctx context.Context, md, upd *v1alpha1.MachineDeployment) error {
	sent := upd.Status
	if err := r.client.Status().Update(ctx, upd); err != nil {
		return fmt.Errorf("standby pool: status of %s: %w", md.Name, err)
	}
	if r.countsField.Observe(sent.StandbyReady+sent.StandbyStarting != 0, upd.Status.StandbyReady+upd.Status.StandbyStarting != 0) {
		r.opts.Log.Info(r.countsField.Message(), "deployment", md.Namespace+"/"+md.Name)
	}
	return nil
}

func sameCounts(a, b v1alpha1.MachineDeploymentStatus) bool {
	return a.StandbyReady == b.StandbyReady && a.StandbyStarting == b.StandbyStarting
}
