package machineset

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

func mach(name string, phase v1alpha1.MachinePhase, age time.Duration, ann map[string]string) *v1alpha1.Machine {
	return &v1alpha1.Machine{
		ObjectMeta: metav1.ObjectMeta{
			Name:              name,
			CreationTimestamp: metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(-age)),
			Annotations:       ann,
		},
		Status: v1alpha1.MachineStatus{CurrentStatus: v1alpha1.CurrentStatus{Phase: phase}},
	}
}

func names(ms []*v1alpha1.Machine) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Name
	}
	return out
}

func TestSortForDeletion(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	prio := func(p string) map[string]string { return map[string]string{v1alpha1.AnnotationMachinePriority: p} }
	marked := func(at string) map[string]string {
		return map[string]string{v1alpha1.AnnotationMachinePriority: "3", v1alpha1.AnnotationMarkedForDeletionTime: at}
	}
	ms := []*v1alpha1.Machine{
		mach("running-old", v1alpha1.MachineRunning, 3*time.Hour, nil),
		mach("running-new", v1alpha1.MachineRunning, time.Hour, nil),
		mach("pending", v1alpha1.MachinePending, time.Hour, nil),
		mach("failed", v1alpha1.MachineFailed, time.Hour, nil),
		mach("unknown", v1alpha1.MachineUnknown, time.Hour, nil),
		mach("crashloop", v1alpha1.MachineCrashLoopBackOff, time.Hour, nil),
		mach("prio1-running", v1alpha1.MachineRunning, time.Hour, prio("1")),
		mach("prio2-running", v1alpha1.MachineRunning, time.Hour, prio("2")),
		mach("marked-late", v1alpha1.MachineRunning, time.Hour, marked("2026-01-01T00:00:10Z")),
		mach("marked-early", v1alpha1.MachineRunning, time.Hour, marked("2026-01-01T00:00:05Z")),
		preservedUntil(mach("preserved-failed", v1alpha1.MachineFailed, time.Hour, map[string]string{v1alpha1.AnnotationPreserve: v1alpha1.PreserveNow}), now.Add(2*time.Hour)),
		preservedUntil(mach("preserved-prio1-late", v1alpha1.MachineRunning, time.Hour, map[string]string{v1alpha1.AnnotationPreserve: v1alpha1.PreserveWhenFailed, v1alpha1.AnnotationMachinePriority: "1"}), now.Add(3*time.Hour)),
		preservedUntil(mach("auto-preserved", v1alpha1.MachineFailed, time.Hour, map[string]string{v1alpha1.AnnotationPreserve: v1alpha1.PreserveAuto}), now.Add(9*time.Hour)),
		preservedUntil(mach("expired", v1alpha1.MachineRunning, 4*time.Hour, map[string]string{v1alpha1.AnnotationPreserve: v1alpha1.PreserveNow}), now.Add(-time.Minute)),
		mach("annotated-not-yet-preserved", v1alpha1.MachineRunning, 5*time.Hour, map[string]string{v1alpha1.AnnotationPreserve: v1alpha1.PreserveNow}),
		preservedUntil(mach("preserved-named-by-scaler", v1alpha1.MachineRunning, time.Hour, map[string]string{
			v1alpha1.AnnotationPreserve: v1alpha1.PreserveNow, v1alpha1.AnnotationMachinePriority: "1", v1alpha1.AnnotationMarkedForDeletionTime: "2026-01-01T00:00:01Z"}), now.Add(time.Hour)),
		mach("bad-prio", v1alpha1.MachineRunning, 2*time.Hour, prio("x")),
	}
	SortForDeletion(ms, now)
	want := []string{
		// a scaler's named machine goes first even when preserved (MCM deletes marked machines
		// on top of its order)
		"preserved-named-by-scaler",
		"prio1-running", "prio2-running",
		"marked-early", "marked-late",
		"failed", "crashloop", "unknown", "pending",
		"annotated-not-yet-preserved", "expired", "running-old", "bad-prio", "running-new",
		// preserved last (MCM's ActiveMachines): auto-preserved first, then by expiry, whatever
		// their priority
		"auto-preserved", "preserved-failed", "preserved-prio1-late",
	}
	if len(ms) != len(want) {
		t.Fatalf("%d machines, want %d", len(ms), len(want))
	}
	got := names(ms)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("order:\n got %v\nwant %v", got, want)
		}
	}
}

func preservedUntil(m *v1alpha1.Machine, t time.Time) *v1alpha1.Machine {
	exp := metav1.NewTime(t)
	m.Status.CurrentStatus.PreserveExpiryTime = &exp
	return m
}

// TestPreserved: a machine is preserved while its preserveExpiryTime is still to come, whatever
// its annotation says (the Machine controller sets and clears the time).
func TestPreserved(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := mach("m", v1alpha1.MachineFailed, time.Hour, map[string]string{v1alpha1.AnnotationPreserve: v1alpha1.PreserveWhenFailed})
	if Preserved(m, now) {
		t.Fatal("when-failed without an expiry time is not preserved yet")
	}
	if !Preserved(preservedUntil(m, now.Add(time.Minute)), now) {
		t.Fatal("expiry to come: preserved")
	}
	if Preserved(preservedUntil(m, now), now) {
		t.Fatal("expiry reached: not preserved")
	}
}

func TestExpectations(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	e := newExpectations(time.Minute, clock)
	key := types.NamespacedName{Namespace: "ns", Name: "a"}
	e.created(key, "m1")
	e.deleted(key, "uid-2")
	view := cacheView{names: map[string]bool{"m2": true}, live: map[types.UID]bool{"uid-2": true}}
	if ok, wait := e.satisfied(key, view); ok || wait != time.Minute {
		t.Fatalf("nothing observed: ok=%v wait=%v", ok, wait)
	}
	view.names["m1"] = true
	if ok, _ := e.satisfied(key, view); ok {
		t.Fatal("deletion not observed yet")
	}
	delete(view.live, "uid-2")
	if ok, _ := e.satisfied(key, view); !ok {
		t.Fatal("all observed")
	}
	e.created(key, "m3")
	now = now.Add(2 * time.Minute)
	if ok, _ := e.satisfied(key, view); !ok {
		t.Fatal("expired expectations must not hold the set")
	}
}
