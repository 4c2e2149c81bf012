// Package openstack is the OpenStack driver: servers in Nova, ports in Neutron, root volumes in
// Cinder and images in Glance, all through gophercloud v2. It accepts the provider specs and
// secrets written for Gardener's OpenStack provider unchanged (see README.md).
//
// Every resource the driver makes is named after its machine and carries the class's cluster and
// role tag keys (server metadata, port tags, volume metadata); the driver never touches a resource
// without them. One authenticated client per credential set is cached and its Keystone token is
// renewed before it expires, so operations do not ask Keystone for tokens.
package openstack

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	corev1 "k8s.io/api/core/v1"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/kit"
)

// ProviderName is the registry name of the driver; MachineClass.provider "OpenStack" selects it.
const ProviderName = "openstack"

// Options tune the driver. Zero values take the defaults noted per field.
type Options struct {
	// Options are every provider's: Log, SpecMode, HTTPTransport (nil: kit.Transport with the
	// secret's caCert, insecure and client certificate), MaxClientSets (default 64),
	// OperationTimeout (default none: a call without deadline is not bounded), CleanupTimeout
	// (the rollback of a failed create once the caller's context is done; default 5m) and
	// PollInterval (between status reads while waiting for a server, port or volume; default 5s).
	kit.Options
	// TokenRenewBefore renews a Keystone token this long before it expires (at most a quarter of
	// its lifetime); default 10m.
	TokenRenewBefore time.Duration
	// HTTPTimeout bounds one HTTP request; default 60s.
	HTTPTimeout time.Duration
	// MaxRetryWait caps one wait before a retry: what a 429 asks for with Retry-After, and the
	// pause before retrying a gateway error; default 30s.
	MaxRetryWait time.Duration
	// Retries of a throttled (429) request, or of an idempotent one that hit a gateway error;
	// default 3.
	Retries int
}

func (o Options) withDefaults() Options {
	o.Options = o.WithDefaults(kit.Options{MaxClientSets: 64, CleanupTimeout: 5 * time.Minute, PollInterval: 5 * time.Second})
	if o.TokenRenewBefore <= 0 {
		o.TokenRenewBefore = 10 * time.Minute
	}
	if o.HTTPTimeout <= 0 {
		o.HTTPTimeout = 60 * time.Second
	}
	if o.MaxRetryWait <= 0 {
		o.MaxRetryWait = 30 * time.Second
	}
	if o.Retries <= 0 {
		o.Retries = 3
	}
	return o
}

// Driver is the OpenStack driver. It is safe for concurrent use.
type Driver struct {
	// InitializeMachine is not needed: a server is ready when Nova reports it ACTIVE.
	driver.UnimplementedDriver

	opts     Options
	log      *slog.Logger
	sessions *pool
}

// open is the registry's factory of the OpenStack driver (register.go).
func open(o kit.Options, _ kit.Env) driver.Driver { return New(Options{Options: o}) }

// New returns a driver. It contacts no cloud: credentials arrive with each request.
func New(opts Options) *Driver {
	opts = opts.withDefaults()
	log := opts.Logger(ProviderName)
	return &Driver{opts: opts, log: log, sessions: newPool(opts, log)}
}

// op is one request's decoded inputs and its authenticated session.
type op struct {
	d      *Driver
	spec   *MachineProviderConfigSpec
	s      *session
	region string
	scope  []string
}

// begin checks the class, decodes its spec and the credentials and returns the session.
func (d *Driver) begin(ctx context.Context, class *v1alpha1.MachineClass, secret *corev1.Secret) (*op, error) {
	spec, _, err := decodeSpec(class, d.opts.SpecMode)
	if err != nil {
		return nil, err
	}
	creds, err := credentialsFrom(secret)
	if err != nil {
		return nil, err
	}
	region := spec.Region
	s, err := d.sessions.get(ctx, creds, region)
	if err != nil {
		return nil, err
	}
	return &op{d: d, spec: spec, s: s, region: region, scope: spec.scope()}, nil
}

// ours reports whether a resource carries every cluster and role tag key of the class.
func (o *op) ours(keys map[string]string) bool {
	for _, k := range o.scope {
		if _, ok := keys[k]; !ok {
			return false
		}
	}
	return true
}

