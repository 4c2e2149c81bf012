package memdriver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
)

// Driver is the mem driver over one Cloud. It is safe for concurrent use.
type Driver struct {
	cloud *Cloud
	log   *slog.Logger
}

// New returns a driver over cloud; a nil cloud gets a new empty one.
func New(cloud *Cloud) *Driver {
	if cloud == nil {
		cloud = NewCloud()
	}
	return &Driver{cloud: cloud, log: slog.Default()}
}

// Cloud returns the driver's backend.
func (d *Driver) Cloud() *Cloud { return d.cloud }

// CreateMachine creates the VM of a machine in the class's cluster and role, or returns the
// existing one.
func (d *Driver) CreateMachine(ctx context.Context, req *driver.CreateMachineRequest) (*driver.CreateMachineResponse, error) {
	var m *v1alpha1.Machine
	var class *v1alpha1.MachineClass
	var secret *corev1.Secret
	if req != nil {
		m, class, secret = req.Machine, req.MachineClass, req.Secret
	}
	name, op := opName("create machine", m)
	fault, err := d.begin(ctx, MethodCreate, op, name)
	if err != nil {
		return nil, err
	}
	spec, err := d.check(op, m, class, secret)
	if err != nil {
		return nil, err
	}

	c := d.cloud
	c.mu.Lock()
	var vm VM
	if existing := c.scoped(name, spec); len(existing) > 0 {
		vm = existing[0].clone()
		c.mu.Unlock()
		if vm.Size != spec.Size {
			return nil, driver.Errorf(driver.AlreadyExists,
				"mem: %s: VM %s exists with size %q but class %q asks for %q: delete the machine to recreate it, or restore the size",
				op, vm.ID, vm.Size, class.Name, spec.Size)
		}
		d.log.Debug("mem: machine already has a VM", "machine", name, "vm", vm.ID)
	} else {
		created := &VM{
			MachineName: name,
			Cluster:     spec.Cluster,
			Role:        spec.Role,
			ClassName:   class.Name,
			Size:        spec.Size,
			Tags:        maps.Clone(spec.Tags),
			UserData:    driver.SecretValue(secret, "userData"),
			Initialized: !c.requireInit,
			Created:     time.Now(),
		}
		c.assignID(created)
		c.put(created)
		vm = created.clone()
		c.mu.Unlock()
		d.log.Debug("mem: created VM", "machine", name, "vm", vm.ID, "cluster", vm.Cluster, "role", vm.Role)
	}
	if err := fault.after(op); err != nil {
		return nil, err
	}
	return &driver.CreateMachineResponse{
		ProviderID:     vm.ProviderID(),
		NodeName:       vm.MachineName,
		LastKnownState: vm.ID,
		Addresses:      addresses(vm),
	}, nil
}

// InitializeMachine marks the machine's VMs initialized.
func (d *Driver) InitializeMachine(ctx context.Context, req *driver.InitializeMachineRequest) (*driver.InitializeMachineResponse, error) {
	var m *v1alpha1.Machine
	var class *v1alpha1.MachineClass
	var secret *corev1.Secret
	if req != nil {
		m, class, secret = req.Machine, req.MachineClass, req.Secret
	}
	name, op := opName("initialize machine", m)
	fault, err := d.begin(ctx, MethodInitialize, op, name)
	if err != nil {
		return nil, err
	}
	spec, err := d.check(op, m, class, secret)
	if err != nil {
		return nil, err
	}

	c := d.cloud
	c.mu.Lock()
	vms := c.scoped(name, spec)
	for _, vm := range vms {
		vm.Initialized = true
	}
	var vm VM
	if len(vms) > 0 {
		vm = vms[0].clone()
	}
	c.mu.Unlock()
	if len(vms) == 0 {
		return nil, notFound(op, name, spec)
	}
	if err := fault.after(op); err != nil {
		return nil, err
	}
	return &driver.InitializeMachineResponse{ProviderID: vm.ProviderID(), NodeName: vm.MachineName, Addresses: addresses(vm)}, nil
}

