package machine_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testclock "k8s.io/utils/clock/testing"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/drivertest/memdriver"
	"github.com/machinist-io/machinist/harness/ctrltest"
	"github.com/machinist-io/machinist/internal/eventually"
)

// TestCreateErrorCodes: every code CreateMachine can fail with leaves the machine in
// CrashLoopBackOff with the code's name and the driver's message in lastOperation, and is
// retried at the pace of its class: transient codes fast (ShortRetry, doubling), codes that need
// a fix slowly (MediumRetry), ResourceExhausted slowest (ResourceExhaustedRetry). Paces are
// compared by the gaps between attempts.
func TestCreateErrorCodes(t *testing.T) {
	e := ctrltest.NewEnv(t)
	cloud := memdriver.NewCloud()
	counting := &countingDriver{Driver: memdriver.New(cloud)}
	e.Drivers.Set(memdriver.ProviderName, counting)
	e.Class("mem", "mem", memSpec(e), "")
	opts := ctrltest.FastOptions() // ShortRetry 100ms, MediumRetry 1s, ResourceExhaustedRetry 2s
	e.StartControllers(opts, false, nil)

	type pace int
	const (
		fast pace = iota
		slow
		slowest
	)
	cases := []struct {
		code driver.Code
		pace pace
	}{
		{driver.Unknown, fast}, {driver.DeadlineExceeded, fast}, {driver.Aborted, fast}, {driver.Unavailable, fast},
		{driver.InvalidArgument, slow}, {driver.AlreadyExists, slow}, {driver.PermissionDenied, slow},
		{driver.FailedPrecondition, slow}, {driver.OutOfRange, slow}, {driver.Internal, slow},
		{driver.DataLoss, slow}, {driver.Unauthenticated, slow},
		{driver.ResourceExhausted, slowest},
	}
	for _, tc := range cases {
		name := e.Name(strings.ToLower(tc.code.String()))
		cloud.Inject(memdriver.MethodCreate, memdriver.Fault{Code: tc.code, Machine: name, Message: "quota of project p1 reached (request req-123)"})
	}
	for _, tc := range cases {
		e.Machine(e.Name(strings.ToLower(tc.code.String())), "mem")
	}
	for _, tc := range cases {
		t.Run(tc.code.String(), func(t *testing.T) {
			name := e.Name(strings.ToLower(tc.code.String()))
			m := e.WaitPhase(name, v1alpha1.MachineCrashLoopBackOff, 30*time.Second)
			lo := m.Status.LastOperation
			if lo.ErrorCode != tc.code.String() || lo.State != v1alpha1.MachineStateFailed || lo.Type != v1alpha1.MachineOperationCreate {
				t.Fatalf("lastOperation = %+v, want a failed Create with errorCode %s", lo, tc.code)
			}
			if !strings.HasPrefix(lo.Description, "Cloud provider message - ") || !strings.Contains(lo.Description, "quota of project p1 reached") {
				t.Fatalf("description %q lacks the driver's message", lo.Description)
			}
			if cloud.Count(name) != 0 || m.Spec.ProviderID != "" {
				t.Fatalf("a failed create left a VM or providerID: %s", ctrltest.Describe(m))
			}
		})
	}

	// Pace: the gaps between attempts (each starts with GetMachineStatus), once every code has
	// been retried (fast codes twice). The others never come back sooner than their base wait
	// allows (−20 % jitter); the fast codes come back sooner than any of the others did — a
	// comparison within one run, since on a loaded machine each attempt also waits for a core.
	calls := func(code driver.Code) []time.Time {
		return counting.statusCalls(e.Name(strings.ToLower(code.String())))
	}
	eventually.True(t, time.Minute, "every code retried", func() bool {
		for _, tc := range cases {
			if want := map[pace]int{fast: 3, slow: 2, slowest: 2}[tc.pace]; len(calls(tc.code)) < want {
				return false
			}
		}
		return true
	})
	minGap := func(at []time.Time) time.Duration {
		gap := time.Duration(1 << 62)
		for i := 1; i < len(at); i++ {
			gap = min(gap, at[i].Sub(at[i-1]))
		}
		return gap
	}
	fastGap, slowGap := time.Duration(1<<62), time.Duration(1<<62)
	for _, tc := range cases {
		gap := minGap(calls(tc.code))
		switch tc.pace {
		case fast:
			fastGap = min(fastGap, gap)
		case slow:
			slowGap = min(slowGap, gap)
			if gap < opts.MediumRetry*8/10 {
				t.Errorf("%s: attempts %s apart, want ≥ %s (MediumRetry %s − 20 %%)", tc.code, gap, opts.MediumRetry*8/10, opts.MediumRetry)
			}
		case slowest:
			if gap < opts.ResourceExhaustedRetry*8/10 {
				t.Errorf("%s: attempts %s apart, want ≥ %s (ResourceExhaustedRetry %s − 20 %%)", tc.code, gap, opts.ResourceExhaustedRetry*8/10, opts.ResourceExhaustedRetry)
			}
		}
	}
	if fastGap >= slowGap {
		t.Errorf("the transient codes were retried %s apart at the soonest, no sooner than the codes that need a fix (%s)", fastGap, slowGap)
	}

	// Once the cloud recovers, every machine is created.
	cloud.ClearFaults()
	for _, tc := range cases {
		m := e.WaitPhase(e.Name(strings.ToLower(tc.code.String())), v1alpha1.MachineAvailable, 30*time.Second)
		if m.Status.LastOperation.ErrorCode != "" {
			t.Errorf("%s: error code kept after success: %+v", tc.code, m.Status.LastOperation)
		}
	}
}

