// Package fakeopenstack is a stateful fake OpenStack cloud served over HTTP on loopback. It speaks
// the wire formats gophercloud v2 uses for Keystone v3 (password and application-credential
// tokens with expiry and a service catalog), Nova (servers that go BUILD -> ACTIVE or ERROR with a
// fault, flavors, key pairs, server groups, metadata, block_device_mapping_v2, scheduler hints),
// Neutron (networks, subnets, ports with tags, fixed IPs and allowed address pairs, security
// groups), Cinder v3 (volumes with status transitions, attached by boot) and Glance v2 (images).
//
// It keeps state like the real services: a deleted server is gone, a port that was handed to Nova
// outlives its server until it is deleted, a volume with delete_on_termination=false survives its
// server. Every response carries X-Openstack-Request-Id (and X-Compute-Request-Id from Nova).
//
// Faults are switched on at run time: NoValidHost, quota exceeded in each service's message shape,
// 409 conflicts, slow BUILD, bursts of 5xx or 429 with Retry-After, and token expiry. Counters per
// endpoint show how often the client called what (token requests above all).
package fakeopenstack

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"time"
)

// Seeded names and IDs. Tests refer to them when they build provider specs.
const (
	DefaultRegion = "RegionOne"

	DomainID    = "default"
	DomainName  = "Default"
	ProjectID   = "0c4e939acacf4376bdcd1129f1a054ad"
	ProjectName = "demo"
	UserID      = "9a0fd6bd2a0d4e3c8f6f1a4f0e1d2c3b"
	UserName    = "machinist"
	Password    = "s3cr3t-password"

	AppCredentialID     = "aa4541d9-0bbe-4f4f-a2ad-8a5e5a0f4d6e"
	AppCredentialName   = "machinist-ci"
	AppCredentialSecret = "app-cred-secret-value"

	FlavorSmall = "m1.small"
	FlavorLarge = "m1.large"

	ImageName = "ubuntu-24.04"
	ImageID   = "5b6e4a8e-0a53-4c28-9d36-1c1b6a3d0f11"

	NetworkName = "shoot-nodes"
	NetworkID   = "6f3b1c52-8f3a-4b8e-8a67-3e2f1d3c9a01"
	SubnetID    = "a1d9e8f7-2c3b-4d5e-8f90-1a2b3c4d5e6f"
	SubnetCIDR  = "10.250.0.0/16"

	PodNetworkName = "shoot-pods"
	PodNetworkID   = "7a4c2d63-9e4b-4c9f-9b78-4f3e2d4cab12"
	PodSubnetID    = "b2eaf908-3d4c-4e6f-9a01-2b3c4d5e6f70"
	PodSubnetCIDR  = "10.96.0.0/16"

	SecurityGroupName = "shoot-nodes-sg"
	SecurityGroupID   = "c3fb0a19-4e5d-4f70-8b12-3c4d5e6f7081"

	KeyName       = "shoot-ssh"
	ServerGroupID = "d40c1b2a-5f6e-4a81-9c23-4d5e6f708192"

	VolumeTypeStandard = "standard"
	VolumeTypeSSD      = "ssd"

	AvailabilityZone      = "nova"
	OtherAvailabilityZone = "az2"
)

// Options configure a cloud. Zero values take the defaults noted per field.
type Options struct {
	// Region of every catalog endpoint; default DefaultRegion.
	Region string
	// TokenTTL is the lifetime of issued tokens; default one hour.
	TokenTTL time.Duration
	// BuildTime is how long a new server stays in BUILD; default 0 (ACTIVE on the next read).
	BuildTime time.Duration
	// DeleteTime is how long a deleted server stays visible in task_state deleting; default 0.
	DeleteTime time.Duration
	// VolumeCreateTime is how long a new volume stays "creating"; default 0.
	VolumeCreateTime time.Duration
}

