package machinedeployment

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/machineset"
	"github.com/machinist-io/machinist/core/controller/rollout"
)

// Condition reasons, as the Deployment controller (and MCM) names them.
const (
	ReasonMinimumReplicasAvailable   = "MinimumReplicasAvailable"
	ReasonMinimumReplicasUnavailable = "MinimumReplicasUnavailable"
	ReasonNewMachineSetCreated       = "NewMachineSetCreated"
	ReasonMachineSetUpdated          = "MachineSetUpdated"
	ReasonNewMachineSetAvailable     = "NewMachineSetAvailable"
	ReasonProgressDeadlineExceeded   = "ProgressDeadlineExceeded"
	ReasonPaused                     = "DeploymentPaused"
	ReasonResumed                    = "DeploymentResumed"
	ReasonInvalidSpec                = "InvalidSpec"
	ReasonFrozen                     = "MachineSetFrozen"
)

// calculateStatus sums the sets' statuses into the deployment's.
func (p *pass) calculateStatus(newMS *v1alpha1.MachineSet, now time.Time) v1alpha1.MachineDeploymentStatus {
	d := p.d
	st := d.Status.DeepCopy()
	st.ObservedGeneration = d.Generation
	if sel, err := rollout.Selector(d); err == nil && !p.r.selectorField.Dropped() {
		st.LabelSelector = sel.String()
	}
	var replicas, ready, available, preserved, specSum int32
	var failed []*v1alpha1.MachineSummary
	var frozen, replicaFailure *v1alpha1.MachineSetCondition
	for _, ms := range p.sets {
		replicas += ms.Status.Replicas
		ready += ms.Status.ReadyReplicas
		available += ms.Status.AvailableReplicas
		preserved += ms.Status.PreservedFailedReplicas
		specSum += ms.Spec.Replicas
		if ms.Status.FailedMachines != nil {
			for i := range *ms.Status.FailedMachines {
				f := (*ms.Status.FailedMachines)[i]
				failed = append(failed, &f)
			}
		}
		for i := range ms.Status.Conditions {
			c := &ms.Status.Conditions[i]
			if c.Status != v1alpha1.ConditionTrue {
				continue
			}
			switch c.Type {
			case v1alpha1.MachineSetFrozen:
				if frozen == nil {
					frozen = c
				}
			case v1alpha1.MachineSetReplicaFailure:
				if replicaFailure == nil {
					replicaFailure = c
				}
			}
		}
		if frozen == nil && machineset.Frozen(ms) {
			frozen = &v1alpha1.MachineSetCondition{Reason: "Frozen", Message: fmt.Sprintf("machine set %s is frozen", ms.Name)}
		}
	}
	st.Replicas, st.ReadyReplicas, st.AvailableReplicas, st.PreservedFailedReplicas = replicas, ready, available, preserved
	st.UpdatedReplicas = 0
	if newMS != nil {
		st.UpdatedReplicas = newMS.Status.Replicas
	}
	st.UnavailableReplicas = max(specSum-available, 0)
	st.FailedMachines = failed

	// Preserved Failed machines are unavailable on purpose and do not cost the deployment its
	// availability (MCM subtracts them from the minimum).
	if available >= max(d.Spec.Replicas-p.dec.MaxUnavailable-preserved, 0) {
		setCondition(st, v1alpha1.MachineDeploymentAvailable, v1alpha1.ConditionTrue, ReasonMinimumReplicasAvailable, "Deployment has minimum availability.", now)
	} else {
		setCondition(st, v1alpha1.MachineDeploymentAvailable, v1alpha1.ConditionFalse, ReasonMinimumReplicasUnavailable, "Deployment does not have minimum availability.", now)
	}
	if replicaFailure != nil {
		setCondition(st, v1alpha1.MachineDeploymentReplicaFailure, v1alpha1.ConditionTrue, replicaFailure.Reason, replicaFailure.Message, now)
	} else {
		removeCondition(st, v1alpha1.MachineDeploymentReplicaFailure)
	}
	if frozen != nil {
		setCondition(st, v1alpha1.MachineDeploymentFrozen, v1alpha1.ConditionTrue, frozen.Reason, frozen.Message, now)
	} else if c := getCondition(st, v1alpha1.MachineDeploymentFrozen); c != nil && c.Status == v1alpha1.ConditionTrue {
		setCondition(st, v1alpha1.MachineDeploymentFrozen, v1alpha1.ConditionFalse, "Unfrozen", "No machine set of the deployment is frozen.", now)
	}
	p.applyFallback(st, now)
	p.applyRolloutCondition(st, now)
	return *st
}