// providerID renders the provider ID of a server, as Gardener's provider does.
func (o *op) providerID(serverID string) string {
	return "openstack:///" + o.region + "/" + serverID
}

// serverIDOf returns the server ID in a provider ID "openstack:///<region>/<id>".
func serverIDOf(providerID string) (string, error) {
	rest, ok := strings.CutPrefix(providerID, "openstack://")
	id := rest[strings.LastIndex(rest, "/")+1:]
	if !ok || id == "" {
		return "", driver.Errorf(driver.InvalidArgument, "openstack: provider ID %q is not of the form openstack:///<region>/<server-id>", providerID)
	}
	return id, nil
}

// serversNamed lists the servers named name that belong to the class's cluster and role.
func (o *op) serversNamed(ctx context.Context, name string) ([]servers.Server, error) {
	pages, err := servers.List(o.s.compute, servers.ListOpts{Name: "^" + regexp.QuoteMeta(name) + "$"}).AllPages(ctx)
	if err != nil {
		return nil, apiError(fmt.Sprintf("list servers named %q", name), err)
	}
	all, err := servers.ExtractServers(pages)
	if err != nil {
		return nil, apiError("read the server list", err)
	}
	var out []servers.Server
	for _, s := range all {
		if s.Name == name && o.ours(s.Metadata) && s.Status != "DELETED" && s.Status != "SOFT_DELETED" {
			out = append(out, s)
		}
	}
	return out, nil
}

// addresses returns the node addresses of a server: fixed IPs as InternalIP, floating IPs as
// ExternalIP, in network-name order.
func addresses(s *servers.Server) []corev1.NodeAddress {
	names := make([]string, 0, len(s.Addresses))
	for n := range s.Addresses {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []corev1.NodeAddress
	for _, n := range names {
		list, _ := s.Addresses[n].([]any)
		for _, e := range list {
			m, _ := e.(map[string]any)
			ip, _ := m["addr"].(string)
			if net.ParseIP(ip) == nil {
				continue
			}
			t := corev1.NodeInternalIP
			if kind, _ := m["OS-EXT-IPS:type"].(string); kind == "floating" {
				t = corev1.NodeExternalIP
			}
			out = append(out, corev1.NodeAddress{Type: t, Address: ip})
		}
	}
	return out
}

// GetMachineStatus reports the server of a machine: NotFound when there is none, OutOfRange when
// several servers of the class's cluster and role carry the machine's name.
func (d *Driver) GetMachineStatus(ctx context.Context, req *driver.GetMachineStatusRequest) (*driver.GetMachineStatusResponse, error) {
	name, err := kit.MachineName(ProviderName, req.Machine)
	if err != nil {
		return nil, err
	}
	o, err := d.begin(ctx, req.MachineClass, req.Secret)
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
		s := &found[0]
		return &driver.GetMachineStatusResponse{ProviderID: o.providerID(s.ID), NodeName: name, Addresses: addresses(s)}, nil
	}
	ids := make([]string, len(found))
	for i, s := range found {
		ids[i] = s.ID
	}
	sort.Strings(ids)
	return nil, driver.Errorf(driver.OutOfRange, "openstack: machine %q has %d servers (%s): the orphan collector deletes the ones its machine does not name",
		name, len(found), strings.Join(ids, ", "))
}

// cinderVolumes are Cinder's volumes among persistent volumes: in-tree Cinder ones and those of the
// Cinder CSI driver (their handle).
var cinderVolumes = kit.Volumes{CSIDriver: CinderCSIDriver, InTree: func(spec *corev1.PersistentVolumeSpec) string {
	if spec.Cinder == nil {
		return ""
	}
	return spec.Cinder.VolumeID
}}

// GetVolumeIDs maps persistent volumes of Cinder, in-tree or through the Cinder CSI driver, to
// their volume IDs and skips every other volume.
func (d *Driver) GetVolumeIDs(_ context.Context, req *driver.GetVolumeIDsRequest) (*driver.GetVolumeIDsResponse, error) {
	return cinderVolumes.IDs(req.PVSpecs), nil
}

// CinderCSIDriver is the name of OpenStack's Cinder CSI driver.
const CinderCSIDriver = "cinder.csi.openstack.org"

var _ driver.Driver = (*Driver)(nil)
