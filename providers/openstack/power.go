package openstack

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/kit"
)

// The standby modes a class picks with the machinist.io/standby-mode annotation: a plain stop
// (Nova's os-stop: the server stays on its hypervisor, SHUTOFF) or a shelve (the server is
// offloaded, SHELVED_OFFLOADED, and its hypervisor freed; unshelve schedules it again).
const (
	modeStop   = "stop"
	modeShelve = "shelve"
)

func standbyMode(class *v1alpha1.MachineClass) (string, error) {
	return kit.StandbyMode(ProviderName, class, modeStop, modeStop, modeShelve)
}

// power is a stop or start of one machine's server.
type power struct {
	*op
	name string
	mode string
	srv  *servers.Server
}

// powerTarget decodes a stop or start and finds the machine's server (NotFound without one,
// OutOfRange with several).
func (d *Driver) powerTarget(ctx context.Context, m *v1alpha1.Machine, class *v1alpha1.MachineClass, secret *corev1.Secret) (*power, error) {
	name, err := kit.MachineName(ProviderName, m)
	if err != nil {
		return nil, err
	}
	mode, err := standbyMode(class)
	if err != nil {
		return nil, err
	}
	o, err := d.begin(ctx, class, secret)
	if err != nil {
		return nil, err
	}
	found, err := o.serversNamed(ctx, name)
	if err != nil {
		return nil, err
	}
	switch len(found) {
	case 0:
		return nil, driver.Errorf(driver.NotFound, "openstack: machine %q has no server", name)
	case 1:
		return &power{op: o, name: name, mode: mode, srv: &found[0]}, nil
	}
	return nil, driver.Errorf(driver.OutOfRange, "openstack: machine %q has %d servers: the orphan collector deletes the ones its machine does not name", name, len(found))
}

// StopMachine stops the machine's server with os-stop, or shelves it (shelve) when the class
// asks for it. A server already stopped, shelved or on its way there is left as it is; one in
// another action (building, starting) is waited for within ctx (Nova refuses an action while
// another runs). It returns once Nova accepted.
func (d *Driver) StopMachine(ctx context.Context, req *driver.StopMachineRequest) (*driver.StopMachineResponse, error) {
	ctx, cancel := d.opts.Bound(ctx)
	defer cancel()
	p, err := d.powerTarget(ctx, req.Machine, req.MachineClass, req.Secret)
	if err != nil {
		return nil, err
	}
	s := p.srv
	action, call := "os-stop", func() error { return servers.Stop(ctx, p.s.compute, s.ID).ExtractErr() }
	if p.mode == modeShelve {
		action, call = "shelve", func() error { return servers.Shelve(ctx, p.s.compute, s.ID).ExtractErr() }
	}
	step := decideStop(p.mode, s.Status, s.TaskState)
	if step == powerWait {
		// Nova refuses an action while another runs (409): wait until it settles.
		if s, err = p.waitSettled(ctx, "the stop", func(s *servers.Server) bool { return decideStop(p.mode, s.Status, s.TaskState) != powerWait }); err != nil {
			return nil, err
		}
		step = decideStop(p.mode, s.Status, s.TaskState)
	}
	switch step {
	case powerDone:
		return &driver.StopMachineResponse{}, nil
	case powerBroken:
		return nil, driver.Errorf(driver.FailedPrecondition, "openstack: server %s of machine %q is %s: it cannot be kept for standby; the machine's health check replaces it", s.ID, p.name, s.Status)
	}
	if err := call(); err != nil {
		return nil, actionError(action, s.ID, p.name, err)
	}
	d.log.Info("openstack: stopping server", "machine", p.name, "server", s.ID, "action", action)
	return &driver.StopMachineResponse{}, nil
}

// StartMachine starts the machine's server: os-start of a SHUTOFF one, unshelve of a shelved one
// (waiting, within ctx, until it is ACTIVE: Nova reports a scheduling failure only by putting
// the server back to SHELVED_OFFLOADED, which is ResourceExhausted). A server ACTIVE or starting
// is left as it is; one still stopping or shelving is waited for within ctx.
func (d *Driver) StartMachine(ctx context.Context, req *driver.StartMachineRequest) (*driver.StartMachineResponse, error) {
	ctx, cancel := d.opts.Bound(ctx)
	defer cancel()
	p, err := d.powerTarget(ctx, req.Machine, req.MachineClass, req.Secret)
	if err != nil {
		return nil, err
	}
	s := p.srv
	step := decideStart(s.Status, s.TaskState)
	if step == powerWait {
		if s, err = p.waitSettled(ctx, "the start", func(s *servers.Server) bool { return decideStart(s.Status, s.TaskState) != powerWait }); err != nil {
			return nil, err
		}
		step = decideStart(s.Status, s.TaskState)
	}
	switch step {
	case powerDone:
	case powerBroken:
		return nil, driver.Errorf(driver.FailedPrecondition, "openstack: server %s of machine %q is %s: it cannot be started; the machine's health check replaces it", s.ID, p.name, s.Status)
	case powerStart:
		if err := servers.Start(ctx, p.s.compute, s.ID).ExtractErr(); err != nil {
			return nil, actionError("os-start", s.ID, p.name, err)
		}
		d.log.Info("openstack: starting server", "machine", p.name, "server", s.ID)
	case powerUnshelve:
		if err := servers.Unshelve(ctx, p.s.compute, s.ID, servers.UnshelveOpts{}).ExtractErr(); err != nil {
			return nil, actionError("unshelve", s.ID, p.name, err)
		}
		d.log.Info("openstack: unshelving server", "machine", p.name, "server", s.ID)
		fallthrough
	case powerUnshelving:
		if s, err = p.waitUnshelved(ctx); err != nil {
			return nil, err
		}
	}
	return &driver.StartMachineResponse{ProviderID: p.providerID(s.ID), NodeName: p.name, Addresses: addresses(s)}, nil
}