// countingDriver records when GetMachineStatus is called per machine; every creation attempt
// starts with one.
type countingDriver struct {
	driver.Driver
	mu    sync.Mutex
	calls map[string][]time.Time
}

func (d *countingDriver) GetMachineStatus(ctx context.Context, req *driver.GetMachineStatusRequest) (*driver.GetMachineStatusResponse, error) {
	d.mu.Lock()
	if d.calls == nil {
		d.calls = map[string][]time.Time{}
	}
	d.calls[req.Machine.Name] = append(d.calls[req.Machine.Name], time.Now())
	d.mu.Unlock()
	return d.Driver.GetMachineStatus(ctx, req)
}

func (d *countingDriver) statusCalls(name string) []time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.calls[name])
}

// TestCreationTimeoutFails: a creation that keeps failing leaves the machine in CrashLoopBackOff
// until the effective creation timeout (the annotation copied from the deployment) has passed on
// the controller's clock; then it is Failed, and Failed is final.
func TestCreationTimeoutFails(t *testing.T) {
	e := ctrltest.NewEnv(t)
	cloud := memdriver.NewCloud()
	e.Drivers.Set(memdriver.ProviderName, memdriver.New(cloud))
	e.Class("mem", "mem", memSpec(e), "")
	clk := testclock.NewFakeClock(time.Now())
	opts := ctrltest.FastOptions()
	opts.Clock = clk
	e.StartControllers(opts, false, nil)
	name := e.Name("late")
	cloud.Inject(memdriver.MethodCreate, memdriver.Fault{Code: driver.Unavailable, Machine: name})
	e.Machine(name, "mem", func(m *v1alpha1.Machine) {
		m.Annotations = map[string]string{v1alpha1.AnnotationEffectiveCreationTimeout: "10m"}
	})
	created := e.WaitPhase(name, v1alpha1.MachineCrashLoopBackOff, 30*time.Second).CreationTimestamp.Time

	clk.SetTime(created.Add(9 * time.Minute))
	afterAttempts(t, "two creations after 9 of 10 minutes", func() int { return cloud.Calls(memdriver.MethodCreate) })
	if m := e.Get(name); m.Status.CurrentStatus.Phase != v1alpha1.MachineCrashLoopBackOff {
		t.Fatalf("failed before its creation timeout: %s", ctrltest.Describe(m))
	}

	clk.SetTime(created.Add(11 * time.Minute))
	e.Touch(name)
	m := e.WaitPhase(name, v1alpha1.MachineFailed, 30*time.Second)
	if m.Status.LastOperation.ErrorCode != "Unavailable" {
		t.Fatalf("failed machine: %s", ctrltest.Describe(m))
	}
	eventually.True(t, 10*time.Second, "Failed event", func() bool { return slices.Contains(e.EventReasons(name), "Failed") })
	// Failed is final: nothing is created for it any more.
	cloud.ClearFaults()
	e.Touch(name)
	time.Sleep(time.Second)
	if cloud.Count(name) != 0 || e.Get(name).Status.CurrentStatus.Phase != v1alpha1.MachineFailed {
		t.Fatalf("a Failed machine got a VM: %s", ctrltest.Describe(e.Get(name)))
	}
}

