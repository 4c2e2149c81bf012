package machinedeployment

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// preferNoSchedule is put on the nodes of old MachineSets during a rollout, so new pods prefer
// the nodes that stay (MCM's deployment.machine.sapcloud.io/prefer-no-schedule=True).
var preferNoSchedule = corev1.Taint{Key: v1alpha1.TaintPreferNoSchedule, Value: "True", Effect: corev1.TaintEffectPreferNoSchedule}

// syncNodeMarks keeps the target cluster's nodes in step with a rollout, as MCM does: while old
// sets still have machines, their nodes carry the PreferNoSchedule taint and every node of the
// deployment carries Cluster Autoscaler's scale-down-disabled annotation (so the autoscaler does not remove
// nodes the rollout is about to replace or has just added). Once the rollout is over both go
// again — the annotation only where a controller put it: MCM's record key or machinist's old one
// (v1alpha1.UnmarkScaleDownDisabled), and not from a preserved machine's node (preservation owns
// the mark then, as in MCM).
func (ro *rollout) syncNodeMarks(ctx context.Context, newMS *v1alpha1.MachineSet) error {
	target := ro.r.opts.Target
	if target == nil {
		return nil
	}
	rolling := false
	for _, ms := range ro.sets {
		if ms != newMS && (ms.Spec.Replicas > 0 || len(ro.machines[ms.UID]) > 0) {
			rolling = true
			break
		}
	}
	// Outside a rollout the nodes need one clean-up pass (also the first pass after a restart),
	// not one per machine event.
	key := ro.key()
	if _, clean := ro.r.nodesClean.Load(key); clean && !rolling {
		return nil
	}
	if rolling {
		ro.r.nodesClean.Delete(key)
	}
	var errs []error
	for _, ms := range ro.sets {
		old := ms != newMS
		for _, m := range ro.machines[ms.UID] {
			name := m.Labels[v1alpha1.LabelNode]
			if name == "" || m.DeletionTimestamp != nil {
				continue
			}
			annotate := rolling && !ro.r.opts.NoScaleDownAnnotationDuringRollout
			if m.Status.CurrentStatus.PreserveExpiryTime != nil {
				// A preserved machine's node keeps the annotation after the rollout (MCM): the
				// Machine controller removes it when preservation ends.
				annotate = true
			}
			if err := ro.markNode(ctx, target, name, nodeMarks{taint: rolling && old, annotate: annotate}); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if len(errs) == 0 && !rolling {
		ro.r.nodesClean.Store(key, true)
	}
	return errors.Join(errs...)
}

// nodeMarks is what a rollout wants on one node.
type nodeMarks struct {
	taint    bool // the PreferNoSchedule taint
	annotate bool // Cluster Autoscaler's scale-down-disabled mark
}

// markNode gives a node the taint and the annotation, or takes them away, writing only when
// something changes.
func (ro *rollout) markNode(ctx context.Context, target client.Client, name string, want nodeMarks) error {
	node := &corev1.Node{}
	if err := target.Get(ctx, client.ObjectKey{Name: name}, node, client.UnsafeDisableDeepCopy); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("machinedeployment: read node %s: %w", name, err)
	}
	upd := node.DeepCopy()
	changed := syncPreferNoSchedule(upd, want.taint)
	if upd.Annotations == nil {
		upd.Annotations = map[string]string{}
	}
	if want.annotate {
		changed = v1alpha1.MarkScaleDownDisabled(upd.Annotations) || changed
	} else {
		changed = v1alpha1.UnmarkScaleDownDisabled(upd.Annotations) || changed
	}
	if !changed {
		return nil
	}
	patch := client.MergeFromWithOptions(node, client.MergeFromWithOptimisticLock{})
	if err := target.Patch(ctx, upd, patch); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("machinedeployment: mark node %s for the rollout of %s: %w", name, ro.d.Name, err)
	}
	return nil
}

// syncPreferNoSchedule adds or removes the rollout's taint; it reports a change.
func syncPreferNoSchedule(node *corev1.Node, want bool) bool {
	has := false
	var taints []corev1.Taint
	for _, t := range node.Spec.Taints {
		if t.Key == preferNoSchedule.Key && t.Effect == preferNoSchedule.Effect {
			has = true
			continue
		}
		taints = append(taints, t)
	}
	if has == want {
		return false
	}
	if want {
		taints = append(taints, preferNoSchedule)
	}
	node.Spec.Taints = taints
	return true
}
