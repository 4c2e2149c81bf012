package gcp

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	compute "google.golang.org/api/compute/v1"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/gcp/fakegcp"
	"github.com/machinist-io/machinist/providers/kit"
)

func (e *testEnv) stopIn(class *v1alpha1.MachineClass, name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := e.drv.StopMachine(ctx, &driver.StopMachineRequest{Machine: machine(name), MachineClass: class, Secret: e.secret.DeepCopy()})
	return err
}

func (e *testEnv) startIn(class *v1alpha1.MachineClass, name string) (*driver.StartMachineResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return e.drv.StartMachine(ctx, &driver.StartMachineRequest{Machine: machine(name), MachineClass: class, Secret: e.secret.DeepCopy()})
}

func withMode(class *v1alpha1.MachineClass, mode string) *v1alpha1.MachineClass {
	c := class.DeepCopy()
	c.Annotations = map[string]string{kit.StandbyModeAnnotation: mode}
	return c
}

func (e *testEnv) status(t *testing.T, name string) string {
	t.Helper()
	in, ok := e.cloud.Instance(testZone, name)
	if !ok {
		t.Fatalf("instance %s is gone", name)
	}
	return in.Status
}

func (e *testEnv) calls(op string) int { return len(e.cloud.Requests.For(op)) }

// TestStopAndSuspendModes: without the annotation (and with stop) a stop leaves the instance
// TERMINATED and a start runs it again; with suspend it is SUSPENDED and a resume runs it. The
// instance keeps being reported, and the start answers as the create did.
func TestStopAndSuspendModes(t *testing.T) {
	for _, tc := range []struct {
		mode        string
		stopped     string
		stop, start string
	}{
		{"", "TERMINATED", fakegcp.OpStopInstance, fakegcp.OpStartInstance},
		{ModeStop, "TERMINATED", fakegcp.OpStopInstance, fakegcp.OpStartInstance},
		{ModeSuspend, "SUSPENDED", fakegcp.OpSuspendInstance, fakegcp.OpResumeInstance},
	} {
		t.Run("mode="+tc.mode, func(t *testing.T) {
			e := newTestEnv(t)
			class := e.class
			if tc.mode != "" {
				class = withMode(class, tc.mode)
			}
			created := e.mustCreate(t, "m-1")
			if err := e.stopIn(class, "m-1"); err != nil {
				t.Fatalf("StopMachine: %v", err)
			}
			if got := e.status(t, "m-1"); got != tc.stopped {
				t.Errorf("status after StopMachine = %s; want %s", got, tc.stopped)
			}
			if n := e.calls(tc.stop); n != 1 {
				t.Errorf("StopMachine made %d %s calls; want 1", n, tc.stop)
			}
			st, err := e.drv.GetMachineStatus(context.Background(), &driver.GetMachineStatusRequest{Machine: machine("m-1"), MachineClass: class, Secret: e.secret})
			if err != nil || st.ProviderID != created.ProviderID {
				t.Errorf("GetMachineStatus of the %s instance = %+v, %v; want it reported with %s", tc.stopped, st, err, created.ProviderID)
			}
			started, err := e.startIn(class, "m-1")
			if err != nil {
				t.Fatalf("StartMachine: %v", err)
			}
			if got := e.status(t, "m-1"); got != "RUNNING" {
				t.Errorf("status after StartMachine = %s; want RUNNING", got)
			}
			if n := e.calls(tc.start); n != 1 {
				t.Errorf("StartMachine made %d %s calls; want 1", n, tc.start)
			}
			if started.ProviderID != created.ProviderID || started.NodeName != created.NodeName || len(started.Addresses) != len(created.Addresses) || started.Addresses[0] != created.Addresses[0] {
				t.Errorf("StartMachine = %+v; CreateMachine answered %+v", started, created)
			}
		})
	}
}

