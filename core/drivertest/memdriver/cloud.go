package memdriver

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/machinist-io/machinist/core/driver"
)

// ProviderName is the provider name of the driver (MachineClass.provider: mem).
const ProviderName = "mem"

// CSIDriverName is the CSI driver whose volumes GetVolumeIDs maps; the volume ID is the
// volumeHandle.
const CSIDriverName = "mem.csi.machinist.io"

// VM is one machine of the in-memory cloud.
type VM struct {
	// ID is unique within the Cloud ("vm-000001").
	ID string
	// MachineName is the name of the Machine the VM belongs to; also its node name.
	MachineName string
	// Cluster and Role are the scope taken from the class's providerSpec.
	Cluster string
	Role    string
	// ClassName is the MachineClass the VM was created from.
	ClassName string
	// Size and Tags are copied from the providerSpec.
	Size string
	Tags map[string]string
	// UserData is the secret's userData as the driver received it.
	UserData string
	// IP is the VM's internal address.
	IP string
	// Initialized reports whether post-create initialization has run (see
	// Cloud.SetRequireInitialization).
	Initialized bool
	// Created is when the VM was created.
	Created time.Time
	// Stopped reports whether the VM is stopped (StopMachine); it keeps its ID, IP and disks.
	Stopped bool
}

// ProviderID returns the VM's provider ID, mem:///<cluster>/<id>.
func (vm VM) ProviderID() string { return "mem:///" + vm.Cluster + "/" + vm.ID }

func (vm VM) clone() VM {
	vm.Tags = maps.Clone(vm.Tags)
	return vm
}

// Method names a driver method for fault injection and call counting.
type Method string

// The six driver methods.
const (
	MethodCreate     Method = "CreateMachine"
	MethodInitialize Method = "InitializeMachine"
	MethodDelete     Method = "DeleteMachine"
	MethodStatus     Method = "GetMachineStatus"
	MethodList       Method = "ListMachines"
	MethodVolumes    Method = "GetVolumeIDs"
)

// The methods of the optional power capability (driver.PowerDriver).
const (
	MethodStop  Method = "StopMachine"
	MethodStart Method = "StartMachine"
)

// Methods lists the six driver methods.
var Methods = []Method{MethodCreate, MethodInitialize, MethodDelete, MethodStatus, MethodList, MethodVolumes}

// PowerMethods lists the methods of the power capability.
var PowerMethods = []Method{MethodStop, MethodStart}

// Fault makes calls of one method misbehave. The zero Fault does nothing.
type Fault struct {
	// Code is the code of the returned error; OK returns no error (useful with Delay alone).
	Code driver.Code
	// Message is the error message; empty means "injected <Code> fault".
	Message string
	// Times is how many calls the fault applies to; 0 means every call until ClearFaults.
	Times int
	// Delay is waited before the call acts. It honours the context: a call whose context ends
	// during the delay returns Canceled or DeadlineExceeded and changes nothing.
	Delay time.Duration
	// Machine limits the fault to calls for this machine name; "" matches every call.
	// ListMachines and GetVolumeIDs carry no machine, so only faults without Machine apply.
	Machine string
	// AfterEffect lets the operation take effect before the error is returned, like a response
	// lost on the way back (e.g. the VM exists although CreateMachine failed).
	AfterEffect bool
}

func (f Fault) err(op string) error {
	msg := f.Message
	if msg == "" {
		msg = fmt.Sprintf("injected %s fault", f.Code)
	}
	return driver.Errorf(f.Code, "mem: %s: %s", op, msg)
}

// Cloud is the in-memory backend: the VMs, injected faults and call counters shared by every
// Driver made from it. The zero value is not usable; call NewCloud.
type Cloud struct {
	mu          sync.Mutex
	vms         map[string]*VM
	byName      map[string]map[string]*VM // machine name -> ID -> VM
	seq         int
	requireInit bool
	credentials map[string]string
	faults      map[Method][]*Fault
	calls       map[Method]int
}

// NewCloud returns an empty cloud.
func NewCloud() *Cloud {
	return &Cloud{
		vms:    map[string]*VM{},
		byName: map[string]map[string]*VM{},
		faults: map[Method][]*Fault{},
		calls:  map[Method]int{},
	}
}

// SetRequireInitialization makes VMs created from now on start uninitialized: GetMachineStatus
// answers Uninitialized (with the VM's ProviderID and NodeName) until InitializeMachine runs.
// By default VMs are ready as soon as CreateMachine returns.
func (c *Cloud) SetRequireInitialization(require bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.requireInit = require
}

// SetCredentials makes every method but GetVolumeIDs require the secret to hold each key with
// the given value; a missing or wrong value is Unauthenticated. Nil or empty requires nothing.
func (c *Cloud) SetCredentials(required map[string]string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.credentials = maps.Clone(required)
}

