package openstack

import (
	"context"
	"strings"

	"github.com/gophercloud/gophercloud/v2/openstack/blockstorage/v3/volumes"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"

	"github.com/machinist-io/machinist/core/driver"
)

// ListMachines returns the servers of the class's cluster and role (provider ID -> machine name)
// and, for the orphan collector, the machine ports and root volumes left over from servers that
// are gone: those are listed under their own ID ("openstack:///<region>/<port-or-volume-id>")
// and the machine name, and DeleteMachine of such an entry removes them.
//
// Nova cannot filter servers by metadata, so servers are filtered here (as Gardener's provider
// does); ports are filtered by tag and volumes by metadata in Neutron and Cinder.
func (d *Driver) ListMachines(ctx context.Context, req *driver.ListMachinesRequest) (*driver.ListMachinesResponse, error) {
	o, err := d.begin(ctx, req.MachineClass, req.Secret)
	if err != nil {
		return nil, err
	}
	pages, err := servers.List(o.s.compute, servers.ListOpts{}).AllPages(ctx)
	if err != nil {
		return nil, apiError("list servers", err)
	}
	all, err := servers.ExtractServers(pages)
	if err != nil {
		return nil, apiError("read servers", err)
	}
	out := map[string]string{}
	live := map[string]bool{}
	for _, s := range all {
		live[s.ID] = true
		if o.ours(s.Metadata) && s.Status != "DELETED" && s.Status != "SOFT_DELETED" {
			out[o.providerID(s.ID)] = s.Name
		}
	}

	pages, err = ports.List(o.s.network, ports.ListOpts{Tags: strings.Join(o.scope, ",")}).AllPages(ctx)
	if err != nil {
		return nil, apiError("list the class's ports", err)
	}
	ps, err := ports.ExtractPorts(pages)
	if err != nil {
		return nil, apiError("read ports", err)
	}
	for _, p := range ps {
		if p.Name != "" && hasTags(p.Tags, o.scope) && (p.DeviceID == "" || !live[p.DeviceID]) {
			out[o.providerID(p.ID)] = p.Name
		}
	}

	meta := map[string]string{}
	for _, k := range o.scope {
		meta[k] = o.spec.Tags[k]
	}
	pages, err = volumes.List(o.s.volume, volumes.ListOpts{Metadata: meta}).AllPages(ctx)
	if err != nil {
		return nil, apiError("list the class's volumes", err)
	}
	vs, err := volumes.ExtractVolumes(pages)
	if err != nil {
		return nil, apiError("read volumes", err)
	}
	for _, v := range vs {
		attached := false
		for _, a := range v.Attachments {
			if live[a.ServerID] {
				attached = true
			}
		}
		if v.Name != "" && o.ours(v.Metadata) && !attached && (v.Status == "available" || v.Status == "error") {
			out[o.providerID(v.ID)] = v.Name
		}
	}
	return &driver.ListMachinesResponse{MachineList: out}, nil
}
