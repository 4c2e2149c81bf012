package openstack

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/blockstorage/v3/volumes"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/flavors"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/keypairs"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/image/v2/images"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/attributestags"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/groups"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/networks"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/kit"
)

// CreateMachine creates the server of a machine, or returns the one that exists. A server named
// after the machine with the class's cluster and role tags is adopted: BUILD is waited for, ERROR
// is deleted and reported, any other state is returned (and a failure around an adopted server
// that is fine never deletes it). Otherwise the driver resolves flavor, image and
// networks, pre-creates the port (when subnets are given) and the root volume (when a root disk
// type is given), boots the server and waits for ACTIVE within ctx. On any failure it deletes
// what it created, so no server, port or volume is left behind, and returns Nova's message.
func (d *Driver) CreateMachine(ctx context.Context, req *driver.CreateMachineRequest) (*driver.CreateMachineResponse, error) {
	name, err := kit.MachineName(ProviderName, req.Machine)
	if err != nil {
		return nil, err
	}
	_, userData, err := kit.UserData(ProviderName, req.Secret)
	if err != nil {
		// Validate the class first so every problem is reported at once.
		if _, _, serr := specs.Decode(req.MachineClass, d.opts.SpecMode); serr != nil {
			return nil, serr
		}
		return nil, err
	}
	o, err := d.begin(ctx, req.MachineClass, req.Secret)
	if err != nil {
		return nil, err
	}
	existing, err := o.serversNamed(ctx, name)
	if err != nil {
		return nil, err
	}
	c := &creation{op: o, name: name}
	switch len(existing) {
	case 0:
		c.fresh = true
	case 1:
		c.serverID = existing[0].ID
		d.log.Info("openstack: adopting existing server", "machine", name, "server", c.serverID, "status", existing[0].Status)
	default:
		return nil, driver.Errorf(driver.OutOfRange, "openstack: machine %q already has %d servers: the orphan collector removes the extra ones", name, len(existing))
	}
	resp, err := c.run(ctx, userData)
	if err != nil {
		return nil, c.rollback(ctx, err)
	}
	return resp, nil
}

// creation is the state of one CreateMachine: what exists so far, so a failure can undo it.
type creation struct {
	*op
	name  string
	fresh bool // no server existed when the call began

	serverID    string
	owned       bool   // this call booted serverID
	broken      bool   // serverID is in ERROR
	portID      string // pre-created port, made or reused by this call
	volumeID    string // pre-created root volume, made or reused by this call
	createReqID string // request ID of the boot, quoted with Nova's fault
}

func (c *creation) run(ctx context.Context, userData []byte) (*driver.CreateMachineResponse, error) {
	if c.serverID == "" {
		if err := c.boot(ctx, userData); err != nil {
			return nil, err
		}
	}
	srv, err := c.waitActive(ctx)
	if err != nil {
		return nil, err
	}
	if err := c.allowPodCIDRs(ctx, srv.ID); err != nil {
		return nil, err
	}
	c.d.log.Info("openstack: server is active", "machine", c.name, "server", srv.ID)
	return &driver.CreateMachineResponse{ProviderID: c.providerID(srv.ID), NodeName: c.name, Addresses: addresses(srv)}, nil
}