// Inject adds a fault to a method. Faults of a method are tried in the order they were added;
// the first that matches a call applies to it.
func (c *Cloud) Inject(m Method, f Fault) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.faults[m] = append(c.faults[m], &f)
}

// ClearFaults removes every injected fault.
func (c *Cloud) ClearFaults() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.faults)
}

// Calls returns how many times a method was called, failed and cancelled calls included.
func (c *Cloud) Calls(m Method) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[m]
}

// ResetCalls sets every call counter to zero.
func (c *Cloud) ResetCalls() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.calls)
}

// VMs returns a copy of every VM, ordered by ID (creation order).
func (c *Cloud) VMs() []VM {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]VM, 0, len(c.vms))
	for _, vm := range c.vms {
		out = append(out, vm.clone())
	}
	slices.SortFunc(out, func(a, b VM) int { return compareIDs(a.ID, b.ID) })
	return out
}

// VM returns a copy of the VM with the given ID.
func (c *Cloud) VM(id string) (VM, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	vm, ok := c.vms[id]
	if !ok {
		return VM{}, false
	}
	return vm.clone(), true
}

// Count returns the number of VMs of a machine name, in any cluster and role.
func (c *Cloud) Count(machineName string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.byName[machineName])
}

// Add puts a VM into the cloud behind the drivers' backs, e.g. an orphan or a second VM for one
// machine. It assigns a fresh ID and IP (any given are ignored), sets Created when zero, and
// returns the stored VM.
func (c *Cloud) Add(vm VM) VM {
	c.mu.Lock()
	defer c.mu.Unlock()
	vm = vm.clone()
	c.assignID(&vm)
	if vm.Created.IsZero() {
		vm.Created = time.Now()
	}
	c.put(&vm)
	return vm.clone()
}

// Remove deletes a VM behind the drivers' backs and reports whether it existed.
func (c *Cloud) Remove(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.vms[id]
	c.drop(id)
	return ok
}

// assignID gives vm the next ID and its IP. The caller holds c.mu.
func (c *Cloud) assignID(vm *VM) {
	c.seq++
	vm.ID = fmt.Sprintf("vm-%06d", c.seq)
	vm.IP = fmt.Sprintf("10.%d.%d.%d", (c.seq>>16)&0xff, (c.seq>>8)&0xff, c.seq&0xff)
}

// put stores a VM. The caller holds c.mu.
func (c *Cloud) put(vm *VM) {
	c.vms[vm.ID] = vm
	if c.byName[vm.MachineName] == nil {
		c.byName[vm.MachineName] = map[string]*VM{}
	}
	c.byName[vm.MachineName][vm.ID] = vm
}

// drop deletes a VM if it exists. The caller holds c.mu.
func (c *Cloud) drop(id string) {
	vm, ok := c.vms[id]
	if !ok {
		return
	}
	delete(c.vms, id)
	delete(c.byName[vm.MachineName], id)
	if len(c.byName[vm.MachineName]) == 0 {
		delete(c.byName, vm.MachineName)
	}
}

// scoped returns the VMs of a machine in a cluster and role, oldest first. The caller holds c.mu.
func (c *Cloud) scoped(machineName string, s *ProviderSpec) []*VM {
	var out []*VM
	for _, vm := range c.byName[machineName] {
		if vm.Cluster == s.Cluster && vm.Role == s.Role {
			out = append(out, vm)
		}
	}
	slices.SortFunc(out, func(a, b *VM) int { return compareIDs(a.ID, b.ID) })
	return out
}

// takeFault counts a call and returns the fault that applies to it, if any.
func (c *Cloud) takeFault(m Method, machineName string) *Fault {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls[m]++
	list := c.faults[m]
	for i, f := range list {
		if f.Machine != "" && f.Machine != machineName {
			continue
		}
		applied := *f
		if f.Times > 0 {
			f.Times--
			if f.Times == 0 {
				c.faults[m] = slices.Delete(list, i, i+1)
			}
		}
		return &applied
	}
	return nil
}

// checkCredentials returns Unauthenticated when the secret lacks a required credential. It never
// puts a secret value into the message.
func (c *Cloud) checkCredentials(secretValue func(string) string, op string) error {
	c.mu.Lock()
	required := maps.Clone(c.credentials)
	c.mu.Unlock()
	keys := slices.Sorted(maps.Keys(required))
	for _, k := range keys {
		switch got := secretValue(k); {
		case got == "":
			return driver.Errorf(driver.Unauthenticated,
				"mem: %s: the secret has no %q: add it to the class's credentialsSecretRef", op, k)
		case got != required[k]:
			return driver.Errorf(driver.Unauthenticated,
				"mem: %s: the secret's %q is not accepted by the cloud: fix the credentials", op, k)
		}
	}
	return nil
}

// compareIDs orders IDs by length, then lexically, so vm-1000000 sorts after vm-999999.
func compareIDs(a, b string) int {
	if len(a) != len(b) {
		return len(a) - len(b)
	}
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