// Cloud is one fake OpenStack deployment: Keystone, Nova, Neutron, Cinder and Glance behind a
// single loopback HTTP server.
type Cloud struct {
	// URL is the root of the server, e.g. http://127.0.0.1:41234.
	URL string
	// AuthURL is the Keystone v3 endpoint to put in credentials (URL + "/identity/v3").
	AuthURL string
	// Region of the catalog endpoints.
	Region string

	srv *httptest.Server

	mu  sync.Mutex
	now func() time.Time

	tokenTTL         time.Duration
	buildTime        time.Duration
	deleteTime       time.Duration
	volumeCreateTime time.Duration

	tokens      map[string]*token
	flavors     map[string]*Flavor
	images      map[string]*Image
	keypairs    map[string]*Keypair
	groups      map[string]*ServerGroup
	zones       map[string]bool
	volumeTypes map[string]string // name -> id
	networks    map[string]*Network
	subnets     map[string]*Subnet
	secgroups   map[string]*SecurityGroup
	servers     map[string]*Server
	ports       map[string]*Port
	volumes     map[string]*Volume
	order       int // creation sequence, for stable listings

	faults     []*Fault
	late       []*http.Request // held by ActsLate faults until ActLate
	failBuilds []ServerFault   // the faults the next server builds end with, in order
	counts     map[string]int
	requests   int
	rejected   int // requests answered 401 for a missing, unknown or expired token
}

// TB is the part of testing.TB that Start uses; the package does not import testing, because
// `machinist fakecloud` links it into the default binary.
type TB interface {
	Helper()
	Cleanup(func())
}

// Start starts a cloud on loopback and stops it when the test ends.
func Start(t TB, opts ...Options) *Cloud {
	t.Helper()
	c := New(opts...)
	t.Cleanup(c.Close)
	return c
}

// New starts a cloud on loopback. Close it when done.
func New(opts ...Options) *Cloud {
	// Listen on the IPv4 loopback explicitly: tests must never reach another address.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(fmt.Sprintf("fakeopenstack: listen on loopback: %v", err))
	}
	return Serve(l, nil, opts...)
}

// Serve starts a cloud on l, which Close closes. wrap, when set, wraps the cloud's handler (to
// observe requests); the cloud also answers control requests under ControlPrefix.
func Serve(l net.Listener, wrap func(http.Handler) http.Handler, opts ...Options) *Cloud {
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.Region == "" {
		o.Region = DefaultRegion
	}
	if o.TokenTTL <= 0 {
		o.TokenTTL = time.Hour
	}
	c := &Cloud{
		Region:           o.Region,
		now:              time.Now,
		tokenTTL:         o.TokenTTL,
		buildTime:        o.BuildTime,
		deleteTime:       o.DeleteTime,
		volumeCreateTime: o.VolumeCreateTime,
		tokens:           map[string]*token{},
		flavors:          map[string]*Flavor{},
		images:           map[string]*Image{},
		keypairs:         map[string]*Keypair{},
		groups:           map[string]*ServerGroup{},
		zones:            map[string]bool{AvailabilityZone: true, OtherAvailabilityZone: true},
		volumeTypes:      map[string]string{VolumeTypeStandard: newID(), VolumeTypeSSD: newID()},
		networks:         map[string]*Network{},
		subnets:          map[string]*Subnet{},
		secgroups:        map[string]*SecurityGroup{},
		servers:          map[string]*Server{},
		ports:            map[string]*Port{},
		volumes:          map[string]*Volume{},
		counts:           map[string]int{},
	}
	c.seed()
	var h http.Handler = c
	if wrap != nil {
		h = wrap(c)
	}
	c.srv = &httptest.Server{Listener: l, Config: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}}
	c.srv.Start()
	c.URL = c.srv.URL
	c.AuthURL = c.URL + "/identity/v3"
	return c
}

// Close stops the server.
func (c *Cloud) Close() { c.srv.Close() }

