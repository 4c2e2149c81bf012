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
	"io"
	"maps"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/machinist-io/machinist/providers/kit/fakekit"
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
// single loopback HTTP server (Serve). Each service is a type of its own over the shared state.
type Cloud struct {
	// Faults are the injected faults (fakekit.Faults: Inject, Clear, Hits).
	Faults fakekit.Faults[Fault]
	// Requests are the requests the cloud answered (fakekit.Journal: All, For, Len, Reset), each
	// under its Op, "<service> <METHOD> <route>".
	Requests fakekit.Journal[Request]

	st       *state
	keystone keystone
	nova     nova
	neutron  neutron
	cinder   cinder
	glance   glance
}

// state is what the services share, under one lock.
type state struct {
	mu  sync.Mutex
	now func() time.Time
	// url is where the cloud is served (the root of the catalog's endpoints).
	url    string
	region string

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

	late       []*http.Request // held by ActsLate faults until ActLate
	failBuilds []ServerFault   // the faults the next server builds end with, in order
}

// The services, each over the shared state.
type (
	keystone struct{ *state }
	nova     struct{ *state }
	neutron  struct{ *state }
	cinder   struct{ *state }
	glance   struct{ *state }
)

// New returns a cloud, seeded with the resources the constants name; Serve serves it.
func New(o Options) *Cloud {
	if o.Region == "" {
		o.Region = DefaultRegion
	}
	if o.TokenTTL <= 0 {
		o.TokenTTL = time.Hour
	}
	st := &state{
		region:           o.Region,
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
	}
	st.seed()
	return &Cloud{st: st, keystone: keystone{st}, nova: nova{st}, neutron: neutron{st}, cinder: cinder{st}, glance: glance{st}}
}

// Serve serves the cloud over HTTP on l until the server is closed. wrap, when set, wraps the
// cloud's handler (to observe requests); the cloud also answers control requests under
// fakekit.ControlPrefix.
func (c *Cloud) Serve(l net.Listener, wrap func(http.Handler) http.Handler) (*fakekit.Server, error) {
	var h http.Handler = c
	if wrap != nil {
		h = wrap(c)
	}
	c.st.mu.Lock()
	c.st.url = "http://" + l.Addr().String()
	c.st.mu.Unlock()
	return fakekit.Serve(l, h), nil
}

// AuthURL is the Keystone v3 endpoint to put in credentials; Serve sets it.
func (c *Cloud) AuthURL() string {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	return c.st.url + "/identity/v3"
}

// Region is the region of every catalog endpoint.
func (c *Cloud) Region() string { return c.st.region }

