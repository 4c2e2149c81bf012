package openstack

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/kit"
	"github.com/machinist-io/machinist/providers/kit/fakekit"
	"github.com/machinist-io/machinist/providers/openstack/fakeopenstack"
)

// powerEnv is a fake OpenStack, a driver and one created machine.
type powerEnv struct {
	t       *testing.T
	cloud   *fakeopenstack.Cloud
	d       *Driver
	created *driver.CreateMachineResponse
}

func newPowerEnv(t *testing.T, mode string) (*powerEnv, *v1alpha1.MachineClass) {
	t.Helper()
	e := &powerEnv{t: t, cloud: startCloud(t, fakeopenstack.Options{})}
	e.d, _ = testDriver(t)
	class := testClass(t)
	if mode != "" {
		class.Annotations = map[string]string{kit.StandbyModeAnnotation: mode}
	}
	var err error
	e.created, err = e.d.CreateMachine(ctxT(t), &driver.CreateMachineRequest{Machine: machine("m-1"), MachineClass: class, Secret: passwordSecret(e.cloud)})
	if err != nil {
		t.Fatalf("CreateMachine: %v", err)
	}
	return e, class
}

func (e *powerEnv) stop(class *v1alpha1.MachineClass) error {
	_, err := e.d.StopMachine(ctxT(e.t), &driver.StopMachineRequest{Machine: machine("m-1"), MachineClass: class, Secret: passwordSecret(e.cloud)})
	return err
}

func (e *powerEnv) start(class *v1alpha1.MachineClass) (*driver.StartMachineResponse, error) {
	return e.d.StartMachine(ctxT(e.t), &driver.StartMachineRequest{Machine: machine("m-1"), MachineClass: class, Secret: passwordSecret(e.cloud)})
}

func (e *powerEnv) server() fakeopenstack.Server {
	e.t.Helper()
	srvs := e.cloud.Servers()
	if len(srvs) != 1 {
		e.t.Fatalf("%d servers; want 1", len(srvs))
	}
	return srvs[0]
}

// actions are the server actions the cloud was asked for, in order.
func (e *powerEnv) actions() []string {
	var out []string
	for _, r := range e.cloud.Requests.For(fakeopenstack.OpServerAction) {
		out = append(out, r.Action)
	}
	return out
}

func (e *powerEnv) wantActions(want ...string) {
	e.t.Helper()
	if got := e.actions(); strings.Join(got, ",") != strings.Join(want, ",") {
		e.t.Fatalf("server actions %v; want %v", got, want)
	}
}

// TestStopStartModes: the default mode stops with os-stop (SHUTOFF) and starts with os-start;
// shelve shelves (SHELVED_OFFLOADED) and unshelves; either way the server keeps its ID and
// address, and GetMachineStatus keeps reporting it while it is down.
func TestStopStartModes(t *testing.T) {
	for _, tc := range []struct {
		mode, down, stopAction, startAction string
	}{
		{"", "SHUTOFF", "os-stop", "os-start"},
		{"stop", "SHUTOFF", "os-stop", "os-start"},
		{"shelve", "SHELVED_OFFLOADED", "shelve", "unshelve"},
	} {
		t.Run("mode="+tc.mode, func(t *testing.T) {
			e, class := newPowerEnv(t, tc.mode)
			if err := e.stop(class); err != nil {
				t.Fatalf("StopMachine = %v", err)
			}
			if s := e.server(); s.Status != tc.down || s.TaskState != "" {
				t.Fatalf("server after the stop is %s (task %q); want %s", s.Status, s.TaskState, tc.down)
			}
			st, err := e.d.GetMachineStatus(ctxT(t), &driver.GetMachineStatusRequest{Machine: machine("m-1"), MachineClass: class, Secret: passwordSecret(e.cloud)})
			if err != nil || st.ProviderID != e.created.ProviderID {
				t.Fatalf("GetMachineStatus of the %s server = %+v, %v; want OK with %s", tc.down, st, err, e.created.ProviderID)
			}
			started, err := e.start(class)
			if err != nil {
				t.Fatalf("StartMachine = %v", err)
			}
			if started.ProviderID != e.created.ProviderID || started.NodeName != e.created.NodeName ||
				len(started.Addresses) == 0 || started.Addresses[0] != e.created.Addresses[0] {
				t.Fatalf("StartMachine = %+v; want CreateMachine's identity %+v", started, e.created)
			}
			if s := e.server(); s.Status != "ACTIVE" {
				t.Fatalf("server after the start is %s; want ACTIVE", s.Status)
			}
			e.wantActions(tc.stopAction, tc.startAction)
		})
	}
}

