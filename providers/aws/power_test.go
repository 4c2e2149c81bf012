package aws

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/cloudmetrics/cloudmetricstest"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/aws/fakeaws"
	"github.com/machinist-io/machinist/providers/kit"
	"github.com/machinist-io/machinist/providers/kit/fakekit"
)

func (e *testEnv) stop(class *v1alpha1.MachineClass, m *v1alpha1.Machine) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := e.drv.StopMachine(ctx, &driver.StopMachineRequest{Machine: m, MachineClass: class, Secret: e.secret.DeepCopy()})
	return err
}

func (e *testEnv) start(class *v1alpha1.MachineClass, m *v1alpha1.Machine) (*driver.StartMachineResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return e.drv.StartMachine(ctx, &driver.StartMachineRequest{Machine: m, MachineClass: class, Secret: e.secret.DeepCopy()})
}

// instance is the fake's only live instance of machine name.
func (e *testEnv) instance(t *testing.T, name string) fakeaws.Instance {
	t.Helper()
	live := e.liveOf(name)
	if len(live) != 1 {
		t.Fatalf("machine %s has %d live instances; want 1", name, len(live))
	}
	return live[0]
}

func annotated(class *v1alpha1.MachineClass, mode string) *v1alpha1.MachineClass {
	c := class.DeepCopy()
	c.Annotations = map[string]string{kit.StandbyModeAnnotation: mode}
	return c
}

// TestStopStartKeepsInstance: a plain stop goes through StopInstances without Hibernate, the
// stopped instance keeps its ID, IP and DNS name and is still reported; the start answers them.
func TestStopStartKeepsInstance(t *testing.T) {
	e := newTestEnv(t)
	created := e.mustCreate(t, "m-1")
	m := machine("m-1")
	if err := e.stop(e.class, m); err != nil {
		t.Fatalf("StopMachine = %v", err)
	}
	before := e.instance(t, "m-1")
	if before.State != fakeaws.StateStopped || before.StateReason != "Client.UserInitiatedShutdown" {
		t.Fatalf("instance after the stop is %s (%s); want stopped by Client.UserInitiatedShutdown", before.State, before.StateReason)
	}
	stops := e.cloud.Requests.For("StopInstances")
	if len(stops) != 1 || stops[0].Params["Hibernate"] != "false" || stops[0].Params["InstanceId.1"] != before.ID {
		t.Fatalf("StopInstances requests = %+v; want one for %s with Hibernate=false", stops, before.ID)
	}
	st, err := e.drv.GetMachineStatus(context.Background(), &driver.GetMachineStatusRequest{Machine: m, MachineClass: e.class, Secret: e.secret})
	if err != nil || st.ProviderID != created.ProviderID {
		t.Fatalf("GetMachineStatus of the stopped instance = %+v, %v; want OK with %s", st, err, created.ProviderID)
	}
	started, err := e.start(e.class, m)
	if err != nil {
		t.Fatalf("StartMachine = %v", err)
	}
	if started.ProviderID != created.ProviderID || started.NodeName != created.NodeName || !equalAddrs(started, created) {
		t.Fatalf("StartMachine = %+v; want the identity CreateMachine answered: %+v", started, created)
	}
	after := e.instance(t, "m-1")
	if after.State != fakeaws.StateRunning || after.ID != before.ID || after.PrivateIP != before.PrivateIP {
		t.Fatalf("instance after the start = %s %s %s; want running %s %s", after.ID, after.State, after.PrivateIP, before.ID, before.PrivateIP)
	}
	if n := len(e.cloud.Requests.For("StartInstances")); n != 1 {
		t.Fatalf("StartInstances requests = %d; want 1", n)
	}
}

func equalAddrs(s *driver.StartMachineResponse, c *driver.CreateMachineResponse) bool {
	if len(s.Addresses) != len(c.Addresses) {
		return false
	}
	for i := range s.Addresses {
		if s.Addresses[i] != c.Addresses[i] {
			return false
		}
	}
	return true
}

