package gcp

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/google/uuid"
	compute "google.golang.org/api/compute/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/kit"
)

// CreateMachine creates the machine's instance (named after the machine, with its disks) and
// waits for the insert operation, or adopts the instance of that name when it carries the
// class's cluster and role tags. When the insert fails or is not awaited to its end, the
// instance is deleted again before the error is returned.
func (d *Driver) CreateMachine(ctx context.Context, req *driver.CreateMachineRequest) (*driver.CreateMachineResponse, error) {
	spec, cs, err := d.prepare(req.MachineClass, req.Secret, kit.ToCreate)
	if err != nil {
		return nil, err
	}
	name, err := instanceName(req.Machine)
	if err != nil {
		return nil, err
	}
	udKey, userData, err := userDataItem(req.Secret)
	if err != nil {
		return nil, err
	}
	for i, m := range spec.Metadata {
		if m.Key == udKey {
			return nil, driver.Errorf(driver.InvalidArgument, "gcp: machineClass %q: providerSpec.metadata[%d].key %s is where the secret's userData goes (%s): remove the item",
				req.MachineClass.Name, i, udKey, "a #cloud-config becomes user-data, anything else startup-script")
		}
	}
	ctx, cancel := d.opts.Bound(ctx)
	defer cancel()
	zone := spec.Zone
	log := d.log.With("machine", name, "zone", zone)
	what := fmt.Sprintf("create instance %s in %s", name, zone)
	// One request ID for the call: Compute Engine ignores a repeated insert with it.
	requestID := uuid.NewString()
	for range 3 {
		in, err := cs.getInstance(ctx, zone, name)
		switch {
		case isNotFound(err):
			resp, err, exists := d.insert(ctx, cs, spec, name, udKey, userData, requestID, log)
			if exists {
				continue // made by a concurrent call: adopt it
			}
			return resp, err
		case err != nil:
			return nil, statusOf("get instance "+name, err)
		}
		if !owns(spec, in) {
			return nil, driver.Errorf(driver.AlreadyExists, "gcp: instance %q exists in %s without this class's cluster and role tags (%v): it is not this machine's; delete or rename it, or rename the machine",
				name, zone, spec.scopeTags())
		}
		if in.Status == "STOPPING" {
			return nil, driver.Errorf(driver.Unavailable, "gcp: instance %q in %s is stopping or being deleted; retry once it is stopped or gone", name, zone)
		}
		log.Info("gcp: adopting existing instance", "status", in.Status)
		return d.createResponse(cs, zone, in), nil
	}
	return nil, driver.Errorf(driver.Aborted, "gcp: %s: the instance appeared and disappeared while creating it; retry", what)
}

// insert creates the instance and awaits the operation. exists reports that an instance of that
// name appeared meanwhile (409).
func (d *Driver) insert(ctx context.Context, cs *clientSet, spec *ProviderSpec, name, udKey, userData, requestID string, log *slog.Logger) (resp *driver.CreateMachineResponse, err error, exists bool) {
	zone := spec.Zone
	what := fmt.Sprintf("create instance %s in %s", name, zone)
	in, refs := buildInstance(spec, cs.project, name, udKey, userData)
	log.Info("gcp: creating instance", "machineType", spec.MachineType)
	op, err := cs.insertInstance(ctx, zone, requestID, in)
	if isAlreadyExists(err) {
		return nil, nil, true
	}
	if err != nil {
		// Nothing was started. (Had Compute Engine started it and the answer been lost, the
		// instance carries the class's tags: the next create adopts it.)
		return nil, statusOf(what, err, refs...), false
	}
	if err := d.await(ctx, cs, zone, op); err != nil {
		return nil, d.cleanupAfter(ctx, cs, zone, name, op.TargetId, statusOf(what, err, refs...), log), false
	}
	got, err := cs.getInstance(ctx, zone, name)
	if err != nil {
		// The instance is made; its addresses matter only without a target cluster.
		log.Warn("gcp: created instance, reading its addresses failed", "error", driver.MessageOf(statusOf("get instance "+name, err)))
		got = &compute.Instance{Name: name}
	}
	log.Info("gcp: created instance")
	return d.createResponse(cs, zone, got), nil, false
}

// cleanupAfter deletes the instance a failed create left (only the one this call made, by its
// id) and returns failure, noting a failed cleanup in it. It runs on its
// own deadline: the caller's context may be why the create failed.
func (d *Driver) cleanupAfter(ctx context.Context, cs *clientSet, zone, name string, id uint64, failure error, log *slog.Logger) error {
	ctx, cancel := d.opts.Cleanup(ctx)
	defer cancel()
	in, err := cs.getInstance(ctx, zone, name)
	if isNotFound(err) {
		return failure
	}
	if err == nil && in.Id != id {
		return failure // another call's instance
	}
	if err == nil {
		log.Info("gcp: deleting the instance of the failed create")
		err = d.deleteInstance(ctx, cs, zone, name)
	}
	if err != nil {
		cerr := statusOf("delete instance "+name+" after the failed create", err)
		log.Warn("gcp: cleanup after failed create left the instance for the orphan collector", "error", driver.MessageOf(cerr))
		return driver.Errorf(driver.CodeOf(failure), "%s; deleting the instance again also failed, the orphan collector will retry: %s", driver.MessageOf(failure), driver.MessageOf(cerr))
	}
	return failure
}

func (d *Driver) createResponse(cs *clientSet, zone string, in *compute.Instance) *driver.CreateMachineResponse {
	return &driver.CreateMachineResponse{
		ProviderID:     providerID(cs.project, zone, in.Name),
		NodeName:       in.Name,
		LastKnownState: "Created " + providerID(cs.project, zone, in.Name),
		Addresses:      addresses(in),
	}
}

// addresses are the instance's internal and external IPv4 addresses and its host name.
func addresses(in *compute.Instance) []corev1.NodeAddress {
	var out []corev1.NodeAddress
	for _, nic := range in.NetworkInterfaces {
		if nic.NetworkIP != "" {
			out = append(out, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: nic.NetworkIP})
		}
	}
	for _, nic := range in.NetworkInterfaces {
		for _, ac := range nic.AccessConfigs {
			if ac.NatIP != "" {
				out = append(out, corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: ac.NatIP})
			}
		}
	}
	return append(out, corev1.NodeAddress{Type: corev1.NodeHostName, Address: in.Name})
}
