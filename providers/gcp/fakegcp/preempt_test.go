package fakegcp

import (
	"strings"
	"testing"
	"time"

	compute "google.golang.org/api/compute/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

// Preemption goes as Compute Engine's: a compute.instances.preempted system operation, the
// instance STOPPING, then TERMINATED (preemptible; Spot with STOP) or deleted with its disks
// (Spot with DELETE) when the operation is done. Standard instances are not preempted.
func TestPreemption(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	s := serveWith(t, New(Options{Clock: clk}))
	s.c.SetOperationDelay(0)
	for name, sched := range map[string]*compute.Scheduling{
		"spot-stop":   {ProvisioningModel: "SPOT", InstanceTerminationAction: "STOP", AutomaticRestart: ptr.To(false), OnHostMaintenance: "TERMINATE"},
		"spot-delete": {ProvisioningModel: "SPOT", InstanceTerminationAction: "DELETE", AutomaticRestart: ptr.To(false), OnHostMaintenance: "TERMINATE"},
		"preemptible": {Preemptible: true, AutomaticRestart: ptr.To(false), OnHostMaintenance: "TERMINATE"},
		"standard":    nil,
	} {
		in := s.instance(name, "t")
		in.Scheduling = sched
		s.wait(t, s.insert(t, in))
	}
	if _, err := s.c.Preempt(DemoZone, "standard"); err == nil || !strings.Contains(err.Error(), "neither Spot nor preemptible") {
		t.Errorf("preempting a standard instance: %v", err)
	}
	s.c.SetOperationDelay(30 * time.Second) // the guest's shutdown
	var ops []string
	for _, name := range []string{"spot-stop", "spot-delete", "preemptible"} {
		op, err := s.c.Preempt(DemoZone, name)
		if err != nil {
			t.Fatal(err)
		}
		ops = append(ops, op)
		if in, _ := s.svc.Instances.Get(DefaultProject, DemoZone, name).Do(); in == nil || in.Status != "STOPPING" {
			t.Errorf("%s while preempted: %+v", name, in)
		}
	}
	clk.Step(30 * time.Second)
	for name, want := range map[string]string{"spot-stop": "TERMINATED", "preemptible": "TERMINATED", "standard": "RUNNING"} {
		in, err := s.svc.Instances.Get(DefaultProject, DemoZone, name).Do()
		if err != nil || in.Status != want || (want == "TERMINATED" && in.LastStopTimestamp == "") {
			t.Errorf("%s: %+v %v, want %s", name, in, err, want)
		}
	}
	if _, err := s.svc.Instances.Get(DefaultProject, DemoZone, "spot-delete").Do(); !isStatus(err, 404) {
		t.Errorf("Spot VM with DELETE: %v, want 404", err)
	}
	if _, err := s.svc.Disks.Get(DefaultProject, DemoZone, "spot-delete").Do(); !isStatus(err, 404) {
		t.Errorf("its boot disk: %v, want 404", err)
	}
	list, err := s.svc.ZoneOperations.List(DefaultProject, DemoZone).Filter(`operationType = "compute.instances.preempted"`).Do()
	if err != nil || len(list.Items) != 3 {
		t.Fatalf("preempted operations: %v %v", list, err)
	}
	for i, op := range list.Items {
		if op.Name != ops[i] || op.Status != "DONE" || op.User != "system" || op.StatusMessage != "Instance was preempted." || op.Error != nil {
			t.Errorf("operation %d = %+v", i, op)
		}
	}
}
