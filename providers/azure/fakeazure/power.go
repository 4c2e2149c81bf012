package fakeazure

import (
	"context"
	"net/http"
	"strings"
	"time"

	azfake "github.com/Azure/azure-sdk-for-go/sdk/azcore/fake"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v8"
	"k8s.io/utils/ptr"
)

// Power states of a VM, as its instance view reports them ("PowerState/<state>").
const (
	PowerStarting     = "starting"
	PowerRunning      = "running"
	PowerStopping     = "stopping"
	PowerStopped      = "stopped"
	PowerDeallocating = "deallocating"
	PowerDeallocated  = "deallocated"
)

// Operation names of the power actions.
const (
	OpDeallocateVM = "VirtualMachinesClient.BeginDeallocate"
	OpPowerOffVM   = "VirtualMachinesClient.BeginPowerOff"
	OpStartVM      = "VirtualMachinesClient.BeginStart"
	OpInstanceView = "VirtualMachinesClient.InstanceView"
)

// Power reads and sets the VMs' power states: Cloud.Power.
type Power struct{ st *state }

// State is the power state of a stored VM ("" when there is no such VM). A VM is running from
// the moment it is created.
func (p Power) State(resourceGroup, name string) string {
	p.st.mu.Lock()
	defer p.st.mu.Unlock()
	if _, ok := p.st.vms[key(resourceGroup, name)]; !ok {
		return ""
	}
	return p.st.powerOf(key(resourceGroup, name))
}

// Set sets a stored VM's power state, as someone acting in the portal would.
func (p Power) Set(resourceGroup, name, state string) {
	p.st.mu.Lock()
	defer p.st.mu.Unlock()
	p.st.power[key(resourceGroup, name)] = state
}

// FailNextStart makes the LRO of the next start of a deallocated VM fail with code
// (AllocationFailed, ZonalAllocationFailed, ...), as Azure does when it cannot find the VM a host
// again: the VM stays deallocated. A VM that was only stopped keeps its host, so its start never
// meets this. Calls queue up.
func (p Power) FailNextStart(code string) {
	p.st.mu.Lock()
	defer p.st.mu.Unlock()
	p.st.startFail = append(p.st.startFail, code)
}

// powerOf is the power state of the VM at k. Callers hold c.mu.
func (c *state) powerOf(k string) string {
	if p, ok := c.power[k]; ok {
		return p
	}
	return PowerRunning
}

// powerVM finds a VM for a power action and refuses one whose provisioning is in progress.
// Callers hold c.mu.
func (c *computeAPI) powerVM(rg, name, action string) (*armcompute.VirtualMachine, *ARMError) {
	if c.groups[strings.ToLower(rg)] == nil {
		return nil, errResourceGroupNotFound(rg)
	}
	vm, ok := c.vms[key(rg, name)]
	if !ok {
		return nil, errResourceNotFound("Microsoft.Compute/virtualMachines", rg, name)
	}
	switch st := deref(vm.Properties.ProvisioningState); st {
	case StateCreating, StateDeleting:
		return nil, armErr(http.StatusConflict, "OperationNotAllowed", "Operation '%s' is not allowed on VM '%s' since the VM is in provisioning state '%s'.", action, name, st)
	case StateFailed:
		if action == "start" {
			return nil, armErr(http.StatusConflict, "OperationNotAllowed", "Operation 'start' is not allowed on VM '%s' since the VM is in provisioning state 'Failed'. Delete or redeploy the VM.", name)
		}
	}
	return vm, nil
}

// transition moves the VM at k through the in-between power state to the final one, with an
// LRO of op on the VM's action path. A VM already there (or on its way) completes at once: the
// action is idempotent, as Azure's are.
func (c *computeAPI) transition(vm *armcompute.VirtualMachine, k, op, between, final string, complete func() *ARMError) int {
	id := actionPath(deref(vm.ID), op)
	if now := c.powerOf(k); now == final || now == between {
		if _, busy := c.lros[strings.ToLower(id)]; !busy {
			c.startLRO(id, op, func() (any, *ARMError) { return nil, nil })
		}
		return 0
	}
	c.power[k] = between
	vm.Properties.ProvisioningState = ptr.To(StateUpdating)
	c.startLRO(id, op, func() (any, *ARMError) {
		c.mu.Lock()
		defer c.mu.Unlock()
		vm, ok := c.vms[k]
		if !ok || c.power[k] != between {
			return nil, nil
		}
		vm.Properties.ProvisioningState = ptr.To(StateSucceeded)
		if complete != nil {
			if e := complete(); e != nil {
				return nil, e
			}
		}
		c.power[k] = final
		return nil, nil
	})
	return c.polls(op)
}

// actionPath is the path of a power action on a VM, where the SDK's fake poller polls it.
func actionPath(vmID, op string) string {
	return vmID + "/" + map[string]string{OpDeallocateVM: "deallocate", OpPowerOffVM: "powerOff", OpStartVM: "start"}[op]
}

func (c *computeAPI) deallocateVM(_ context.Context, rg, name string, _ *armcompute.VirtualMachinesClientBeginDeallocateOptions) (resp azfake.PollerResponder[armcompute.VirtualMachinesClientDeallocateResponse], errResp azfake.ErrorResponder) {
	c.mu.Lock()
	defer c.mu.Unlock()
	vm, e := c.powerVM(rg, name, "deallocate")
	if e != nil {
		return resp, fail(e)
	}
	polls := c.transition(vm, key(rg, name), OpDeallocateVM, PowerDeallocating, PowerDeallocated, nil)
	return lroResponder(polls, http.StatusAccepted, http.StatusOK, armcompute.VirtualMachinesClientDeallocateResponse{}), errResp
}

