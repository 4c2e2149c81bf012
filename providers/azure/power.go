package azure

import (
	"context"
	"slices"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v8"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/kit"
)

// Standby modes (the MachineClass annotation kit.StandbyModeAnnotation).
const (
	// ModeDeallocate (the default) deallocates the VM: Azure stops billing its compute, and a
	// start has to find it a host again, which can fail for capacity.
	ModeDeallocate = "deallocate"
	// ModePowerOff only powers the VM off: it keeps its host, so a start is faster and never
	// meets a capacity shortage, but Azure bills its compute as if it ran.
	ModePowerOff = "poweroff"
)

// standbyMode is the class's standby mode.
func standbyMode(class *v1alpha1.MachineClass) (string, error) {
	return kit.StandbyMode(ProviderName, class, ModeDeallocate, ModeDeallocate, ModePowerOff)
}

// Power states of a VM's instance view ("PowerState/<state>").
const (
	powerStarting     = "starting"
	powerRunning      = "running"
	powerStopping     = "stopping"
	powerStopped      = "stopped"
	powerDeallocating = "deallocating"
	powerDeallocated  = "deallocated"
)

// StopMachine deallocates the machine's VM (or powers it off, when the class asks for
// poweroff) and returns when Azure has done so. A VM already there is left alone.
func (d *Driver) StopMachine(ctx context.Context, req *driver.StopMachineRequest) (*driver.StopMachineResponse, error) {
	if req == nil {
		return nil, driver.Error(driver.InvalidArgument, "azure: stop machine: the request is empty")
	}
	mode, err := standbyMode(req.MachineClass)
	if err != nil {
		return nil, err
	}
	ctx, cancel := d.opts.Bound(ctx)
	defer cancel()
	t, err := d.powerTarget(ctx, req.Machine, req.MachineClass, req.Secret)
	if err != nil {
		return nil, err
	}
	if stoppedFor(mode, t.power) {
		return &driver.StopMachineResponse{}, nil
	}
	d.log.Info("azure: stopping VM", "machine", t.name, "resourceGroup", t.spec.ResourceGroup, "mode", mode, "power", t.power)
	what, act := "deallocate VM", func() error {
		poller, err := t.cs.vms.BeginDeallocate(ctx, t.spec.ResourceGroup, t.name, nil)
		if err == nil {
			_, err = poller.PollUntilDone(ctx, d.pollOptions())
		}
		return err
	}
	if mode == ModePowerOff {
		what, act = "power off VM", func() error {
			poller, err := t.cs.vms.BeginPowerOff(ctx, t.spec.ResourceGroup, t.name, nil)
			if err == nil {
				_, err = poller.PollUntilDone(ctx, d.pollOptions())
			}
			return err
		}
	}
	if err := act(); err != nil {
		return nil, t.powerError(what, err)
	}
	return &driver.StopMachineResponse{}, nil
}

// StartMachine starts the machine's stopped or deallocated VM and returns when it runs. A
// deallocated VM that finds no host is ResourceExhausted (AllocationFailed,
// ZonalAllocationFailed), and stays deallocated.
func (d *Driver) StartMachine(ctx context.Context, req *driver.StartMachineRequest) (*driver.StartMachineResponse, error) {
	if req == nil {
		return nil, driver.Error(driver.InvalidArgument, "azure: start machine: the request is empty")
	}
	if _, err := standbyMode(req.MachineClass); err != nil {
		return nil, err
	}
	ctx, cancel := d.opts.Bound(ctx)
	defer cancel()
	t, err := d.powerTarget(ctx, req.Machine, req.MachineClass, req.Secret)
	if err != nil {
		return nil, err
	}
	if !running(t.power) {
		if strings.EqualFold(t.provisioning, "Failed") {
			return nil, driver.Errorf(driver.Internal, "azure: VM %q in resource group %q is in provisioning state Failed and cannot be started: delete the machine so that a new VM is made", t.name, t.spec.ResourceGroup)
		}
		d.log.Info("azure: starting VM", "machine", t.name, "resourceGroup", t.spec.ResourceGroup, "power", t.power)
		poller, err := t.cs.vms.BeginStart(ctx, t.spec.ResourceGroup, t.name, nil)
		if err == nil {
			_, err = poller.PollUntilDone(ctx, d.pollOptions())
		}
		if err != nil {
			return nil, t.powerError("start VM", err)
		}
	}
	return &driver.StartMachineResponse{
		ProviderID: providerID(t.spec.Location, t.name),
		NodeName:   t.name,
		Addresses:  d.addresses(ctx, t.cs, t.spec, t.name),
	}, nil
}