func (c *Cloud) seed() {
	c.flavors["1"] = &Flavor{ID: "1", Name: FlavorSmall, VCPUs: 1, RAM: 2048, Disk: 20}
	c.flavors["2"] = &Flavor{ID: "2", Name: FlavorLarge, VCPUs: 4, RAM: 8192, Disk: 80}
	c.images[ImageID] = &Image{ID: ImageID, Name: ImageName, Status: "active", Created: c.now().Add(-48 * time.Hour), MinDisk: 10}
	c.keypairs[KeyName] = &Keypair{Name: KeyName, Type: "ssh", PublicKey: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeFakeFakeFakeFakeFakeFakeFakeFakeFakeFake machinist@test"}
	c.groups[ServerGroupID] = &ServerGroup{ID: ServerGroupID, Name: "workers", Policy: "soft-anti-affinity"}
	c.addNetwork(NetworkID, NetworkName, SubnetID, SubnetCIDR)
	c.addNetwork(PodNetworkID, PodNetworkName, PodSubnetID, PodSubnetCIDR)
	c.secgroups[SecurityGroupID] = &SecurityGroup{ID: SecurityGroupID, Name: SecurityGroupName}
	def := newID()
	c.secgroups[def] = &SecurityGroup{ID: def, Name: "default"}
}

func (c *Cloud) addNetwork(netID, name, subnetID, cidr string) {
	c.networks[netID] = &Network{ID: netID, Name: name, Subnets: []string{subnetID}}
	sn := &Subnet{ID: subnetID, Name: name + "-subnet", NetworkID: netID, CIDR: cidr}
	_, ipnet, err := net.ParseCIDR(cidr)
	if err != nil {
		panic(err)
	}
	sn.ipnet = ipnet
	sn.next = 10
	c.subnets[subnetID] = sn
}

// AddImage adds an active image and returns its ID. Several images may share a name, as in
// Glance; created orders them.
func (c *Cloud) AddImage(name string, created time.Time) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	id := newID()
	c.images[id] = &Image{ID: id, Name: name, Status: "active", Created: created}
	return id
}

// AddNetwork adds a network with one subnet and returns their IDs.
func (c *Cloud) AddNetwork(name, cidr string) (networkID, subnetID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	networkID, subnetID = newID(), newID()
	c.addNetwork(networkID, name, subnetID, cidr)
	return networkID, subnetID
}

// SetBuildTime changes how long servers created from now on stay in BUILD ("slow BUILD").
func (c *Cloud) SetBuildTime(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buildTime = d
}

// SetDeleteTime changes how long deleted servers stay visible.
func (c *Cloud) SetDeleteTime(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deleteTime = d
}

// SetTokenTTL changes the lifetime of tokens issued from now on.
func (c *Cloud) SetTokenTTL(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tokenTTL = d
}

// ExpireAllTokens makes every issued token invalid now: the next request with one gets 401.
func (c *Cloud) ExpireAllTokens() {
	c.mu.Lock()
	defer c.mu.Unlock()
	past := c.now().Add(-time.Second)
	for _, t := range c.tokens {
		t.expires = past
	}
}

// NoValidHost makes the scheduler fail the next n server builds: the servers go to ERROR with
// Nova's "No valid host was found" fault.
func (c *Cloud) NoValidHost(n int) {
	// Zed's message when Placement has no allocation candidates (an empty reason after the
	// period), as the real run showed; the details are for admins only.
	c.failNextBuilds(n, ServerFault{Code: 500, Message: "No valid host was found. ",
		Details: "Traceback (most recent call last):\n  File \"/usr/lib/python3/dist-packages/nova/conductor/manager.py\", line 1587, in schedule_and_build_instances\nnova.exception.NoValidHost: No valid host was found. \n"})
}

// QuotaRecheckFails makes the next n server builds fail Nova's second quota check: the create
// was accepted (202), then the conductor, counting the instances that now exist, finds the
// project over its quota and puts the server in ERROR with the 413 quota fault. Real Nova does
// this when creates race for the last of a quota; it can refuse every one of them.
func (c *Cloud) QuotaRecheckFails(n int) {
	c.failNextBuilds(n, ServerFault{Code: 413,
		Message: "Quota exceeded for instances: Requested 1, but already used 2 of 2 instances",
		Details: "Traceback (most recent call last):\n  File \"/usr/lib/python3/dist-packages/nova/conductor/manager.py\", in schedule_and_build_instances\nnova.exception.TooManyInstances: Quota exceeded for instances: Requested 1, but already used 2 of 2 instances\n"})
}

func (c *Cloud) failNextBuilds(n int, f ServerFault) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for range n {
		c.failBuilds = append(c.failBuilds, f)
	}
}

// Count returns how many requests matched key, "<service> <METHOD> <route>", for example
// "identity POST /v3/auth/tokens" or "compute POST /servers". Routes name path parameters
// {id}: "compute GET /servers/{id}".
func (c *Cloud) Count(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[key]
}

