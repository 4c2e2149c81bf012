package azure

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v8"
	"k8s.io/utils/ptr"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/azure/fakeazure"
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

// calls counts the requests of op (not its polls).
func (e *testEnv) calls(op string) int {
	n := 0
	for _, r := range e.cloud.Requests.For(op) {
		if !r.Poll {
			n++
		}
	}
	return n
}

// TestStopDeallocatesByDefaultAndStartKeepsIdentity: without the annotation, and with it set to
// deallocate, a stop deallocates the VM; the VM stays visible to GetMachineStatus; a start runs it
// again and answers as CreateMachine did.
func TestStopDeallocatesByDefaultAndStartKeepsIdentity(t *testing.T) {
	for _, mode := range []string{"", ModeDeallocate} {
		e := newTestEnv(t)
		class := e.class
		if mode != "" {
			class = withMode(class, mode)
		}
		created := e.mustCreate(t, "m-1")
		if err := e.stopIn(class, "m-1"); err != nil {
			t.Fatalf("StopMachine: %v", err)
		}
		if got := e.cloud.Power.State(testRG, "m-1"); got != fakeazure.PowerDeallocated {
			t.Errorf("power state after StopMachine = %q; want %q", got, fakeazure.PowerDeallocated)
		}
		if n, m := e.calls(fakeazure.OpDeallocateVM), e.calls(fakeazure.OpPowerOffVM); n != 1 || m != 0 {
			t.Errorf("StopMachine sent %d deallocate and %d power-off requests; want 1 and 0", n, m)
		}
		st, err := e.drv.GetMachineStatus(context.Background(), &driver.GetMachineStatusRequest{Machine: machine("m-1"), MachineClass: class, Secret: e.secret})
		if err != nil || st.ProviderID != created.ProviderID {
			t.Errorf("GetMachineStatus of the deallocated VM = %+v, %v; want it reported with ProviderID %s", st, err, created.ProviderID)
		}
		started, err := e.startIn(class, "m-1")
		if err != nil {
			t.Fatalf("StartMachine: %v", err)
		}
		if got := e.cloud.Power.State(testRG, "m-1"); got != fakeazure.PowerRunning {
			t.Errorf("power state after StartMachine = %q; want running", got)
		}
		if started.ProviderID != created.ProviderID || started.NodeName != created.NodeName || len(started.Addresses) != len(created.Addresses) {
			t.Errorf("StartMachine = %+v; CreateMachine answered %+v", started, created)
		}
		if vm, _ := e.cloud.VM(testRG, "m-1"); ptr.Deref(vm.Properties.ProvisioningState, "") != fakeazure.StateSucceeded {
			t.Errorf("provisioning state after start = %q; want Succeeded", ptr.Deref(vm.Properties.ProvisioningState, ""))
		}
	}
}

// TestPowerOffModeKeepsTheHost: with the poweroff mode the VM is only powered off, and its start
// cannot fail for capacity, as it never left its host.
func TestPowerOffModeKeepsTheHost(t *testing.T) {
	e := newTestEnv(t)
	class := withMode(e.class, ModePowerOff)
	e.mustCreate(t, "m-1")
	if err := e.stopIn(class, "m-1"); err != nil {
		t.Fatalf("StopMachine: %v", err)
	}
	if got := e.cloud.Power.State(testRG, "m-1"); got != fakeazure.PowerStopped {
		t.Errorf("power state = %q; want stopped", got)
	}
	if n, m := e.calls(fakeazure.OpPowerOffVM), e.calls(fakeazure.OpDeallocateVM); n != 1 || m != 0 {
		t.Errorf("StopMachine sent %d power-off and %d deallocate requests; want 1 and 0", n, m)
	}
	e.cloud.Power.FailNextStart("AllocationFailed")
	if _, err := e.startIn(class, "m-1"); err != nil {
		t.Fatalf("StartMachine of a powered-off VM = %v; want OK (it keeps its host)", err)
	}
	// A deallocated VM can also be "stopped" in poweroff mode: it is more than stopped already.
	e.cloud.Power.Set(testRG, "m-1", fakeazure.PowerDeallocated)
	e.cloud.Requests.Reset()
	if err := e.stopIn(class, "m-1"); err != nil {
		t.Fatalf("StopMachine of a deallocated VM in poweroff mode: %v", err)
	}
	if n := e.calls(fakeazure.OpPowerOffVM); n != 0 {
		t.Errorf("StopMachine of a deallocated VM sent %d power-off requests; want none", n)
	}
}

