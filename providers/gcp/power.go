package gcp

import (
	"context"
	"fmt"
	"slices"
	"strings"

	compute "google.golang.org/api/compute/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/kit"
)

// Standby modes (the MachineClass annotation kit.StandbyModeAnnotation).
const (
	// ModeStop (the default) stops the instance (TERMINATED): Compute Engine bills no vCPUs or
	// memory, only its disks and reserved addresses; a start boots it again and can meet a
	// stockout.
	ModeStop = "stop"
	// ModeSuspend suspends the instance: its memory is saved, so a resume continues where it
	// left off, faster than a boot; Compute Engine bills the storage of the saved memory besides
	// the disks. Instances with GPUs, Local SSDs, more than 208 GB of memory or Confidential
	// Computing cannot be suspended.
	ModeSuspend = "suspend"
)

// The power calls of the Compute API.
const (
	verbStop    = "stop"
	verbStart   = "start"
	verbSuspend = "suspend"
	verbResume  = "resume"
)

// standbyMode is the class's standby mode.
func standbyMode(class *v1alpha1.MachineClass) (string, error) {
	return kit.StandbyMode(ProviderName, class, ModeStop, ModeStop, ModeSuspend)
}

// StopMachine stops the machine's instance (or suspends it, when the class asks for suspend) and
// returns when Compute Engine has done so. An instance stopped, suspended or on its way there is
// left alone.
func (d *Driver) StopMachine(ctx context.Context, req *driver.StopMachineRequest) (*driver.StopMachineResponse, error) {
	if req == nil {
		return nil, driver.Error(driver.InvalidArgument, "gcp: stop machine: the request is empty")
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
	verb, err := stopVerb(mode, t.in)
	if err != nil {
		return nil, err
	}
	if verb != "" {
		if err := d.powerCall(ctx, t, verb); err != nil {
			return nil, err
		}
	}
	return &driver.StopMachineResponse{}, nil
}

// StartMachine starts the machine's stopped instance, or resumes its suspended one, and returns
// when it runs. A stockout is ResourceExhausted; the instance stays stopped or suspended.
func (d *Driver) StartMachine(ctx context.Context, req *driver.StartMachineRequest) (*driver.StartMachineResponse, error) {
	if req == nil {
		return nil, driver.Error(driver.InvalidArgument, "gcp: start machine: the request is empty")
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
	verb, err := startVerb(t.in)
	if err != nil {
		return nil, err
	}
	if verb != "" {
		if err := d.powerCall(ctx, t, verb); err != nil {
			return nil, err
		}
		// A started instance may have a new ephemeral external address.
		if in, err := t.cs.getInstance(ctx, t.zone, t.name); err == nil {
			t.in = in
		} else {
			d.log.Warn("gcp: started instance, reading its addresses failed", "machine", t.name, "error", driver.MessageOf(statusOf("get instance "+t.name, err)))
		}
	}
	return &driver.StartMachineResponse{
		ProviderID: providerID(t.cs.project, t.zone, t.name),
		NodeName:   t.name,
		Addresses:  addresses(t.in),
	}, nil
}

// stopVerb decides how to stop an instance in mode: the power call to make, "" when it is
// stopped enough already, or why it cannot be stopped that way now.
func stopVerb(mode string, in *compute.Instance) (string, error) {
	switch {
	case slices.Contains([]string{"TERMINATED", "STOPPING", "SUSPENDED", "SUSPENDING"}, in.Status):
		// Stopped or suspended (or on the way): either is a standby instance. A suspended one is
		// not stopped in stop mode, which would throw its saved memory away.
		return "", nil
	case mode == ModeStop:
		return verbStop, nil
	case in.Status != "RUNNING":
		return "", driver.Errorf(driver.Unavailable, "gcp: instance %q is %s: Compute Engine suspends only a RUNNING instance; retry once it runs", in.Name, in.Status)
	}
	if why := unsuspendable(in); why != "" {
		return "", driver.Errorf(driver.InvalidArgument, "gcp: instance %q cannot be suspended: %s: set the MachineClass annotation %s to %q (or remove it)",
			in.Name, why, kit.StandbyModeAnnotation, ModeStop)
	}
	return verbSuspend, nil
}

// startVerb decides how to start an instance: the power call, "" when it runs (or is on the
// way), or why it cannot be started now.
func startVerb(in *compute.Instance) (string, error) {
	switch in.Status {
	case "RUNNING", "PROVISIONING", "STAGING":
		return "", nil
	case "TERMINATED":
		return verbStart, nil
	case "SUSPENDED":
		return verbResume, nil
	}
	return "", driver.Errorf(driver.Unavailable, "gcp: instance %q is %s: it can be started once it is stopped or suspended; retry", in.Name, in.Status)
}

// gpuMachineFamilies are the machine families whose machine types come with GPUs attached.
var gpuMachineFamilies = []string{"a2-", "a3-", "a4-", "g2-", "g4-"}

// unsuspendable says why Compute Engine does not suspend an instance, or "".
func unsuspendable(in *compute.Instance) string {
	mt := lastSegment(in.MachineType)
	switch {
	case len(in.GuestAccelerators) > 0 || slices.ContainsFunc(gpuMachineFamilies, func(p string) bool { return strings.HasPrefix(mt, p) }):
		return "it has GPUs attached"
	case strings.Contains(mt, "megamem") || strings.Contains(mt, "ultramem"):
		return fmt.Sprintf("machine type %s has more than 208 GB of memory", mt)
	case in.ConfidentialInstanceConfig != nil && in.ConfidentialInstanceConfig.EnableConfidentialCompute:
		return "it is a Confidential VM"
	}
	for _, disk := range in.Disks {
		if disk.Type == "SCRATCH" {
			return "it has Local SSDs, whose data a suspend would have to discard"
		}
	}
	return ""
}

// powerTarget is the instance a power call acts on.
type powerTarget struct {
	cs         *clientSet
	zone, name string
	in         *compute.Instance
}

// powerTarget reads the machine's instance; NotFound when there is none of the class.
func (d *Driver) powerTarget(ctx context.Context, m *v1alpha1.Machine, class *v1alpha1.MachineClass, secret *corev1.Secret) (*powerTarget, error) {
	spec, cs, err := d.prepare(class, secret, kit.ToReach)
	if err != nil {
		return nil, err
	}
	zone, name, err := machineInstance(m, spec)
	if err != nil {
		return nil, err
	}
	in, err := cs.getInstance(ctx, zone, name)
	if isNotFound(err) {
		return nil, driver.Errorf(driver.NotFound, "gcp: no instance %q in %s of project %s", name, zone, cs.project)
	}
	if err != nil {
		return nil, statusOf("get instance "+name, err)
	}
	if !owns(spec, in) {
		return nil, driver.Errorf(driver.NotFound, "gcp: instance %q in %s lacks this class's cluster and role tags, so it is not this machine's", name, zone)
	}
	return &powerTarget{cs: cs, zone: zone, name: name, in: in}, nil
}

// powerCall makes the power call verb on the instance and awaits its operation.
func (d *Driver) powerCall(ctx context.Context, t *powerTarget, verb string) error {
	what := fmt.Sprintf("%s instance %s in %s", verb, t.name, t.zone)
	d.log.Info("gcp: "+verb+" instance", "machine", t.name, "zone", t.zone, "status", t.in.Status)
	op, err := t.cs.power(ctx, verb, t.zone, t.name)
	if err == nil {
		err = d.await(ctx, t.cs, t.zone, op)
	}
	if isNotFound(err) {
		return driver.Errorf(driver.NotFound, "gcp: %s: the instance is gone", what)
	}
	if err != nil {
		return statusOf(what, err)
	}
	return nil
}

var _ driver.PowerDriver = (*Driver)(nil)
