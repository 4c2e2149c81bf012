// Package fakegcp is a stateful fake of Google Compute Engine for tests and `machinist fakecloud
// gcp`: it serves the REST paths the Compute Engine Go client (google.golang.org/api/compute/v1)
// calls, over HTTPS on loopback, and the OAuth 2.0 token endpoints the real golang.org/x/oauth2
// flows call (a service account's JWT bearer grant, workload identity's STS token exchange and
// service account impersonation).
//
// It follows the Compute API's published contract, the discovery document of the
// google.golang.org/api module (Contract): requests are checked against it as Compute Engine
// checks them (400 for a path parameter off its pattern, an unknown query parameter or field, a
// value of the wrong type or outside its enum) and so are its own answers (a violation is the
// fake's bug: 500, recorded). List filters follow the grammar the document gives (filter.go): a
// filter on a repeated field such as tags.items is refused with Compute Engine's 400 "Invalid
// list filter expression".
//
// It keeps instances, their disks and zonal operations that finish after a delay, and serves
// images (by name and family), networks, subnetworks and machine types (per zone), pagination
// (maxResults, pageToken) and zonal operation lists. Inserts are checked the way Compute Engine
// checks them (machine type in the zone, image, disk type, network, subnetwork, accelerator and
// labels), vCPU quotas are counted per region, Spot and preemptible instances can be preempted
// (Preempt), and fault switches make requests or operations fail: stockouts
// (ZONE_RESOURCE_POOL_EXHAUSTED), quota (QUOTA_EXCEEDED), rate limits (rateLimitExceeded), 5xx,
// slow operations and denied permissions. Every request is recorded with its time.
package fakegcp

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	compute "google.golang.org/api/compute/v1"
	"k8s.io/utils/clock"

	"github.com/machinist-io/machinist/providers/kit/fakekit"
)

// DefaultProject is the project New serves.
const DefaultProject = "machinist-fake"

// Cloud is a fake Compute Engine with one project, safe for concurrent use: the Compute API and
// the token endpoints are each a type of their own over the shared state.
type Cloud struct {
	// Faults are the injected faults (fakekit.Faults: Inject, Clear, Hits).
	Faults fakekit.Faults[Fault]
	// Requests are the requests the fake answered (fakekit.Journal: All, For, Len, Reset).
	Requests fakekit.Journal[Request]

	st      *state
	compute computeAPI
	auth    authAPI
}

// Options configure a fake. The zero value is ready to use.
type Options struct {
	// Clock times operations and throttling; nil is the real clock.
	Clock clock.Clock
}

// The Compute API and the token endpoints, over the shared state.
type (
	computeAPI struct {
		*state
		faults *fakekit.Faults[Fault]
	}
	authAPI struct{ *state }
)

// state is what the APIs share, under one lock.
type state struct {
	mu    sync.Mutex
	clock clock.Clock

	project string
	// zones by region; a zone named in a request must be one of them.
	zones        map[string]string // zone -> region
	machineTypes map[string]int    // machine type -> vCPUs, offered in every zone but those withdrawn
	withdrawn    map[string]bool   // "<zone>/<machine type>" not offered there
	diskTypes    map[string]bool
	accelerators map[string]bool
	images       map[string]*compute.Image      // "<project>/<name>"
	networks     map[string]*compute.Network    // name
	subnetworks  map[string]*compute.Subnetwork // "<region>/<name>"
	cpuQuota     map[string]int                 // region -> vCPUs; absent = unlimited

	instances  map[string]*compute.Instance // "<zone>/<name>"
	disks      map[string]*compute.Disk     // "<zone>/<name>"
	operations map[string]*operation        // "<zone>/<name>"
	requestIDs map[string]string            // requestId -> operation key

	accounts map[string]*rsa.PublicKey // service account email -> key
	subjects map[string]string         // workload identity subject token -> principal
	tokens   map[string]string         // access token -> principal

	opDelay  time.Duration
	waitMax  time.Duration
	pageSize int
	nextID   uint64
	nextIP   int

	contract    *Contract // nil: requests and answers are not checked
	contractErr error     // why there is no contract
	violations  []string  // answers of the fake that broke the contract
}