// boot resolves what the server needs, pre-creates port and volume, and asks Nova for the server.
func (c *creation) boot(ctx context.Context, userData []byte) error {
	spec := c.spec
	flavorID, err := c.flavorID(ctx)
	if err != nil {
		return err
	}
	imageID, err := c.imageID(ctx)
	if err != nil {
		return err
	}
	nets, err := c.networks(ctx)
	if err != nil {
		return err
	}
	opts := servers.CreateOpts{
		Name:             c.name,
		FlavorRef:        flavorID,
		ImageRef:         imageID,
		AvailabilityZone: spec.AvailabilityZone,
		Networks:         nets,
		Metadata:         spec.Tags,
		// Encode here: gophercloud sends data that already decodes as base64 unchanged, which would
		// corrupt user data that happens to be valid base64.
		UserData:    []byte(base64.StdEncoding.EncodeToString(userData)),
		ConfigDrive: spec.UseConfigDrive,
	}
	if c.portID == "" {
		// Security groups apply to the ports Nova creates; a pre-created port already has them.
		opts.SecurityGroups = spec.SecurityGroups
	}
	if spec.RootDiskSize > 0 {
		if spec.RootDiskType != nil && *spec.RootDiskType != "" {
			if err := c.ensureVolume(ctx, imageID); err != nil {
				return err
			}
			opts.ImageRef = ""
			opts.BlockDevice = []servers.BlockDevice{{SourceType: servers.SourceVolume, UUID: c.volumeID, DestinationType: servers.DestinationVolume, BootIndex: 0, DeleteOnTermination: false}}
		} else {
			opts.ImageRef = ""
			opts.BlockDevice = []servers.BlockDevice{{SourceType: servers.SourceImage, UUID: imageID, DestinationType: servers.DestinationVolume, VolumeSize: spec.RootDiskSize, BootIndex: 0, DeleteOnTermination: true}}
		}
	}
	var builder servers.CreateOptsBuilder = opts
	if spec.KeyName != "" {
		builder = keypairs.CreateOptsExt{CreateOptsBuilder: opts, KeyName: spec.KeyName}
	}
	var hints servers.SchedulerHintOptsBuilder
	if spec.ServerGroupID != nil && *spec.ServerGroupID != "" {
		hints = servers.SchedulerHintOpts{Group: *spec.ServerGroupID}
	}
	res := servers.Create(ctx, c.s.compute, builder, hints)
	c.createReqID = requestID(res.Header)
	srv, err := res.Extract()
	if err != nil {
		return apiError(fmt.Sprintf("create server %q", c.name), err)
	}
	c.serverID, c.owned = srv.ID, true
	c.d.log.Info("openstack: server created", "machine", c.name, "server", srv.ID, "request", c.createReqID)
	return nil
}

// flavorID resolves the flavor name. A flavor the project cannot see is ResourceExhausted, as in
// Gardener's provider: the cloud offers no capacity of that kind to this project.
func (c *creation) flavorID(ctx context.Context) (string, error) {
	pages, err := flavors.ListDetail(c.s.compute, flavors.ListOpts{}).AllPages(ctx)
	if err != nil {
		return "", apiError("list flavors", err)
	}
	all, err := flavors.ExtractFlavors(pages)
	if err != nil {
		return "", apiError("read flavors", err)
	}
	for _, f := range all {
		if f.Name == c.spec.FlavorName {
			return f.ID, nil
		}
	}
	return "", driver.Errorf(driver.ResourceExhausted, "openstack: flavor %q (providerSpec.spec.flavorName) is not available to the project in region %q: choose another flavor or ask the cloud operator for access",
		c.spec.FlavorName, c.region)
}

// imageID returns the image ID, looking a name up in Glance: the newest active image of that name.
func (c *creation) imageID(ctx context.Context) (string, error) {
	if c.spec.ImageID != "" {
		return c.spec.ImageID, nil
	}
	pages, err := images.List(c.s.image, images.ListOpts{Name: c.spec.ImageName, Status: images.ImageStatusActive}).AllPages(ctx)
	if err != nil {
		return "", apiError(fmt.Sprintf("look up image %q", c.spec.ImageName), err)
	}
	all, err := images.ExtractImages(pages)
	if err != nil {
		return "", apiError("read images", err)
	}
	var found []images.Image
	for _, img := range all {
		if img.Name == c.spec.ImageName && img.Status == images.ImageStatusActive {
			found = append(found, img)
		}
	}
	if len(found) == 0 {
		return "", driver.Errorf(driver.InvalidArgument, "openstack: no active image named %q (providerSpec.spec.imageName) is visible to the project: upload it or set imageID", c.spec.ImageName)
	}
	sort.SliceStable(found, func(i, j int) bool { return found[i].CreatedAt.After(found[j].CreatedAt) })
	if len(found) > 1 {
		c.d.log.Info("openstack: several images share the name; using the newest", "image", c.spec.ImageName, "id", found[0].ID)
	}
	return found[0].ID, nil
}