// afterAttempts waits until attempts, a count of the controller's attempts on one machine, has
// grown by two: the first of them began after the caller's change (a step of the clock), and
// the reconcile that made it has ended, writes included, once the second began (a machine's
// reconciles never overlap).
func afterAttempts(t *testing.T, what string, attempts func() int) {
	t.Helper()
	before := attempts()
	eventually.True(t, 30*time.Second, what, func() bool { return attempts() >= before+2 })
}

func TestStatusAndInitializeCodes(t *testing.T) {
	e := ctrltest.NewEnv(t)
	cloud := memdriver.NewCloud()
	e.Drivers.Set(memdriver.ProviderName, memdriver.New(cloud))
	e.Class("mem", "mem", memSpec(e), "")
	e.StartControllers(ctrltest.FastOptions(), false, nil)

	t.Run("OutOfRange", func(t *testing.T) {
		name := e.Name("dup")
		cloud.Add(memdriver.VM{MachineName: name, Cluster: e.NS, Role: "worker"})
		cloud.Add(memdriver.VM{MachineName: name, Cluster: e.NS, Role: "worker"})
		e.Machine(name, "mem")
		m := e.WaitMachine(name, 30*time.Second, "OutOfRange", func(m *v1alpha1.Machine) bool {
			return m != nil && m.Status.LastOperation.ErrorCode == "OutOfRange"
		})
		if m.Status.CurrentStatus.Phase != v1alpha1.MachineCrashLoopBackOff || cloud.Count(name) != 2 {
			t.Fatalf("two VMs for one machine: %s, %d VMs", ctrltest.Describe(m), cloud.Count(name))
		}
	})

	t.Run("Uninitialized", func(t *testing.T) {
		cloud.SetRequireInitialization(true)
		defer cloud.SetRequireInitialization(false)
		name := e.Name("init")
		cloud.Inject(memdriver.MethodInitialize, memdriver.Fault{Code: driver.Internal, Machine: name, Times: 1, Message: "agent not ready"})
		e.Machine(name, "mem")
		// The failed initialization is reported (event with MCM's text) and retried.
		eventually.True(t, 30*time.Second, "initialize failure event", func() bool {
			list, err := e.CS.EventsV1().Events(e.NS).List(context.Background(), metav1.ListOptions{})
			if err != nil {
				return false
			}
			for _, ev := range list.Items {
				if ev.Regarding.Name == name && ev.Reason == "CreateFailed" && strings.Contains(ev.Note, "agent not ready. Initialize VM Instance") && strings.Contains(ev.Note, "(Internal)") {
					return true
				}
			}
			return false
		})
		e.WaitPhase(name, v1alpha1.MachineAvailable, 30*time.Second)
		vms := cloud.VMs()
		for _, vm := range vms {
			if vm.MachineName == name && !vm.Initialized {
				t.Fatalf("VM %s is not initialized", vm.ID)
			}
		}
		if cloud.Count(name) != 1 || cloud.Calls(memdriver.MethodInitialize) < 2 {
			t.Fatalf("%d VMs for %s, %d initialize calls", cloud.Count(name), name, cloud.Calls(memdriver.MethodInitialize))
		}
	})
}

