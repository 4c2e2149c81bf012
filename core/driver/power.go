package driver

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// PowerDriver is an optional capability beside the six operations, as database/sql drivers have
// optional interfaces: stopping a machine's VM and starting it again, keeping its disks, network
// identity and provider ID. Standby machines (stopped after their first boot, resumed by a
// scale-up) need it. How a VM is stopped is the provider's choice within what the class allows:
// a plain stop by default, hibernation, shelving, suspension or deallocation where the class asks
// for it (each provider's README names the field).
//
// A driver that does not implement the interface has no standby. A driver that forwards to
// another (the gRPC bridge's clients, wrappers that count calls) implements it and also
// CapabilityReporter, since only the far side knows; callers ask through PowerOf, never by a bare
// type assertion.
type PowerDriver interface {
	// StopMachine stops the VM of req.Machine. A VM already stopped (or stopping) is OK, so the
	// call is idempotent; a VM that does not exist is NotFound. It returns once the cloud has
	// accepted the stop; GetMachineStatus keeps reporting the VM while it is stopped.
	StopMachine(ctx context.Context, req *StopMachineRequest) (*StopMachineResponse, error)

	// StartMachine starts the stopped VM of req.Machine. A VM already running (or starting) is
	// OK; a VM that does not exist is NotFound. A cloud without capacity for it answers
	// ResourceExhausted (EC2's InsufficientInstanceCapacity, Azure's AllocationFailed, …), so the
	// controller can create a fresh machine elsewhere instead.
	StartMachine(ctx context.Context, req *StartMachineRequest) (*StartMachineResponse, error)
}

// StopMachineRequest asks for a machine's VM to be stopped.
type StopMachineRequest struct {
	Machine      *v1alpha1.Machine
	MachineClass *v1alpha1.MachineClass
	Secret       *corev1.Secret
}

// StopMachineResponse reports a stop.
type StopMachineResponse struct {
	// LastKnownState is opaque state stored in Machine.status for the next call.
	LastKnownState string
}

// StartMachineRequest asks for a machine's stopped VM to be started.
type StartMachineRequest struct {
	Machine      *v1alpha1.Machine
	MachineClass *v1alpha1.MachineClass
	Secret       *corev1.Secret
}

// StartMachineResponse describes the started VM.
type StartMachineResponse struct {
	ProviderID string
	NodeName   string
	Addresses  []corev1.NodeAddress
	// LastKnownState is opaque state stored in Machine.status for the next call.
	LastKnownState string
}

// Capabilities are the optional capabilities a driver serves.
type Capabilities struct {
	// Power: StopMachine and StartMachine work.
	Power bool
}

// CapabilityReporter is implemented by drivers whose optional capabilities depend on what they
// forward to. A provider built before a capability existed reports it absent.
type CapabilityReporter interface {
	Capabilities(ctx context.Context) (Capabilities, error)
}

// CapabilitiesOf returns the optional capabilities driver d serves: what it reports when it is a
// CapabilityReporter, else the interfaces it implements.
func CapabilitiesOf(ctx context.Context, d Driver) (Capabilities, error) {
	if r, ok := d.(CapabilityReporter); ok {
		return r.Capabilities(ctx)
	}
	_, power := d.(PowerDriver)
	return Capabilities{Power: power}, nil
}

// PowerOf returns the PowerDriver of provider's driver d, or an Unimplemented error saying that
// the provider cannot stop and start machines (so standby is unavailable for its classes).
func PowerOf(ctx context.Context, provider string, d Driver) (PowerDriver, error) {
	p, ok := d.(PowerDriver)
	if ok {
		caps, err := CapabilitiesOf(ctx, d)
		if err != nil {
			return nil, Wrap(CodeOf(err), err, fmt.Sprintf("provider %q: asking which capabilities it serves", provider))
		}
		ok = caps.Power
	}
	if !ok {
		return nil, Errorf(Unimplemented, "provider %q cannot stop and start machines, so it has no standby machines: "+
			"remove the machinist.io/standby annotation, or use a provider build that serves StopMachine and StartMachine", provider)
	}
	return p, nil
}