// New returns a fake with one project (DefaultProject), the regions europe-west1 (zones b, c, d)
// and us-central1 (zones a, b, c), common machine, disk and accelerator types, and nothing else.
// Operations finish after 20 ms; SetOperationDelay changes that.
func New(o Options) *Cloud {
	clk := o.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	c := &state{
		clock:   clk,
		project: DefaultProject,
		zones:   map[string]string{},
		machineTypes: map[string]int{
			"e2-micro": 2, "e2-small": 2, "e2-medium": 2, "e2-standard-2": 2, "e2-standard-4": 4,
			"n1-standard-1": 1, "n1-standard-2": 2, "n1-standard-4": 4, "n1-standard-8": 8,
			"n2-standard-2": 2, "n2-standard-4": 4, "n2-standard-8": 8, "n2-standard-16": 16,
			"c3-standard-4": 4, "a2-highgpu-1g": 12,
		},
		diskTypes: map[string]bool{
			"pd-standard": true, "pd-balanced": true, "pd-ssd": true, "pd-extreme": true,
			"hyperdisk-balanced": true, "hyperdisk-throughput": true, "hyperdisk-extreme": true, "local-ssd": true,
		},
		accelerators: map[string]bool{"nvidia-tesla-t4": true, "nvidia-l4": true, "nvidia-tesla-a100": true},
		withdrawn:    map[string]bool{},
		images:       map[string]*compute.Image{},
		networks:     map[string]*compute.Network{},
		subnetworks:  map[string]*compute.Subnetwork{},
		cpuQuota:     map[string]int{},
		instances:    map[string]*compute.Instance{},
		disks:        map[string]*compute.Disk{},
		operations:   map[string]*operation{},
		requestIDs:   map[string]string{},
		accounts:     map[string]*rsa.PublicKey{},
		subjects:     map[string]string{},
		tokens:       map[string]string{},
		opDelay:      20 * time.Millisecond,
		waitMax:      30 * time.Second,
		pageSize:     500,
	}
	c.contract, c.contractErr = DefaultContract()
	for region, zones := range map[string][]string{"europe-west1": {"b", "c", "d"}, "us-central1": {"a", "b", "c"}} {
		for _, z := range zones {
			c.zones[region+"-"+z] = region
		}
	}
	cl := &Cloud{st: c, auth: authAPI{c}}
	cl.compute = computeAPI{state: c, faults: &cl.Faults}
	return cl
}

// SetContract replaces the contract requests and answers are checked against (New reads
// DefaultContract); nil turns the checks off.
func (c *Cloud) SetContract(ct *Contract) {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	c.st.contract, c.st.contractErr = ct, nil
}

// ContractError says why the fake checks nothing against the Compute contract (the discovery
// document could not be read), or is nil when it checks.
func (c *Cloud) ContractError() error {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	if c.st.contract == nil && c.st.contractErr == nil {
		return fmt.Errorf("fakegcp: the contract checks are turned off")
	}
	return c.st.contractErr
}

// ContractViolations are the answers of the fake that broke the Compute contract (each was
// answered 500 instead): a bug of the fake.
func (c *Cloud) ContractViolations() []string {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	return slices.Clone(c.st.violations)
}

// Project is the project the fake serves.
func (c *Cloud) Project() string { return c.st.project }

// AddServiceAccount creates a service account with a fresh key and returns its JSON key file,
// as `gcloud iam service-accounts keys create` writes it; tokenURI is the token endpoint the
// file names (Server.TokenURL).
func (c *Cloud) AddServiceAccount(email, tokenURI string) []byte {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(fmt.Sprintf("fakegcp: generate a service account key: %v", err))
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		panic(fmt.Sprintf("fakegcp: encode a service account key: %v", err))
	}
	var id [20]byte
	_, _ = rand.Read(id[:])
	c.st.mu.Lock()
	c.st.accounts[email] = &key.PublicKey
	c.st.mu.Unlock()
	out, _ := json.MarshalIndent(map[string]string{
		"type":                        "service_account",
		"project_id":                  c.st.project,
		"private_key_id":              hex.EncodeToString(id[:]),
		"private_key":                 string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"client_email":                email,
		"client_id":                   "1000000000000000000" + fmt.Sprint(len(c.st.accounts)),
		"auth_uri":                    "https://accounts.google.com/o/oauth2/auth",
		"token_uri":                   tokenURI,
		"auth_provider_x509_cert_url": "https://www.googleapis.com/oauth2/v1/certs",
		"client_x509_cert_url":        "https://www.googleapis.com/robot/v1/metadata/x509/" + email,
		"universe_domain":             "googleapis.com",
	}, "", "  ")
	return out
}

// RemoveServiceAccount deletes a service account: its key no longer gets tokens, and the
// tokens it got stop working.
func (c *Cloud) RemoveServiceAccount(email string) {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	delete(c.st.accounts, email)
	for tok, p := range c.st.tokens {
		if p == email {
			delete(c.st.tokens, tok)
		}
	}
}