func TestDeleteErrorCodes(t *testing.T) {
	e := ctrltest.NewEnv(t)
	cloud := memdriver.NewCloud()
	e.Drivers.Set(memdriver.ProviderName, memdriver.New(cloud))
	e.Class("mem", "mem", memSpec(e), "")
	e.StartControllers(ctrltest.FastOptions(), false, nil)

	t.Run("TransientRetried", func(t *testing.T) {
		name := e.Name("flaky")
		e.Machine(name, "mem")
		e.WaitPhase(name, v1alpha1.MachineAvailable, 30*time.Second)
		cloud.Inject(memdriver.MethodDelete, memdriver.Fault{Code: driver.Unavailable, Machine: name, Times: 3})
		e.DeleteMachine(name)
		e.WaitGone(name, 30*time.Second)
		if cloud.Count(name) != 0 {
			t.Fatal("VM left behind")
		}
	})

	t.Run("NotFoundIsDone", func(t *testing.T) {
		name := e.Name("vanished")
		e.Machine(name, "mem")
		m := e.WaitPhase(name, v1alpha1.MachineAvailable, 30*time.Second)
		id := m.Spec.ProviderID[strings.LastIndex(m.Spec.ProviderID, "/")+1:]
		cloud.Remove(id)
		cloud.Inject(memdriver.MethodDelete, memdriver.Fault{Code: driver.NotFound, Machine: name})
		e.DeleteMachine(name)
		e.WaitGone(name, 30*time.Second)
	})

	t.Run("PermanentStaysInStepWithCode", func(t *testing.T) {
		name := e.Name("stuck")
		e.Machine(name, "mem")
		e.WaitPhase(name, v1alpha1.MachineAvailable, 30*time.Second)
		cloud.Inject(memdriver.MethodDelete, memdriver.Fault{Code: driver.PermissionDenied, Machine: name, Message: "role lacks compute.delete"})
		e.DeleteMachine(name)
		m := e.WaitMachine(name, 30*time.Second, "failed delete", func(m *v1alpha1.Machine) bool {
			return m != nil && m.Status.LastOperation.ErrorCode == "PermissionDenied"
		})
		lo := m.Status.LastOperation
		if m.Status.CurrentStatus.Phase != v1alpha1.MachineTerminating || lo.Type != v1alpha1.MachineOperationDelete ||
			!strings.Contains(lo.Description, "role lacks compute.delete") || !strings.HasSuffix(lo.Description, "Initiate VM deletion") ||
			!strings.Contains(m.Annotations["machinist.io/deletion"], `"step":"InitiateVMDeletion"`) {
			t.Fatalf("stuck deletion: %s", ctrltest.Describe(m))
		}
		if cloud.Count(name) != 1 {
			t.Fatal("VM gone although DeleteMachine failed")
		}
		cloud.ClearFaults()
		e.WaitGone(name, 30*time.Second)
		if cloud.Count(name) != 0 {
			t.Fatal("VM left behind")
		}
	})
}

