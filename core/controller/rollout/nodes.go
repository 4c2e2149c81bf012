package rollout

import (
	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// nodes plans the target cluster's nodes in step with a rollout, as MCM does: while old
// sets still have machines, their nodes carry the PreferNoSchedule taint and every node of the
// deployment carries Cluster Autoscaler's scale-down-disabled annotation (so the autoscaler does
// not remove nodes the rollout is about to replace or has just added). Once the rollout is over
// both go again — the annotation only where a controller put it (MarkNode.Apply), and not from a
// preserved machine's node (preservation owns the mark then, as in MCM). Outside a rollout the
// nodes need one clean-up pass (also the first pass after a restart), not one per decision.
func (p marks) nodes() (clean bool) {
	if !p.in.TargetCluster {
		return p.in.NodesClean
	}
	rolling := false
	for _, ms := range p.sets {
		if ms != p.newMS && (ms.Spec.Replicas > 0 || len(p.machinesOf(ms)) > 0) {
			rolling = true
			break
		}
	}
	if p.in.NodesClean && !rolling {
		return true
	}
	for _, ms := range p.sets {
		old := ms != p.newMS
		for _, m := range p.machinesOf(ms) {
			name := m.Labels[v1alpha1.LabelNode]
			if name == "" || m.DeletionTimestamp != nil {
				continue
			}
			annotate := rolling && !p.in.NoScaleDownAnnotation
			if m.Status.CurrentStatus.PreserveExpiryTime != nil {
				// A preserved machine's node keeps the annotation after the rollout (MCM): the
				// Machine controller removes it when preservation ends.
				annotate = true
			}
			p.add(MarkNode{Machine: m.Name, Node: name, PreferNoSchedule: rolling && old, ScaleDownDisabled: annotate})
		}
	}
	return !rolling
}