// TokenRequests returns how many tokens were requested from Keystone.
func (c *Cloud) TokenRequests() int { return c.Count("identity POST /v3/auth/tokens") }

// Counts returns a copy of all request counters.
func (c *Cloud) Counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.counts))
	for k, v := range c.counts {
		out[k] = v
	}
	return out
}

// Requests returns the number of requests served.
func (c *Cloud) Requests() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.requests
}

// Rejected returns how many service requests were answered 401 because their token was missing,
// unknown or expired.
func (c *Cloud) Rejected() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rejected
}

// ResetCounts sets every counter to zero.
func (c *Cloud) ResetCounts() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counts = map[string]int{}
	c.requests = 0
	c.rejected = 0
}

// Servers returns a snapshot of the servers that exist (deleted ones are gone), oldest first.
func (c *Cloud) Servers() []Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.advance()
	out := make([]Server, 0, len(c.servers))
	for _, s := range sortedBySeq(c.servers, func(s *Server) int { return s.seq }) {
		cp := *s
		cp.Metadata = cloneMap(s.Metadata)
		out = append(out, cp)
	}
	return out
}

// Ports returns a snapshot of the ports, oldest first.
func (c *Cloud) Ports() []Port {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.advance()
	out := make([]Port, 0, len(c.ports))
	for _, p := range sortedBySeq(c.ports, func(p *Port) int { return p.seq }) {
		cp := *p
		cp.Tags = append([]string(nil), p.Tags...)
		out = append(out, cp)
	}
	return out
}

// Volumes returns a snapshot of the volumes, oldest first.
func (c *Cloud) Volumes() []Volume {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.advance()
	out := make([]Volume, 0, len(c.volumes))
	for _, v := range sortedBySeq(c.volumes, func(v *Volume) int { return v.seq }) {
		cp := *v
		cp.Metadata = cloneMap(v.Metadata)
		out = append(out, cp)
	}
	return out
}

// CreateServer puts a server into the cloud directly, bypassing the API (for tests that need a
// server the driver did not make, e.g. a duplicate or one of another cluster). It builds like any
// server: ACTIVE after the build time.
func (c *Cloud) CreateServer(name string, metadata map[string]string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.newServer(name, FlavorSmallID(), ImageID, AvailabilityZone)
	s.Metadata = cloneMap(metadata)
	c.attachNewPort(s, NetworkID, nil)
	return s.ID
}

// FailServer puts a server into ERROR with the given fault, as if its build had failed (for tests
// of a driver that finds such a server).
func (c *Cloud) FailServer(id, faultMessage string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.servers[id]
	if s == nil {
		return false
	}
	s.Status, s.TaskState, s.VMState = "ERROR", "", "error"
	s.Fault = &ServerFault{Code: 500, Message: faultMessage, Created: c.now()}
	return true
}

// CreatePort puts a port into the cloud directly (e.g. a leftover of another run).
func (c *Cloud) CreatePort(name, networkID string, tags []string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.newPort(name, networkID)
	p.Tags = append([]string(nil), tags...)
	if sn := c.firstSubnet(networkID); sn != nil {
		p.FixedIPs = []FixedIP{{SubnetID: sn.ID, IPAddress: sn.allocate()}}
	}
	return p.ID
}

// CreateVolume puts an available volume into the cloud directly.
func (c *Cloud) CreateVolume(name string, sizeGB int, metadata map[string]string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	v := c.newVolume(name, sizeGB, VolumeTypeStandard, AvailabilityZone)
	v.Metadata = cloneMap(metadata)
	v.Status = "available"
	return v.ID
}

// FlavorSmallID is the ID of FlavorSmall.
func FlavorSmallID() string { return "1" }

