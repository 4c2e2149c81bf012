package machinedeployment

import (
	"context"
	"fmt"
	"maps"
	"sort"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// rollout is one reconcile pass over a deployment and its sets.
type rollout struct {
	r            *Reconciler
	d            *v1alpha1.MachineDeployment
	sets         []*v1alpha1.MachineSet            // every set the deployment controls
	machines     map[types.UID][]*v1alpha1.Machine // machines of each set, terminating included
	created      *v1alpha1.MachineSet              // the new set, when this pass created it
	newMS        *v1alpha1.MachineSet              // the current template's set, once known
	requeueAfter time.Duration
	fallback     fallbackCheck // the capacity fallback list, checked
}

func (ro *rollout) key() types.NamespacedName { return client.ObjectKeyFromObject(ro.d) }

// machineCount counts a set's machines for surge: its replicas or the machines it still has
// (terminating ones hold VMs too), whichever is larger.
func (ro *rollout) machineCount(ms *v1alpha1.MachineSet) int32 {
	if ms == nil {
		return 0
	}
	return max(ms.Spec.Replicas, int32(len(ro.machines[ms.UID])))
}

// annotations a MachineSet does not inherit from its deployment.
var notCopied = map[string]bool{
	"kubectl.kubernetes.io/last-applied-configuration": true,
	v1alpha1.AnnotationRevision:                        true,
	v1alpha1.AnnotationRevisionHistory:                 true,
	v1alpha1.AnnotationDesiredReplicas:                 true,
	v1alpha1.AnnotationMaxReplicas:                     true,
	v1alpha1.AnnotationTriggerDeletionByMCM:            true,
}

// copyAnnotations copies the deployment's annotations onto a set; it reports a change.
func copyAnnotations(d *v1alpha1.MachineDeployment, ms *v1alpha1.MachineSet) bool {
	changed := false
	if ms.Annotations == nil {
		ms.Annotations = map[string]string{}
	}
	for k, v := range d.Annotations {
		if notCopied[k] || ms.Annotations[k] == v {
			continue
		}
		ms.Annotations[k] = v
		changed = true
	}
	return changed
}

// setRevision gives a set a revision, keeping the ones it had in the revision history.
func setRevision(ms *v1alpha1.MachineSet, rev int64) bool {
	old := ms.Annotations[v1alpha1.AnnotationRevision]
	want := strconv.FormatInt(rev, 10)
	if old == want {
		return false
	}
	if cur, err := strconv.ParseInt(old, 10, 64); err == nil && cur > rev {
		return false
	}
	if old != "" {
		h := ms.Annotations[v1alpha1.AnnotationRevisionHistory]
		if h != "" {
			h += ","
		}
		ms.Annotations[v1alpha1.AnnotationRevisionHistory] = h + old
	}
	ms.Annotations[v1alpha1.AnnotationRevision] = want
	return true
}

// setReplicaAnnotations records the deployment's replicas and replicas+maxSurge on a set.
func setReplicaAnnotations(d *v1alpha1.MachineDeployment, ms *v1alpha1.MachineSet) bool {
	if ms.Annotations == nil {
		ms.Annotations = map[string]string{}
	}
	desired := strconv.Itoa(int(d.Spec.Replicas))
	maxR := strconv.Itoa(int(d.Spec.Replicas + maxSurge(d)))
	changed := ms.Annotations[v1alpha1.AnnotationDesiredReplicas] != desired || ms.Annotations[v1alpha1.AnnotationMaxReplicas] != maxR
	ms.Annotations[v1alpha1.AnnotationDesiredReplicas] = desired
	ms.Annotations[v1alpha1.AnnotationMaxReplicas] = maxR
	return changed
}

// getAllSets splits the sets into the new one (the current template's, possibly created now
// when create is set) and the old ones, and keeps the new one's revision, annotations and
// in-place fields (nodeTemplate, machine configuration, class kind) current.
func (ro *rollout) getAllSets(ctx context.Context, create bool) (*v1alpha1.MachineSet, []*v1alpha1.MachineSet, error) {
	sortByCreation(ro.sets)
	var newMS *v1alpha1.MachineSet
	var old []*v1alpha1.MachineSet
	for _, ms := range ro.sets {
		if newMS == nil && ms.DeletionTimestamp == nil && templateMatches(ro.d, ms) {
			newMS = ms
			continue
		}
		old = append(old, ms)
	}
	rev := maxRevision(old) + 1
	ro.newMS = newMS
	if newMS != nil {
		upd := newMS.DeepCopy()
		changed := copyAnnotations(ro.d, upd)
		changed = setRevision(upd, rev) || changed
		changed = syncInPlace(ro.d, upd) || changed
		if upd.Spec.MinReadySeconds != ro.d.Spec.MinReadySeconds {
			upd.Spec.MinReadySeconds = ro.d.Spec.MinReadySeconds
			changed = true
		}
		if upd.Spec.AutoPreserveFailedMachineMax != ro.d.Spec.AutoPreserveFailedMachineMax {
			// Not a rollout: MCM copies it into the current set in place.
			upd.Spec.AutoPreserveFailedMachineMax = ro.d.Spec.AutoPreserveFailedMachineMax
			changed = true
		}
		if changed {
			if err := ro.r.client.Update(ctx, upd); err != nil {
				return nil, nil, fmt.Errorf("machinedeployment: update machine set %s: %w", upd.Name, err)
			}
			ro.r.writes.wrote(ro.key(), upd)
			*newMS = *upd
		}
		return newMS, old, nil
	}
	if !create {
		return nil, old, nil
	}
	ms, err := ro.createSet(ctx, old, rev)
	if err != nil {
		return nil, nil, err
	}
	ro.sets = append(ro.sets, ms)
	ro.newMS = ms
	return ms, old, nil
}

// createSet creates the MachineSet of the current template.
func (ro *rollout) createSet(ctx context.Context, old []*v1alpha1.MachineSet, rev int64) (*v1alpha1.MachineSet, error) {
	d := ro.d
	hash := templateHash(&d.Spec.Template, d.Status.CollisionCount)
	tmpl := setTemplate(d, hash)
	sel := d.Spec.Selector.DeepCopy()
	if sel.MatchLabels == nil {
		sel.MatchLabels = map[string]string{}
	}
	sel.MatchLabels[v1alpha1.LabelMachineTemplateHash] = hash
	ms := &v1alpha1.MachineSet{
		ObjectMeta: metav1.ObjectMeta{
			Name:      setName(d, hash),
			Namespace: d.Namespace,
			Labels:    maps.Clone(tmpl.Labels),
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion:         v1alpha1.SchemeGroupVersion.String(),
				Kind:               "MachineDeployment",
				Name:               d.Name,
				UID:                d.UID,
				Controller:         ptr.To(true),
				BlockOwnerDeletion: ptr.To(true),
			}},
		},
		// As MCM writes it: no spec.machineClass (the template names the class).
		Spec: v1alpha1.MachineSetSpec{
			Selector:                     sel,
			Template:                     tmpl,
			MinReadySeconds:              d.Spec.MinReadySeconds,
			AutoPreserveFailedMachineMax: d.Spec.AutoPreserveFailedMachineMax,
		},
	}
	copyAnnotations(d, ms)
	setRevision(ms, rev)
	setReplicaAnnotations(d, ms)
	ms.Spec.Replicas = ro.newSetReplicas(append(old, ms), nil)

	err := ro.r.client.Create(ctx, ms)
	if apierrors.IsAlreadyExists(err) {
		existing := &v1alpha1.MachineSet{}
		if gerr := ro.r.reader.Get(ctx, client.ObjectKeyFromObject(ms), existing); gerr != nil {
			return nil, fmt.Errorf("machinedeployment: read existing machine set %s: %w", ms.Name, gerr)
		}
		if ref := metav1.GetControllerOf(existing); ref != nil && ref.UID == d.UID && templateMatches(d, existing) {
			// Ours, created by an earlier pass the cache has not shown yet.
			ro.r.writes.create(ro.key(), existing.Name, ro.r.now())
			return existing, nil
		}
		// A different template hashed to the same name: count the collision so the next hash differs.
		st := d.DeepCopy()
		st.Status.CollisionCount = ptr.To(ptr.Deref(d.Status.CollisionCount, 0) + 1)
		if uerr := ro.r.client.Status().Update(ctx, st); uerr != nil {
			return nil, fmt.Errorf("machinedeployment: record hash collision: %w", uerr)
		}
		return nil, fmt.Errorf("machinedeployment: machine set %s exists with another template: collision count raised, retrying", ms.Name)
	}
	if err != nil {
		ro.r.recorder.Eventf(d, nil, "Warning", "FailedCreate", "Create", "Failed to create machine set %s: %v", ms.Name, err)
		return nil, fmt.Errorf("machinedeployment: create machine set %s: %w", ms.Name, err)
	}
	ro.r.writes.create(ro.key(), ms.Name, ro.r.now())
	ro.created = ms
	ro.r.recorder.Eventf(d, ms, "Normal", "ScalingMachineSet", "Scale", "Created machine set %s with %d replicas", ms.Name, ms.Spec.Replicas)
	return ms, nil
}

