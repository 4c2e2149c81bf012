package rollout

import (
	"sort"

	"k8s.io/apimachinery/pkg/types"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// scaling plans a change of spec.replicas (and a paused deployment's passes): the sets are
// scaled, nothing rolls out.
type scaling struct{ *planner }

// isScalingEvent reports whether spec.replicas changed since the sets were last scaled.
func (p *planner) isScalingEvent() bool {
	for _, ms := range activeSets(p.sets) {
		if desired, ok := annotationInt(ms, v1alpha1.AnnotationDesiredReplicas); ok && desired != p.d.Spec.Replicas {
			return true
		}
	}
	return false
}

// sync scales without rolling out (a paused deployment, or a scaling event).
func (s scaling) sync() {
	newMS, old := s.currentAndOld(false)
	s.scale(newMS, old)
	if s.d.Spec.Paused {
		s.cleanup(old)
	}
}

// findActiveOrLatest returns the only set with replicas, or the newest set when none has any,
// or nil when several have replicas.
func findActiveOrLatest(newMS *v1alpha1.MachineSet, old []*v1alpha1.MachineSet) *v1alpha1.MachineSet {
	if newMS == nil && len(old) == 0 {
		return nil
	}
	all := append(append([]*v1alpha1.MachineSet{}, old...), newMS)
	active := activeSets(all)
	switch len(active) {
	case 0:
		if newMS != nil {
			return newMS
		}
		latest := append([]*v1alpha1.MachineSet{}, old...)
		sortByCreation(latest)
		return latest[len(latest)-1]
	case 1:
		return active[0]
	default:
		return nil
	}
}

func (s scaling) isSaturated(ms *v1alpha1.MachineSet) bool {
	if ms == nil {
		return false
	}
	desired, ok := annotationInt(ms, v1alpha1.AnnotationDesiredReplicas)
	return ok && desired == s.d.Spec.Replicas && ms.Spec.Replicas == s.d.Spec.Replicas && ms.Status.AvailableReplicas == s.d.Spec.Replicas
}

// scale applies a change of spec.replicas to the sets. With one active set it takes the whole
// change. During a rollout, added replicas go to the new set (old templates are not grown) unless
// a pause keeps it inactive, and removed replicas are first taken from the sets holding machines
// a scaler marked for deletion, then (for a deployment a pool governs) from the old sets, then
// proportionally to the sets' sizes (see proportionalSizes).
func (s scaling) scale(newMS *v1alpha1.MachineSet, old []*v1alpha1.MachineSet) {
	d := s.d
	if a := findActiveOrLatest(newMS, old); a != nil {
		// Also refreshes the replica annotations, which ends the scaling event.
		s.scaleSet(a, d.Spec.Replicas)
		return
	}
	if s.isSaturated(newMS) {
		for _, ms := range activeSets(old) {
			s.scaleSet(ms, 0)
		}
		return
	}
	sets, sizes := s.proportionalSizes(newMS, old)
	// One write per set, old sets first: a pass can stop part-way (a conflict with the
	// MachineSet controller's status write, say); proportionalSizes finishes such a pass.
	for _, ms := range sets {
		s.scaleSet(ms, sizes[ms.UID])
	}
}

// proportionalSizes decides, for a change of spec.replicas during a rollout, the size of each set
// to write, in write order: the active sets, old ones first. The sets are sized to replicas +
// maxSurge in total.
//
// Added replicas belong to the new set when it takes them (see newSetTakesAdditions); otherwise
// the active sets share them in proportion to their sizes, as the Deployment controller does.
//
// A set whose replica annotations already name the current replicas and maxSurge was resized
// for them by an earlier pass that then stopped part-way: the rest of the change belongs to
// the sets not resized yet. Spreading it over every set again would resize the done ones
// twice: shrinking 8 → 4 (maxSurge 2) with new 6 and old 4 gives new 4 and old 2, but if only
// the old set's write landed, spreading the remaining 2 over new 6 and old 2 would leave old 1.
func (s scaling) proportionalSizes(newMS *v1alpha1.MachineSet, old []*v1alpha1.MachineSet) ([]*v1alpha1.MachineSet, map[types.UID]int32) {
	d := s.d
	all := activeSets(append(append([]*v1alpha1.MachineSet{}, old...), newMS))
	sizes := make(map[types.UID]int32, len(all)+1)
	for _, ms := range all {
		sizes[ms.UID] = ms.Spec.Replicas
	}
	if len(all) == 0 {
		return nil, sizes
	}
	var allowed int32
	if d.Spec.Replicas > 0 {
		allowed = d.Spec.Replicas + s.lim.annotationSurge(d)
	}
	delta := allowed - replicaSum(all)
	var pending []*v1alpha1.MachineSet
	for _, ms := range all {
		if !s.scaledForReplicas(ms) {
			pending = append(pending, ms)
		}
	}
	if len(pending) == 0 {
		// Every set was resized for these replicas, yet the total differs (a paused rollout that
		// had not reached replicas + maxSurge, say): the change is everybody's.
		pending = all
	}
	switch {
	case delta > 0 && s.newSetTakesAdditions(newMS):
		// An inactive new set is not written here: the rolling pass grows it within maxSurge.
		sizes[newMS.UID] += delta
	case delta > 0:
		distribute(pending, sizes, replicaSum(pending)+delta)
	case delta < 0:
		remove := -delta
		for _, ms := range pending {
			take := min(s.markedCount(ms), sizes[ms.UID], remove)
			sizes[ms.UID] -= take
			remove -= take
		}
		if s.in.Pool != nil {
			// A pool prefers outdated machines when a scaler shrinks a rolling deployment
			// (Cluster Autoscaler's DecreaseTargetSize): what the scale-down takes from old sets
			// is not replaced later (issue 35). Old sets come first in pending, oldest first.
			for _, ms := range pending {
				if ms == newMS || remove == 0 {
					continue
				}
				take := min(sizes[ms.UID], remove)
				sizes[ms.UID] -= take
				remove -= take
			}
		}
		if remove > 0 {
			var total int32
			for _, ms := range pending {
				total += sizes[ms.UID]
			}
			distribute(pending, sizes, total-remove)
		}
	}
	return all, sizes
}

// newSetTakesAdditions reports whether replicas added during a rollout go to the new set alone
// (MCM #754: machines added to an old template would only be replaced later). An active new set
// takes them. So does an inactive one while the deployment rolls out, since the rolling pass grows
// it within maxSurge. A paused deployment does not roll out: its inactive new set stays at 0, and
// leaving the additions to it would leave spec.replicas unmet until the deployment is resumed.
func (s scaling) newSetTakesAdditions(newMS *v1alpha1.MachineSet) bool {
	return newMS != nil && (newMS.Spec.Replicas > 0 || !s.d.Spec.Paused)
}

// scaledForReplicas reports whether a set's replica annotations name the deployment's current
// replicas and replicas + maxSurge, i.e. this controller last sized it for them.
func (s scaling) scaledForReplicas(ms *v1alpha1.MachineSet) bool {
	desired, ok1 := annotationInt(ms, v1alpha1.AnnotationDesiredReplicas)
	maxR, ok2 := annotationInt(ms, v1alpha1.AnnotationMaxReplicas)
	return ok1 && ok2 && desired == s.d.Spec.Replicas && maxR == s.d.Spec.Replicas+s.lim.annotationSurge(s.d)
}

// markedCount counts a set's live machines a scaler marked for deletion (priority 1).
func (s scaling) markedCount(ms *v1alpha1.MachineSet) int32 {
	var n int32
	for _, m := range s.machinesOf(ms) {
		if m.DeletionTimestamp == nil && m.Annotations[v1alpha1.AnnotationMachinePriority] == v1alpha1.DeletionCandidateMachinePriority {
			n++
		}
	}
	return n
}

// distribute resizes sets proportionally to their current sizes so they sum to target, giving
// the units left by rounding to the largest remainders, larger and then newer sets first: when
// growing newer sets grow first, when shrinking older sets shrink first, as the Deployment
// controller does.
func distribute(sets []*v1alpha1.MachineSet, sizes map[types.UID]int32, target int32) {
	var total int64
	for _, ms := range sets {
		total += int64(sizes[ms.UID])
	}
	if target < 0 {
		target = 0
	}
	order := append([]*v1alpha1.MachineSet{}, sets...)
	sortBySize(order, true)
	if total == 0 {
		sizes[order[0].UID] = target
		return
	}
	type rem struct {
		ms *v1alpha1.MachineSet
		r  int64
	}
	var assigned int64
	rems := make([]rem, 0, len(order))
	for _, ms := range order {
		num := int64(sizes[ms.UID]) * int64(target)
		sizes[ms.UID] = int32(num / total)
		assigned += num / total
		rems = append(rems, rem{ms, num % total})
	}
	sort.SliceStable(rems, func(i, j int) bool { return rems[i].r > rems[j].r })
	for i := 0; assigned < int64(target); i = (i + 1) % len(rems) {
		sizes[rems[i].ms.UID]++
		assigned++
	}
}