// networks returns the server's network attachments, pre-creating the machine's port when
// subnets are given.
func (c *creation) networks(ctx context.Context) ([]servers.Network, error) {
	spec := c.spec
	if spec.NetworkID != "" {
		if subnets := spec.subnets(); len(subnets) > 0 {
			if err := c.ensurePort(ctx, subnets); err != nil {
				return nil, err
			}
			return []servers.Network{{Port: c.portID}}, nil
		}
		return []servers.Network{{UUID: spec.NetworkID}}, nil
	}
	out := make([]servers.Network, 0, len(spec.Networks))
	for i, n := range spec.Networks {
		id, err := c.networkID(ctx, i, n)
		if err != nil {
			return nil, err
		}
		out = append(out, servers.Network{UUID: id})
	}
	return out, nil
}

func (c *creation) networkID(ctx context.Context, i int, n OpenStackNetwork) (string, error) {
	if n.Id != "" {
		return n.Id, nil
	}
	pages, err := networks.List(c.s.network, networks.ListOpts{Name: n.Name}).AllPages(ctx)
	if err != nil {
		return "", apiError(fmt.Sprintf("look up network %q", n.Name), err)
	}
	all, err := networks.ExtractNetworks(pages)
	if err != nil {
		return "", apiError("read networks", err)
	}
	var ids []string
	for _, net := range all {
		if net.Name == n.Name {
			ids = append(ids, net.ID)
		}
	}
	switch len(ids) {
	case 1:
		return ids[0], nil
	case 0:
		return "", driver.Errorf(driver.InvalidArgument, "openstack: no network named %q (providerSpec.spec.networks[%d].name) is visible to the project", n.Name, i)
	}
	return "", driver.Errorf(driver.InvalidArgument, "openstack: %d networks are named %q (providerSpec.spec.networks[%d].name): set its id instead", len(ids), n.Name, i)
}

// podNetworkIDs returns the networks whose ports carry pod traffic.
func (c *creation) podNetworkIDs(ctx context.Context) (map[string]bool, error) {
	out := map[string]bool{}
	if c.spec.NetworkID != "" {
		out[c.spec.NetworkID] = true
		return out, nil
	}
	for i, n := range c.spec.Networks {
		if !n.PodNetwork {
			continue
		}
		id, err := c.networkID(ctx, i, n)
		if err != nil {
			return nil, err
		}
		out[id] = true
	}
	return out, nil
}

// securityGroupIDs resolves security group names to IDs for a pre-created port.
func (c *creation) securityGroupIDs(ctx context.Context) ([]string, error) {
	ids := []string{}
	for i, ref := range c.spec.SecurityGroups {
		if uuidRE.MatchString(ref) {
			ids = append(ids, ref)
			continue
		}
		pages, err := groups.List(c.s.network, groups.ListOpts{Name: ref}).AllPages(ctx)
		if err != nil {
			return nil, apiError(fmt.Sprintf("look up security group %q", ref), err)
		}
		all, err := groups.ExtractGroups(pages)
		if err != nil {
			return nil, apiError("read security groups", err)
		}
		var found []string
		for _, g := range all {
			if g.Name == ref {
				found = append(found, g.ID)
			}
		}
		switch len(found) {
		case 1:
			ids = append(ids, found[0])
		case 0:
			return nil, driver.Errorf(driver.InvalidArgument, "openstack: no security group named %q (providerSpec.spec.securityGroups[%d]) in the project", ref, i)
		default:
			return nil, driver.Errorf(driver.InvalidArgument, "openstack: %d security groups are named %q (providerSpec.spec.securityGroups[%d]): use its ID", len(found), ref, i)
		}
	}
	return ids, nil
}