// TestPowerIdempotent: a stop of a server stopping or stopped and a start of one starting or
// ACTIVE send nothing; a start while it is still powering off waits, and is Unavailable when
// its caller's deadline comes first.
func TestPowerIdempotent(t *testing.T) {
	e, class := newPowerEnv(t, "")
	e.cloud.SetPowerTimes(fakeopenstack.PowerTimes{Stop: time.Hour})
	for i := range 2 {
		if err := e.stop(class); err != nil {
			t.Fatalf("StopMachine #%d = %v", i+1, err)
		}
	}
	e.wantActions("os-stop")
	short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := e.d.StartMachine(short, &driver.StartMachineRequest{Machine: machine("m-1"), MachineClass: class, Secret: passwordSecret(e.cloud)})
	if !driver.IsCode(err, driver.Unavailable) || !strings.Contains(err.Error(), "powering-off") {
		t.Fatalf("StartMachine cut off while the server powers off = %v; want Unavailable naming the task", err)
	}
	e.wantActions("os-stop")
	e2, class2 := newPowerEnv(t, "")
	for i := range 2 {
		if _, err := e2.start(class2); err != nil {
			t.Fatalf("StartMachine #%d of an ACTIVE server = %v", i+1, err)
		}
	}
	if err := e2.stop(class2); err != nil {
		t.Fatal(err)
	}
	if err := e2.stop(annotatedWith(class2, "shelve")); err != nil {
		t.Fatalf("StopMachine in shelve mode of a SHUTOFF server = %v", err)
	}
	if err := e2.stop(class2); err != nil {
		t.Fatalf("StopMachine of a shelved server = %v; want OK: shelved is stopped too", err)
	}
	e2.wantActions("os-stop", "shelve")
	if s := e2.server(); s.Status != "SHELVED_OFFLOADED" {
		t.Fatalf("server is %s; want SHELVED_OFFLOADED", s.Status)
	}
}

// TestPowerWaitsForActions: a start while the server powers off and a stop while it powers on
// wait until Nova takes them (it answers 409 while another action runs).
func TestPowerWaitsForActions(t *testing.T) {
	e, class := newPowerEnv(t, "")
	e.cloud.SetPowerTimes(fakeopenstack.PowerTimes{Stop: 50 * time.Millisecond, Start: 50 * time.Millisecond})
	if err := e.stop(class); err != nil {
		t.Fatal(err)
	}
	if _, err := e.start(class); err != nil {
		t.Fatalf("StartMachine while powering off = %v; want OK once SHUTOFF", err)
	}
	if err := e.stop(class); err != nil {
		t.Fatalf("StopMachine while powering on = %v; want OK once ACTIVE", err)
	}
	e.wantActions("os-stop", "os-start", "os-stop")
}

func annotatedWith(class *v1alpha1.MachineClass, mode string) *v1alpha1.MachineClass {
	c := class.DeepCopy()
	c.Annotations = map[string]string{kit.StandbyModeAnnotation: mode}
	return c
}

// TestUnshelveNoValidHost: when the scheduler finds no host for an unshelve, Nova puts the
// server back to SHELVED_OFFLOADED; the start is ResourceExhausted and the server stays shelved.
func TestUnshelveNoValidHost(t *testing.T) {
	e, class := newPowerEnv(t, "shelve")
	if err := e.stop(class); err != nil {
		t.Fatal(err)
	}
	e.cloud.SetPowerTimes(fakeopenstack.PowerTimes{Unshelve: 30 * time.Millisecond})
	e.cloud.NoValidHostOnUnshelve(1)
	_, err := e.start(class)
	if !driver.IsCode(err, driver.ResourceExhausted) || !strings.Contains(err.Error(), "no valid host") {
		t.Fatalf("StartMachine without a host = %v; want ResourceExhausted saying Nova found no valid host", err)
	}
	if s := e.server(); s.Status != "SHELVED_OFFLOADED" || s.TaskState != "" {
		t.Fatalf("server after the failed unshelve is %s (task %q); want SHELVED_OFFLOADED", s.Status, s.TaskState)
	}
	if _, err := e.start(class); err != nil {
		t.Fatalf("StartMachine once a host is free = %v", err)
	}
	e.wantActions("shelve", "unshelve", "unshelve")
}