// TestPowerIsIdempotent: stopping a stopped instance, suspending a suspended one and starting a
// running one make no call; a suspended instance is not stopped (its memory is kept) and is
// resumed, not started, whatever the class's mode.
func TestPowerIsIdempotent(t *testing.T) {
	e := newTestEnv(t)
	e.mustCreate(t, "m-1")
	if _, err := e.startIn(e.class, "m-1"); err != nil || e.calls(fakegcp.OpStartInstance) != 0 {
		t.Errorf("StartMachine of a running instance = %v with %d start calls; want OK without one", err, e.calls(fakegcp.OpStartInstance))
	}
	suspend := withMode(e.class, ModeSuspend)
	for i := range 2 {
		if err := e.stopIn(suspend, "m-1"); err != nil {
			t.Fatalf("StopMachine #%d in suspend mode: %v", i+1, err)
		}
	}
	if n := e.calls(fakegcp.OpSuspendInstance); n != 1 {
		t.Errorf("two stops in suspend mode made %d suspend calls; want 1", n)
	}
	if err := e.stopIn(e.class, "m-1"); err != nil || e.calls(fakegcp.OpStopInstance) != 0 || e.status(t, "m-1") != "SUSPENDED" {
		t.Errorf("StopMachine in stop mode of a suspended instance = %v, %d stop calls, status %s; want OK, none, SUSPENDED", err, e.calls(fakegcp.OpStopInstance), e.status(t, "m-1"))
	}
	if _, err := e.startIn(e.class, "m-1"); err != nil || e.calls(fakegcp.OpResumeInstance) != 1 || e.calls(fakegcp.OpStartInstance) != 0 {
		t.Errorf("StartMachine of a suspended instance = %v, %d resume and %d start calls; want OK by one resume", err, e.calls(fakegcp.OpResumeInstance), e.calls(fakegcp.OpStartInstance))
	}
	for i := range 2 {
		if err := e.stopIn(e.class, "m-1"); err != nil {
			t.Fatalf("StopMachine #%d: %v", i+1, err)
		}
	}
	if n := e.calls(fakegcp.OpStopInstance); n != 1 {
		t.Errorf("two stops made %d stop calls; want 1", n)
	}
	if err := e.stopIn(suspend, "m-1"); err != nil || e.calls(fakegcp.OpSuspendInstance) != 1 {
		t.Errorf("StopMachine in suspend mode of a stopped instance = %v after %d suspend calls; want OK without a new one", err, e.calls(fakegcp.OpSuspendInstance))
	}
}

// TestSuspendRefusals: an instance Compute Engine does not suspend is InvalidArgument naming
// why and the annotation, and is left running; an unknown mode is InvalidArgument before any
// call; an absent or foreign instance is NotFound.
func TestSuspendRefusals(t *testing.T) {
	e := newTestEnv(t)
	suspend := withMode(e.class, ModeSuspend)
	for _, tc := range []struct {
		name   string
		mutate func(*compute.Instance)
		why    string
	}{
		{"gpu", func(in *compute.Instance) {
			in.GuestAccelerators = []*compute.AcceleratorConfig{{AcceleratorType: "nvidia-tesla-t4", AcceleratorCount: 1}}
		}, "GPUs"},
		{"gpu-family", func(in *compute.Instance) {
			in.MachineType = strings.Replace(in.MachineType, "n2-standard-2", "a2-highgpu-1g", 1)
		}, "GPUs"},
		{"memory", func(in *compute.Instance) {
			in.MachineType = strings.Replace(in.MachineType, "n2-standard-2", "m1-megamem-96", 1)
		}, "208 GB"},
		{"local-ssd", func(in *compute.Instance) {
			in.Disks = append(in.Disks, &compute.AttachedDisk{Type: "SCRATCH", Interface: "NVME", DeviceName: "local-ssd-1"})
		}, "Local SSD"},
		{"confidential", func(in *compute.Instance) {
			in.ConfidentialInstanceConfig = &compute.ConfidentialInstanceConfig{EnableConfidentialCompute: true}
		}, "Confidential"},
	} {
		name := "m-" + tc.name
		e.mustCreate(t, name)
		in, _ := e.cloud.Instance(testZone, name)
		tc.mutate(in)
		e.cloud.PutInstance(testZone, in)
		err := e.stopIn(suspend, name)
		if !driver.IsCode(err, driver.InvalidArgument) || !strings.Contains(err.Error(), tc.why) || !strings.Contains(err.Error(), kit.StandbyModeAnnotation) {
			t.Errorf("%s: StopMachine in suspend mode = %v; want InvalidArgument naming %q and the annotation", tc.name, err, tc.why)
		}
		if got := e.status(t, name); got != "RUNNING" {
			t.Errorf("%s: status after the refused suspend = %s; want RUNNING", tc.name, got)
		}
	}
	if n := e.calls(fakegcp.OpSuspendInstance); n != 0 {
		t.Errorf("refused suspends made %d suspend calls; want none", n)
	}

	e.cloud.Requests.Reset()
	bad := withMode(e.class, "hibernate")
	if err := e.stopIn(bad, "m-gpu"); !driver.IsCode(err, driver.InvalidArgument) || !strings.Contains(err.Error(), `"suspend"`) {
		t.Errorf("StopMachine with mode hibernate = %v; want InvalidArgument naming the allowed values", err)
	}
	if _, err := e.startIn(bad, "m-gpu"); !driver.IsCode(err, driver.InvalidArgument) {
		t.Errorf("StartMachine with mode hibernate = %v; want InvalidArgument", err)
	}
	if n := e.cloud.Requests.Len(); n != 0 {
		t.Errorf("a bad mode made %d requests; want none", n)
	}
	if err := e.stopIn(e.class, "m-absent"); !driver.IsCode(err, driver.NotFound) {
		t.Errorf("StopMachine of an absent instance = %v; want NotFound", err)
	}
	in, _ := e.cloud.Instance(testZone, "m-gpu")
	in.Name, in.Id, in.Tags = "m-foreign", 0, &compute.Tags{Items: []string{"other"}}
	e.cloud.PutInstance(testZone, in)
	if _, err := e.startIn(e.class, "m-foreign"); !driver.IsCode(err, driver.NotFound) {
		t.Errorf("StartMachine of an instance without the class's tags = %v; want NotFound", err)
	}
}