// TestUnresolvableProviderRecovers: a class whose provider no source serves marks the machine
// with a clear message and FailedPrecondition, creates nothing, never fails it by timeout, and
// proceeds by itself once a driver appears.
func TestUnresolvableProviderRecovers(t *testing.T) {
	e := ctrltest.NewEnv(t)
	cloud := memdriver.NewCloud()
	e.Class("mem", "mem", memSpec(e), "")
	clk := testclock.NewFakeClock(time.Now())
	opts := ctrltest.FastOptions()
	opts.Clock = clk
	e.StartControllers(opts, false, nil)
	name := e.Name("waiting")
	e.Machine(name, "mem", func(m *v1alpha1.Machine) {
		m.Annotations = map[string]string{v1alpha1.AnnotationEffectiveCreationTimeout: "1m"}
	})
	m := e.WaitMachine(name, 30*time.Second, "no-driver report", func(m *v1alpha1.Machine) bool {
		return m != nil && m.Status.LastOperation.ErrorCode == "FailedPrecondition"
	})
	lo := m.Status.LastOperation
	if m.Status.CurrentStatus.Phase != v1alpha1.MachineCrashLoopBackOff || !strings.Contains(lo.Description, `unknown provider "mem"`) ||
		!strings.Contains(lo.Description, "-tags provider_mem") {
		t.Fatalf("unresolvable provider: %s", ctrltest.Describe(m))
	}
	eventually.True(t, 10*time.Second, "DriverUnavailable event", func() bool { return slices.Contains(e.EventReasons(name), "DriverUnavailable") })
	clk.SetTime(time.Now().Add(2 * time.Minute)) // past the creation timeout
	e.Touch(name)
	afterAttempts(t, "two lookups of the provider past the creation timeout", func() int { return e.Drivers.Lookups(memdriver.ProviderName) })
	if p := e.Get(name).Status.CurrentStatus.Phase; p == v1alpha1.MachineFailed {
		t.Fatal("a machine waiting for a driver was failed by the creation timeout")
	}

	e.Drivers.Set(memdriver.ProviderName, memdriver.New(cloud))
	e.WaitPhase(name, v1alpha1.MachineAvailable, 30*time.Second)
	if cloud.Count(name) != 1 {
		t.Fatalf("%d VMs", cloud.Count(name))
	}
}

// TestNoDuplicateVMsAcrossRestartsAndLostResponses: a CreateMachine whose answer is lost (the VM
// exists, the call failed) and a controller stopped while a slow CreateMachine runs both end
// with exactly one VM per machine.
func TestNoDuplicateVMsAcrossRestartsAndLostResponses(t *testing.T) {
	e := ctrltest.NewEnv(t)
	cloud := memdriver.NewCloud()
	e.Drivers.Set(memdriver.ProviderName, memdriver.New(cloud))
	e.Class("mem", "mem", memSpec(e), "")
	lost, slow := e.Name("lost"), e.Name("slow")
	cloud.Inject(memdriver.MethodCreate, memdriver.Fault{Code: driver.DeadlineExceeded, Machine: lost, Times: 1, AfterEffect: true})
	cloud.Inject(memdriver.MethodCreate, memdriver.Fault{Code: driver.OK, Machine: slow, Times: 1, Delay: 3 * time.Second})
	e.StartControllers(ctrltest.FastOptions(), false, nil)
	e.Machine(lost, "mem")
	e.Machine(slow, "mem")

	// Stop while the slow create is in flight, then start again.
	eventually.True(t, 30*time.Second, "slow create in flight", func() bool { return cloud.Calls(memdriver.MethodCreate) >= 2 })
	e.StopControllers()
	e.StartControllers(ctrltest.FastOptions(), false, nil)

	for _, n := range []string{lost, slow} {
		m := e.WaitPhase(n, v1alpha1.MachineAvailable, 30*time.Second)
		if c := cloud.Count(n); c != 1 {
			t.Fatalf("%s has %d VMs", n, c)
		}
		if vms := cloud.VMs(); !hasVM(vms, m.Spec.ProviderID) {
			t.Fatalf("%s records %s, which is not in the cloud", n, m.Spec.ProviderID)
		}
	}
}

func hasVM(vms []memdriver.VM, providerID string) bool {
	for _, vm := range vms {
		if vm.ProviderID() == providerID {
			return true
		}
	}
	return false
}
