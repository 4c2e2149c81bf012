package fakeazure_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v8"
	"k8s.io/utils/ptr"

	"github.com/machinist-io/machinist/providers/azure/fakeazure"
)

var fast = &runtime.PollUntilDoneOptions{Frequency: time.Millisecond}

// powerOf reads the power state the way clients do: GET with $expand=instanceView.
func powerOf(t *testing.T, cl clients, name string) string {
	t.Helper()
	got, err := cl.vms.Get(context.Background(), rg, name, &armcompute.VirtualMachinesClientGetOptions{Expand: ptr.To(armcompute.InstanceViewTypesInstanceView)})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range got.Properties.InstanceView.Statuses {
		if code := ptr.Deref(s.Code, ""); len(code) > len("PowerState/") && code[:len("PowerState/")] == "PowerState/" {
			return code[len("PowerState/"):]
		}
	}
	t.Fatalf("instance view of %s has no PowerState status: %+v", name, got.Properties.InstanceView)
	return ""
}

// TestDeallocateAndStartPassThroughTheirStates: deallocate shows deallocating while its LRO runs
// and deallocated after; start shows starting, then running; a start that finds no host fails
// the LRO with AllocationFailed and leaves the VM deallocated.
func TestDeallocateAndStartPassThroughTheirStates(t *testing.T) {
	c, cl := setup(t)
	ctx := context.Background()
	p, err := cl.vms.BeginCreateOrUpdate(ctx, rg, "vm", vmParams(createNIC(t, cl, c, "vm-nic")), nil)
	if err != nil {
		t.Fatal(err)
	}
	// Nothing is powered while the VM is being created.
	if _, err := cl.vms.BeginStart(ctx, rg, "vm", nil); !isCode(err, http.StatusConflict, "OperationNotAllowed") {
		t.Errorf("start during creation = %v; want 409 OperationNotAllowed", err)
	}
	if _, err := p.PollUntilDone(ctx, fast); err != nil {
		t.Fatal(err)
	}
	if got := powerOf(t, cl, "vm"); got != fakeazure.PowerRunning {
		t.Fatalf("power state after create = %q; want running", got)
	}

	dp, err := cl.vms.BeginDeallocate(ctx, rg, "vm", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := powerOf(t, cl, "vm"); got != fakeazure.PowerDeallocating {
		t.Errorf("power state during deallocate = %q; want deallocating", got)
	}
	if _, err := dp.PollUntilDone(ctx, fast); err != nil {
		t.Fatal(err)
	}
	if got := powerOf(t, cl, "vm"); got != fakeazure.PowerDeallocated {
		t.Errorf("power state after deallocate = %q; want deallocated", got)
	}
	if d, _ := c.Disk(rg, "vm-os-disk"); d == nil || d.ManagedBy == nil {
		t.Errorf("OS disk after deallocate = %+v; want it kept and attached", d)
	}

	c.Power.FailNextStart("ZonalAllocationFailed")
	sp, err := cl.vms.BeginStart(ctx, rg, "vm", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := powerOf(t, cl, "vm"); got != fakeazure.PowerStarting {
		t.Errorf("power state during start = %q; want starting", got)
	}
	if _, err := sp.PollUntilDone(ctx, fast); !isCode(err, 0, "ZonalAllocationFailed") {
		t.Errorf("start without capacity = %v; want the LRO to fail with ZonalAllocationFailed", err)
	}
	if got := powerOf(t, cl, "vm"); got != fakeazure.PowerDeallocated {
		t.Errorf("power state after a failed start = %q; want deallocated", got)
	}

	sp, err = cl.vms.BeginStart(ctx, rg, "vm", nil)
	if err == nil {
		_, err = sp.PollUntilDone(ctx, fast)
	}
	if err != nil || powerOf(t, cl, "vm") != fakeazure.PowerRunning {
		t.Fatalf("second start = %v, power %q; want running", err, powerOf(t, cl, "vm"))
	}
	initial := 0
	for _, r := range c.Requests.For(fakeazure.OpStartVM) {
		if !r.Poll {
			initial++
		}
	}
	if initial != 3 {
		t.Errorf("start requests (without polls) = %d; want 3: the refused one, the failed one and the one that ran", initial)
	}
}

// TestAbandonedDeallocateFinishesBeforeTheNextAction: a client that stops polling a deallocate
// leaves it to Azure, which finishes it before a later start on the VM.
func TestAbandonedDeallocateFinishesBeforeTheNextAction(t *testing.T) {
	c, cl := setup(t)
	ctx := context.Background()
	p, err := cl.vms.BeginCreateOrUpdate(ctx, rg, "vm", vmParams(createNIC(t, cl, c, "vm-nic")), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.PollUntilDone(ctx, fast); err != nil {
		t.Fatal(err)
	}
	c.SetLROPollsFor(fakeazure.OpDeallocateVM, 5)
	if _, err := cl.vms.BeginDeallocate(ctx, rg, "vm", nil); err != nil {
		t.Fatal(err)
	}
	if got := c.Power.State(rg, "vm"); got != fakeazure.PowerDeallocating {
		t.Fatalf("power state = %q; want deallocating", got)
	}
	sp, err := cl.vms.BeginStart(ctx, rg, "vm", nil)
	if err == nil {
		_, err = sp.PollUntilDone(ctx, fast)
	}
	if err != nil || c.Power.State(rg, "vm") != fakeazure.PowerRunning {
		t.Fatalf("start after an abandoned deallocate = %v, power %q; want running", err, c.Power.State(rg, "vm"))
	}
}

func isCode(err error, status int, code string) bool {
	var re *azcore.ResponseError
	return errors.As(err, &re) && re.ErrorCode == code && (status == 0 || re.StatusCode == status)
}

// TestRealisticPollsMakeAStartFasterThanACreate: with the realistic durations a create polls
// twice as long as a start, which a benchmark of standby against fresh creates relies on.
func TestRealisticPollsMakeAStartFasterThanACreate(t *testing.T) {
	c, cl := setup(t)
	c.SetRealisticPolls()
	ctx := context.Background()
	p, err := cl.vms.BeginCreateOrUpdate(ctx, rg, "vm", vmParams(createNIC(t, cl, c, "vm-nic")), nil)
	if err == nil {
		_, err = p.PollUntilDone(ctx, fast)
	}
	if err != nil {
		t.Fatal(err)
	}
	dp, err := cl.vms.BeginDeallocate(ctx, rg, "vm", nil)
	if err == nil {
		_, err = dp.PollUntilDone(ctx, fast)
	}
	if err != nil {
		t.Fatal(err)
	}
	sp, err := cl.vms.BeginStart(ctx, rg, "vm", nil)
	if err == nil {
		_, err = sp.PollUntilDone(ctx, fast)
	}
	if err != nil {
		t.Fatal(err)
	}
	creates, starts := len(c.Requests.For(fakeazure.OpCreateVM)), len(c.Requests.For(fakeazure.OpStartVM))
	if creates < 2*starts-2 || starts < 5 {
		t.Errorf("create took %d requests and start %d; want a create about twice as long as a start", creates, starts)
	}
}