// TestFakeRefusesWhatComputeEngineRefuses: the fake itself refuses a suspend Compute Engine
// refuses (the operation ends in UNSUPPORTED_OPERATION), and a start of a suspended instance;
// the driver reports them, the instance unchanged.
func TestFakeRefusesWhatComputeEngineRefuses(t *testing.T) {
	e := newTestEnv(t)
	e.mustCreate(t, "m-1")
	in, _ := e.cloud.Instance(testZone, "m-1")
	in.GuestAccelerators = []*compute.AcceleratorConfig{{AcceleratorType: "nvidia-tesla-t4", AcceleratorCount: 1}}
	e.cloud.PutInstance(testZone, in)
	cs, err := e.drv.clients(mustCredentials(t, e))
	if err != nil {
		t.Fatal(err)
	}
	t0 := &powerTarget{cs: cs, zone: testZone, name: "m-1", in: in}
	if err := e.drv.powerCall(context.Background(), t0, verbSuspend); err == nil || !strings.Contains(err.Error(), "UNSUPPORTED_OPERATION") {
		t.Errorf("a suspend of an instance with GPUs = %v; want the operation to fail UNSUPPORTED_OPERATION", err)
	}
	in.GuestAccelerators = nil
	in.Status = "SUSPENDED"
	e.cloud.PutInstance(testZone, in)
	if err := e.drv.powerCall(context.Background(), t0, verbStart); err == nil || !strings.Contains(err.Error(), "resume") {
		t.Errorf("a start of a suspended instance = %v; want UNSUPPORTED_OPERATION saying to resume", err)
	}
	if got := e.status(t, "m-1"); got != "SUSPENDED" {
		t.Errorf("status after the refused start = %s; want SUSPENDED", got)
	}
}

// TestStartWithoutCapacityIsResourceExhausted: a start or resume that meets a stockout is
// ResourceExhausted, the instance stays as it was, and a later start works; a start over the
// region's CPU quota is ResourceExhausted too.
func TestStartWithoutCapacityIsResourceExhausted(t *testing.T) {
	for _, tc := range []struct {
		mode, op, stopped string
	}{
		{ModeStop, fakegcp.OpStartInstance, "TERMINATED"},
		{ModeSuspend, fakegcp.OpResumeInstance, "SUSPENDED"},
	} {
		e := newTestEnv(t)
		class := withMode(e.class, tc.mode)
		e.mustCreate(t, "m-1")
		if err := e.stopIn(class, "m-1"); err != nil {
			t.Fatal(err)
		}
		e.cloud.Faults.Inject(fakegcp.StockoutNextStart(tc.op, 1))
		_, err := e.startIn(class, "m-1")
		if !driver.IsCode(err, driver.ResourceExhausted) || !strings.Contains(err.Error(), "ZONE_RESOURCE_POOL_EXHAUSTED") {
			t.Errorf("%s: StartMachine in a stockout = %v; want ResourceExhausted naming ZONE_RESOURCE_POOL_EXHAUSTED", tc.mode, err)
		}
		if got := e.status(t, "m-1"); got != tc.stopped {
			t.Errorf("%s: status after the stockout = %s; want %s", tc.mode, got, tc.stopped)
		}
		if _, err := e.startIn(class, "m-1"); err != nil {
			t.Errorf("%s: StartMachine after the stockout = %v; want OK", tc.mode, err)
		}
	}
	e := newTestEnv(t)
	e.mustCreate(t, "m-1")
	if err := e.stopIn(e.class, "m-1"); err != nil {
		t.Fatal(err)
	}
	e.mustCreate(t, "m-2")
	e.cloud.SetCPUQuota(fakegcp.DemoRegion, 2) // m-2 uses it all; the stopped m-1 counts nothing
	if _, err := e.startIn(e.class, "m-1"); !driver.IsCode(err, driver.ResourceExhausted) || !strings.Contains(err.Error(), "QUOTA_EXCEEDED") {
		t.Errorf("StartMachine over the CPU quota = %v; want ResourceExhausted naming QUOTA_EXCEEDED", err)
	}
}

