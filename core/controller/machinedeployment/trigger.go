package machinedeployment

import (
	"context"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// triggerEntry is one machine a scaler asked to delete.
type triggerEntry struct {
	machine string
	at      string // RFC3339, as written by the scaler; may be empty
}

// parseTrigger reads the trigger-deletion annotation: "m1~t1,m2~t2", optionally in brackets.
func parseTrigger(v string) []triggerEntry {
	v = strings.TrimSpace(v)
	v = strings.TrimSuffix(strings.TrimPrefix(v, "["), "]")
	var out []triggerEntry
	seen := map[string]bool{}
	for part := range strings.SplitSeq(v, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, at, _ := strings.Cut(part, "~")
		name = strings.TrimSpace(name)
		if name == "" || seen[name] {
			continue
		}
		seen[name] = true
		out = append(out, triggerEntry{machine: name, at: strings.TrimSpace(at)})
	}
	return out
}

func formatTrigger(entries []triggerEntry) string {
	parts := make([]string, len(entries))
	for i, e := range entries {
		parts[i] = e.machine
		if e.at != "" {
			parts[i] += "~" + e.at
		}
	}
	return strings.Join(parts, ",")
}

// markTriggeredMachines implements the Cluster Autoscaler contract: every machine named in the
// deployment's trigger-deletion annotation gets priority "1" and its marked-for-deletion time,
// so the MachineSet controller deletes exactly those machines when the scaler's lower replicas
// reach the sets. Entries whose machines are gone are pruned from the annotation. It reports
// whether every mark is already visible in the cache; until then no set may be scaled.
func (r *Reconciler) markTriggeredMachines(ctx context.Context, ro *rollout) (bool, error) {
	d := ro.d
	raw, ok := d.Annotations[v1alpha1.AnnotationTriggerDeletionByMCM]
	if !ok {
		return true, nil
	}
	entries := parseTrigger(raw)
	ours := map[string]*v1alpha1.Machine{}
	for _, ms := range ro.machines {
		for _, m := range ms {
			ours[m.Name] = m
		}
	}
	visible := true
	keep := entries[:0:0]
	for _, e := range entries {
		m, found := ours[e.machine]
		if !found {
			drop, err := r.foreignOrGone(ctx, d, e.machine)
			if err != nil {
				return false, err
			}
			if !drop {
				keep = append(keep, e)
				visible = false
			}
			continue
		}
		keep = append(keep, e)
		if m.DeletionTimestamp != nil {
			continue
		}
		at := e.at
		if _, err := time.Parse(time.RFC3339, at); err != nil {
			at = r.now().UTC().Format(time.RFC3339)
		}
		if m.Annotations[v1alpha1.AnnotationMachinePriority] == v1alpha1.DeletionCandidateMachinePriority {
			if _, marked := m.Annotations[v1alpha1.AnnotationMarkedForDeletionTime]; marked {
				continue
			}
		}
		visible = false
		mark := m.DeepCopy()
		patch := client.MergeFrom(m)
		if mark.Annotations == nil {
			mark.Annotations = map[string]string{}
		}
		mark.Annotations[v1alpha1.AnnotationMachinePriority] = v1alpha1.DeletionCandidateMachinePriority
		mark.Annotations[v1alpha1.AnnotationMarkedForDeletionTime] = at
		if err := r.client.Patch(ctx, mark, patch); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return false, fmt.Errorf("machinedeployment: mark machine %s for deletion: %w", m.Name, err)
		}
		r.recorder.Eventf(d, mark, "Normal", "MarkedForDeletion", "Scale", "Marked machine %s for deletion at a scaler's request", m.Name)
	}
	if len(keep) != len(entries) {
		upd := d.DeepCopy()
		if len(keep) == 0 {
			delete(upd.Annotations, v1alpha1.AnnotationTriggerDeletionByMCM)
		} else {
			upd.Annotations[v1alpha1.AnnotationTriggerDeletionByMCM] = formatTrigger(keep)
		}
		// Optimistic lock: a scaler appending entries meanwhile makes this a conflict, not a loss.
		if err := r.client.Patch(ctx, upd, client.MergeFromWithOptions(d, client.MergeFromWithOptimisticLock{})); err != nil {
			return false, fmt.Errorf("machinedeployment: prune %s: %w", v1alpha1.AnnotationTriggerDeletionByMCM, err)
		}
		*d = *upd
	}
	return visible, nil
}

// foreignOrGone decides about an entry whose machine is not among the deployment's machines in
// the cache: it is dropped when the machine does not exist or belongs elsewhere, and kept (the
// cache may lag a new machine) otherwise.
func (r *Reconciler) foreignOrGone(ctx context.Context, d *v1alpha1.MachineDeployment, name string) (bool, error) {
	m := &v1alpha1.Machine{}
	err := r.reader.Get(ctx, client.ObjectKey{Namespace: d.Namespace, Name: name}, m)
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("machinedeployment: read machine %s: %w", name, err)
	}
	ref := metav1.GetControllerOf(m)
	if ref == nil || ref.Kind != "MachineSet" {
		r.recorder.Eventf(d, m, "Warning", "IgnoredDeletionRequest", "Scale", "Machine %s named in %s belongs to no machine set of this deployment", name, v1alpha1.AnnotationTriggerDeletionByMCM)
		return true, nil
	}
	ms := &v1alpha1.MachineSet{}
	if err := r.reader.Get(ctx, client.ObjectKey{Namespace: d.Namespace, Name: ref.Name}, ms); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("machinedeployment: read machine set %s: %w", ref.Name, err)
	}
	if dref := metav1.GetControllerOf(ms); dref == nil || dref.UID != d.UID {
		r.recorder.Eventf(d, m, "Warning", "IgnoredDeletionRequest", "Scale", "Machine %s named in %s belongs to another deployment", name, v1alpha1.AnnotationTriggerDeletionByMCM)
		return true, nil
	}
	return false, nil
}
