package machineset

import (
	"context"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/internal/preservation"
)

// Machine preservation in the MachineSet controller, as MCM's machineset.go does it: a Failed
// machine that is preserved (or asked to be: preserve now, when-failed or auto-preserved) is not
// deleted — it keeps its replica, so no replacement is created until preservation ends — and up
// to spec.autoPreserveFailedMachineMax Failed machines are annotated auto-preserved, newest
// first. The Machine controller does the preserving itself.

// keepFailed reports whether a Failed machine stays (MCM's shouldFailedMachineBeTerminated,
// negated): preserved until a time still to come, or asked to be preserved with preservation not
// started yet. A node that cannot be read does not keep it.
func (r *Reconciler) keepFailed(ctx context.Context, m *v1alpha1.Machine, now time.Time) bool {
	if exp := m.Status.CurrentStatus.PreserveExpiryTime; exp != nil {
		return exp.After(now)
	}
	value, err := r.preserveValue(ctx, m)
	if err != nil {
		log.FromContext(ctx).Info("cannot read the node of a failed machine: replacing it", "machine", m.Name, "err", err)
		return false
	}
	return preservation.KeepsFailed(value)
}

// preserveValue is the preserve value that counts for m: its node's (which wins) or its own.
func (r *Reconciler) preserveValue(ctx context.Context, m *v1alpha1.Machine) (string, error) {
	name := m.Labels[v1alpha1.LabelNode]
	if name == "" || r.opts.Nodes == nil {
		return preservation.Of(m, nil, false).Effective(), nil
	}
	node := &corev1.Node{}
	if err := r.opts.Nodes.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
		if apierrors.IsNotFound(err) {
			return preservation.Of(m, nil, true).Effective(), nil
		}
		return "", err
	}
	return preservation.Of(m, node, false).Effective(), nil
}

// autoPreserveCount counts the set's machines annotated auto-preserved.
func autoPreserveCount(machines []*v1alpha1.Machine) int32 {
	var n int32
	for _, m := range machines {
		if m.DeletionTimestamp == nil && m.Annotations[v1alpha1.AnnotationPreserve] == v1alpha1.PreserveAuto {
			n++
		}
	}
	return n
}

// autoPreserve keeps the number of auto-preserved machines at spec.autoPreserveFailedMachineMax
// (MCM's manageAutoPreservationOfFailedMachines): below it, Failed machines nobody asked about
// (no effective preserve value) are annotated auto-preserved, newest first; above it (the
// maximum was lowered), the annotation is taken from the oldest auto-preserved machines, which
// then end their preservation and are replaced. It returns machines with the annotated ones
// replaced by what was written. The count is taken from the machines, not from the last status,
// so two passes in quick succession never preserve more than the maximum.
func (r *Reconciler) autoPreserve(ctx context.Context, ms *v1alpha1.MachineSet, machines []*v1alpha1.Machine) []*v1alpha1.Machine {
	limit := ms.Spec.AutoPreserveFailedMachineMax
	remaining := limit - autoPreserveCount(machines)
	if remaining == 0 {
		return machines
	}
	out := append([]*v1alpha1.Machine(nil), machines...)
	index := map[*v1alpha1.Machine]int{}
	for i, m := range out {
		index[m] = i
	}
	if remaining < 0 {
		var auto []*v1alpha1.Machine
		for _, m := range out {
			if m.DeletionTimestamp == nil && m.Annotations[v1alpha1.AnnotationPreserve] == v1alpha1.PreserveAuto {
				auto = append(auto, m)
			}
		}
		sort.SliceStable(auto, func(i, j int) bool { return auto[i].CreationTimestamp.Before(&auto[j].CreationTimestamp) })
		for _, m := range auto[:min(int(-remaining), len(auto))] {
			upd, err := r.setPreserveAnnotation(ctx, m, "")
			if err != nil {
				log.FromContext(ctx).Info("cannot stop auto-preservation", "machine", m.Name, "err", err)
				continue
			}
			out[index[m]] = upd
			r.recorder.Eventf(ms, upd, corev1.EventTypeNormal, "AutoPreservationStopped", "Preserve",
				"Stopped auto-preserving machine %s: spec.autoPreserveFailedMachineMax is %d", m.Name, limit)
		}
		return out
	}
	var candidates []*v1alpha1.Machine
	for _, m := range out {
		if m.DeletionTimestamp != nil || m.Status.CurrentStatus.Phase != v1alpha1.MachineFailed {
			continue
		}
		if exp := m.Status.CurrentStatus.PreserveExpiryTime; exp != nil && !exp.After(r.now()) {
			continue // its preservation just expired: it is being replaced
		}
		value, err := r.preserveValue(ctx, m)
		if err != nil || value != "" {
			continue // asked about (or unknowable): not the set's to decide
		}
		candidates = append(candidates, m)
	}
	sort.SliceStable(candidates, func(i, j int) bool { return candidates[j].CreationTimestamp.Before(&candidates[i].CreationTimestamp) })
	for _, m := range candidates[:min(int(remaining), len(candidates))] {
		upd, err := r.setPreserveAnnotation(ctx, m, v1alpha1.PreserveAuto)
		if err != nil {
			log.FromContext(ctx).Info("cannot auto-preserve a failed machine", "machine", m.Name, "err", err)
			continue
		}
		out[index[m]] = upd
		r.recorder.Eventf(ms, upd, corev1.EventTypeNormal, "AutoPreserved", "Preserve",
			"Auto-preserving failed machine %s (spec.autoPreserveFailedMachineMax %d)", m.Name, limit)
	}
	return out
}

// setPreserveAnnotation sets (or with "" removes) the machine's preserve annotation, with an
// optimistic lock so a machine someone changed meanwhile is looked at again.
func (r *Reconciler) setPreserveAnnotation(ctx context.Context, cached *v1alpha1.Machine, value string) (*v1alpha1.Machine, error) {
	m := cached.DeepCopy()
	if value == "" {
		delete(m.Annotations, v1alpha1.AnnotationPreserve)
	} else {
		if m.Annotations == nil {
			m.Annotations = map[string]string{}
		}
		m.Annotations[v1alpha1.AnnotationPreserve] = value
	}
	if err := r.client.Patch(ctx, m, client.MergeFromWithOptions(cached, client.MergeFromWithOptimisticLock{})); err != nil {
		return nil, fmt.Errorf("machineset: set %s on machine %s: %w", v1alpha1.AnnotationPreserve, cached.Name, err)
	}
	return m, nil
}