// TestPowerFaults: rate limits are retried; lasting server errors are Unavailable; a missing
// permission is PermissionDenied naming it.
func TestPowerFaults(t *testing.T) {
	e := newTestEnv(t)
	e.mustCreate(t, "m-1")
	e.cloud.Faults.Inject(fakegcp.Throttle(fakegcp.OpStopInstance, 1, http.StatusTooManyRequests))
	if err := e.stopIn(e.class, "m-1"); err != nil {
		t.Fatalf("StopMachine after one rate-limited request = %v; want OK after a retry", err)
	}
	if n := e.calls(fakegcp.OpStopInstance); n != 2 {
		t.Errorf("stop calls = %d; want 2 (one limited, one retried)", n)
	}
	e.cloud.Faults.Inject(fakegcp.ServerErrors(fakegcp.OpStartInstance, http.StatusServiceUnavailable, 1+e.drv.opts.Retry.Steps))
	if _, err := e.startIn(e.class, "m-1"); !driver.IsCode(err, driver.Unavailable) {
		t.Errorf("StartMachine against lasting 503s = %v; want Unavailable", err)
	}
	e.cloud.Faults.Clear()
	e.cloud.Faults.Inject(fakegcp.Deny(fakegcp.OpStartInstance))
	if _, err := e.startIn(e.class, "m-1"); !driver.IsCode(err, driver.PermissionDenied) || !strings.Contains(err.Error(), "compute.instances.start") {
		t.Errorf("StartMachine without compute.instances.start = %v; want PermissionDenied naming it", err)
	}
	e.cloud.Faults.Clear()
	if _, err := e.startIn(e.class, "m-1"); err != nil {
		t.Errorf("StartMachine after the faults = %v; want OK", err)
	}
}

func mustCredentials(t *testing.T, e *testEnv) credentials {
	t.Helper()
	creds, err := credentialsFrom(e.secret, e.drv.opts.WorkloadIdentityTokenFile)
	if err != nil {
		t.Fatal(err)
	}
	return creds
}

// TestPowerDecisions: what a stop in each mode and a start do with an instance in each status.
func TestPowerDecisions(t *testing.T) {
	for _, tc := range []struct {
		status             string
		stop, suspend, run string // the call, "" for none, "!" for a refusal
	}{
		{"RUNNING", verbStop, verbSuspend, ""},
		{"PROVISIONING", verbStop, "!", ""},
		{"STAGING", verbStop, "!", ""},
		{"STOPPING", "", "", "!"},
		{"TERMINATED", "", "", verbStart},
		{"SUSPENDING", "", "", "!"},
		{"SUSPENDED", "", "", verbResume},
		{"REPAIRING", verbStop, "!", "!"},
	} {
		in := &compute.Instance{Name: "m-1", Status: tc.status, MachineType: "zones/z/machineTypes/n2-standard-2"}
		for _, c := range []struct {
			name string
			want string
			got  func() (string, error)
		}{
			{"stop", tc.stop, func() (string, error) { return stopVerb(ModeStop, in) }},
			{"suspend", tc.suspend, func() (string, error) { return stopVerb(ModeSuspend, in) }},
			{"start", tc.run, func() (string, error) { return startVerb(in) }},
		} {
			got, err := c.got()
			if c.want == "!" {
				if !driver.IsCode(err, driver.Unavailable) {
					t.Errorf("%s of a %s instance = %q, %v; want Unavailable", c.name, tc.status, got, err)
				}
				continue
			}
			if err != nil || got != c.want {
				t.Errorf("%s of a %s instance = %q, %v; want %q", c.name, tc.status, got, err, c.want)
			}
		}
	}
}