// AddWorkloadIdentity makes the STS endpoint exchange subjectToken (a projected service account
// token) for an access token of principal.
func (c *Cloud) AddWorkloadIdentity(subjectToken, principal string) {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	c.st.subjects[subjectToken] = principal
}

// RevokeTokens invalidates every access token issued so far.
func (c *Cloud) RevokeTokens() {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	c.st.tokens = map[string]string{}
}

// AddImage adds an image of project (a public image project such as "debian-cloud", or the
// fake's own) in family ("" for none).
func (c *Cloud) AddImage(project, name, family string) {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	c.st.images[project+"/"+name] = &compute.Image{
		Kind: "compute#image", Id: c.st.newIDLocked(), Name: name, Family: family, Status: "READY", DiskSizeGb: 10,
		CreationTimestamp: c.st.timestamp(), SelfLink: c.st.link("projects/%s/global/images/%s", project, name),
	}
}

// AddNetwork adds a VPC network of the fake's project.
func (c *Cloud) AddNetwork(name string) {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	c.st.networks[name] = &compute.Network{
		Kind: "compute#network", Id: c.st.newIDLocked(), Name: name, CreationTimestamp: c.st.timestamp(),
		SelfLink: c.st.link("projects/%s/global/networks/%s", c.st.project, name),
	}
}

// AddSubnetwork adds a subnetwork of network in region with the primary range cidr and the
// named secondary ranges (name -> CIDR).
func (c *Cloud) AddSubnetwork(region, network, name, cidr string, secondary map[string]string) {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	s := &compute.Subnetwork{
		Kind: "compute#subnetwork", Id: c.st.newIDLocked(), Name: name, Region: c.st.link("projects/%s/regions/%s", c.st.project, region),
		Network: c.st.link("projects/%s/global/networks/%s", c.st.project, network), IpCidrRange: cidr, StackType: "IPV4_ONLY",
		CreationTimestamp: c.st.timestamp(), SelfLink: c.st.link("projects/%s/regions/%s/subnetworks/%s", c.st.project, region, name),
	}
	for _, n := range sortedKeys(secondary) {
		s.SecondaryIpRanges = append(s.SecondaryIpRanges, &compute.SubnetworkSecondaryRange{RangeName: n, IpCidrRange: secondary[n]})
	}
	c.st.subnetworks[region+"/"+name] = s
}

// EnableIPv6 makes a subnetwork dual-stack (IPV4_IPV6) with an IPv6 range of accessType
// (EXTERNAL or INTERNAL): interfaces of stackType IPV4_IPV6 need such a subnetwork.
func (c *Cloud) EnableIPv6(region, name, accessType string) {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	if s := c.st.subnetworks[region+"/"+name]; s != nil {
		s.StackType, s.Ipv6AccessType = "IPV4_IPV6", accessType
		if accessType == "EXTERNAL" {
			s.ExternalIpv6Prefix = "2600:1900:4010:1a2b::/64"
		} else {
			s.InternalIpv6Prefix = "fd20:c00:1a2b::/64"
		}
	}
}

// SetCPUQuota limits the vCPUs of the instances of region (the CPUS quota); cpus < 0 removes the
// limit.
func (c *Cloud) SetCPUQuota(region string, cpus int) {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	if cpus < 0 {
		delete(c.st.cpuQuota, region)
		return
	}
	c.st.cpuQuota[region] = cpus
}

// WithdrawMachineType stops offering a machine type in a zone: inserts of it there are refused
// as Compute Engine refuses a type the zone does not have ("Machine type with name 'T' does not
// exist in zone 'Z'.").
func (c *Cloud) WithdrawMachineType(zone, machineType string) {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	c.st.withdrawn[zone+"/"+machineType] = true
}

// offersLocked reports whether zone offers a machine type, and its vCPUs.
func (c *state) offersLocked(zone, machineType string) (int, bool) {
	cpus, ok := c.machineTypes[machineType]
	return cpus, ok && !c.withdrawn[zone+"/"+machineType]
}

// SetOperationDelay sets how long operations take from insert or delete to DONE.
func (c *Cloud) SetOperationDelay(d time.Duration) { fakekit.Set(&c.st.mu, &c.st.opDelay, d) }

// SetWaitTimeout bounds how long zoneOperations.wait holds a request for an operation that is
// not done (Compute Engine holds it about two minutes); default 30s.
func (c *Cloud) SetWaitTimeout(d time.Duration) { fakekit.Set(&c.st.mu, &c.st.waitMax, d) }