// DeleteMachine deletes the VM named by the machine's spec.providerID or, without one, every VM of
// the machine's name in the class's scope. Nothing to delete is OK.
func (d *Driver) DeleteMachine(ctx context.Context, req *driver.DeleteMachineRequest) (*driver.DeleteMachineResponse, error) {
	var m *v1alpha1.Machine
	var class *v1alpha1.MachineClass
	var secret *corev1.Secret
	if req != nil {
		m, class, secret = req.Machine, req.MachineClass, req.Secret
	}
	name, op := opName("delete machine", m)
	fault, err := d.begin(ctx, MethodDelete, op, name)
	if err != nil {
		return nil, err
	}
	spec, err := d.check(op, m, class, secret)
	if err != nil {
		return nil, err
	}
	var byID string
	if pid := m.Spec.ProviderID; pid != "" {
		cluster, id, ok := parseProviderID(pid)
		if !ok {
			return nil, driver.Errorf(driver.InvalidArgument,
				"mem: %s: spec.providerID %q is not a mem provider ID (mem:///<cluster>/<vm-id>): fix or clear it", op, pid)
		}
		if cluster != spec.Cluster {
			return nil, driver.Errorf(driver.FailedPrecondition,
				"mem: %s: spec.providerID %q is in cluster %q but class %q is scoped to cluster %q: delete it with the class it was created from",
				op, pid, cluster, class.Name, spec.Cluster)
		}
		byID = id
	}

	c := d.cloud
	c.mu.Lock()
	var deleted []string
	if vm, ok := c.vms[byID]; ok {
		if vm.Role != spec.Role || vm.MachineName != name {
			c.mu.Unlock()
			return nil, driver.Errorf(driver.FailedPrecondition,
				"mem: %s: spec.providerID names VM %s of machine %q, role %q, not this machine in role %q: fix spec.providerID",
				op, vm.ID, vm.MachineName, vm.Role, spec.Role)
		}
		c.drop(vm.ID)
		deleted = append(deleted, vm.ID)
	}
	if byID == "" {
		// Only without a providerID does the name find the VMs: with one, another VM of the same
		// name (a duplicate the orphan collector is cleaning up) must survive.
		for _, vm := range c.scoped(name, spec) {
			c.drop(vm.ID)
			deleted = append(deleted, vm.ID)
		}
	}
	c.mu.Unlock()
	if len(deleted) > 0 {
		d.log.Debug("mem: deleted VMs", "machine", name, "vms", deleted)
	}
	if err := fault.after(op); err != nil {
		return nil, err
	}
	return &driver.DeleteMachineResponse{}, nil
}

// GetMachineStatus reports the machine's VM: NotFound without one, OutOfRange with several,
// and Uninitialized (with the VM's ProviderID and NodeName in the response) before
// InitializeMachine ran on a cloud that requires it.
func (d *Driver) GetMachineStatus(ctx context.Context, req *driver.GetMachineStatusRequest) (*driver.GetMachineStatusResponse, error) {
	var m *v1alpha1.Machine
	var class *v1alpha1.MachineClass
	var secret *corev1.Secret
	if req != nil {
		m, class, secret = req.Machine, req.MachineClass, req.Secret
	}
	name, op := opName("get status of machine", m)
	fault, err := d.begin(ctx, MethodStatus, op, name)
	if err != nil {
		return nil, err
	}
	spec, err := d.check(op, m, class, secret)
	if err != nil {
		return nil, err
	}

	c := d.cloud
	c.mu.Lock()
	vms := c.scoped(name, spec)
	ids := make([]string, len(vms))
	for i, vm := range vms {
		ids[i] = vm.ID
	}
	var vm VM
	if len(vms) > 0 {
		vm = vms[0].clone()
	}
	c.mu.Unlock()
	switch {
	case len(vms) == 0:
		return nil, notFound(op, name, spec)
	case len(vms) > 1:
		return nil, driver.Errorf(driver.OutOfRange,
			"mem: %s: %d VMs belong to the machine (%s): the orphan collector deletes the extra ones",
			op, len(vms), strings.Join(ids, ", "))
	}
	if err := fault.after(op); err != nil {
		return nil, err
	}
	resp := &driver.GetMachineStatusResponse{ProviderID: vm.ProviderID(), NodeName: vm.MachineName, Addresses: addresses(vm)}
	if !vm.Initialized {
		return resp, driver.Errorf(driver.Uninitialized,
			"mem: %s: VM %s is not initialized yet: call InitializeMachine", op, vm.ID)
	}
	return resp, nil
}

// ListMachines returns ProviderID -> machine name for every VM of the class's cluster and role.
func (d *Driver) ListMachines(ctx context.Context, req *driver.ListMachinesRequest) (*driver.ListMachinesResponse, error) {
	var class *v1alpha1.MachineClass
	var secret *corev1.Secret
	if req != nil {
		class, secret = req.MachineClass, req.Secret
	}
	op := "list machines"
	if class != nil {
		op = fmt.Sprintf("list machines of class %q", class.Name)
	}
	fault, err := d.begin(ctx, MethodList, op, "")
	if err != nil {
		return nil, err
	}
	spec, err := classSpec(class)
	if err != nil {
		return nil, err
	}
	if err := d.cloud.checkCredentials(secretLookup(secret), op); err != nil {
		return nil, err
	}

	c := d.cloud
	c.mu.Lock()
	list := map[string]string{}
	for _, vm := range c.vms {
		if vm.Cluster == spec.Cluster && vm.Role == spec.Role {
			list[vm.ProviderID()] = vm.MachineName
		}
	}
	c.mu.Unlock()
	if err := fault.after(op); err != nil {
		return nil, err
	}
	return &driver.ListMachinesResponse{MachineList: list}, nil
}

