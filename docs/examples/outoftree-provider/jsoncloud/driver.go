// Package jsoncloud is a tiny machinist provider kept outside machinist's repository: its "cloud"
// is a JSON file of VMs (Cloud). It implements core/driver's contract, passes the conformance
// kit (core/drivertest), and is served to a machinist controller over grpcbridge by the main
// package of this module.
package jsoncloud

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
)

// ProviderName is the MachineClass.provider this driver serves.
const ProviderName = "jsoncloud"

// CSIDriverName is the CSI driver whose volumes GetVolumeIDs maps.
const CSIDriverName = "jsoncloud.csi.example.com"

// Driver manages the VMs of one Cloud.
type Driver struct {
	// InitializeMachine is not supported: the embedded driver answers it with Unimplemented.
	driver.UnimplementedDriver

	cloud *Cloud
	log   *slog.Logger
}

// New returns a driver of cloud; a nil log means slog.Default().
func New(cloud *Cloud, log *slog.Logger) *Driver {
	if log == nil {
		log = slog.Default()
	}
	return &Driver{cloud: cloud, log: log.With("provider", ProviderName)}
}

// CreateMachine creates the VM of a machine, or returns the one it has.
func (d *Driver) CreateMachine(ctx context.Context, req *driver.CreateMachineRequest) (*driver.CreateMachineResponse, error) {
	spec, name, err := d.begin(ctx, req.MachineClass, req.Machine, req.Secret)
	if err != nil {
		return nil, err
	}
	var vm VM
	err = d.cloud.update(func(s *state) error {
		if found := find(s, spec, req.Machine); len(found) > 0 {
			if vm = found[0]; vm.Size != spec.Size {
				return driver.Errorf(driver.AlreadyExists, "jsoncloud: machine %s has VM %s of size %s, the class asks for %s: delete the machine to replace it", name, vm.ID, vm.Size, spec.Size)
			}
			return nil
		}
		s.NextID++
		vm = VM{ID: fmt.Sprintf("vm-%06d", s.NextID), Name: name, Region: spec.Region, Size: spec.Size,
			Tags: maps.Clone(spec.Tags), UserData: driver.SecretValue(req.Secret, "userData"), Created: time.Now().UTC()}
		vm.Tags[MachineTag] = name
		s.VMs[vm.ID] = vm
		return nil
	})
	if err != nil {
		return nil, err
	}
	d.log.Info("created VM", "machine", name, "vm", vm.ID)
	return &driver.CreateMachineResponse{ProviderID: providerID(vm), NodeName: name}, nil
}

// DeleteMachine deletes the VMs of a machine; none is fine.
func (d *Driver) DeleteMachine(ctx context.Context, req *driver.DeleteMachineRequest) (*driver.DeleteMachineResponse, error) {
	spec, _, err := d.begin(ctx, req.MachineClass, req.Machine, req.Secret)
	if err != nil {
		return nil, err
	}
	return &driver.DeleteMachineResponse{}, d.cloud.update(func(s *state) error {
		for _, vm := range find(s, spec, req.Machine) {
			delete(s.VMs, vm.ID)
		}
		return nil
	})
}

// GetMachineStatus reports the VM of a machine.
func (d *Driver) GetMachineStatus(ctx context.Context, req *driver.GetMachineStatusRequest) (*driver.GetMachineStatusResponse, error) {
	spec, name, err := d.begin(ctx, req.MachineClass, req.Machine, req.Secret)
	if err != nil {
		return nil, err
	}
	var found []VM
	if err := d.cloud.view(func(s *state) error { found = find(s, spec, req.Machine); return nil }); err != nil {
		return nil, err
	}
	switch len(found) {
	case 0:
		return nil, driver.Errorf(driver.NotFound, "jsoncloud: machine %s has no VM", name)
	case 1:
		return &driver.GetMachineStatusResponse{ProviderID: providerID(found[0]), NodeName: name}, nil
	}
	return nil, driver.Errorf(driver.OutOfRange, "jsoncloud: machine %s has %d VMs", name, len(found))
}

// ListMachines lists the VMs of the class's cluster and role.
func (d *Driver) ListMachines(ctx context.Context, req *driver.ListMachinesRequest) (*driver.ListMachinesResponse, error) {
	spec, _, err := d.begin(ctx, req.MachineClass, nil, req.Secret)
	if err != nil {
		return nil, err
	}
	list := map[string]string{}
	return &driver.ListMachinesResponse{MachineList: list}, d.cloud.view(func(s *state) error {
		for _, vm := range s.VMs {
			if spec.owns(vm) {
				list[providerID(vm)] = vm.Name
			}
		}
		return nil
	})
}

// GetVolumeIDs maps volumes of CSIDriverName to their handle and skips all others.
func (d *Driver) GetVolumeIDs(ctx context.Context, req *driver.GetVolumeIDsRequest) (*driver.GetVolumeIDsResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, driver.StatusOf(err)
	}
	ids := []string{}
	for _, pv := range req.PVSpecs {
		if pv != nil && pv.CSI != nil && pv.CSI.Driver == CSIDriverName {
			ids = append(ids, pv.CSI.VolumeHandle)
		}
	}
	return &driver.GetVolumeIDsResponse{VolumeIDs: ids}, nil
}

// begin checks what every machine call needs: a live context, a valid class, a named machine
// (when machine is not nil) and the cloud's token.
func (d *Driver) begin(ctx context.Context, class *v1alpha1.MachineClass, machine *v1alpha1.Machine, secret *corev1.Secret) (*ProviderSpec, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", driver.StatusOf(err)
	}
	spec, err := classSpec(class)
	if err != nil {
		return nil, "", err
	}
	name := ""
	if machine != nil {
		if name = machine.Name; name == "" {
			return nil, "", driver.Error(driver.InvalidArgument, "jsoncloud: the machine has no name")
		}
	}
	return spec, name, d.cloud.view(func(s *state) error {
		if s.Token != "" && driver.SecretValue(secret, "token") != s.Token {
			return driver.Error(driver.Unauthenticated, "jsoncloud: the secret's token is missing or wrong: set the cloud's API token in key token")
		}
		return nil
	})
}

// find returns the class's VMs of machine m: by spec.providerID when set, else by name.
func find(s *state, spec *ProviderSpec, m *v1alpha1.Machine) []VM {
	var out []VM
	for _, vm := range s.VMs {
		match := vm.Name == m.Name
		if m.Spec.ProviderID != "" {
			match = providerID(vm) == m.Spec.ProviderID
		}
		if match && spec.owns(vm) {
			out = append(out, vm)
		}
	}
	return out
}

func providerID(vm VM) string { return "jsoncloud:///" + vm.Region + "/" + vm.ID }

var _ driver.Driver = (*Driver)(nil)
