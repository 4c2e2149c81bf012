package local

import (
	"context"
	"errors"
	"time"

	"github.com/machinist-io/machinist/core/driver"
)

// StopMachine stops a machine's VM: its node agent stops (no kubelet, no heartbeat, no pods run)
// and its Node and Lease are deleted (best effort, as a cloud's node lifecycle would; the machine
// controller deletes the Node too). The record, provider ID, IP and pod CIDR stay: StartMachine
// brings the same machine back. Stopping a stopped machine is OK; an absent one (or one of
// another cluster) is NotFound.
func (d *Driver) StopMachine(ctx context.Context, req *driver.StopMachineRequest) (*driver.StopMachineResponse, error) {
	if req == nil {
		return nil, driver.Error(driver.InvalidArgument, "local: stop machine: empty request")
	}
	if err := ctxErr(ctx, "stop machine"); err != nil {
		return nil, err
	}
	name, err := machineName(req.Machine)
	if err != nil {
		return nil, err
	}
	_, ms, err := classSpec(req.MachineClass, d.env.SpecMode)
	if err != nil {
		return nil, err
	}
	unlock := d.lockName(name)
	defer unlock()
	rec, err := d.existing(name, ms.Cluster, "stop machine")
	if err != nil {
		return nil, err
	}
	if err := d.store.setStopped(name, true); err != nil {
		return nil, driver.Wrap(driver.Internal, err, "local: stop machine "+name)
	}
	a := d.fleet.removeAgentLocked(name)
	var c *cluster
	if a != nil {
		c = a.cluster
	} else {
		c, _ = d.fleet.cluster(rec.Target)
	}
	if c != nil {
		c.deleteNode(d.log, name)
	}
	d.log.Info("local: machine stopped", "machine", name)
	return &driver.StopMachineResponse{}, nil
}

// StartMachine starts a stopped machine's VM: its node registers again with the same name,
// provider ID, IP and pod CIDR, startDelay after the call (before it returns when 0), and turns
// Ready readyDelay later. Starting a running machine is OK; an absent one (or one of another
// cluster) is NotFound. providerSpec.startError injects a failure (ResourceExhausted: no capacity).
func (d *Driver) StartMachine(ctx context.Context, req *driver.StartMachineRequest) (*driver.StartMachineResponse, error) {
	if req == nil {
		return nil, driver.Error(driver.InvalidArgument, "local: start machine: empty request")
	}
	if err := ctxErr(ctx, "start machine"); err != nil {
		return nil, err
	}
	name, err := machineName(req.Machine)
	if err != nil {
		return nil, err
	}
	spec, ms, err := classSpec(req.MachineClass, d.env.SpecMode)
	if err != nil {
		return nil, err
	}
	unlock := d.lockName(name)
	defer unlock()
	rec, err := d.existing(name, ms.Cluster, "start machine")
	if err != nil {
		return nil, err
	}
	if !d.fleet.isStopped(name) {
		return startResponse(rec), nil
	}
	if err := d.inject(spec.StartError, "startError", name); err != nil {
		return nil, err
	}
	rec.RestartAt = time.Now().UTC().Add(ms.StartDelay).Truncate(time.Millisecond)
	if err := d.store.update(rec); err != nil {
		return nil, driver.Wrap(driver.Internal, err, "local: start machine "+name)
	}
	if err := d.store.setStopped(name, false); err != nil {
		return nil, driver.Wrap(driver.Internal, err, "local: start machine "+name)
	}
	if a, isNew := d.fleet.addAgentLocked(rec); isNew {
		if ms.StartDelay == 0 {
			d.fleet.sched.schedule(a, a.beat(ctx, time.Now()))
		} else {
			d.fleet.sched.schedule(a, a.bootAt())
		}
	}
	d.log.Info("local: machine started", "machine", name, "registersAt", rec.RestartAt)
	return startResponse(rec), nil
}

// existing reads the record of a machine of cluster; NotFound when there is none.
func (d *Driver) existing(name, cluster, op string) (*record, error) {
	rec, err := d.store.get(name)
	if errors.Is(err, errNotFound) || (err == nil && rec.Spec.Cluster != cluster) {
		return nil, driver.Errorf(driver.NotFound, "local: %s: machine %q does not exist in cluster %q", op, name, cluster)
	}
	if err != nil {
		return nil, driver.Wrap(driver.Internal, err, "local: "+op+" "+name)
	}
	return rec, nil
}

func startResponse(rec *record) *driver.StartMachineResponse {
	return &driver.StartMachineResponse{ProviderID: rec.ProviderID, NodeName: rec.Name, Addresses: addresses(rec)}
}

// Stopped reports whether a machine's VM is stopped (tests and `machinist driver`).
func (d *Driver) Stopped(machine string) bool { return d.fleet.isStopped(machine) }

var _ driver.PowerDriver = (*Driver)(nil)
