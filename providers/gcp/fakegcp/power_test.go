package fakegcp

import (
	"testing"
	"time"

	compute "google.golang.org/api/compute/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

// Stop, start, suspend and resume pass through Compute Engine's states on the fake's clock, with
// the realistic durations: STOPPING then TERMINATED, STAGING then RUNNING, SUSPENDING then
// SUSPENDED; a start takes half an insert, a resume half a start.
func TestPowerStatesOnTheClock(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	s := serveWith(t, New(Options{Clock: clk}))
	s.c.SetRealisticDelays(time.Second)
	op := s.insert(t, s.instance("vm", "t"))
	clk.Step(40 * time.Second)
	s.wait(t, op)
	status := func() string {
		in, err := s.svc.Instances.Get(DefaultProject, DemoZone, "vm").Do()
		if err != nil {
			t.Fatal(err)
		}
		return in.Status
	}
	for _, step := range []struct {
		call            func() error
		between, final  string
		duration        time.Duration
		timestampSetter string
	}{
		{func() error { _, err := s.svc.Instances.Stop(DefaultProject, DemoZone, "vm").Do(); return err }, "STOPPING", "TERMINATED", 30 * time.Second, "stop"},
		{func() error { _, err := s.svc.Instances.Start(DefaultProject, DemoZone, "vm").Do(); return err }, "STAGING", "RUNNING", 20 * time.Second, "start"},
		{func() error { _, err := s.svc.Instances.Suspend(DefaultProject, DemoZone, "vm").Do(); return err }, "SUSPENDING", "SUSPENDED", 30 * time.Second, "suspend"},
		{func() error { _, err := s.svc.Instances.Resume(DefaultProject, DemoZone, "vm").Do(); return err }, "STAGING", "RUNNING", 10 * time.Second, "resume"},
	} {
		if err := step.call(); err != nil {
			t.Fatalf("%s: %v", step.timestampSetter, err)
		}
		if got := status(); got != step.between {
			t.Errorf("%s: status right after the call = %s; want %s", step.timestampSetter, got, step.between)
		}
		clk.Step(step.duration - time.Millisecond)
		if got := status(); got != step.between {
			t.Errorf("%s: status just before %v = %s; want still %s", step.timestampSetter, step.duration, got, step.between)
		}
		clk.Step(time.Millisecond)
		if got := status(); got != step.final {
			t.Errorf("%s: status after %v = %s; want %s", step.timestampSetter, step.duration, got, step.final)
		}
	}
	in, _ := s.c.Instance(DemoZone, "vm")
	if in.LastStopTimestamp == "" || in.LastSuspendedTimestamp == "" || in.LastStartTimestamp == "" {
		t.Errorf("timestamps after stop, start, suspend and resume: stop %q suspended %q start %q", in.LastStopTimestamp, in.LastSuspendedTimestamp, in.LastStartTimestamp)
	}
}

// What Compute Engine refuses ends in an operation failed with UNSUPPORTED_OPERATION and leaves
// the instance as it was: a suspend of a stopped or suspended instance, a resume of a running
// one is nothing to do, a start of a suspended one is refused.
func TestPowerRefusals(t *testing.T) {
	s := serve(t)
	s.c.SetOperationDelay(0)
	s.wait(t, s.insert(t, s.instance("vm", "t")))
	run := func(call func() (*compute.Operation, error)) *compute.Operation {
		t.Helper()
		op, err := call()
		if err != nil {
			t.Fatal(err)
		}
		return s.wait(t, op)
	}
	run(func() (*compute.Operation, error) { return s.svc.Instances.Stop(DefaultProject, DemoZone, "vm").Do() })
	op := run(func() (*compute.Operation, error) {
		return s.svc.Instances.Suspend(DefaultProject, DemoZone, "vm").Do()
	})
	if op.Error == nil || op.Error.Errors[0].Code != "UNSUPPORTED_OPERATION" || op.Error.Errors[0].Message != "You cannot suspend an instance that is stopped or terminated." {
		t.Errorf("suspend of a TERMINATED instance: %+v", op.Error)
	}
	run(func() (*compute.Operation, error) { return s.svc.Instances.Start(DefaultProject, DemoZone, "vm").Do() })
	run(func() (*compute.Operation, error) {
		return s.svc.Instances.Suspend(DefaultProject, DemoZone, "vm").Do()
	})
	op = run(func() (*compute.Operation, error) {
		return s.svc.Instances.Suspend(DefaultProject, DemoZone, "vm").Do()
	})
	if op.Error == nil || op.Error.Errors[0].Message != "You cannot suspend an already suspended instance." {
		t.Errorf("suspend of a SUSPENDED instance: %+v", op.Error)
	}
	op = run(func() (*compute.Operation, error) { return s.svc.Instances.Start(DefaultProject, DemoZone, "vm").Do() })
	if op.Error == nil || op.Error.Errors[0].Code != "UNSUPPORTED_OPERATION" {
		t.Errorf("start of a SUSPENDED instance: %+v", op.Error)
	}
	if in, _ := s.c.Instance(DemoZone, "vm"); in.Status != "SUSPENDED" {
		t.Errorf("status after the refusals = %s; want SUSPENDED", in.Status)
	}
	if _, err := s.svc.Instances.Stop(DefaultProject, DemoZone, "absent").Do(); !isStatus(err, 404) {
		t.Errorf("stop of an absent instance: %v; want 404", err)
	}
}
