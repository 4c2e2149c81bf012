package machine_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/internal/ctrltest"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/drivertest/memdriver"
)

// TestCreateErrorCodes: every code CreateMachine can fail with leaves the machine in
// CrashLoopBackOff with the code's name and the driver's message in lastOperation, and is
// retried at the pace of its class: transient codes fast (ShortRetry, doubling), codes that need
// a fix slowly (MediumRetry), ResourceExhausted slowest (ResourceExhaustedRetry). Paces are
// compared by call counts in a window, not by timing single calls.
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

	// Pace: attempts (each starts with GetMachineStatus) over a 1.5s window after the failures.
	// The fast codes retry at least twice in it; the others never sooner than their base wait
	// allows (−20 % jitter): gaps, not counts in a window, whose start is unrelated to when each
	// machine failed.
	before := map[driver.Code]int{}
	for _, tc := range cases {
		before[tc.code] = len(counting.statusCalls(e.Name(strings.ToLower(tc.code.String()))))
	}
	time.Sleep(1500 * time.Millisecond)
	for _, tc := range cases {
		calls := counting.statusCalls(e.Name(strings.ToLower(tc.code.String())))
		gap := time.Duration(1 << 62)
		for i := 1; i < len(calls); i++ {
			gap = min(gap, calls[i].Sub(calls[i-1]))
		}
		switch tc.pace {
		case fast:
			if n := len(calls) - before[tc.code]; n < 2 {
				t.Errorf("%s: %d retries in 1.5s, want ≥ 2 (ShortRetry 100ms, doubling)", tc.code, n)
			}
		case slow:
			if gap < opts.MediumRetry*8/10 {
				t.Errorf("%s: attempts %s apart, want ≥ %s (MediumRetry %s − 20 %%)", tc.code, gap, opts.MediumRetry*8/10, opts.MediumRetry)
			}
		case slowest:
			if gap < opts.ResourceExhaustedRetry*8/10 {
				t.Errorf("%s: attempts %s apart, want ≥ %s (ResourceExhaustedRetry %s − 20 %%)", tc.code, gap, opts.ResourceExhaustedRetry*8/10, opts.ResourceExhaustedRetry)
			}
		}
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

func TestCreationTimeoutFails(t *testing.T) {
	e := ctrltest.NewEnv(t)
	cloud := memdriver.NewCloud()
	e.Drivers.Set(memdriver.ProviderName, memdriver.New(cloud))
	e.Class("mem", "mem", memSpec(e), "")
	e.StartControllers(ctrltest.FastOptions(), false, nil)
	name := e.Name("late")
	cloud.Inject(memdriver.MethodCreate, memdriver.Fault{Code: driver.Unavailable, Machine: name})
	e.Machine(name, "mem", func(m *v1alpha1.Machine) {
		m.Annotations = map[string]string{v1alpha1.AnnotationEffectiveCreationTimeout: "2s"}
	})
	m := e.WaitPhase(name, v1alpha1.MachineFailed, 30*time.Second)
	if m.Status.LastOperation.ErrorCode != "Unavailable" {
		t.Fatalf("failed machine: %s", ctrltest.Describe(m))
	}
	ctrltest.Eventually(t, 10*time.Second, "Failed event", func() bool { return slices.Contains(e.EventReasons(name), "Failed") })
	// Failed is final: nothing is created for it any more.
	cloud.ClearFaults()
	time.Sleep(time.Second)
	if cloud.Count(name) != 0 || e.Get(name).Status.CurrentStatus.Phase != v1alpha1.MachineFailed {
		t.Fatalf("a Failed machine got a VM: %s", ctrltest.Describe(e.Get(name)))
	}
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
		ctrltest.Eventually(t, 30*time.Second, "initialize failure event", func() bool {
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
	e.StartControllers(ctrltest.FastOptions(), false, nil)
	name := e.Name("waiting")
	e.Machine(name, "mem", func(m *v1alpha1.Machine) {
		m.Annotations = map[string]string{v1alpha1.AnnotationEffectiveCreationTimeout: "1s"}
	})
	m := e.WaitMachine(name, 30*time.Second, "no-driver report", func(m *v1alpha1.Machine) bool {
		return m != nil && m.Status.LastOperation.ErrorCode == "FailedPrecondition"
	})
	lo := m.Status.LastOperation
	if m.Status.CurrentStatus.Phase != v1alpha1.MachineCrashLoopBackOff || !strings.Contains(lo.Description, `unknown provider "mem"`) ||
		!strings.Contains(lo.Description, "-tags provider_mem") {
		t.Fatalf("unresolvable provider: %s", ctrltest.Describe(m))
	}
	ctrltest.Eventually(t, 10*time.Second, "DriverUnavailable event", func() bool { return slices.Contains(e.EventReasons(name), "DriverUnavailable") })
	time.Sleep(1500 * time.Millisecond) // past the creation timeout
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
	ctrltest.Eventually(t, 30*time.Second, "slow create in flight", func() bool { return cloud.Calls(memdriver.MethodCreate) >= 2 })
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