// newSetReplicas is how many replicas the new set may have now. Rolling: as many as keep the
// deployment's machines within replicas + maxSurge. Recreate: all of them. InPlaceUpdate: see
// inPlaceNewSetReplicas.
func (ro *rollout) newSetReplicas(all []*v1alpha1.MachineSet, newMS *v1alpha1.MachineSet) int32 {
	d := ro.d
	if isInPlaceUpdate(d) {
		return ro.inPlaceNewSetReplicas(all, newMS)
	}
	if !isRollingUpdate(d) {
		return d.Spec.Replicas
	}
	var current int32
	for _, ms := range all {
		current += ro.machineCount(ms)
	}
	var newSpec int32
	if newMS != nil {
		newSpec = newMS.Spec.Replicas
	}
	maxTotal := d.Spec.Replicas + maxSurge(d)
	if current >= maxTotal {
		return newSpec
	}
	up := min(maxTotal-current, d.Spec.Replicas-newSpec)
	return newSpec + max(up, 0)
}

// scaleSet sets a set's replicas (and the deployment's replica annotations on it).
func (ro *rollout) scaleSet(ctx context.Context, ms *v1alpha1.MachineSet, replicas int32) (bool, error) {
	upd := ms.DeepCopy()
	sizeChanged := upd.Spec.Replicas != replicas
	annChanged := setReplicaAnnotations(ro.d, upd)
	if !sizeChanged && !annChanged {
		return false, nil
	}
	from := upd.Spec.Replicas
	upd.Spec.Replicas = replicas
	if err := ro.r.client.Update(ctx, upd); err != nil {
		return false, fmt.Errorf("machinedeployment: scale machine set %s to %d: %w", ms.Name, replicas, err)
	}
	ro.r.writes.wrote(ro.key(), upd)
	*ms = *upd
	if sizeChanged {
		dir := "up"
		if replicas < from {
			dir = "down"
		}
		ro.r.recorder.Eventf(ro.d, ms, "Normal", "ScalingMachineSet", "Scale", "Scaled %s machine set %s from %d to %d", dir, ms.Name, from, replicas)
	}
	return sizeChanged, nil
}