func (c *state) seed() {
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

func (c *state) addNetwork(netID, name, subnetID, cidr string) {
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
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	id := newID()
	c.st.images[id] = &Image{ID: id, Name: name, Status: "active", Created: created}
	return id
}

// AddNetwork adds a network with one subnet and returns their IDs.
func (c *Cloud) AddNetwork(name, cidr string) (networkID, subnetID string) {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	networkID, subnetID = newID(), newID()
	c.st.addNetwork(networkID, name, subnetID, cidr)
	return networkID, subnetID
}

// SetBuildTime changes how long servers created from now on stay in BUILD ("slow BUILD").
func (c *Cloud) SetBuildTime(d time.Duration) { fakekit.Set(&c.st.mu, &c.st.buildTime, d) }

// SetDeleteTime changes how long deleted servers stay visible.
func (c *Cloud) SetDeleteTime(d time.Duration) { fakekit.Set(&c.st.mu, &c.st.deleteTime, d) }

// SetTokenTTL changes the lifetime of tokens issued from now on.
func (c *Cloud) SetTokenTTL(d time.Duration) { fakekit.Set(&c.st.mu, &c.st.tokenTTL, d) }

// ExpireAllTokens makes every issued token invalid now: the next request with one gets 401.
func (c *Cloud) ExpireAllTokens() {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	past := c.st.now().Add(-time.Second)
	for _, t := range c.st.tokens {
		t.expires = past
	}
}

// NoValidHost makes the scheduler fail the next n server builds: the servers go to ERROR with
// Nova's "No valid host was found" fault.
func (c *Cloud) NoValidHost(n int) {
	// Zed's message when Placement has no allocation candidates (an empty reason after the
	// period), as the real run showed; the details are for admins only.
	c.st.failNextBuilds(n, ServerFault{Code: 500, Message: "No valid host was found. ",
		Details: "Traceback (most recent call last):\n  File \"/usr/lib/python3/dist-packages/nova/conductor/manager.py\", line 1587, in schedule_and_build_instances\nnova.exception.NoValidHost: No valid host was found. \n"})
}

// QuotaRecheckFails makes the next n server builds fail Nova's second quota check: the create
// was accepted (202), then the conductor, counting the instances that now exist, finds the
// project over its quota and puts the server in ERROR with the 413 quota fault. Real Nova does
// this when creates race for the last of a quota; it can refuse every one of them.
func (c *Cloud) QuotaRecheckFails(n int) {
	c.st.failNextBuilds(n, ServerFault{Code: 413,
		Message: "Quota exceeded for instances: Requested 1, but already used 2 of 2 instances",
		Details: "Traceback (most recent call last):\n  File \"/usr/lib/python3/dist-packages/nova/conductor/manager.py\", in schedule_and_build_instances\nnova.exception.TooManyInstances: Quota exceeded for instances: Requested 1, but already used 2 of 2 instances\n"})
}

func (c *state) failNextBuilds(n int, f ServerFault) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for range n {
		c.failBuilds = append(c.failBuilds, f)
	}
}

// Request is one request the cloud answered.
type Request struct {
	Time time.Time `json:"time"`
	// Op is "<service> <METHOD> <route>", e.g. "identity POST /v3/auth/tokens" or
	// "compute POST /servers"; routes name path parameters {id}: "compute GET /servers/{id}".
	Op string `json:"op"`
	// Rejected is set when the request was answered 401 because its token was missing, unknown
	// or expired.
	Rejected bool `json:"rejected,omitempty"`
}

// Operation is the request's Op.
func (r Request) Operation() string { return r.Op }

// OpToken is the operation of a token request to Keystone.
const OpToken = "identity POST /v3/auth/tokens"

// TokenRequests returns how many tokens were requested from Keystone.
func (c *Cloud) TokenRequests() int { return len(c.Requests.For(OpToken)) }

// Rejected returns how many service requests were answered 401 because their token was missing,
// unknown or expired.
func (c *Cloud) Rejected() int {
	n := 0
	for _, r := range c.Requests.All() {
		if r.Rejected {
			n++
		}
	}
	return n
}

// Servers returns a snapshot of the servers that exist (deleted ones are gone), oldest first.
func (c *Cloud) Servers() []Server {
	return fakekit.Snapshot(&c.st.mu, c.st.advance, c.st.servers, func(r *Server) Server {
		cp := *r
		cp.Metadata = maps.Clone(r.Metadata)
		return cp
	}, func(a, b Server) int { return a.seq - b.seq })
}

// Ports returns a snapshot of the ports, oldest first.
func (c *Cloud) Ports() []Port {
	return fakekit.Snapshot(&c.st.mu, c.st.advance, c.st.ports, func(r *Port) Port {
		cp := *r
		cp.Tags = append([]string(nil), r.Tags...)
		return cp
	}, func(a, b Port) int { return a.seq - b.seq })
}

// Volumes returns a snapshot of the volumes, oldest first.
func (c *Cloud) Volumes() []Volume {
	return fakekit.Snapshot(&c.st.mu, c.st.advance, c.st.volumes, func(r *Volume) Volume {
		cp := *r
		cp.Metadata = maps.Clone(r.Metadata)
		return cp
	}, func(a, b Volume) int { return a.seq - b.seq })
}

// CreateServer puts a server into the cloud directly, bypassing the API (for tests that need a
// server the driver did not make, e.g. a duplicate or one of another cluster). It builds like any
// server: ACTIVE after the build time.
func (c *Cloud) CreateServer(name string, metadata map[string]string) string {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	s := c.st.newServer(name, FlavorSmallID(), ImageID, AvailabilityZone)
	s.Metadata = maps.Clone(metadata)
	c.st.attachNewPort(s, NetworkID, nil)
	return s.ID
}

