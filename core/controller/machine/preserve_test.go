package machine_test

import (
	"slices"
	"testing"
	"time"

	testclock "k8s.io/utils/clock/testing"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/drivertest/memdriver"
	"github.com/machinist-io/machinist/harness/ctrltest"
)

// TestPreserveWithoutTarget: without a target cluster (no node) preservation is the expiry time
// alone (MCM: "If a machine has no backing node, only PreserveExpiryTime is set"), taken from the
// preserve timeout; when it expires the annotation is removed and the machine stays. An invalid
// value is ignored with a Warning event naming the valid ones.
func TestPreserveWithoutTarget(t *testing.T) {
	e := ctrltest.NewEnv(t)
	e.Drivers.Set(memdriver.ProviderName, memdriver.New(memdriver.NewCloud()))
	e.Class("mem", "mem", memSpec(e), "")
	clk := testclock.NewFakeClock(time.Now())
	opts := ctrltest.FastOptions()
	opts.PreserveTimeout = time.Hour
	opts.Clock = clk
	e.StartControllers(opts, false, nil)

	kept, bad := e.Name("kept"), e.Name("bad")
	annotated := func(v string) func(*v1alpha1.Machine) {
		return func(m *v1alpha1.Machine) { m.Annotations = map[string]string{v1alpha1.AnnotationPreserve: v} }
	}
	e.Machine(kept, "mem", annotated(v1alpha1.PreserveNow))
	e.Machine(bad, "mem", annotated("yes"))

	m := e.WaitMachine(kept, 30*time.Second, "preserved", func(m *v1alpha1.Machine) bool {
		return m != nil && m.Status.CurrentStatus.PreserveExpiryTime != nil
	})
	if d := m.Status.CurrentStatus.PreserveExpiryTime.Sub(clk.Now()); d < 59*time.Minute || d > time.Hour {
		t.Fatalf("preserved for %s from now, want the 1h preserve timeout", d)
	}
	clk.Step(2 * time.Hour)
	e.Touch(kept)
	e.WaitMachine(kept, 30*time.Second, "preservation expired, annotation removed", func(m *v1alpha1.Machine) bool {
		_, has := m.Annotations[v1alpha1.AnnotationPreserve]
		return m.Status.CurrentStatus.PreserveExpiryTime == nil && !has && m.Status.CurrentStatus.Phase == v1alpha1.MachineAvailable
	})
	e.WaitEventReasons(kept, 30*time.Second, "Preserved", "PreservationStopped")

	e.WaitMachine(bad, 30*time.Second, "invalid value reported", func(m *v1alpha1.Machine) bool {
		return slices.Contains(e.EventReasons(bad), "InvalidPreserveAnnotation")
	})
	if m := e.Get(bad); m.Status.CurrentStatus.PreserveExpiryTime != nil || m.Annotations[v1alpha1.AnnotationPreserve] != "yes" {
		t.Fatalf("invalid value acted on: %+v, annotations %v", m.Status.CurrentStatus, m.Annotations)
	}
}
