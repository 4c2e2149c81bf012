package machineset

import (
	"sort"
	"strconv"
	"time"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/internal/preservation"
)

// phaseRank orders phases for scale-down as MCM does: the cheapest machine to lose first.
// Phases not listed (the empty phase of a machine still being created, in-place update phases)
// rank 0 like Terminating, as in MCM.
var phaseRank = map[v1alpha1.MachinePhase]int{
	v1alpha1.MachineTerminating:      0,
	v1alpha1.MachineFailed:           1,
	v1alpha1.MachineCrashLoopBackOff: 2,
	v1alpha1.MachineUnknown:          3,
	v1alpha1.MachinePending:          4,
	v1alpha1.MachineAvailable:        5,
	v1alpha1.MachineRunning:          6,
}

// Priority returns a machine's scale-down priority (annotation machinepriority.machine.sapcloud.io);
// a missing or unreadable value is the default 3. Lower is deleted first.
func Priority(m *v1alpha1.Machine) int {
	if v, ok := m.Annotations[v1alpha1.AnnotationMachinePriority]; ok {
		if p, err := strconv.Atoi(v); err == nil {
			return p
		}
	}
	p, _ := strconv.Atoi(v1alpha1.DefaultMachinePriority)
	return p
}

// MarkedForDeletion returns when a scaler marked the machine for deletion, if it did.
func MarkedForDeletion(m *v1alpha1.Machine) (time.Time, bool) {
	v, ok := m.Annotations[v1alpha1.AnnotationMarkedForDeletionTime]
	if !ok {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		// A mark whose time cannot be read still marks the machine; it sorts after readable ones.
		return time.Time{}, true
	}
	return t, true
}

// Preserved reports whether a machine is preserved at now: the Machine controller set its
// preserveExpiryTime (annotation node.machine.sapcloud.io/preserve on it or its node) and that
// time has not come (MCM's ActiveMachines rule).
func Preserved(m *v1alpha1.Machine, now time.Time) bool { return preservation.Preserved(m, now) }

// SortForDeletion orders machines so the first ones are the ones to delete first (MCM's
// ActiveMachines order, docs/compatibility/mcm-controllers.md#scale-down-order): machines a scaler
// named for deletion (priority 1 with a marked-for-deletion time) first, preserved or not — MCM's
// MachineSet deletes those on top of its order; then not preserved before preserved (auto-preserved
// before explicitly preserved, then earlier expiry); lower priority; marked for deletion (earlier
// mark first) before unmarked; lower phase rank; older before newer; then by name, so the order is
// total and stable.
func SortForDeletion(machines []*v1alpha1.Machine, now time.Time) {
	sort.SliceStable(machines, func(i, j int) bool { return deleteBefore(machines[i], machines[j], now) })
}

// namedByScaler: a scaler asked for this machine to go (the MachineDeployment controller turns
// trigger-deletion-by-mcm entries into priority 1 and a marked-for-deletion time).
func namedByScaler(m *v1alpha1.Machine) bool {
	_, marked := MarkedForDeletion(m)
	return marked && m.Annotations[v1alpha1.AnnotationMachinePriority] == v1alpha1.DeletionCandidateMachinePriority
}

func deleteBefore(a, b *v1alpha1.Machine, now time.Time) bool {
	if na, nb := namedByScaler(a), namedByScaler(b); na != nb {
		return na
	}
	pa, pb := Preserved(a, now), Preserved(b, now)
	if pa != pb {
		return !pa
	}
	if pa {
		autoA := a.Annotations[v1alpha1.AnnotationPreserve] == v1alpha1.PreserveAuto
		autoB := b.Annotations[v1alpha1.AnnotationPreserve] == v1alpha1.PreserveAuto
		if autoA != autoB {
			return autoA
		}
		ea, eb := a.Status.CurrentStatus.PreserveExpiryTime, b.Status.CurrentStatus.PreserveExpiryTime
		if ea != nil && eb != nil && !ea.Equal(eb) {
			return ea.Before(eb)
		}
	}
	if qa, qb := Priority(a), Priority(b); qa != qb {
		return qa < qb
	}
	ta, ma := MarkedForDeletion(a)
	tb, mb := MarkedForDeletion(b)
	if ma != mb {
		return ma
	}
	if ma && !ta.Equal(tb) {
		if ta.IsZero() || tb.IsZero() {
			return !ta.IsZero()
		}
		return ta.Before(tb)
	}
	if ra, rb := phaseRank[a.Status.CurrentStatus.Phase], phaseRank[b.Status.CurrentStatus.Phase]; ra != rb {
		return ra < rb
	}
	ca, cb := a.CreationTimestamp, b.CreationTimestamp
	if !ca.Equal(&cb) {
		if ca.IsZero() || cb.IsZero() {
			// A machine without a timestamp has not been stored yet: keep it.
			return !ca.IsZero()
		}
		return ca.Before(&cb)
	}
	return a.Name < b.Name
}
