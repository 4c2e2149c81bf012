package rollout

import (
	"strings"
	"time"

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

// deletion plans the Cluster Autoscaler contract: every machine named in the deployment's
// trigger-deletion annotation gets priority "1" and its marked-for-deletion time, so the
// MachineSet controller deletes exactly those machines when the scaler's lower replicas reach
// the sets. Entries whose machines are gone or belong elsewhere are pruned from the annotation.
// It reports whether every mark is already visible; until then no set may be scaled.
// marks plans the marks a step leaves on machines and nodes besides its rollout: a scaler's
// deletion marks, and the rollout's marks on nodes.
type marks struct{ *planner }

func (p marks) deletion() bool {
	raw, ok := p.d.Annotations[v1alpha1.AnnotationTriggerDeletionByMCM]
	if !ok {
		return true
	}
	entries := parseTrigger(raw)
	ours := map[string]*v1alpha1.Machine{}
	for _, ms := range p.in.Machines {
		for _, m := range ms {
			ours[m.Name] = m
		}
	}
	visible := true
	keep := entries[:0:0]
	var dropped []DroppedTrigger
	for _, e := range entries {
		m, found := ours[e.machine]
		if !found {
			if why := p.in.Triggers[e.machine]; why != TriggerPending {
				dropped = append(dropped, DroppedTrigger{Machine: e.machine, Why: why})
				continue
			}
			keep = append(keep, e)
			visible = false
			continue
		}
		keep = append(keep, e)
		if m.DeletionTimestamp != nil {
			continue
		}
		at := e.at
		if _, err := time.Parse(time.RFC3339, at); err != nil {
			at = p.in.Now.UTC().Format(time.RFC3339)
		}
		if m.Annotations[v1alpha1.AnnotationMachinePriority] == v1alpha1.DeletionCandidateMachinePriority {
			if _, marked := m.Annotations[v1alpha1.AnnotationMarkedForDeletionTime]; marked {
				continue
			}
		}
		visible = false
		p.add(MarkForDeletion{Machine: m.Name, At: at})
	}
	if len(keep) != len(entries) {
		p.add(PruneTrigger{Value: formatTrigger(keep), Remove: len(keep) == 0, Dropped: dropped})
	}
	return visible
}

// DeleteMachine deletes a machine a scaler named for deletion whose set was not scaled down for
// it: the scaler's lower replicas were undone (or never written), so its MachineSet would keep it
// for ever. Its set replaces it if the set's replicas still want one
// (gardener/machine-controller-manager#1078, where MCM keeps such a machine).
type DeleteMachine struct {
	Machine string `json:"machine"`
	Set     string `json:"set"`
}

// Kind implements Op.
func (DeleteMachine) Kind() string { return "DeleteMachine" }

// stale plans the deletion of machines named in the trigger-deletion annotation, marked and
// live, whose set the step leaves with no surplus to delete (its replicas cover its live
// machines). Called after a step that is not a scaling event: a scaler's lower replicas, when
// they came, were applied already.
func (p marks) stale() {
	raw, ok := p.d.Annotations[v1alpha1.AnnotationTriggerDeletionByMCM]
	if !ok {
		return
	}
	named := map[string]bool{}
	for _, e := range parseTrigger(raw) {
		named[e.machine] = true
	}
	for _, ms := range p.sets {
		var live []*v1alpha1.Machine
		for _, m := range p.machinesOf(ms) {
			if m.DeletionTimestamp == nil && !p.moved[m.Name] {
				live = append(live, m)
			}
		}
		if int32(len(live)) > ms.Spec.Replicas {
			continue // the set deletes its surplus, marked machines first
		}
		for _, m := range live {
			if named[m.Name] && m.Annotations[v1alpha1.AnnotationMachinePriority] == v1alpha1.DeletionCandidateMachinePriority {
				if _, marked := m.Annotations[v1alpha1.AnnotationMarkedForDeletionTime]; marked {
					p.add(DeleteMachine{Machine: m.Name, Set: ms.Name})
				}
			}
		}
	}
}