// TestPowerRefusals: an unknown mode is InvalidArgument naming the annotation and the values;
// 429 is retried; a 503 on the action is Unavailable and changes nothing; an absent server is
// NotFound.
func TestPowerRefusals(t *testing.T) {
	e, class := newPowerEnv(t, "")
	err := e.stop(annotatedWith(class, "hibernate"))
	if !driver.IsCode(err, driver.InvalidArgument) || !strings.Contains(err.Error(), kit.StandbyModeAnnotation) || !strings.Contains(err.Error(), `"stop" or "shelve"`) {
		t.Fatalf("StopMachine with standby-mode hibernate = %v; want InvalidArgument naming the annotation and the allowed values", err)
	}
	op := "compute POST /servers/" + e.server().ID + "/action"
	e.cloud.Faults.Inject(fakeopenstack.Fault{Rule: fakekit.Rule{Op: op, Times: 1}, Status: http.StatusServiceUnavailable})
	if err := e.stop(class); !driver.IsCode(err, driver.Unavailable) {
		t.Fatalf("StopMachine through a 503 = %v; want Unavailable", err)
	}
	if s := e.server(); s.Status != "ACTIVE" {
		t.Fatalf("server after the refused stop is %s; want ACTIVE", s.Status)
	}
	e.cloud.Faults.Inject(fakeopenstack.Fault{Rule: fakekit.Rule{Op: op, Times: 1}, Status: http.StatusTooManyRequests, RetryAfter: 1})
	if err := e.stop(class); err != nil {
		t.Fatalf("StopMachine through a 429 = %v; want OK after the retry", err)
	}
	if s := e.server(); s.Status != "SHUTOFF" {
		t.Fatalf("server is %s; want SHUTOFF", s.Status)
	}
	if _, err := e.d.StartMachine(ctxT(t), &driver.StartMachineRequest{Machine: machine("nobody"), MachineClass: class, Secret: passwordSecret(e.cloud)}); !driver.IsCode(err, driver.NotFound) {
		t.Fatalf("StartMachine of a machine without a server = %v; want NotFound", err)
	}
}

// TestDecidePower: what a stop or start does in each of Nova's states.
func TestDecidePower(t *testing.T) {
	for _, tc := range []struct {
		mode, status, task string
		stop, start        powerStep
	}{
		{"stop", "ACTIVE", "", powerStop, powerDone},
		{"shelve", "ACTIVE", "", powerStop, powerDone},
		{"stop", "ACTIVE", "powering-off", powerDone, powerWait},
		{"stop", "SHUTOFF", "", powerDone, powerStart},
		{"shelve", "SHUTOFF", "", powerStop, powerStart},
		{"stop", "SHUTOFF", "powering-on", powerWait, powerDone},
		{"shelve", "ACTIVE", "shelving", powerDone, powerWait},
		{"shelve", "SHELVED", "shelving_offloading", powerDone, powerWait},
		{"stop", "SHELVED_OFFLOADED", "", powerDone, powerUnshelve},
		{"shelve", "SHELVED_OFFLOADED", "unshelving", powerWait, powerUnshelving},
		{"stop", "BUILD", "spawning", powerWait, powerDone},
		{"stop", "ERROR", "", powerBroken, powerBroken},
	} {
		if got := decideStop(tc.mode, tc.status, tc.task); got != tc.stop {
			t.Errorf("decideStop(%s, %s, %q) = %d; want %d", tc.mode, tc.status, tc.task, got, tc.stop)
		}
		if got := decideStart(tc.status, tc.task); got != tc.start {
			t.Errorf("decideStart(%s, %q) = %d; want %d", tc.status, tc.task, got, tc.start)
		}
	}
}