// TestPowerIdempotent: stopping a stopping instance and starting a pending or running one send
// nothing; a start while the instance is still stopping waits until it is stopped, and a stop
// while it is pending waits until it runs (EC2 refuses both with IncorrectInstanceState).
func TestPowerIdempotent(t *testing.T) {
	e := newTestEnv(t)
	e.mustCreate(t, "m-1")
	m := machine("m-1")
	e.cloud.SetBootDelays(fakeaws.BootDelays{Stopping: time.Hour})
	for i := range 2 {
		if err := e.stop(e.class, m); err != nil {
			t.Fatalf("StopMachine #%d = %v; want OK", i+1, err)
		}
	}
	if n := len(e.cloud.Requests.For("StopInstances")); n != 1 {
		t.Fatalf("StopInstances requests = %d; want 1: the second stop finds the instance stopping", n)
	}
	if got := e.instance(t, "m-1").State; got != fakeaws.StateStopping {
		t.Fatalf("instance is %s; want stopping (Stopping is an hour)", got)
	}
	e.cloud.SetBootDelays(fakeaws.BootDelays{Stopping: 0, Starting: time.Hour})
	for i := range 2 {
		if _, err := e.start(e.class, m); err != nil {
			t.Fatalf("StartMachine #%d = %v; want OK", i+1, err)
		}
	}
	if got := e.instance(t, "m-1").State; got != fakeaws.StatePending {
		t.Fatalf("instance after the starts is %s; want pending (Starting is an hour)", got)
	}
	if n := len(e.cloud.Requests.For("StartInstances")); n != 1 {
		t.Fatalf("StartInstances requests = %d; want 1: the second start finds the instance pending", n)
	}
	e.cloud.SetBootDelays(fakeaws.BootDelays{Starting: 0})
	if _, err := e.start(e.class, m); err != nil {
		t.Fatalf("StartMachine of a running instance = %v; want OK", err)
	}
	if n := len(e.cloud.Requests.For("StartInstances")); n != 1 {
		t.Fatalf("StartInstances requests = %d; want still 1", n)
	}
}

// TestPowerWaitsForTransitions: a start while the instance is still stopping, and a stop while
// it is pending, wait (polling DescribeInstances) until EC2 accepts the call, instead of failing
// with IncorrectInstanceState; a wait cut off by the caller is Unavailable.
func TestPowerWaitsForTransitions(t *testing.T) {
	e := newTestEnv(t)
	e.mustCreate(t, "m-1")
	m := machine("m-1")
	e.cloud.SetBootDelays(fakeaws.BootDelays{Stopping: 50 * time.Millisecond, Starting: 50 * time.Millisecond})
	if err := e.stop(e.class, m); err != nil {
		t.Fatal(err)
	}
	if _, err := e.start(e.class, m); err != nil {
		t.Fatalf("StartMachine of a stopping instance = %v; want OK once it is stopped", err)
	}
	if err := e.stop(e.class, m); err != nil {
		t.Fatalf("StopMachine of a pending instance = %v; want OK once it runs", err)
	}
	for _, action := range []string{"StartInstances", "StopInstances"} {
		for _, r := range e.cloud.Requests.For(action) {
			if r.Code != "" {
				t.Errorf("%s was answered %s: the driver called it in a state EC2 refuses", action, r.Code)
			}
		}
	}
	if n := len(e.cloud.Requests.For("StopInstances")); n != 2 {
		t.Fatalf("StopInstances requests = %d; want 2", n)
	}
	e.cloud.SetBootDelays(fakeaws.BootDelays{Stopping: time.Hour})
	e.mustCreate(t, "m-2")
	m = machine("m-2")
	if err := e.stop(e.class, m); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := e.drv.StartMachine(ctx, &driver.StartMachineRequest{Machine: m, MachineClass: e.class, Secret: e.secret.DeepCopy()})
	if !driver.IsCode(err, driver.Unavailable) && !driver.IsCode(err, driver.DeadlineExceeded) {
		t.Fatalf("StartMachine cut off while the instance stops = %v; want Unavailable or DeadlineExceeded", err)
	}
}