// ensurePort reuses a free port of the machine left by an earlier attempt, or creates one on the
// subnets, tagged with the class's cluster and role keys.
func (c *creation) ensurePort(ctx context.Context, subnets []string) error {
	pages, err := ports.List(c.s.network, ports.ListOpts{Name: c.name, NetworkID: c.spec.NetworkID}).AllPages(ctx)
	if err != nil {
		return apiError(fmt.Sprintf("list ports named %q", c.name), err)
	}
	existing, err := ports.ExtractPorts(pages)
	if err != nil {
		return apiError("read ports", err)
	}
	for _, p := range existing {
		if p.Name == c.name && p.DeviceID == "" && hasTags(p.Tags, c.scope) {
			c.portID = p.ID
			c.d.log.Info("openstack: reusing the machine's port", "machine", c.name, "port", p.ID)
			return nil
		}
	}
	sgs, err := c.securityGroupIDs(ctx)
	if err != nil {
		return err
	}
	fixed := make([]ports.IP, 0, len(subnets))
	for _, s := range subnets {
		fixed = append(fixed, ports.IP{SubnetID: s})
	}
	opts := ports.CreateOpts{
		Name:                c.name,
		NetworkID:           c.spec.NetworkID,
		FixedIPs:            fixed,
		SecurityGroups:      &sgs,
		AllowedAddressPairs: addressPairs(c.spec.podCIDRs()),
	}
	p, err := ports.Create(ctx, c.s.network, opts).Extract()
	if isNotFound(err) {
		// Neutron answers 404 (SubnetNotFound, NetworkNotFound) for a subnet or network that does
		// not exist: a mistake in the class, not a missing machine.
		return driver.Errorf(driver.InvalidArgument, "%s: check providerSpec.spec.networkID and subnetIDs", driver.MessageOf(apiError(fmt.Sprintf("create port %q", c.name), err)))
	}
	if err != nil {
		return apiError(fmt.Sprintf("create port %q", c.name), err)
	}
	c.portID = p.ID
	if _, err := attributestags.ReplaceAll(ctx, c.s.network, "ports", p.ID, attributestags.ReplaceAllOpts{Tags: c.scope}).Extract(); err != nil {
		return apiError(fmt.Sprintf("tag port %s", p.ID), err)
	}
	c.d.log.Info("openstack: port created", "machine", c.name, "port", p.ID)
	return nil
}

func addressPairs(cidrs []string) []ports.AddressPair {
	out := make([]ports.AddressPair, 0, len(cidrs))
	for _, c := range cidrs {
		out = append(out, ports.AddressPair{IPAddress: c})
	}
	return out
}

