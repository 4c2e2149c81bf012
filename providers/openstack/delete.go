package openstack

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/blockstorage/v3/volumes"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/kit"
)

// DeleteMachine deletes the server of a machine and the port and root volume made for it. The
// server is found by the machine's provider ID, or by name when it has none; a server without
// the class's cluster and role tags is never touched. Missing resources are fine, so the call is
// idempotent. It waits until the server is gone (bounded by ctx) so the port and volume are free.
func (d *Driver) DeleteMachine(ctx context.Context, req *driver.DeleteMachineRequest) (*driver.DeleteMachineResponse, error) {
	name, err := kit.MachineName(ProviderName, req.Machine)
	if err != nil {
		return nil, err
	}
	o, err := d.begin(ctx, req.MachineClass, req.Secret)
	if err != nil {
		return nil, err
	}
	var ids []string
	if pid := req.Machine.Spec.ProviderID; pid != "" {
		id, err := serverIDOf(pid)
		if err != nil {
			return nil, err
		}
		srv, err := servers.Get(ctx, o.s.compute, id).Extract()
		switch {
		case isNotFound(err):
			// Gone already, or the ID names a leftover port or volume listed by ListMachines.
		case err != nil:
			return nil, apiError(fmt.Sprintf("read server %s", id), err)
		case !o.ours(srv.Metadata):
			d.log.Warn("openstack: not deleting a server without the class's cluster and role tags", "machine", name, "server", id)
		default:
			ids = append(ids, srv.ID)
		}
	} else {
		found, err := o.serversNamed(ctx, name)
		if err != nil {
			return nil, err
		}
		for _, s := range found {
			ids = append(ids, s.ID)
		}
	}
	if len(ids) > 0 {
		if err := o.deleteServers(ctx, ids); err != nil {
			return nil, err
		}
	}
	if err := o.cleanupArtefacts(ctx, name, ids); err != nil {
		return nil, err
	}
	d.log.Info("openstack: machine deleted", "machine", name, "servers", ids)
	return &driver.DeleteMachineResponse{}, nil
}

// deleteServers deletes servers and waits until Nova no longer knows them.
func (o *op) deleteServers(ctx context.Context, ids []string) error {
	for _, id := range ids {
		err := servers.Delete(ctx, o.s.compute, id).ExtractErr()
		if err != nil && !isNotFound(err) {
			return apiError(fmt.Sprintf("delete server %s", id), err)
		}
	}
	start := time.Now()
	for _, id := range ids {
		var failed error
		err := wait.PollUntilContextCancel(ctx, o.d.opts.PollInterval, true, func(ctx context.Context) (bool, error) {
			_, err := servers.Get(ctx, o.s.compute, id).Extract()
			if isNotFound(err) {
				return true, nil
			}
			if err != nil && driver.CodeOf(apiError("", err)) != driver.Unavailable {
				failed = apiError(fmt.Sprintf("read server %s", id), err)
				return false, failed
			}
			return false, nil
		})
		switch {
		case failed != nil:
			return failed
		case err != nil: // ctx ended between two reads
			return driver.Errorf(codeOfContext(err), "openstack: server %s is still being deleted after %s: %v", id, time.Since(start).Round(time.Millisecond), err)
		}
	}
	return nil
}

// cleanupArtefacts deletes the machine's ports and root volumes that carry the class's cluster
// and role tags and are free, or were bound to one of the servers just deleted. Anything bound to
// another server is left alone: it may belong to a live server of the same name.
func (o *op) cleanupArtefacts(ctx context.Context, name string, goneServers []string) error {
	gone := map[string]bool{}
	for _, id := range goneServers {
		gone[id] = true
	}
	pages, err := ports.List(o.s.network, ports.ListOpts{Name: name}).AllPages(ctx)
	if err != nil {
		return apiError(fmt.Sprintf("list ports named %q", name), err)
	}
	ps, err := ports.ExtractPorts(pages)
	if err != nil {
		return apiError("read ports", err)
	}
	var errs []error
	for _, p := range ps {
		if p.Name != name || !hasTags(p.Tags, o.scope) || (p.DeviceID != "" && !gone[p.DeviceID]) {
			continue
		}
		if err := o.deletePort(ctx, p.ID); err != nil {
			errs = append(errs, err)
		}
	}
	vs, err := o.volumesNamed(ctx, name)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, v := range vs {
		free := true
		for _, a := range v.Attachments {
			if !gone[a.ServerID] {
				free = false
			}
		}
		if !free || v.Status == "deleting" {
			continue
		}
		if err := o.deleteVolume(ctx, v.ID); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// deletePort deletes a port; a missing port is fine.
func (o *op) deletePort(ctx context.Context, id string) error {
	err := ports.Delete(ctx, o.s.network, id).ExtractErr()
	if err != nil && !isNotFound(err) {
		return apiError(fmt.Sprintf("delete port %s", id), err)
	}
	if err == nil {
		o.d.log.Info("openstack: port deleted", "port", id)
	}
	return nil
}

// deleteVolume deletes a volume once it is detached, waiting (bounded by ctx) while Cinder
// finishes a detach; a missing volume is fine.
func (o *op) deleteVolume(ctx context.Context, id string) error {
	status, failed := "", error(nil)
	err := wait.PollUntilContextCancel(ctx, o.d.opts.PollInterval, true, func(ctx context.Context) (bool, error) {
		v, err := volumes.Get(ctx, o.s.volume, id).Extract()
		if isNotFound(err) {
			return true, nil
		}
		if err != nil {
			failed = apiError(fmt.Sprintf("read volume %s", id), err)
			return false, failed
		}
		status = v.Status
		switch v.Status {
		case "deleting":
			return true, nil
		case "available", "error", "error_restoring", "error_extending":
			err := volumes.Delete(ctx, o.s.volume, id, volumes.DeleteOpts{}).ExtractErr()
			switch {
			case err == nil:
				o.d.log.Info("openstack: volume deleted", "volume", id)
				return true, nil
			case isNotFound(err):
				return true, nil
			case !gophercloud.ResponseCodeIs(err, http.StatusBadRequest):
				failed = apiError(fmt.Sprintf("delete volume %s", id), err)
				return false, failed
			}
			// 400: the status changed under us (e.g. still detaching); look again.
		}
		return false, nil
	})
	switch {
	case failed != nil:
		return failed
	case err != nil: // ctx ended between two reads
		return driver.Errorf(codeOfContext(err), "openstack: volume %s is still %s and cannot be deleted yet: %v", id, status, err)
	}
	return nil
}

// volumesNamed lists the volumes named name that carry the class's cluster and role keys.
func (o *op) volumesNamed(ctx context.Context, name string) ([]volumes.Volume, error) {
	pages, err := volumes.List(o.s.volume, volumes.ListOpts{Name: name}).AllPages(ctx)
	if err != nil {
		return nil, apiError(fmt.Sprintf("list volumes named %q", name), err)
	}
	all, err := volumes.ExtractVolumes(pages)
	if err != nil {
		return nil, apiError("read volumes", err)
	}
	var out []volumes.Volume
	for _, v := range all {
		if v.Name == name && o.ours(v.Metadata) {
			out = append(out, v)
		}
	}
	return out, nil
}