// ServeHTTP routes a request to its service after the common steps every OpenStack API takes:
// request IDs, counters, token validation and injected faults.
func (c *Cloud) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, ControlPrefix) {
		c.serveControl(w, r)
		return
	}
	reqID := "req-" + newID()
	w.Header().Set("X-Openstack-Request-Id", reqID)
	service, rest := splitService(r.URL.Path)
	if service == "compute" {
		w.Header().Set("X-Compute-Request-Id", reqID)
	}
	rt := route(service, rest)

	c.mu.Lock()
	c.requests++
	c.counts[service+" "+r.Method+" "+rt]++
	c.advance()
	f := c.matchFault(service, r.Method, rest)
	c.mu.Unlock()

	if service == "" {
		writeError(w, service, http.StatusNotFound, "NotFound", "no service at "+r.URL.Path)
		return
	}
	if f != nil && f.ActsLate {
		body, _ := io.ReadAll(r.Body)
		<-r.Context().Done()
		late := r.Clone(context.Background())
		late.Body = io.NopCloser(bytes.NewReader(body))
		c.mu.Lock()
		c.late = append(c.late, late)
		c.mu.Unlock()
		return
	}
	if f != nil && !f.AfterHandling {
		f.write(w, service)
		return
	}
	if f != nil {
		defer f.write(w, service)
		w = discardWriter{}
	}
	if service != "identity" {
		c.mu.Lock()
		tok := c.tokens[r.Header.Get("X-Auth-Token")]
		valid := tok != nil && c.now().Before(tok.expires)
		if !valid {
			c.rejected++
		}
		c.mu.Unlock()
		if !valid {
			writeError(w, service, http.StatusUnauthorized, "Unauthorized", "The request you have made requires authentication.")
			return
		}
	}
	switch service {
	case "identity":
		c.serveIdentity(w, r, rest)
	case "compute":
		c.serveCompute(w, r, trimPrefix(rest, "/v2.1"))
	case "network":
		c.serveNetwork(w, r, rest)
	case "volume":
		c.serveVolume(w, r, trimPrefix(rest, "/v3/"+ProjectID))
	case "image":
		c.serveImage(w, r, rest)
	}
}

// splitService maps "/compute/v2.1/servers" to ("compute", "/v2.1/servers").
func splitService(p string) (string, string) {
	p = strings.TrimPrefix(p, "/")
	svc, rest, _ := strings.Cut(p, "/")
	switch svc {
	case "identity", "compute", "network", "volume", "image":
		return svc, "/" + rest
	}
	return "", p
}

func trimPrefix(p, prefix string) string {
	if p == prefix {
		return "/"
	}
	return strings.TrimPrefix(p, prefix)
}

// route names a path for the counters: IDs become {id}.
func route(service, rest string) string {
	switch service {
	case "compute":
		rest = trimPrefix(rest, "/v2.1")
	case "volume":
		rest = trimPrefix(rest, "/v3/"+ProjectID)
	}
	parts := strings.Split(strings.Trim(rest, "/"), "/")
	for i, p := range parts {
		if i == 0 || p == "detail" || p == "tags" || p == "tokens" || p == "auth" || p == "v3" || p == "v2.0" || p == "v2" || p == "metadata" {
			continue
		}
		if i == 1 && (parts[0] == "v2.0" || parts[0] == "v2" || parts[0] == "v3") {
			continue
		}
		parts[i] = "{id}"
	}
	return "/" + strings.Join(parts, "/")
}

// advance moves time-driven state forward: builds finish, deletions complete, volumes become
// available. Callers hold c.mu.
func (c *Cloud) advance() {
	now := c.now()
	for id, s := range c.servers {
		if s.deleting && !now.Before(s.deleteDone) {
			c.finishDelete(s)
			delete(c.servers, id)
			continue
		}
		if s.Status == "BUILD" && !now.Before(s.buildDone) {
			if s.failBuild != nil {
				s.Status = "ERROR"
				s.Fault = s.failBuild
				s.TaskState = ""
				s.VMState = "error"
			} else {
				s.Status = "ACTIVE"
				s.TaskState = ""
				s.VMState = "active"
				s.PowerState = 1
			}
		}
	}
	for _, v := range c.volumes {
		if v.Status == "creating" && !now.Before(v.readyAt) {
			v.Status = "available"
		}
	}
}

func newID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	b[6] = (b[6] & 0x0f) | 0x40
	b[8] = (b[8] & 0x3f) | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

func newToken() string {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return "gAAAA" + hex.EncodeToString(b[:])
}

func cloneMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func sortedBySeq[T any](m map[string]T, seq func(T) int) []T {
	out := make([]T, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return seq(out[i]) < seq(out[j]) })
	return out
}

// discardWriter swallows a response the client never sees.
type discardWriter struct{}

func (discardWriter) Header() http.Header         { return http.Header{} }
func (discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (discardWriter) WriteHeader(int)             {}