func hasTags(have []string, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// scopeMetadata returns the class's cluster and role tags with their values.
func (c *creation) scopeMetadata() map[string]string {
	out := map[string]string{}
	for _, k := range c.scope {
		out[k] = c.spec.Tags[k]
	}
	return out
}

// ensureVolume reuses an available root volume of the machine left by an earlier attempt, or
// creates one from the image with the root disk size and type, and waits until it is available.
func (c *creation) ensureVolume(ctx context.Context, imageID string) error {
	existing, err := c.volumesNamed(ctx, c.name)
	if err != nil {
		return err
	}
	for _, v := range existing {
		if v.Status == "available" && len(v.Attachments) == 0 && v.Size == c.spec.RootDiskSize {
			c.volumeID = v.ID
			c.d.log.Info("openstack: reusing the machine's root volume", "machine", c.name, "volume", v.ID)
			return nil
		}
	}
	opts := volumes.CreateOpts{
		Name:             c.name,
		Size:             c.spec.RootDiskSize,
		VolumeType:       *c.spec.RootDiskType,
		ImageID:          imageID,
		AvailabilityZone: c.spec.AvailabilityZone,
		Metadata:         c.scopeMetadata(),
		Description:      "root volume of machine " + c.name,
	}
	v, err := volumes.Create(ctx, c.s.volume, opts, nil).Extract()
	if isNotFound(err) {
		// Cinder answers 404 for a volume type it does not know: a mistake in the class.
		return driver.Errorf(driver.InvalidArgument, "%s: check providerSpec.spec.rootDiskType", driver.MessageOf(apiError(fmt.Sprintf("create root volume %q", c.name), err)))
	}
	if err != nil {
		return apiError(fmt.Sprintf("create root volume %q", c.name), err)
	}
	c.volumeID = v.ID
	c.d.log.Info("openstack: root volume created", "machine", c.name, "volume", v.ID)
	status, failed := "", error(nil)
	err = wait.PollUntilContextCancel(ctx, c.d.opts.PollInterval, true, func(ctx context.Context) (bool, error) {
		v, err := volumes.Get(ctx, c.s.volume, c.volumeID).Extract()
		if err != nil {
			failed = apiError(fmt.Sprintf("read root volume %s", c.volumeID), err)
			return false, failed
		}
		status = v.Status
		switch v.Status {
		case "available":
			return true, nil
		case "error":
			failed = driver.Errorf(driver.Internal, "openstack: Cinder could not create root volume %s of machine %q (type %q, %d GB): check the volume type and the backend", c.volumeID, c.name, v.VolumeType, v.Size)
			return false, failed
		}
		return false, nil
	})
	if err != nil && failed == nil { // ctx ended between two reads
		return driver.Wrap(codeOfContext(err), err, fmt.Sprintf("openstack: root volume %s of machine %q is still %s", c.volumeID, c.name, status))
	}
	return failed
}

// waitActive polls the server until it is ACTIVE, fails, or ctx is done.
func (c *creation) waitActive(ctx context.Context) (*servers.Server, error) {
	start := time.Now()
	stillBuilding := func(cause error) error {
		return driver.Errorf(codeOfContext(cause), "openstack: server %s of machine %q is still building after %s: %v",
			c.serverID, c.name, time.Since(start).Round(time.Millisecond), cause)
	}
	var (
		built  *servers.Server
		failed error
	)
	err := wait.PollUntilContextCancel(ctx, c.d.opts.PollInterval, true, func(ctx context.Context) (bool, error) {
		srv, err := servers.Get(ctx, c.s.compute, c.serverID).Extract()
		switch {
		case ctx.Err() != nil:
			failed = stillBuilding(ctx.Err())
		case isNotFound(err):
			failed = driver.Errorf(driver.Unavailable, "openstack: server %s of machine %q disappeared while it was being built", c.serverID, c.name)
		case err != nil && driver.CodeOf(apiError("", err)) == driver.Unavailable:
			// A transient read error does not fail the create: keep polling.
			c.d.log.Info("openstack: reading server failed; polling again", "machine", c.name, "error", err)
			return false, nil
		case err != nil:
			failed = apiError(fmt.Sprintf("read server %s", c.serverID), err)
		case srv.Status == "ACTIVE":
			built = srv
			return true, nil
		case srv.Status == "ERROR":
			c.broken = true
			failed = c.faultError(srv)
		case srv.Status != "BUILD":
			// The server exists in another state (SHUTOFF, REBOOT, ...): it is the machine's VM;
			// the controller's health check decides what becomes of it.
			c.d.log.Info("openstack: server exists but is not ACTIVE", "machine", c.name, "server", srv.ID, "status", srv.Status)
			built = srv
			return true, nil
		default:
			return false, nil
		}
		return false, failed
	})
	switch {
	case failed != nil:
		return nil, failed
	case err != nil: // ctx ended between two reads
		return nil, stillBuilding(err)
	}
	return built, nil
}

// faultError reports a server in ERROR with Nova's fault.
func (c *creation) faultError(srv *servers.Server) error {
	msg := strings.TrimSpace(srv.Fault.Message)
	if msg == "" {
		msg = "no fault recorded"
	}
	code := driver.Internal
	lower := strings.ToLower(msg)
	if strings.Contains(lower, "no valid host") || strings.Contains(lower, "quota") || strings.Contains(lower, "exceeded max scheduling attempts") {
		code = driver.ResourceExhausted
	}
	reqID := ""
	if c.createReqID != "" {
		reqID = ", request " + c.createReqID
	}
	return driver.Errorf(code, "openstack: server %s of machine %q failed to build: Nova fault: %s (code %d%s)", srv.ID, c.name, msg, srv.Fault.Code, reqID)
}

// allowPodCIDRs lets the pod CIDRs through port security on the server's pod-network ports.
func (c *creation) allowPodCIDRs(ctx context.Context, serverID string) error {
	cidrs := c.spec.podCIDRs()
	if len(cidrs) == 0 {
		return nil
	}
	podNets, err := c.podNetworkIDs(ctx)
	if err != nil {
		return err
	}
	pages, err := ports.List(c.s.network, ports.ListOpts{DeviceID: serverID}).AllPages(ctx)
	if err != nil {
		return apiError(fmt.Sprintf("list ports of server %s", serverID), err)
	}
	all, err := ports.ExtractPorts(pages)
	if err != nil {
		return apiError("read ports", err)
	}
	for _, p := range all {
		if !podNets[p.NetworkID] {
			continue
		}
		pairs := p.AllowedAddressPairs
		changed := false
		for _, cidr := range cidrs {
			found := false
			for _, a := range pairs {
				if a.IPAddress == cidr {
					found = true
				}
			}
			if !found {
				pairs = append(pairs, ports.AddressPair{IPAddress: cidr})
				changed = true
			}
		}
		if !changed {
			continue
		}
		if _, err := ports.Update(ctx, c.s.network, p.ID, ports.UpdateOpts{AllowedAddressPairs: &pairs}).Extract(); err != nil {
			return apiError(fmt.Sprintf("allow the pod CIDRs on port %s", p.ID), err)
		}
	}
	return nil
}

// rollback deletes what this create made (or the adopted server that failed), so nothing leaks,
// and returns cause with a note on the cleanup. It runs on a context of its own when ctx is done.
func (c *creation) rollback(ctx context.Context, cause error) error {
	if driver.CodeOf(cause) == driver.OutOfRange {
		return cause
	}
	cctx, cancel := c.d.opts.Cleanup(ctx)
	defer cancel()
	var errs []error
	var gone []string
	unanswered := false
	// Delete the server this call booted, or an adopted one that failed to build; an adopted
	// server that is fine (or still building) stays for the next attempt.
	if c.serverID != "" && !c.owned && !c.broken {
		return driver.Errorf(driver.CodeOf(cause), "%s; the existing server %s was kept", driver.MessageOf(cause), c.serverID)
	}
	{
		ids := []string{}
		if c.serverID != "" {
			ids = append(ids, c.serverID)
		}
		if c.fresh && c.serverID == "" && mayHaveCreated(cause) {
			// The boot request failed in a way that may still have created the server.
			found, err := c.serversNamed(cctx, c.name)
			if err != nil {
				errs = append(errs, err)
			}
			for _, s := range found {
				ids = append(ids, s.ID)
			}
			// Nova may not have got to the request yet (it answered nothing before the
			// timeout): a server can still appear after this search.
			unanswered = len(found) == 0 && c.createReqID == ""
		}
		if len(ids) > 0 {
			if err := c.deleteServers(cctx, ids); err != nil {
				errs = append(errs, err)
			} else {
				gone = ids
			}
		}
	}
	// A port or volume is only freed once its server is gone; while the server remains, leave
	// them to the next attempt or the orphan collector rather than break a live server.
	if c.portID != "" && len(errs) == 0 {
		if err := c.deletePort(cctx, c.portID); err != nil {
			errs = append(errs, err)
		}
	}
	if c.volumeID != "" && len(errs) == 0 {
		if err := c.deleteVolume(cctx, c.volumeID); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		if err := c.cleanupArtefacts(cctx, c.name, gone); err != nil {
			errs = append(errs, err)
		}
	}
	what := "nothing was left behind"
	if unanswered {
		// Seen on a real Nova under load: the boot timed out on the client, no server of the
		// machine existed right after, and Nova created it a minute later.
		what = "Nova did not answer the boot request and may still create the server: the next create of the machine adopts it, and the orphan collector deletes it if the machine is gone"
	}
	if len(errs) > 0 {
		what = "cleanup failed, the orphan collector will retry: " + errors.Join(errs...).Error()
		c.d.log.Error("openstack: rollback after a failed create did not finish", "machine", c.name, "error", errors.Join(errs...))
	} else {
		c.d.log.Info("openstack: rolled back a failed create", "machine", c.name, "error", cause)
	}
	return driver.Errorf(driver.CodeOf(cause), "%s; %s", driver.MessageOf(cause), what)
}

// mayHaveCreated reports whether a failed boot request may nevertheless have created a server
// (the answer was lost or the service failed after accepting it).
func mayHaveCreated(err error) bool {
	switch driver.CodeOf(err) {
	case driver.Unavailable, driver.DeadlineExceeded, driver.Canceled, driver.Unknown:
		return true
	}
	return gophercloud.ResponseCodeIs(err, http.StatusInternalServerError)
}

func codeOfContext(err error) driver.Code {
	if errors.Is(err, context.Canceled) {
		return driver.Canceled
	}
	return driver.DeadlineExceeded
}