// stoppedFor reports whether a VM in power state is stopped as mode asks: deallocated (or on the
// way) for deallocate; also only stopped for poweroff. An unknown state is not.
func stoppedFor(mode, power string) bool {
	stopped := []string{powerDeallocating, powerDeallocated}
	if mode == ModePowerOff {
		stopped = append(stopped, powerStopping, powerStopped)
	}
	return slices.Contains(stopped, power)
}

// running reports whether a VM in power state runs or is starting.
func running(power string) bool { return power == powerRunning || power == powerStarting }

// powerTarget is the VM a power call acts on, with its states.
type powerTarget struct {
	spec         *ProviderSpec
	cs           *clientSet
	name         string
	power        string // "" when the instance view names none
	provisioning string
}

// powerTarget reads the machine's VM with its instance view; NotFound when there is none or it
// is not this class's.
func (d *Driver) powerTarget(ctx context.Context, m *v1alpha1.Machine, class *v1alpha1.MachineClass, secret *corev1.Secret) (*powerTarget, error) {
	spec, cs, err := d.prepare(class, secret)
	if err != nil {
		return nil, err
	}
	if _, err := kit.MachineName(ProviderName, m); err != nil {
		return nil, err
	}
	name, err := vmName(m)
	if err != nil {
		return nil, driver.Errorf(driver.NotFound, "azure: no VM can be named %q: %s", m.Name, driver.MessageOf(err))
	}
	vm, err := cs.vms.Get(ctx, spec.ResourceGroup, name, &armcompute.VirtualMachinesClientGetOptions{Expand: ptr.To(armcompute.InstanceViewTypesInstanceView)})
	if isNotFound(err) {
		return nil, driver.Errorf(driver.NotFound, "azure: no VM %q in resource group %q", name, spec.ResourceGroup)
	}
	if err != nil {
		return nil, statusOf("get VM "+name, err)
	}
	if !owns(spec, vm.Tags) {
		return nil, driver.Errorf(driver.NotFound, "azure: VM %q in resource group %q lacks this class's cluster and role tags, so it is not this machine's", name, spec.ResourceGroup)
	}
	t := &powerTarget{spec: spec, cs: cs, name: name}
	if p := vm.Properties; p != nil {
		t.provisioning = ptr.Deref(p.ProvisioningState, "")
		t.power = powerStateOf(p.InstanceView)
	}
	if strings.EqualFold(t.provisioning, "Deleting") {
		return nil, driver.Errorf(driver.NotFound, "azure: VM %q in resource group %q is being deleted", name, spec.ResourceGroup)
	}
	return t, nil
}

// powerError turns the error of a power action into a status; a VM deleted meanwhile is
// NotFound.
func (t *powerTarget) powerError(what string, err error) error {
	if err == nil {
		return nil
	}
	if isNotFound(err) {
		return driver.Errorf(driver.NotFound, "azure: %s %s: the VM is gone from resource group %q", what, t.name, t.spec.ResourceGroup)
	}
	return statusOf(what+" "+t.name, err)
}

// powerStateOf reads "PowerState/<state>" from an instance view; "" when it has none.
func powerStateOf(iv *armcompute.VirtualMachineInstanceView) string {
	if iv == nil {
		return ""
	}
	for _, s := range iv.Statuses {
		if state, ok := strings.CutPrefix(ptr.Deref(s.Code, ""), "PowerState/"); ok {
			return strings.ToLower(state)
		}
	}
	return ""
}

var _ driver.PowerDriver = (*Driver)(nil)