// isScalingEvent reports whether spec.replicas changed since the sets were last scaled.
func (ro *rollout) isScalingEvent() bool {
	for _, ms := range activeSets(ro.sets) {
		if desired, ok := annotationInt(ms, v1alpha1.AnnotationDesiredReplicas); ok && desired != ro.d.Spec.Replicas {
			return true
		}
	}
	return false
}

// sync scales without rolling out (a paused deployment, or a scaling event) and writes status.
func (ro *rollout) sync(ctx context.Context) error {
	newMS, old, err := ro.getAllSets(ctx, false)
	if err != nil {
		return err
	}
	if err := ro.scale(ctx, newMS, old); err != nil {
		return err
	}
	if ro.d.Spec.Paused {
		if err := ro.cleanup(ctx, old); err != nil {
			return err
		}
	}
	return ro.syncStatus(ctx, newMS)
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

func (ro *rollout) isSaturated(ms *v1alpha1.MachineSet) bool {
	if ms == nil {
		return false
	}
	desired, ok := annotationInt(ms, v1alpha1.AnnotationDesiredReplicas)
	return ok && desired == ro.d.Spec.Replicas && ms.Spec.Replicas == ro.d.Spec.Replicas && ms.Status.AvailableReplicas == ro.d.Spec.Replicas
}

// scale applies a change of spec.replicas to the sets. With one active set it takes the whole
// change. During a rollout, added replicas go to the new set (old templates are not grown) unless
// a pause keeps it inactive, and removed replicas are first taken from the sets holding machines
// a scaler marked for deletion, then proportionally to the sets' sizes (see proportionalSizes).
func (ro *rollout) scale(ctx context.Context, newMS *v1alpha1.MachineSet, old []*v1alpha1.MachineSet) error {
	d := ro.d
	if a := findActiveOrLatest(newMS, old); a != nil {
		// Also refreshes the replica annotations, which ends the scaling event.
		_, err := ro.scaleSet(ctx, a, d.Spec.Replicas)
		return err
	}
	if ro.isSaturated(newMS) {
		for _, ms := range activeSets(old) {
			if _, err := ro.scaleSet(ctx, ms, 0); err != nil {
				return err
			}
		}
		return nil
	}
	sets, sizes := ro.proportionalSizes(newMS, old)
	// One write per set, old sets first: a pass can stop part-way (a conflict with the
	// MachineSet controller's status write, say); proportionalSizes finishes such a pass.
	for _, ms := range sets {
		if _, err := ro.scaleSet(ctx, ms, sizes[ms.UID]); err != nil {
			return err
		}
	}
	return nil
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
func (ro *rollout) proportionalSizes(newMS *v1alpha1.MachineSet, old []*v1alpha1.MachineSet) ([]*v1alpha1.MachineSet, map[types.UID]int32) {
	d := ro.d
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
		allowed = d.Spec.Replicas + maxSurge(d)
	}
	delta := allowed - replicaSum(all)
	var pending []*v1alpha1.MachineSet
	for _, ms := range all {
		if !ro.scaledForReplicas(ms) {
			pending = append(pending, ms)
		}
	}
	if len(pending) == 0 {
		// Every set was resized for these replicas, yet the total differs (a paused rollout that
		// had not reached replicas + maxSurge, say): the change is everybody's.
		pending = all
	}
	switch {
	case delta > 0 && ro.newSetTakesAdditions(newMS):
		// An inactive new set is not written here: the rolling pass grows it within maxSurge.
		sizes[newMS.UID] += delta
	case delta > 0:
		distribute(pending, sizes, replicaSum(pending)+delta)
	case delta < 0:
		remove := -delta
		for _, ms := range pending {
			take := min(ro.markedCount(ms), sizes[ms.UID], remove)
			sizes[ms.UID] -= take
			remove -= take
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
func (ro *rollout) newSetTakesAdditions(newMS *v1alpha1.MachineSet) bool {
	return newMS != nil && (newMS.Spec.Replicas > 0 || !ro.d.Spec.Paused)
}

// scaledForReplicas reports whether a set's replica annotations name the deployment's current
// replicas and replicas + maxSurge, i.e. this controller last sized it for them.
func (ro *rollout) scaledForReplicas(ms *v1alpha1.MachineSet) bool {
	desired, ok1 := annotationInt(ms, v1alpha1.AnnotationDesiredReplicas)
	maxR, ok2 := annotationInt(ms, v1alpha1.AnnotationMaxReplicas)
	return ok1 && ok2 && desired == ro.d.Spec.Replicas && maxR == ro.d.Spec.Replicas+maxSurge(ro.d)
}

// markedCount counts a set's live machines a scaler marked for deletion (priority 1).
func (ro *rollout) markedCount(ms *v1alpha1.MachineSet) int32 {
	var n int32
	for _, m := range ro.machines[ms.UID] {
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

// cleanup deletes old sets beyond the revision history limit, oldest first, when they have no
// replicas and no machines left.
func (ro *rollout) cleanup(ctx context.Context, old []*v1alpha1.MachineSet) error {
	lim := ro.d.Spec.RevisionHistoryLimit
	if lim == nil {
		lim = ro.r.opts.DefaultRevisionHistoryLimit
	}
	if lim == nil || *lim < 0 {
		return nil
	}
	limit := *lim
	var alive []*v1alpha1.MachineSet
	for _, ms := range old {
		if ms.DeletionTimestamp == nil {
			alive = append(alive, ms)
		}
	}
	diff := len(alive) - int(limit)
	if diff <= 0 {
		return nil
	}
	sortByCreation(alive)
	for _, ms := range alive[:diff] {
		if ms.Spec.Replicas != 0 || ms.Status.Replicas != 0 || ms.Generation > ms.Status.ObservedGeneration || len(ro.machines[ms.UID]) > 0 {
			continue
		}
		if err := ro.r.client.Delete(ctx, ms, client.Preconditions{UID: &ms.UID}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("machinedeployment: delete old machine set %s: %w", ms.Name, err)
		}
		ro.r.recorder.Eventf(ro.d, ms, "Normal", "DeletedMachineSet", "Cleanup", "Deleted old machine set %s (revision history limit %d)", ms.Name, limit)
	}
	return nil
}