// FailServer puts a server into ERROR with the given fault, as if its build had failed (for tests
// of a driver that finds such a server).
func (c *Cloud) FailServer(id, faultMessage string) bool {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	s := c.st.servers[id]
	if s == nil {
		return false
	}
	s.Status, s.TaskState, s.VMState = "ERROR", "", "error"
	s.Fault = &ServerFault{Code: 500, Message: faultMessage, Created: c.st.now()}
	return true
}

// CreatePort puts a port into the cloud directly (e.g. a leftover of another run).
func (c *Cloud) CreatePort(name, networkID string, tags []string) string {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	p := c.st.newPort(name, networkID)
	p.Tags = append([]string(nil), tags...)
	if sn := c.st.firstSubnet(networkID); sn != nil {
		p.FixedIPs = []FixedIP{{SubnetID: sn.ID, IPAddress: sn.allocate()}}
	}
	return p.ID
}

// CreateVolume puts an available volume into the cloud directly.
func (c *Cloud) CreateVolume(name string, sizeGB int, metadata map[string]string) string {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	v := c.st.newVolume(name, sizeGB, VolumeTypeStandard, AvailabilityZone)
	v.Metadata = maps.Clone(metadata)
	v.Status = "available"
	return v.ID
}

// FlavorSmallID is the ID of FlavorSmall.
func FlavorSmallID() string { return "1" }

// ServeHTTP routes a request to its service after the common steps every OpenStack API takes:
// request IDs, the request journal, token validation and injected faults.
func (c *Cloud) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if fakekit.Serves(r) {
		c.control().ServeHTTP(w, r)
		return
	}
	reqID := "req-" + newID()
	w.Header().Set("X-Openstack-Request-Id", reqID)
	service, rest := splitService(r.URL.Path)
	if service == "compute" {
		w.Header().Set("X-Compute-Request-Id", reqID)
	}
	record := Request{Time: time.Now(), Op: service + " " + r.Method + " " + route(service, rest)}
	defer func() { c.Requests.Add(record) }()
	c.st.mu.Lock()
	c.st.advance()
	c.st.mu.Unlock()
	f, faulty := c.Faults.Take(func(f Fault) bool { return f.matches(service, r.Method, rest) })

	if service == "" {
		writeError(w, service, http.StatusNotFound, "NotFound", "no service at "+r.URL.Path)
		return
	}
	if faulty && f.ActsLate {
		c.st.holdLate(r)
		return
	}
	if faulty && !f.AfterHandling {
		f.write(w, service)
		return
	}
	if faulty {
		defer f.write(w, service)
		w = discardWriter{}
	}
	if service != "identity" && !c.st.validToken(r.Header.Get("X-Auth-Token")) {
		record.Rejected = true
		writeError(w, service, http.StatusUnauthorized, "Unauthorized", "The request you have made requires authentication.")
		return
	}
	switch service {
	case "identity":
		c.keystone.serveIdentity(w, r, rest)
	case "compute":
		c.nova.serveCompute(w, r, trimPrefix(rest, "/v2.1"))
	case "network":
		c.neutron.serveNetwork(w, r, rest)
	case "volume":
		c.cinder.serveVolume(w, r, trimPrefix(rest, "/v3/"+ProjectID))
	case "image":
		c.glance.serveImage(w, r, rest)
	}
}

// validToken reports whether a token was issued and has not expired.
func (c *state) validToken(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	tok := c.tokens[id]
	return tok != nil && c.now().Before(tok.expires)
}

// holdLate holds a request until its client gives up, then keeps it for ActLate.
func (c *state) holdLate(r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	<-r.Context().Done()
	late := r.Clone(context.Background())
	late.Body = io.NopCloser(bytes.NewReader(body))
	c.mu.Lock()
	c.late = append(c.late, late)
	c.mu.Unlock()
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
func (c *state) advance() {
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