// TestHibernate: a class annotated hibernate launches its instances with hibernation
// configured and stops them with Hibernate=true; EC2 records the hibernation as the state
// reason; the start resumes the same instance.
func TestHibernate(t *testing.T) {
	e := newTestEnv(t)
	class := annotated(e.class, "hibernate")
	m := machine("m-1")
	created, err := e.createIn(context.Background(), class, m)
	if err != nil {
		t.Fatalf("CreateMachine with hibernation = %v", err)
	}
	if !e.instance(t, "m-1").Hibernation {
		t.Fatalf("the instance was launched without hibernation configured")
	}
	if run := e.cloud.Requests.For("RunInstances"); run[len(run)-1].Params["HibernationOptions.Configured"] != "true" {
		t.Fatalf("RunInstances did not carry HibernationOptions.Configured=true: %v", run[len(run)-1].Params)
	}
	if err := e.stop(class, m); err != nil {
		t.Fatalf("StopMachine (hibernate) = %v", err)
	}
	inst := e.instance(t, "m-1")
	if inst.State != fakeaws.StateStopped || inst.StateReason != "Client.UserInitiatedHibernate" || !inst.Hibernated {
		t.Fatalf("instance after the hibernation is %s (%s, hibernated %v); want stopped by Client.UserInitiatedHibernate", inst.State, inst.StateReason, inst.Hibernated)
	}
	if stops := e.cloud.Requests.For("StopInstances"); len(stops) != 1 || stops[0].Params["Hibernate"] != "true" {
		t.Fatalf("StopInstances requests = %+v; want one with Hibernate=true", stops)
	}
	started, err := e.start(class, m)
	if err != nil || started.ProviderID != created.ProviderID {
		t.Fatalf("StartMachine after the hibernation = %+v, %v; want %s", started, err, created.ProviderID)
	}
}

// TestPowerRefusals: what EC2 refuses, and what the driver refuses before asking it, each with
// a code the controllers act on and a message saying what to do; nothing changes.
func TestPowerRefusals(t *testing.T) {
	e := newTestEnv(t)
	e.mustCreate(t, "plain")

	t.Run("unknown mode", func(t *testing.T) {
		for _, call := range []func(*v1alpha1.MachineClass) error{
			func(c *v1alpha1.MachineClass) error { return e.stop(c, machine("plain")) },
			func(c *v1alpha1.MachineClass) error { _, err := e.start(c, machine("plain")); return err },
			func(c *v1alpha1.MachineClass) error {
				_, err := e.createIn(context.Background(), c, machine("other"))
				return err
			},
		} {
			err := call(annotated(e.class, "suspend"))
			if !driver.IsCode(err, driver.InvalidArgument) || !strings.Contains(err.Error(), kit.StandbyModeAnnotation) ||
				!strings.Contains(err.Error(), `"stop" or "hibernate"`) {
				t.Errorf("call with standby-mode suspend = %v; want InvalidArgument naming the annotation and the allowed values", err)
			}
		}
		if len(e.liveOf("other")) != 0 {
			t.Errorf("a create with an unknown standby mode launched an instance")
		}
	})
	t.Run("hibernate without hibernation at launch", func(t *testing.T) {
		err := e.stop(annotated(e.class, "hibernate"), machine("plain"))
		if !driver.IsCode(err, driver.FailedPrecondition) || !strings.Contains(err.Error(), "launched without hibernation") {
			t.Fatalf("hibernating an instance launched without it = %v; want FailedPrecondition", err)
		}
		if n := len(e.cloud.Requests.For("StopInstances")); n != 0 {
			t.Fatalf("StopInstances requests = %d; want none", n)
		}
		if got := e.instance(t, "plain").State; got != fakeaws.StateRunning {
			t.Fatalf("instance is %s; want still running", got)
		}
	})
	t.Run("hibernate with an unencrypted root volume", func(t *testing.T) {
		class := annotated(e.classWith("clear", func(s *ProviderSpec) { s.BlockDevices[0].Ebs.Encrypted = false }), "hibernate")
		_, err := e.createIn(context.Background(), class, machine("clear"))
		if !driver.IsCode(err, driver.InvalidArgument) || !strings.Contains(err.Error(), "UnsupportedHibernationConfiguration") ||
			!strings.Contains(err.Error(), "encrypted: true") {
			t.Fatalf("CreateMachine with hibernation and an unencrypted root = %v; want InvalidArgument naming encryption", err)
		}
		if len(e.liveOf("clear")) != 0 {
			t.Fatalf("the refused launch left an instance")
		}
	})
	t.Run("one-time spot instance", func(t *testing.T) {
		class := e.classWith("spot", func(s *ProviderSpec) { s.SpotPrice = ptr.To("") })
		if _, err := e.createIn(context.Background(), class, machine("spot")); err != nil {
			t.Fatal(err)
		}
		err := e.stop(class, machine("spot"))
		if !driver.IsCode(err, driver.FailedPrecondition) || !strings.Contains(err.Error(), "UnsupportedOperation") {
			t.Fatalf("StopMachine of a one-time spot instance = %v; want FailedPrecondition from EC2's UnsupportedOperation", err)
		}
		if got := e.instance(t, "spot").State; got != fakeaws.StateRunning {
			t.Fatalf("spot instance is %s; want still running", got)
		}
	})
	t.Run("terminated instance", func(t *testing.T) {
		e.mustCreate(t, "gone")
		id := e.instance(t, "gone").ID
		if err := e.delete(t, e.class, machine("gone")); err != nil {
			t.Fatal(err)
		}
		withID := machine("gone")
		withID.Spec.ProviderID = providerID(testRegion, id)
		if err := e.stop(e.class, withID); !driver.IsCode(err, driver.NotFound) {
			t.Errorf("StopMachine of a terminated instance = %v; want NotFound", err)
		}
		if _, err := e.start(e.class, withID); !driver.IsCode(err, driver.NotFound) {
			t.Errorf("StartMachine of a terminated instance = %v; want NotFound", err)
		}
	})
}