// SetPageSize sets the largest page a list answers (Compute Engine's default and maximum is
// 500); a request's smaller maxResults wins.
func (c *Cloud) SetPageSize(n int) { fakekit.Set(&c.st.mu, &c.st.pageSize, n) }

// Instances returns copies of every instance, sorted by zone and name, operations that are due
// applied first.
func (c *Cloud) Instances() []*compute.Instance {
	return fakekit.Snapshot(&c.st.mu, c.st.settleLocked, c.st.instances, cloneJSON[compute.Instance], nil)
}

// Instance returns a copy of an instance.
func (c *Cloud) Instance(zone, name string) (*compute.Instance, bool) {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	c.st.settleLocked()
	in, ok := c.st.instances[zone+"/"+name]
	if !ok {
		return nil, false
	}
	return cloneJSON(in), true
}

// Disks returns copies of every disk, sorted by zone and name.
func (c *Cloud) Disks() []*compute.Disk {
	return fakekit.Snapshot(&c.st.mu, c.st.settleLocked, c.st.disks, cloneJSON[compute.Disk], nil)
}

// PutInstance stores an instance as it is (in zone), for tests that start from an existing
// one; its disks are not made.
func (c *Cloud) PutInstance(zone string, in *compute.Instance) {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	in = cloneJSON(in)
	in.Kind = "compute#instance"
	in.Zone = c.st.link("projects/%s/zones/%s", c.st.project, zone)
	in.SelfLink = c.st.link("projects/%s/zones/%s/instances/%s", c.st.project, zone, in.Name)
	if in.Id == 0 {
		in.Id = c.st.newIDLocked()
	}
	if in.Status == "" {
		in.Status = "RUNNING"
	}
	completeInstanceLocked(in)
	c.st.instances[zone+"/"+in.Name] = in
}

// Settle waits until no operation is pending, applying each as it finishes: what the cloud
// holds afterwards is what stays.
func (c *Cloud) Settle() {
	for {
		c.st.mu.Lock()
		c.st.settleLocked()
		var next time.Time
		for _, op := range c.st.operations {
			if op.Status != "DONE" && (next.IsZero() || op.doneAt.Before(next)) {
				next = op.doneAt
			}
		}
		c.st.mu.Unlock()
		if next.IsZero() {
			return
		}
		<-c.st.clock.After(next.Sub(c.st.clock.Now()))
	}
}

// State is what the fake holds, for `machinist fakecloud gcp --state` and GET /.fakecloud/state.
type State struct {
	Project    string              `json:"project"`
	Instances  []*compute.Instance `json:"instances"`
	Disks      []*compute.Disk     `json:"disks"`
	Operations int                 `json:"operations"`
	Requests   int                 `json:"requests"`
	// Contract is the discovery document's revision requests are checked against, or why
	// they are not.
	Contract string `json:"contract"`
	// ContractViolations are the fake's answers that broke the contract.
	ContractViolations []string `json:"contractViolations,omitempty"`
}

// State returns what the fake holds.
func (c *Cloud) State() State {
	in, d := c.Instances(), c.Disks()
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	contract := "not checked: the contract checks are turned off"
	switch {
	case c.st.contract != nil:
		contract = "Compute v1 discovery document, revision " + c.st.contract.Revision
	case c.st.contractErr != nil:
		contract = "not checked: " + c.st.contractErr.Error()
	}
	return State{Project: c.st.project, Instances: in, Disks: d, Operations: len(c.st.operations), Requests: c.Requests.Len(),
		Contract: contract, ContractViolations: slices.Clone(c.st.violations)}
}

func (c *state) newIDLocked() uint64 {
	c.nextID++
	return 1_000_000_000_000 + c.nextID
}

func (c *state) timestamp() string { return c.clock.Now().UTC().Format(time.RFC3339Nano) }

// link is the selfLink of a resource path, on Compute Engine's public endpoint as the real API
// writes it.
func (c *state) link(format string, args ...any) string {
	return "https://www.googleapis.com/compute/v1/" + fmt.Sprintf(format, args...)
}

func sortedKeys[T any](m map[string]T) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// cloneJSON deep-copies a Compute type through its JSON form.
func cloneJSON[T any](v *T) *T {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	out := new(T)
	if err := json.Unmarshal(b, out); err != nil {
		panic(err)
	}
	return out
}

// lastSegment is the part of a URL or path after the last '/'.
func lastSegment(s string) string {
	if i := strings.LastIndex(s, "/"); i >= 0 {
		return s[i+1:]
	}
	return s
}