func (c *computeAPI) powerOffVM(_ context.Context, rg, name string, _ *armcompute.VirtualMachinesClientBeginPowerOffOptions) (resp azfake.PollerResponder[armcompute.VirtualMachinesClientPowerOffResponse], errResp azfake.ErrorResponder) {
	c.mu.Lock()
	defer c.mu.Unlock()
	vm, e := c.powerVM(rg, name, "powerOff")
	if e != nil {
		return resp, fail(e)
	}
	k := key(rg, name)
	if p := c.powerOf(k); p == PowerDeallocated || p == PowerDeallocating {
		// Nothing runs on a deallocated VM: powering it off changes nothing.
		if id := actionPath(deref(vm.ID), OpPowerOffVM); c.lros[strings.ToLower(id)] == nil {
			c.startLRO(id, OpPowerOffVM, func() (any, *ARMError) { return nil, nil })
		}
		return lroResponder(0, http.StatusAccepted, http.StatusOK, armcompute.VirtualMachinesClientPowerOffResponse{}), errResp
	}
	polls := c.transition(vm, k, OpPowerOffVM, PowerStopping, PowerStopped, nil)
	return lroResponder(polls, http.StatusAccepted, http.StatusOK, armcompute.VirtualMachinesClientPowerOffResponse{}), errResp
}

func (c *computeAPI) startVM(_ context.Context, rg, name string, _ *armcompute.VirtualMachinesClientBeginStartOptions) (resp azfake.PollerResponder[armcompute.VirtualMachinesClientStartResponse], errResp azfake.ErrorResponder) {
	c.mu.Lock()
	defer c.mu.Unlock()
	vm, e := c.powerVM(rg, name, "start")
	if e != nil {
		return resp, fail(e)
	}
	k := key(rg, name)
	var failCode string
	if from := c.powerOf(k); from == PowerDeallocated || from == PowerDeallocating {
		if len(c.startFail) > 0 {
			failCode, c.startFail = c.startFail[0], c.startFail[1:]
		}
	}
	polls := c.transition(vm, k, OpStartVM, PowerStarting, PowerRunning, func() *ARMError {
		if failCode == "" {
			return nil
		}
		// No host for it: the VM stays deallocated, ready for a later start.
		c.power[k] = PowerDeallocated
		return ErrAllocation(failCode)
	})
	return lroResponder(polls, http.StatusAccepted, http.StatusOK, armcompute.VirtualMachinesClientStartResponse{}), errResp
}

func (c *computeAPI) instanceView(_ context.Context, rg, name string, _ *armcompute.VirtualMachinesClientInstanceViewOptions) (resp azfake.Responder[armcompute.VirtualMachinesClientInstanceViewResponse], errResp azfake.ErrorResponder) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.groups[strings.ToLower(rg)] == nil {
		return resp, fail(errResourceGroupNotFound(rg))
	}
	vm, ok := c.vms[key(rg, name)]
	if !ok {
		return resp, fail(errResourceNotFound("Microsoft.Compute/virtualMachines", rg, name))
	}
	resp.SetResponse(http.StatusOK, armcompute.VirtualMachinesClientInstanceViewResponse{VirtualMachineInstanceView: *c.instanceViewOf(key(rg, name), vm)}, nil)
	return resp, errResp
}

// instanceViewOf is the VM's instance view: its provisioning and power states. Callers hold c.mu.
func (c *state) instanceViewOf(k string, vm *armcompute.VirtualMachine) *armcompute.VirtualMachineInstanceView {
	now := time.Now().UTC()
	power := c.powerOf(k)
	return &armcompute.VirtualMachineInstanceView{
		ComputerName: vm.Name,
		Statuses: []*armcompute.InstanceViewStatus{
			{Code: ptr.To("ProvisioningState/" + strings.ToLower(deref(vm.Properties.ProvisioningState))), Level: ptr.To(armcompute.StatusLevelTypesInfo), Time: &now},
			{Code: ptr.To("PowerState/" + power), Level: ptr.To(armcompute.StatusLevelTypesInfo), DisplayStatus: ptr.To(powerDisplay[power])},
		},
	}
}

var powerDisplay = map[string]string{
	PowerStarting: "VM starting", PowerRunning: "VM running", PowerStopping: "VM stopping", PowerStopped: "VM stopped",
	PowerDeallocating: "VM deallocating", PowerDeallocated: "VM deallocated",
}

// Typical durations on Azure, in LRO polls of the driver's 5-second default poll interval: a
// Linux VM is created in about a minute, a deallocated one starts in about half of that, a
// deallocation takes about as long, a power-off a few seconds less. They are observed typical
// values, not service levels.
var realisticPolls = map[string]int{
	OpCreateNIC:    1,
	OpCreateVM:     12,
	OpStartVM:      6,
	OpDeallocateVM: 6,
	OpPowerOffVM:   4,
	OpDeleteVM:     6,
}

// SetRealisticPolls gives the VM operations the relative durations they have on Azure (create
// about twice a start of a deallocated VM), for benchmarks that compare a fresh create with a
// start. Each poll lasts the client's poll interval.
func (c *Cloud) SetRealisticPolls() {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	for op, n := range realisticPolls {
		c.st.opPolls[op] = n
	}
}
