package aws

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/kit"
)

// The standby modes a class picks with the machinist.io/standby-mode annotation: a plain stop
// (the default; EC2 keeps the EBS volumes, the OS boots again at start) or a hibernation (the
// memory is written to the encrypted root volume and restored at start). Hibernation needs
// instances launched with it, so CreateMachine launches them so when the class asks for it.
const (
	modeStop      = "stop"
	modeHibernate = "hibernate"
)

func standbyMode(class *v1alpha1.MachineClass) (string, error) {
	return kit.StandbyMode(ProviderName, class, modeStop, modeStop, modeHibernate)
}

// StopMachine stops (or hibernates) the machine's instance with StopInstances. An instance
// that is stopping or stopped is left as it is; one still pending is waited for (within ctx)
// until it runs. It returns once EC2 accepted the stop: the instance is stopping.
func (d *Driver) StopMachine(ctx context.Context, req *driver.StopMachineRequest) (*driver.StopMachineResponse, error) {
	ctx, cancel := d.opts.Bound(ctx)
	defer cancel()
	r, mode, inst, err := d.powerTarget(ctx, req.Machine, req.MachineClass, req.Secret)
	if err != nil {
		return nil, err
	}
	id := ptr.Deref(inst.InstanceId, "")
	if inst.State.Name == ec2types.InstanceStateNamePending {
		// EC2 refuses to stop a pending instance: wait until it runs.
		if inst, err = d.waitWhile(ctx, r, inst, ec2types.InstanceStateNamePending, "the stop"); err != nil {
			return nil, err
		}
	}
	if s := inst.State.Name; s == ec2types.InstanceStateNameStopping || s == ec2types.InstanceStateNameStopped {
		return &driver.StopMachineResponse{}, nil
	}
	hibernate := mode == modeHibernate
	if hibernate && (inst.HibernationOptions == nil || !ptr.Deref(inst.HibernationOptions.Configured, false)) {
		return nil, driver.Errorf(driver.FailedPrecondition,
			"aws: instance %s of machine %s was launched without hibernation, so EC2 cannot hibernate it, and the class's annotation %s asks for hibernate: replace the machine (new instances are launched with hibernation), or remove the annotation to stop it plainly",
			id, req.Machine.Name, kit.StandbyModeAnnotation)
	}
	_, err = r.api.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{id}, Hibernate: aws.Bool(hibernate)})
	if err != nil {
		return nil, powerStatus(r.spec, "stop instance "+id, err)
	}
	d.log.Info("aws: stopping instance", "machine", req.Machine.Name, "instance", id, "mode", mode)
	return &driver.StopMachineResponse{}, nil
}

// StartMachine starts the machine's stopped instance with StartInstances; one pending or
// running is left as it is, one still stopping is waited for (within ctx) until it is stopped.
// EC2 without capacity for it answers InsufficientInstanceCapacity: ResourceExhausted.
func (d *Driver) StartMachine(ctx context.Context, req *driver.StartMachineRequest) (*driver.StartMachineResponse, error) {
	ctx, cancel := d.opts.Bound(ctx)
	defer cancel()
	r, _, inst, err := d.powerTarget(ctx, req.Machine, req.MachineClass, req.Secret)
	if err != nil {
		return nil, err
	}
	id := ptr.Deref(inst.InstanceId, "")
	if inst.State.Name == ec2types.InstanceStateNameStopping {
		// EC2 refuses to start a stopping instance: wait until it is stopped.
		if inst, err = d.waitWhile(ctx, r, inst, ec2types.InstanceStateNameStopping, "the start"); err != nil {
			return nil, err
		}
	}
	if inst.State.Name == ec2types.InstanceStateNameStopped {
		if _, err := r.api.StartInstances(ctx, &ec2.StartInstancesInput{InstanceIds: []string{id}}); err != nil {
			return nil, powerStatus(r.spec, "start instance "+id, err)
		}
		d.log.Info("aws: starting instance", "machine", req.Machine.Name, "instance", id)
		// A started instance may have a new public IP: answer what EC2 shows now.
		if now, err := d.byID(ctx, r, id); err == nil && now != nil {
			inst = now
		}
	}
	pid, node, addrs := identity(r.spec.Region, inst)
	return &driver.StartMachineResponse{ProviderID: pid, NodeName: node, Addresses: addrs}, nil
}

// powerTarget decodes a stop or start: the request, the class's standby mode and the machine's
// live instance (NotFound when it has none).
func (d *Driver) powerTarget(ctx context.Context, m *v1alpha1.Machine, class *v1alpha1.MachineClass, secret *corev1.Secret) (*request, string, *ec2types.Instance, error) {
	r, err := d.prepare(ctx, class, secret, kit.ToReach)
	if err != nil {
		return nil, "", nil, err
	}
	mode, err := standbyMode(class)
	if err != nil {
		return nil, "", nil, err
	}
	inst, err := d.instanceOf(ctx, r, m)
	if err != nil {
		return nil, "", nil, err
	}
	return r, mode, inst, nil
}

// waitWhile polls the instance while it is in state (EC2 refuses the call in it) and returns it
// in its next state; Unavailable when ctx ends first, so the controller retries.
func (d *Driver) waitWhile(ctx context.Context, r *request, inst *ec2types.Instance, state ec2types.InstanceStateName, call string) (*ec2types.Instance, error) {
	id := ptr.Deref(inst.InstanceId, "")
	err := wait.PollUntilContextCancel(ctx, d.opts.PollInterval, false, func(ctx context.Context) (bool, error) {
		now, err := d.byID(ctx, r, id)
		if err != nil {
			return false, err
		}
		if now == nil || !live(now) {
			return false, driver.Errorf(driver.NotFound, "aws: instance %s is gone (terminated) while %s waited for it", id, call)
		}
		inst = now
		return inst.State.Name != state, nil
	})
	if err != nil {
		if driver.CodeOf(err) != driver.Unknown {
			return nil, err
		}
		return nil, driver.Errorf(driver.Unavailable, "aws: instance %s is still %s; %s is retried once it is not: %v", id, state, call, err)
	}
	return inst, nil
}

// powerStatus maps the errors of StopInstances and StartInstances: an instance that changed
// state meanwhile (IncorrectInstanceState) is Unavailable, so the call is retried.
func powerStatus(spec *ProviderSpec, what string, err error) error {
	if e, ok := apiErrorOf(err); ok && e.code == "IncorrectInstanceState" {
		return driver.Errorf(driver.Unavailable, "aws: %s: %s: the instance is changing state; the call is retried", what, e)
	}
	return statusOf(spec, what, err)
}

var _ driver.PowerDriver = (*Driver)(nil)