// TestPowerIsIdempotent: stopping a stopped VM and starting a running one are OK and send no
// action; a VM deallocating is stopped already.
func TestPowerIsIdempotent(t *testing.T) {
	e := newTestEnv(t)
	e.mustCreate(t, "m-1")
	if _, err := e.startIn(e.class, "m-1"); err != nil {
		t.Fatalf("StartMachine of a running VM: %v", err)
	}
	if n := e.calls(fakeazure.OpStartVM); n != 0 {
		t.Errorf("StartMachine of a running VM sent %d start requests; want none", n)
	}
	for i := range 2 {
		if err := e.stopIn(e.class, "m-1"); err != nil {
			t.Fatalf("StopMachine #%d: %v", i+1, err)
		}
	}
	if n := e.calls(fakeazure.OpDeallocateVM); n != 1 {
		t.Errorf("two StopMachine calls sent %d deallocate requests; want 1", n)
	}
	e.cloud.Power.Set(testRG, "m-1", fakeazure.PowerDeallocating)
	if err := e.stopIn(e.class, "m-1"); err != nil || e.calls(fakeazure.OpDeallocateVM) != 1 {
		t.Errorf("StopMachine of a deallocating VM = %v after %d deallocate requests; want OK without a new one", err, e.calls(fakeazure.OpDeallocateVM))
	}
	e.cloud.Power.Set(testRG, "m-1", fakeazure.PowerStarting)
	if _, err := e.startIn(e.class, "m-1"); err != nil || e.calls(fakeazure.OpStartVM) != 0 {
		t.Errorf("StartMachine of a starting VM = %v after %d start requests; want OK without one", err, e.calls(fakeazure.OpStartVM))
	}
}

// TestPowerRefusals: an unknown mode is InvalidArgument before anything is asked of Azure; a VM
// that does not exist, or is another class's, is NotFound; a VM whose provisioning failed cannot
// be started.
func TestPowerRefusals(t *testing.T) {
	e := newTestEnv(t)
	e.mustCreate(t, "m-1")
	e.cloud.Requests.Reset()
	bad := withMode(e.class, "hibernate")
	err := e.stopIn(bad, "m-1")
	if !driver.IsCode(err, driver.InvalidArgument) || !strings.Contains(err.Error(), kit.StandbyModeAnnotation) || !strings.Contains(err.Error(), `"poweroff"`) {
		t.Errorf("StopMachine with mode hibernate = %v; want InvalidArgument naming the annotation and the allowed values", err)
	}
	if _, err := e.startIn(bad, "m-1"); !driver.IsCode(err, driver.InvalidArgument) {
		t.Errorf("StartMachine with mode hibernate = %v; want InvalidArgument", err)
	}
	if n := e.cloud.Requests.Len(); n != 0 {
		t.Errorf("a bad mode sent %d requests to Azure; want none", n)
	}
	if got := e.cloud.Power.State(testRG, "m-1"); got != fakeazure.PowerRunning {
		t.Errorf("power state after refused calls = %q; want running", got)
	}

	if err := e.stopIn(e.class, "m-absent"); !driver.IsCode(err, driver.NotFound) {
		t.Errorf("StopMachine of an absent VM = %v; want NotFound", err)
	}
	e.cloud.PutVM(testRG, &armcompute.VirtualMachine{Name: ptr.To("m-foreign"), Location: ptr.To(testLocation)})
	if err := e.stopIn(e.class, "m-foreign"); !driver.IsCode(err, driver.NotFound) {
		t.Errorf("StopMachine of an untagged VM = %v; want NotFound", err)
	}
	if got := e.cloud.Power.State(testRG, "m-foreign"); got != fakeazure.PowerRunning {
		t.Errorf("the untagged VM was touched: power state %q", got)
	}

	vm, _ := e.cloud.VM(testRG, "m-1")
	vm.Properties.ProvisioningState = ptr.To(fakeazure.StateFailed)
	e.cloud.PutVM(testRG, vm)
	e.cloud.Power.Set(testRG, "m-1", fakeazure.PowerDeallocated)
	if _, err := e.startIn(e.class, "m-1"); !driver.IsCode(err, driver.Internal) || !strings.Contains(err.Error(), "Failed") {
		t.Errorf("StartMachine of a VM in provisioning state Failed = %v; want Internal saying so", err)
	}
}

