package machineset

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/internal/truncate"
)

// A machine the set creates while a failed machine of it is being deleted is that machine's
// replacement: the set records the pairing on the new machine, so `machinist explain` can say
// why the machine exists after the failed one and its events are gone. One new machine per
// failed one; machines created before this existed simply carry neither annotation.
const (
	// AnnotationReplaces names the failed machine a machine was created to replace.
	AnnotationReplaces = "machinist.io/replaces"
	// AnnotationReplacesReason says, in words, how that machine failed (its lastOperation when
	// the set replaced it: for a health check, the node conditions that failed and for how long).
	AnnotationReplacesReason = "machinist.io/replaces-reason"
	// ReasonReplacement is the event on a new machine that replaces a failed one (related: the
	// failed machine, so the failed machine's story names its replacement too).
	ReasonReplacement = "Replacement"
)

// replacesReasonLimit bounds the reason annotation: a lastOperation may carry a long provider
// message.
const replacesReasonLimit = 1024

// replacement pairs a failed machine with the words that say how it failed.
type replacement struct {
	old    *v1alpha1.Machine
	reason string
}

// pendingReplacements are the failed machines of the set a new machine replaces: those deleted
// in this pass (failed) and those already terminating that were Failed when their deletion began
// as far as the cache shows (still phase Failed), less those a live machine already names.
func pendingReplacements(machines, failed []*v1alpha1.Machine) []replacement {
	named := map[string]bool{}
	for _, m := range machines {
		if old := m.Annotations[AnnotationReplaces]; old != "" && m.DeletionTimestamp == nil {
			named[old] = true
		}
	}
	var out []replacement
	add := func(m *v1alpha1.Machine) {
		if !named[m.Name] {
			named[m.Name] = true
			out = append(out, replacement{old: m, reason: failureReason(m)})
		}
	}
	for _, m := range failed {
		add(m)
	}
	for _, m := range machines {
		if m.DeletionTimestamp != nil && m.Status.CurrentStatus.Phase == v1alpha1.MachineFailed {
			add(m)
		}
	}
	return out
}

// failureReason says how a Failed machine failed, from its lastOperation ("" when it no longer
// says: the deletion has overwritten it).
func failureReason(m *v1alpha1.Machine) string {
	op := m.Status.LastOperation
	if op.State != v1alpha1.MachineStateFailed || op.Description == "" {
		return ""
	}
	what := "failed"
	switch op.Type {
	case v1alpha1.MachineOperationHealthCheck:
		what = "failed its health check"
	case v1alpha1.MachineOperationCreate:
		what = "failed to be created or to join"
	}
	return truncate.String(what+": "+op.Description, replacesReasonLimit)
}

// markReplacement makes m the replacement of p.
func markReplacement(m *v1alpha1.Machine, p replacement) {
	m.Annotations[AnnotationReplaces] = p.old.Name
	if p.reason != "" {
		m.Annotations[AnnotationReplacesReason] = p.reason
	} else {
		delete(m.Annotations, AnnotationReplacesReason)
	}
}

// replacementEvents records, on each new machine that replaces a failed one, which one and why.
func (r *Reconciler) replacementEvents(made []*v1alpha1.Machine) {
	for _, m := range made {
		old := m.Annotations[AnnotationReplaces]
		if old == "" {
			continue
		}
		note := fmt.Sprintf("Created to replace failed machine %s", old)
		if why := m.Annotations[AnnotationReplacesReason]; why != "" {
			note += ", which " + why
		}
		related := &v1alpha1.Machine{}
		related.Namespace, related.Name = m.Namespace, old
		r.recorder.Eventf(m, related, corev1.EventTypeNormal, ReasonReplacement, "Create", "%s", note)
	}
}