// TestStartCapacity: a stopped instance gives its host back; when the zone has no capacity
// left at the start, EC2's InsufficientInstanceCapacity is ResourceExhausted and the instance
// stays stopped. Throttling and 5xx at start are retried by the SDK.
func TestStartCapacity(t *testing.T) {
	e := newTestEnv(t)
	e.cloud.Capacity.SetZoneCapacity(testZoneA, 1)
	e.mustCreate(t, "m-1")
	if err := e.stop(e.class, machine("m-1")); err != nil {
		t.Fatal(err)
	}
	e.mustCreate(t, "m-2") // takes the capacity the stop gave back
	_, err := e.start(e.class, machine("m-1"))
	if !driver.IsCode(err, driver.ResourceExhausted) || !strings.Contains(err.Error(), "InsufficientInstanceCapacity") {
		t.Fatalf("StartMachine without capacity = %v; want ResourceExhausted from InsufficientInstanceCapacity", err)
	}
	if n := len(e.cloud.Requests.For("StartInstances")); n != 1 {
		t.Fatalf("StartInstances requests = %d; want 1: capacity errors are not retried at once", n)
	}
	if got := e.instance(t, "m-1").State; got != fakeaws.StateStopped {
		t.Fatalf("instance after the refused start is %s; want stopped", got)
	}

	e.cloud.Capacity.SetZoneCapacity(testZoneA, -1)
	e.cloud.Faults.Inject(fakeaws.Throttle("StartInstances", 1))
	e.cloud.Faults.Inject(fakeaws.ServerErrors("StartInstances", http.StatusServiceUnavailable, 1))
	if _, err := e.start(e.class, machine("m-1")); err != nil {
		t.Fatalf("StartMachine through a throttle and a 503 = %v; want OK after the SDK's retries", err)
	}
	if n := len(e.cloud.Requests.For("StartInstances")); n != 4 {
		t.Fatalf("StartInstances requests = %d; want 4 (the refused one, a throttled, a 503, the accepted)", n)
	}

	e.cloud.Faults.Inject(fakeaws.Fault{Rule: fakekit.Rule{Op: "StartInstances", Times: 1}, Status: http.StatusInternalServerError,
		Code: "InsufficientInstanceCapacity", Message: "Insufficient capacity."})
	if err := e.stop(e.class, machine("m-1")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.start(e.class, machine("m-1")); !driver.IsCode(err, driver.ResourceExhausted) {
		t.Fatalf("StartMachine with an injected capacity fault = %v; want ResourceExhausted", err)
	}
}

// TestPowerCountedUnderItsOwnNames: StopInstances and StartInstances count as instance_stop and
// instance_start in MCM's cloud API metrics.
func TestPowerCountedUnderItsOwnNames(t *testing.T) {
	e := newTestEnv(t)
	e.mustCreate(t, "m-1")
	before, _, _ := cloudmetricstest.Counts(t, ProviderName)
	if err := e.stop(e.class, machine("m-1")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.start(e.class, machine("m-1")); err != nil {
		t.Fatal(err)
	}
	after, _, _ := cloudmetricstest.Counts(t, ProviderName)
	for _, svc := range []string{serviceStopInstance, serviceStartInstance} {
		if got := after[svc] - before[svc]; got != 1 {
			t.Errorf("%s counted %v times; want 1", svc, got)
		}
	}
}