// syncStatus computes the status including the Progressing condition and writes it when it
// changed; with a progress deadline it also schedules the next check.
func (p *pass) syncStatus(ctx context.Context) error {
	d, newMS := p.d, p.current()
	now := p.r.now()
	st := p.calculateStatus(newMS, now)
	prog := getCondition(&st, v1alpha1.MachineDeploymentProgressing)
	deadline := d.Spec.ProgressDeadlineSeconds
	switch {
	case d.Spec.Paused:
		if prog == nil || prog.Reason != ReasonPaused {
			setCondition(&st, v1alpha1.MachineDeploymentProgressing, v1alpha1.ConditionUnknown, ReasonPaused, "Deployment is paused.", now)
		}
	case prog != nil && prog.Reason == ReasonPaused:
		setCondition(&st, v1alpha1.MachineDeploymentProgressing, v1alpha1.ConditionUnknown, ReasonResumed, "Deployment is resumed.", now)
	case rollout.Complete(d, &st):
		name := ""
		if newMS != nil {
			name = newMS.Name
		}
		setCondition(&st, v1alpha1.MachineDeploymentProgressing, v1alpha1.ConditionTrue, ReasonNewMachineSetAvailable,
			fmt.Sprintf("MachineSet %q has successfully progressed.", name), now)
	case p.created != nil:
		setCondition(&st, v1alpha1.MachineDeploymentProgressing, v1alpha1.ConditionTrue, ReasonNewMachineSetCreated,
			fmt.Sprintf("Created new machine set %q.", p.created.Name), now)
	case progressed(&d.Status, &st) || prog == nil:
		name := ""
		if newMS != nil {
			name = newMS.Name
		}
		setCondition(&st, v1alpha1.MachineDeploymentProgressing, v1alpha1.ConditionTrue, ReasonMachineSetUpdated,
			fmt.Sprintf("MachineSet %q is progressing.", name), now)
		// Progress refreshes the condition so the deadline counts from the last step.
		getCondition(&st, v1alpha1.MachineDeploymentProgressing).LastUpdateTime = metav1.NewTime(now)
	case deadline != nil && prog.Status == v1alpha1.ConditionTrue && prog.Reason != ReasonNewMachineSetAvailable:
		limit := prog.LastUpdateTime.Add(time.Duration(*deadline) * time.Second)
		if !now.Before(limit) {
			setCondition(&st, v1alpha1.MachineDeploymentProgressing, v1alpha1.ConditionFalse, ReasonProgressDeadlineExceeded,
				fmt.Sprintf("MachineDeployment %q has timed out progressing.", d.Name), now)
			p.r.recorder.Eventf(d, nil, "Warning", ReasonProgressDeadlineExceeded, "Rollout", "Rollout of %s made no progress for %ds", d.Name, *deadline)
		} else {
			p.requeueAfter = limit.Sub(now) + time.Second
		}
	}
	if equality.Semantic.DeepEqual(st, d.Status) {
		return nil
	}
	upd := d.DeepCopy()
	upd.Status = st
	if err := p.r.client.Status().Update(ctx, upd); err != nil {
		return fmt.Errorf("machinedeployment: update status of %s: %w", d.Name, err)
	}
	p.r.own.Wrote(upd)
	p.r.notePruned(st, upd.Status)
	*d = *upd
	return nil
}

// notePruned records, after a status write, whether the server dropped a field MCM's CRD lacks,
// and says so once.
func (r *Reconciler) notePruned(sent, stored v1alpha1.MachineDeploymentStatus) {
	if r.fallbackField.Observe(sent.FallbackReplicas != 0, stored.FallbackReplicas != 0) {
		r.log.Info(r.fallbackField.Message())
	}
	if r.selectorField.Observe(sent.LabelSelector != "", stored.LabelSelector != "") {
		r.log.Info(r.selectorField.Message())
	}
}

// progressed reports whether a rollout step happened since the last status.
func progressed(old, cur *v1alpha1.MachineDeploymentStatus) bool {
	return cur.UpdatedReplicas > old.UpdatedReplicas ||
		cur.Replicas-cur.UpdatedReplicas < old.Replicas-old.UpdatedReplicas ||
		cur.ReadyReplicas > old.ReadyReplicas ||
		cur.AvailableReplicas > old.AvailableReplicas
}

// writeInvalidStatus records why the spec cannot be acted on.
func (r *Reconciler) writeInvalidStatus(ctx context.Context, d *v1alpha1.MachineDeployment, cause string) error {
	st := d.Status.DeepCopy()
	st.ObservedGeneration = d.Generation
	setCondition(st, v1alpha1.MachineDeploymentReplicaFailure, v1alpha1.ConditionTrue, ReasonInvalidSpec, cause, r.now())
	if equality.Semantic.DeepEqual(*st, d.Status) {
		return nil
	}
	upd := d.DeepCopy()
	upd.Status = *st
	if err := r.client.Status().Update(ctx, upd); err != nil {
		return fmt.Errorf("machinedeployment: update status of %s: %w", d.Name, err)
	}
	r.own.Wrote(upd)
	return nil
}

func getCondition(st *v1alpha1.MachineDeploymentStatus, t v1alpha1.MachineDeploymentConditionType) *v1alpha1.MachineDeploymentCondition {
	for i := range st.Conditions {
		if st.Conditions[i].Type == t {
			return &st.Conditions[i]
		}
	}
	return nil
}

// setCondition sets a condition; an unchanged status and reason keeps the condition (and its
// times) as it is, so a steady state writes nothing.
func setCondition(st *v1alpha1.MachineDeploymentStatus, t v1alpha1.MachineDeploymentConditionType, status v1alpha1.ConditionStatus, reason, msg string, now time.Time) {
	if c := getCondition(st, t); c != nil {
		if c.Status == status && c.Reason == reason && c.Message == msg {
			return
		}
		if c.Status != status {
			c.LastTransitionTime = metav1.NewTime(now)
		}
		c.Status, c.Reason, c.Message, c.LastUpdateTime = status, reason, msg, metav1.NewTime(now)
		return
	}
	st.Conditions = append(st.Conditions, v1alpha1.MachineDeploymentCondition{
		Type: t, Status: status, Reason: reason, Message: msg,
		LastUpdateTime: metav1.NewTime(now), LastTransitionTime: metav1.NewTime(now),
	})
}

func removeCondition(st *v1alpha1.MachineDeploymentStatus, t v1alpha1.MachineDeploymentConditionType) {
	out := st.Conditions[:0:0]
	for _, c := range st.Conditions {
		if c.Type != t {
			out = append(out, c)
		}
	}
	st.Conditions = out
}