// GetVolumeIDs returns the volumeHandle of every CSI volume of driver CSIDriverName, in request
// order, and skips every other volume.
func (d *Driver) GetVolumeIDs(ctx context.Context, req *driver.GetVolumeIDsRequest) (*driver.GetVolumeIDsResponse, error) {
	const op = "get volume IDs"
	fault, err := d.begin(ctx, MethodVolumes, op, "")
	if err != nil {
		return nil, err
	}
	if req == nil {
		return nil, driver.Error(driver.InvalidArgument, "mem: get volume IDs: the request is missing")
	}
	ids := []string{}
	for i, pv := range req.PVSpecs {
		if pv == nil || pv.CSI == nil || pv.CSI.Driver != CSIDriverName {
			continue
		}
		if pv.CSI.VolumeHandle == "" {
			return nil, driver.Errorf(driver.InvalidArgument,
				"mem: %s: pvSpecs[%d].csi.volumeHandle is empty: set the volume's ID", op, i)
		}
		ids = append(ids, pv.CSI.VolumeHandle)
	}
	if err := fault.after(op); err != nil {
		return nil, err
	}
	return &driver.GetVolumeIDsResponse{VolumeIDs: ids}, nil
}

// begin counts the call, fails it when the context is done, and applies an injected fault's
// delay and (unless it is an after-effect fault) its error.
func (d *Driver) begin(ctx context.Context, m Method, op, machineName string) (*Fault, error) {
	fault := d.cloud.takeFault(m, machineName)
	if err := contextError(ctx, op); err != nil {
		return nil, err
	}
	if fault == nil {
		return nil, nil
	}
	if fault.Delay > 0 {
		timer := time.NewTimer(fault.Delay)
		defer timer.Stop()
		select {
		case <-ctx.Done():
			return nil, contextError(ctx, op)
		case <-timer.C:
		}
	}
	if fault.Code != driver.OK && !fault.AfterEffect {
		return nil, fault.err(op)
	}
	return fault, nil
}

// after returns the error of an after-effect fault.
func (f *Fault) after(op string) error {
	if f == nil || f.Code == driver.OK || !f.AfterEffect {
		return nil
	}
	return f.err(op)
}

// check validates a machine request: the machine, the class (provider and providerSpec) and the
// credentials.
func (d *Driver) check(op string, m *v1alpha1.Machine, class *v1alpha1.MachineClass, secret *corev1.Secret) (*ProviderSpec, error) {
	if m == nil {
		return nil, driver.Errorf(driver.InvalidArgument, "mem: %s: the request has no machine", op)
	}
	if m.Name == "" {
		return nil, driver.Errorf(driver.InvalidArgument, "mem: %s: the machine has no name: set metadata.name", op)
	}
	spec, err := classSpec(class)
	if err != nil {
		return nil, err
	}
	if err := d.cloud.checkCredentials(secretLookup(secret), op); err != nil {
		return nil, err
	}
	return spec, nil
}

func secretLookup(secret *corev1.Secret) func(string) string {
	return func(key string) string { return driver.SecretValue(secret, key) }
}

// opName returns the machine's name and the operation's description for messages.
func opName(verb string, m *v1alpha1.Machine) (name, op string) {
	if m == nil {
		return "", verb
	}
	return m.Name, fmt.Sprintf("%s %q", verb, m.Name)
}

func notFound(op, name string, spec *ProviderSpec) error {
	return driver.Errorf(driver.NotFound, "mem: %s: no VM of machine %q in cluster %q, role %q", op, name, spec.Cluster, spec.Role)
}

// contextError returns Canceled or DeadlineExceeded once ctx is done.
func contextError(ctx context.Context, op string) error {
	err := ctx.Err()
	if err == nil {
		return nil
	}
	code := driver.Canceled
	if errors.Is(err, context.DeadlineExceeded) {
		code = driver.DeadlineExceeded
	}
	return driver.Wrap(code, err, "mem: "+op)
}

func addresses(vm VM) []corev1.NodeAddress {
	return []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: vm.IP},
		{Type: corev1.NodeHostName, Address: vm.MachineName},
	}
}

var _ driver.Driver = (*Driver)(nil)