// TestStartWithoutCapacityIsResourceExhausted: a deallocated VM that finds no host answers
// ResourceExhausted with Azure's code, stays deallocated, and starts later.
func TestStartWithoutCapacityIsResourceExhausted(t *testing.T) {
	for _, code := range []string{"AllocationFailed", "ZonalAllocationFailed"} {
		e := newTestEnv(t)
		e.mustCreate(t, "m-1")
		if err := e.stopIn(e.class, "m-1"); err != nil {
			t.Fatal(err)
		}
		e.cloud.Power.FailNextStart(code)
		_, err := e.startIn(e.class, "m-1")
		if !driver.IsCode(err, driver.ResourceExhausted) || !strings.Contains(err.Error(), code) {
			t.Errorf("StartMachine without capacity (%s) = %v; want ResourceExhausted naming the code", code, err)
		}
		if got := e.cloud.Power.State(testRG, "m-1"); got != fakeazure.PowerDeallocated {
			t.Errorf("power state after a failed start = %q; want deallocated", got)
		}
		if _, err := e.startIn(e.class, "m-1"); err != nil {
			t.Errorf("StartMachine once capacity is back = %v; want OK", err)
		}
	}
}

// TestPowerFaults: throttling is retried after Retry-After; lasting server errors are Unavailable;
// a missing permission is PermissionDenied.
func TestPowerFaults(t *testing.T) {
	e := newTestEnv(t)
	e.mustCreate(t, "m-1")
	e.cloud.Faults.Inject(fakeazure.Throttle(fakeazure.OpDeallocateVM, 1, 10*time.Millisecond))
	if err := e.stopIn(e.class, "m-1"); err != nil {
		t.Fatalf("StopMachine after one throttled request = %v; want OK after a retry", err)
	}
	if n := e.calls(fakeazure.OpDeallocateVM); n != 2 {
		t.Errorf("deallocate requests = %d; want 2 (one throttled, one retried)", n)
	}
	e.cloud.Faults.Inject(fakeazure.ServerErrors(fakeazure.OpStartVM, http.StatusServiceUnavailable, 10))
	if _, err := e.startIn(e.class, "m-1"); !driver.IsCode(err, driver.Unavailable) {
		t.Errorf("StartMachine against lasting 503s = %v; want Unavailable", err)
	}
	e.cloud.Faults.Clear()
	e.cloud.Faults.Inject(fakeazure.Deny(fakeazure.OpStartVM))
	if _, err := e.startIn(e.class, "m-1"); !driver.IsCode(err, driver.PermissionDenied) || !strings.Contains(err.Error(), "virtualMachines/start/action") {
		t.Errorf("StartMachine without the start permission = %v; want PermissionDenied naming the action", err)
	}
	e.cloud.Faults.Clear()
	if _, err := e.startIn(e.class, "m-1"); err != nil {
		t.Errorf("StartMachine after the faults = %v; want OK", err)
	}
}

// TestPowerDecisions: which power states a stop in each mode leaves alone, and which a start does.
func TestPowerDecisions(t *testing.T) {
	for _, tc := range []struct {
		power                            string
		deallocated, poweredOff, running bool
	}{
		{powerRunning, false, false, true},
		{powerStarting, false, false, true},
		{powerStopping, false, true, false},
		{powerStopped, false, true, false},
		{powerDeallocating, true, true, false},
		{powerDeallocated, true, true, false},
		{"", false, false, false},
	} {
		if got := stoppedFor(ModeDeallocate, tc.power); got != tc.deallocated {
			t.Errorf("stoppedFor(deallocate, %q) = %v; want %v", tc.power, got, tc.deallocated)
		}
		if got := stoppedFor(ModePowerOff, tc.power); got != tc.poweredOff {
			t.Errorf("stoppedFor(poweroff, %q) = %v; want %v", tc.power, got, tc.poweredOff)
		}
		if got := running(tc.power); got != tc.running {
			t.Errorf("running(%q) = %v; want %v", tc.power, got, tc.running)
		}
	}
}