// powerStep is what a stop or start does with a server in its state.
type powerStep int

const (
	powerDone       powerStep = iota // nothing: it is there or on its way
	powerWait                        // another action runs: retry later
	powerBroken                      // ERROR and the like: not for standby
	powerStop                        // os-stop or shelve
	powerStart                       // os-start
	powerUnshelve                    // unshelve
	powerUnshelving                  // an unshelve runs: wait for its outcome
)

// decideStop picks what a stop in mode does with a server of status and task state.
func decideStop(mode, status, task string) powerStep {
	shelved := status == "SHELVED" || status == "SHELVED_OFFLOADED" || strings.HasPrefix(task, "shelving")
	switch {
	case shelved && task != "unshelving":
		return powerDone // shelved is stopped too, whatever the mode
	case mode == modeStop && (status == "SHUTOFF" && task == "" || task == "powering-off"):
		return powerDone
	case task != "":
		return powerWait
	case status == "ACTIVE" || (mode == modeShelve && status == "SHUTOFF"):
		return powerStop
	case status == "BUILD":
		return powerWait
	}
	return powerBroken
}

// decideStart picks what a start does with a server of status and task state.
func decideStart(status, task string) powerStep {
	switch {
	case task == "unshelving" || task == "spawning" && status != "BUILD":
		return powerUnshelving
	case task == "powering-on" || status == "BUILD" || (status == "ACTIVE" && task == ""):
		return powerDone
	case task != "":
		return powerWait
	case status == "SHUTOFF":
		return powerStart
	case status == "SHELVED" || status == "SHELVED_OFFLOADED":
		return powerUnshelve
	}
	return powerBroken
}

// waitUnshelved polls the server until an unshelve ends: ACTIVE, or back to shelved without a
// task (no valid host: ResourceExhausted).
func (p *power) waitUnshelved(ctx context.Context) (*servers.Server, error) {
	start := time.Now()
	var (
		done   *servers.Server
		failed error
	)
	err := wait.PollUntilContextCancel(ctx, p.d.opts.PollInterval, false, func(ctx context.Context) (bool, error) {
		s, err := servers.Get(ctx, p.s.compute, p.srv.ID).Extract()
		switch {
		case ctx.Err() != nil:
			return false, ctx.Err()
		case err != nil && driver.CodeOf(apiError("", err)) == driver.Unavailable:
			return false, nil
		case err != nil:
			failed = apiError("read server "+p.srv.ID, err)
		case s.Status == "ACTIVE" && s.TaskState == "":
			done = s
			return true, nil
		case (s.Status == "SHELVED" || s.Status == "SHELVED_OFFLOADED") && s.TaskState == "":
			failed = driver.Errorf(driver.ResourceExhausted,
				"openstack: unshelve server %s of machine %q: Nova found no valid host for it (the server is back to %s): a fresh machine (or a fallback class) takes over, else the start is retried",
				s.ID, p.name, s.Status)
		case s.Status == "ERROR":
			msg := "no fault recorded"
			if s.Fault.Message != "" {
				msg = s.Fault.Message
			}
			failed = driver.Errorf(driver.Internal, "openstack: unshelve server %s of machine %q: the server went to ERROR: Nova fault: %s", s.ID, p.name, msg)
		default:
			return false, nil
		}
		return false, failed
	})
	switch {
	case failed != nil:
		return nil, failed
	case err != nil:
		return nil, driver.Errorf(codeOfContext(err), "openstack: server %s of machine %q is still unshelving after %s: %v", p.srv.ID, p.name, time.Since(start).Round(time.Millisecond), err)
	}
	return done, nil
}

// waitSettled polls the server until settled says its state allows the call, and returns it;
// Unavailable when ctx ends first, so the controller retries; NotFound when it is gone.
func (p *power) waitSettled(ctx context.Context, call string, settled func(*servers.Server) bool) (*servers.Server, error) {
	var srv *servers.Server
	var failed error
	err := wait.PollUntilContextCancel(ctx, p.d.opts.PollInterval, false, func(ctx context.Context) (bool, error) {
		s, err := servers.Get(ctx, p.s.compute, p.srv.ID).Extract()
		switch {
		case ctx.Err() != nil:
			return false, ctx.Err()
		case isNotFound(err):
			failed = driver.Errorf(driver.NotFound, "openstack: server %s of machine %q is gone while %s waited for it", p.srv.ID, p.name, call)
			return false, failed
		case err != nil && driver.CodeOf(apiError("", err)) == driver.Unavailable:
			return false, nil
		case err != nil:
			failed = apiError("read server "+p.srv.ID, err)
			return false, failed
		}
		srv = s
		return settled(s), nil
	})
	switch {
	case failed != nil:
		return nil, failed
	case err != nil:
		return nil, driver.Errorf(driver.Unavailable, "openstack: server %s of machine %q is still %s (task %s); %s is retried once it settles: %v",
			p.srv.ID, p.name, p.srv.Status, p.srv.TaskState, call, err)
	}
	return srv, nil
}

// actionError maps the error of a server action: 409 (the server changed state meanwhile) is
// Unavailable, retried; a server Nova no longer knows is NotFound.
func actionError(action, id, machine string, err error) error {
	st := apiError(fmt.Sprintf("%s server %s of machine %q", action, id, machine), err)
	if driver.CodeOf(st) == driver.Aborted {
		return driver.Errorf(driver.Unavailable, "%s: the server is changing state; the call is retried", driver.MessageOf(st))
	}
	return st
}

var _ driver.PowerDriver = (*Driver)(nil)
