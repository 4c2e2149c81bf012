package memdriver

import (
	"context"

	corev1 "k8s.io/api/core/v1"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
)

// StopMachine stops the machine's VM (the one of spec.providerID, else the only one of its name in
// the class's scope). A stopped VM stays listed and keeps its ID and IP; stopping it again is OK.
func (d *Driver) StopMachine(ctx context.Context, req *driver.StopMachineRequest) (*driver.StopMachineResponse, error) {
	var m *v1alpha1.Machine
	var class *v1alpha1.MachineClass
	var secret *corev1.Secret
	if req != nil {
		m, class, secret = req.Machine, req.MachineClass, req.Secret
	}
	vm, fault, err := d.power(ctx, MethodStop, "stop machine", m, class, secret, true)
	if err != nil {
		return nil, err
	}
	if err := fault.after("stop machine " + vm.MachineName); err != nil {
		return nil, err
	}
	return &driver.StopMachineResponse{LastKnownState: vm.ID}, nil
}

// StartMachine starts the machine's stopped VM; starting a running one is OK.
func (d *Driver) StartMachine(ctx context.Context, req *driver.StartMachineRequest) (*driver.StartMachineResponse, error) {
	var m *v1alpha1.Machine
	var class *v1alpha1.MachineClass
	var secret *corev1.Secret
	if req != nil {
		m, class, secret = req.Machine, req.MachineClass, req.Secret
	}
	vm, fault, err := d.power(ctx, MethodStart, "start machine", m, class, secret, false)
	if err != nil {
		return nil, err
	}
	if err := fault.after("start machine " + vm.MachineName); err != nil {
		return nil, err
	}
	return &driver.StartMachineResponse{ProviderID: vm.ProviderID(), NodeName: vm.MachineName, LastKnownState: vm.ID, Addresses: addresses(vm)}, nil
}

// power finds the machine's VM and sets it stopped or running. An injected fault that is not an
// after-effect fails the call before anything changes.
func (d *Driver) power(ctx context.Context, method Method, verb string, m *v1alpha1.Machine, class *v1alpha1.MachineClass, secret *corev1.Secret, stopped bool) (VM, *Fault, error) {
	name, op := opName(verb, m)
	fault, err := d.begin(ctx, method, op, name)
	if err != nil {
		return VM{}, nil, err
	}
	spec, err := d.check(op, m, class, secret)
	if err != nil {
		return VM{}, nil, err
	}
	c := d.cloud
	c.mu.Lock()
	defer c.mu.Unlock()
	var vm *VM
	if pid := m.Spec.ProviderID; pid != "" {
		cluster, id, ok := parseProviderID(pid)
		if !ok || cluster != spec.Cluster {
			return VM{}, nil, driver.Errorf(driver.InvalidArgument,
				"mem: %s: spec.providerID %q is not a VM of cluster %q (mem:///<cluster>/<vm-id>): fix or clear it", op, pid, spec.Cluster)
		}
		if v, ok := c.vms[id]; ok && v.MachineName == name && v.Role == spec.Role {
			vm = v
		}
	} else if vms := c.scoped(name, spec); len(vms) == 1 {
		vm = vms[0]
	} else if len(vms) > 1 {
		return VM{}, nil, driver.Errorf(driver.OutOfRange, "mem: %s: %d VMs belong to the machine: the orphan collector deletes the extra ones", op, len(vms))
	}
	if vm == nil {
		return VM{}, nil, notFound(op, name, spec)
	}
	vm.Stopped = stopped
	return vm.clone(), fault, nil
}

var _ driver.PowerDriver = (*Driver)(nil)
