// Package fakeaws is a stateful fake of Amazon EC2 for tests and demos, served over HTTP on
// loopback in EC2's query protocol, so the real aws-sdk-go-v2 client runs unchanged against it:
// Signature Version 4 (checked against the fake's access keys), the retryer, the ec2query
// serializers and error parsing.
//
// One Cloud is one AWS account in one region: VPCs, subnets (each in an availability zone, with
// a finite number of free addresses) and security groups (Network), access keys, web identity
// roles and instance profiles (Identity), capacity reservations (Capacity), AMIs, key pairs and
// placement groups are seeded with the Add methods; instances, their EBS volumes, network
// interfaces and spot instance requests are made by RunInstances. Instances go pending → running
// (after SetStartDelay) and, once terminated, shutting-down → terminated (after SetStopDelay);
// terminated instances stay visible for an hour, as in EC2 (SetTerminatedRetention), and
// deleteOnTermination volumes and interfaces go with them. The instance types are a table of
// real ones (InstanceTypes: vCPUs, memory, architecture, GPUs) checked against the AMI's
// architecture; placement groups are taken by ID or name (AddPlacementGroup). RunInstances
// honours ClientToken as EC2 does (the same token returns the same reservation, even after
// termination; different parameters are IdempotentParameterMismatch).
// DescribeInstances, DescribeVolumes, DescribeNetworkInterfaces and DescribeSpotInstanceRequests
// take EC2's filters (with * and ? wildcards) and paginate with MaxResults and NextToken.
//
// Capacity and faults: Capacity (SetZoneCapacity, SetSpotCapacity, SetSpotPrice, SetVcpuQuota,
// SetInstanceLimit, FailLaunches), SetDescribeLag (eventual consistency) and Faults (throttling
// with RequestLimitExceeded, 5xx, any error code, a delay, an answer lost after the request took
// effect, a hang until released). STS's AssumeRoleWithWebIdentity is served at the same URL for
// web-identity (IRSA-style) credentials. Every request is recorded (Requests) with its action,
// time, request ID, answer code and parameters, and dumped as JSON on the control endpoint: the
// differential run against Gardener's provider (providers/aws/oracle) compares what reaches the
// fake request by request.
package fakeaws

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"net/netip"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/machinist-io/machinist/providers/kit/fakekit"
)

// Defaults of a new Cloud.
const (
	DefaultRegion    = "eu-west-1"
	DefaultAccountID = "123456789012"
	// DefaultTerminatedRetention is how long a terminated instance stays visible to
	// DescribeInstances: EC2 documents "about an hour" (SetTerminatedRetention changes it).
	DefaultTerminatedRetention = time.Hour
	// DemoAccessKeyID and DemoSecretAccessKey are the key SeedDemo adds.
	DemoAccessKeyID     = "AKIAFAKEAWSDEMO00001"
	DemoSecretAccessKey = "fakeaws/demo/secret/key/not/for/real/use0"
)

// Instance states, as EC2 names them.
const (
	StatePending      = "pending"
	StateRunning      = "running"
	StateShuttingDown = "shutting-down"
	StateTerminated   = "terminated"
	StateStopping     = "stopping"
	StateStopped      = "stopped"
)

var stateCodes = map[string]int{StatePending: 0, StateRunning: 16, StateShuttingDown: 32, StateTerminated: 48, StateStopping: 64, StateStopped: 80}

// Cloud is one fake AWS account in one region. Create it with New; all methods are safe for
// concurrent use. EC2's instances, network interfaces, images and volumes, spot requests, and STS
// are each a type of their own over the shared state; so are the settings of the account's
// identities (Identity), networks (Network) and capacity (Capacity).
type Cloud struct {
	// Faults are the injected faults (fakekit.Faults: Inject, Clear, Hits).
	Faults fakekit.Faults[Fault]
	// Requests are the requests the cloud answered (fakekit.Journal: All, For(action), Len,
	// Reset).
	Requests fakekit.Journal[Request]
	// Identity holds the account's access keys, web identity roles and instance profiles.
	Identity *Identity
	// Network holds the account's VPCs, subnets and security groups.
	Network *Network
	// Capacity holds what EC2 can still launch: per zone, spot, quotas, reservations.
	Capacity *Capacity

	st           *state
	apiInstances instancesAPI
	apiNetwork   networkAPI
	apiResources resourcesAPI
	apiSpot      spotAPI
	apiSTS       stsAPI
	actions      map[string]func(params) (any, *apiError)
}

// Options configure a cloud. The zero value is ready to use.
type Options struct {
	// Region is the cloud's region; default DefaultRegion.
	Region string
	// Clock keeps the cloud's time; nil is the real clock.
	Clock clock.Clock
}

// The settings of an account and EC2's and STS's APIs, over the shared state.
type (
	// Identity holds an account's access keys, web identity roles and instance profiles.
	Identity struct{ *state }
	// Network holds an account's VPCs, subnets and security groups.
	Network struct{ *state }
	// Capacity holds what EC2 can still launch in an account.
	Capacity     struct{ *state }
	instancesAPI struct{ *state }
	networkAPI   struct{ *state }
	resourcesAPI struct{ *state }
	spotAPI      struct{ *state }
	stsAPI       struct{ *state }
)

// state is what the APIs share, under one lock.
type state struct {
	region    string
	accountID string
	clock     clock.Clock
	idPrefix  string

	mu           sync.Mutex
	keys         map[string]*accessKey // by access key ID
	roles        map[string]string     // web identity role ARN -> accepted token
	vpcs         map[string]bool
	subnets      map[string]*Subnet
	groups       map[string]*SecurityGroup
	images       map[string]*Image
	keyPairs     map[string]bool
	profiles     map[string]string // instance profile name -> ARN
	reservations map[string]*CapacityReservation
	pgroups      map[string]*PlacementGroup // by ID
	instances    map[string]*Instance
	expired      map[string]*Instance // terminated longer than the retention: gone from Describe
	retention    time.Duration        // how long terminated instances stay visible
	volumes      map[string]*Volume
	nics         map[string]*NetworkInterface
	spots        map[string]*SpotRequest
	tokens       map[string]*tokenUse // ClientToken -> what it made
	zoneCap      map[string]int       // zone -> instances it still takes (absent: unlimited)
	spotCap      map[string]int       // zone -> spot instances it still takes
	spotPrice    map[string]float64   // instance type -> current spot price
	vcpuQuota    int                  // running on-demand vCPUs allowed; 0: unlimited
	instLimit    int                  // instances allowed; 0: unlimited
	startDelay   time.Duration
	stopDelay    time.Duration
	describeLag  int
	failLaunch   []string // state reason codes of the next launches that EC2 gives up on
	imdsRole     string   // instance profile role IMDS serves credentials for; "" serves none
	hangs        []chan struct{}
	seq          int
}

type accessKey struct {
	secret       string
	sessionToken string // set for keys STS issued
	expires      time.Time
}

type tokenUse struct {
	fingerprint   string
	reservationID string
	instanceIDs   []string
}

// Subnet is a subnet of a VPC in one availability zone.
type Subnet struct {
	ID                string
	VpcID             string
	Zone              string
	CIDR              string
	AvailableIPs      int
	next              netip.Addr
	prefix            netip.Prefix
	ipv6PrefixCounter int
}

// SecurityGroup is a VPC security group.
type SecurityGroup struct {
	ID    string
	VpcID string
	Name  string
}

// Image is an AMI.
type Image struct {
	ID             string
	Name           string
	RootDeviceName string
	Architecture   string
}

// PlacementGroup is a placement group of the account.
type PlacementGroup struct {
	ID         string
	Name       string
	Strategy   string // cluster, spread, partition
	Partitions int    // of a partition group
}

// CapacityReservation reserves instances of one type in one zone.
type CapacityReservation struct {
	ID           string
	InstanceType string
	Zone         string
	Total        int
	Used         int
}

// Instance is an EC2 instance.
type Instance struct {
	ID              string
	ReservationID   string
	ImageID         string
	InstanceType    string
	KeyName         string            `json:",omitempty"`
	State           string            // see State* constants
	StateReason     string            `json:",omitempty"` // code, e.g. Client.UserInitiatedShutdown
	Zone            string            // availability zone
	SubnetID        string            // of the primary interface
	VpcID           string            //
	PrivateIP       string            //
	PrivateDNSName  string            //
	ClientToken     string            `json:",omitempty"`
	LaunchTime      time.Time         //
	ShutdownAt      time.Time         `json:",omitempty"`
	TerminatedAt    time.Time         `json:",omitempty"`
	Tags            map[string]string `json:",omitempty"`
	SecurityGroups  []string
	Devices         []Device          // block device mapping
	NICs            []string          // interface IDs by device index
	IAMProfileARN   string            `json:",omitempty"`
	Lifecycle       string            `json:",omitempty"` // "spot" or ""
	SpotRequestID   string            `json:",omitempty"`
	Reservation     string            `json:",omitempty"` // capacity reservation
	UserData        string            `json:"-"`
	EbsOptimized    bool              `json:",omitempty"`
	Monitoring      bool              `json:",omitempty"`
	Tenancy         string            `json:",omitempty"`
	PlacementGroup  string            `json:",omitempty"` // its name
	PlacementID     string            `json:",omitempty"`
	Partition       int32             `json:",omitempty"`
	CoreCount       int32             `json:",omitempty"`
	ThreadsPerCore  int32             `json:",omitempty"`
	MetadataOptions map[string]string `json:",omitempty"`
	visibleAfter    int               // DescribeInstances calls that still miss it (SetDescribeLag)
	failReason      string            // set: terminated on the next look, with this state reason
}

// Device is a block device of an instance.
type Device struct {
	Name                string
	VolumeID            string
	DeleteOnTermination bool
}

// Volume is an EBS volume.
type Volume struct {
	ID                  string
	Zone                string
	Size                int32
	Type                string
	Iops                int32  `json:",omitempty"`
	Throughput          int32  `json:",omitempty"`
	Encrypted           bool   `json:",omitempty"`
	KmsKeyID            string `json:",omitempty"`
	SnapshotID          string `json:",omitempty"`
	State               string // in-use, available
	InstanceID          string `json:",omitempty"`
	Device              string `json:",omitempty"`
	DeleteOnTermination bool   `json:",omitempty"`
	CreateTime          time.Time
	Tags                map[string]string `json:",omitempty"`
}

// NetworkInterface is an elastic network interface.
type NetworkInterface struct {
	ID                  string
	SubnetID            string
	VpcID               string
	Zone                string
	PrivateIP           string
	PrivateDNSName      string
	SecurityGroups      []string
	SourceDestCheck     bool
	InterfaceType       string
	Description         string `json:",omitempty"`
	Status              string // in-use, available
	InstanceID          string `json:",omitempty"`
	DeviceIndex         int32
	NetworkCardIndex    int32
	DeleteOnTermination bool
	PublicIP            string            `json:",omitempty"`
	Ipv6Addresses       []string          `json:",omitempty"`
	Ipv6Prefixes        []string          `json:",omitempty"`
	Tags                map[string]string `json:",omitempty"`
}

// SpotRequest is a one-time spot instance request made by RunInstances.
type SpotRequest struct {
	ID         string
	State      string // active, closed, cancelled
	StatusCode string // fulfilled, instance-terminated-by-user, ...
	InstanceID string
	MaxPrice   string
	Type       string
	Zone       string
	CreateTime time.Time
	Tags       map[string]string `json:",omitempty"`
}

// New returns an empty cloud.
func New(o Options) *Cloud {
	region, clk := o.Region, o.Clock
	if region == "" {
		region = DefaultRegion
	}
	if clk == nil {
		clk = clock.RealClock{}
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	st := &state{
		region: region, accountID: DefaultAccountID, clock: clk, idPrefix: hex.EncodeToString(b[:]),
		keys: map[string]*accessKey{}, roles: map[string]string{}, vpcs: map[string]bool{},
		subnets: map[string]*Subnet{}, groups: map[string]*SecurityGroup{}, images: map[string]*Image{},
		keyPairs: map[string]bool{}, profiles: map[string]string{}, reservations: map[string]*CapacityReservation{}, pgroups: map[string]*PlacementGroup{},
		instances: map[string]*Instance{}, expired: map[string]*Instance{}, retention: DefaultTerminatedRetention, volumes: map[string]*Volume{}, nics: map[string]*NetworkInterface{},
		spots: map[string]*SpotRequest{}, tokens: map[string]*tokenUse{}, zoneCap: map[string]int{},
		spotCap: map[string]int{}, spotPrice: map[string]float64{},
	}
	c := &Cloud{
		Identity: &Identity{st}, Network: &Network{st}, Capacity: &Capacity{st},
		st: st, apiInstances: instancesAPI{st}, apiNetwork: networkAPI{st}, apiResources: resourcesAPI{st}, apiSpot: spotAPI{st}, apiSTS: stsAPI{st},
	}
	c.actions = c.ec2Actions()
	return c
}

// IDPrefix is the random part every resource ID of this cloud starts with after its kind
// (i-<prefix><sequence>): a normalizer drops it to compare two clouds' IDs by sequence.
func (c *Cloud) IDPrefix() string { return c.st.idPrefix }

// Region is the cloud's region.
func (c *Cloud) Region() string { return c.st.region }

// AccountID is the cloud's account.
func (c *Cloud) AccountID() string { return c.st.accountID }

// AddAccessKey lets requests signed with this key in.
func (c *Identity) AddAccessKey(id, secret string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.keys[id] = &accessKey{secret: secret}
}

// RemoveAccessKey revokes a key: requests signed with it fail with AuthFailure.
func (c *Identity) RemoveAccessKey(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.keys, id)
}

// AddWebIdentityRole lets AssumeRoleWithWebIdentity for roleARN with token issue session keys.
func (c *Identity) AddWebIdentityRole(roleARN, token string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.roles[roleARN] = token
}

// AddSubnet adds a subnet of vpcID (created if new) in zone with the IPv4 cidr.
func (c *Network) AddSubnet(id, vpcID, zone, cidr string) {
	prefix := netip.MustParsePrefix(cidr).Masked()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.vpcs[vpcID] = true
	// AWS reserves the first four addresses and the last one of every subnet.
	size := 1 << (32 - prefix.Bits())
	first := prefix.Addr()
	for range 4 {
		first = first.Next()
	}
	c.subnets[id] = &Subnet{ID: id, VpcID: vpcID, Zone: zone, CIDR: prefix.String(), AvailableIPs: max(size-5, 0), next: first, prefix: prefix}
}

// SetSubnetFreeAddresses limits the addresses a subnet still has.
func (c *Network) SetSubnetFreeAddresses(id string, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.subnets[id]; s != nil {
		s.AvailableIPs = n
	}
}

// AddSecurityGroup adds a security group of vpcID.
func (c *Network) AddSecurityGroup(id, vpcID, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.vpcs[vpcID] = true
	c.groups[id] = &SecurityGroup{ID: id, VpcID: vpcID, Name: name}
}

// AddImage adds an x86_64 AMI whose root device is rootDevice (e.g. /dev/xvda).
func (c *Cloud) AddImage(id, name, rootDevice string) { c.AddImageFor(id, name, rootDevice, "x86_64") }

// AddImageFor adds an AMI of architecture arch (x86_64 or arm64): RunInstances refuses an
// instance type of another architecture, as EC2 does.
func (c *Cloud) AddImageFor(id, name, rootDevice, arch string) {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	c.st.images[id] = &Image{ID: id, Name: name, RootDeviceName: rootDevice, Architecture: arch}
}

// AddKeyPair adds an EC2 key pair.
func (c *Cloud) AddKeyPair(name string) {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	c.st.keyPairs[name] = true
}

// AddInstanceProfile adds an IAM instance profile (IAM is global; the fake keeps it here).
func (c *Identity) AddInstanceProfile(name string) string {
	arn := fmt.Sprintf("arn:aws:iam::%s:instance-profile/%s", c.accountID, name)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.profiles[name] = arn
	return arn
}

// AddPlacementGroup adds a placement group: strategy cluster, spread or partition (with
// partitions partitions). RunInstances takes it by Placement.GroupId or Placement.GroupName.
func (c *Cloud) AddPlacementGroup(id, name, strategy string, partitions int) {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	c.st.pgroups[id] = &PlacementGroup{ID: id, Name: name, Strategy: strategy, Partitions: partitions}
}

// AddCapacityReservation reserves total instances of instanceType in zone.
func (c *Capacity) AddCapacityReservation(id, instanceType, zone string, total int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reservations[id] = &CapacityReservation{ID: id, InstanceType: instanceType, Zone: zone, Total: total}
}

// SetZoneCapacity lets zone take n more on-demand instances (of any type); n < 0 removes the
// limit. Beyond it RunInstances fails with InsufficientInstanceCapacity.
func (c *Capacity) SetZoneCapacity(zone string, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n < 0 {
		delete(c.zoneCap, zone)
		return
	}
	c.zoneCap[zone] = n
}

// SetSpotCapacity lets zone take n more spot instances; n < 0 removes the limit.
func (c *Capacity) SetSpotCapacity(zone string, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n < 0 {
		delete(c.spotCap, zone)
		return
	}
	c.spotCap[zone] = n
}

// SetSpotPrice sets the current spot price of instanceType: a lower maximum price fails with
// SpotMaxPriceTooLow.
func (c *Capacity) SetSpotPrice(instanceType string, price float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.spotPrice[instanceType] = price
}

// SetVcpuQuota limits the vCPUs of the account's on-demand instances (0: no limit); beyond it
// RunInstances fails with VcpuLimitExceeded.
func (c *Capacity) SetVcpuQuota(vcpus int) { fakekit.Set(&c.mu, &c.vcpuQuota, vcpus) }

// SetInstanceLimit limits the account's instances (0: no limit); beyond it RunInstances fails
// with InstanceLimitExceeded.
func (c *Capacity) SetInstanceLimit(n int) { fakekit.Set(&c.mu, &c.instLimit, n) }

// SetStartDelay is how long a new instance stays pending (a slow start).
func (c *Cloud) SetStartDelay(d time.Duration) { fakekit.Set(&c.st.mu, &c.st.startDelay, d) }

// SetStopDelay is how long a terminated instance stays shutting-down.
func (c *Cloud) SetStopDelay(d time.Duration) { fakekit.Set(&c.st.mu, &c.st.stopDelay, d) }

// SetTerminatedRetention is how long terminated instances stay visible after they reached
// terminated (by the cloud's clock); then DescribeInstances and TerminateInstances answer their
// IDs with InvalidInstanceID.NotFound, as EC2 does, and Instances no longer lists them. A client
// token keeps answering with its instance. 0 keeps them for ever.
func (c *Cloud) SetTerminatedRetention(d time.Duration) { fakekit.Set(&c.st.mu, &c.st.retention, d) }

// SetDescribeLag makes each new instance invisible to the first n DescribeInstances requests
// after its launch, as EC2's eventual consistency does.
func (c *Cloud) SetDescribeLag(n int) { fakekit.Set(&c.st.mu, &c.st.describeLag, n) }

// FailLaunches makes the next launched instances end up terminated right after RunInstances
// answered, one per reason (a state reason code such as Server.InsufficientInstanceCapacity or
// Server.SpotInstanceTermination), as EC2 does when it cannot place an instance it accepted.
func (c *Capacity) FailLaunches(reasons ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failLaunch = append(c.failLaunch, reasons...)
}

// ServeInstanceProfile makes the instance metadata service (IMDSv2, under /latest/ on the
// served URL) hand out session credentials of role, as on an EC2 instance with an instance
// profile; "" stops it.
func (c *Identity) ServeInstanceProfile(role string) { fakekit.Set(&c.mu, &c.imdsRole, role) }

// SeedDemo adds the demo account key and the network, image and profile that
// kubernetes/samples/fakecloud/aws-machineclass.yaml names: subnets in zones a and b of the
// region, a security group, an AMI, a key pair and an instance profile.
func (c *Cloud) SeedDemo() {
	c.Identity.AddAccessKey(DemoAccessKeyID, DemoSecretAccessKey)
	c.Network.AddSubnet("subnet-0demo0000000000a", "vpc-0demo00000000000", c.st.region+"a", "10.250.0.0/19")
	c.Network.AddSubnet("subnet-0demo0000000000b", "vpc-0demo00000000000", c.st.region+"b", "10.250.32.0/19")
	c.Network.AddSecurityGroup("sg-0demo000000nodes", "vpc-0demo00000000000", "demo-nodes")
	c.AddImage("ami-0demogardenlinux0", "gardenlinux-1592.1.0", "/dev/xvda")
	c.AddKeyPair("demo-ssh")
	c.Identity.AddInstanceProfile("demo-nodes")
}

// Instances returns copies of every instance the fake holds (terminated ones included).
func (c *Cloud) Instances() []Instance {
	return fakekit.Snapshot(&c.st.mu, c.st.advanceLocked, c.st.instances, (*Instance).copied, func(a, b Instance) int { return strings.Compare(a.ID, b.ID) })
}

// Live returns the instances that are not shutting down or terminated.
func (c *Cloud) Live() []Instance {
	var out []Instance
	for _, i := range c.Instances() {
		if i.State != StateShuttingDown && i.State != StateTerminated {
			out = append(out, i)
		}
	}
	return out
}

// Volumes returns copies of the volumes the fake holds.
func (c *Cloud) Volumes() []Volume {
	return fakekit.Snapshot(&c.st.mu, c.st.advanceLocked, c.st.volumes, (*Volume).copied, func(a, b Volume) int { return strings.Compare(a.ID, b.ID) })
}

// NetworkInterfaces returns copies of the network interfaces the fake holds.
func (c *Cloud) NetworkInterfaces() []NetworkInterface {
	return fakekit.Snapshot(&c.st.mu, c.st.advanceLocked, c.st.nics, (*NetworkInterface).copied, func(a, b NetworkInterface) int { return strings.Compare(a.ID, b.ID) })
}

// SpotRequests returns copies of the spot instance requests.
func (c *Cloud) SpotRequests() []SpotRequest {
	return fakekit.Snapshot(&c.st.mu, c.st.advanceLocked, c.st.spots, (*SpotRequest).copied, func(a, b SpotRequest) int { return strings.Compare(a.ID, b.ID) })
}

// State is everything the fake holds, for `machinist fakecloud aws --state` and
// GET /.fakecloud/state: live instances, and the volumes, interfaces and spot requests that
// are left (terminated instances are listed apart).
type State struct {
	Region             string             `json:"region"`
	Instances          []Instance         `json:"instances"`
	TerminatedCount    int                `json:"terminatedInstances"`
	Volumes            []Volume           `json:"volumes"`
	NetworkInterfaces  []NetworkInterface `json:"networkInterfaces"`
	ActiveSpotRequests []SpotRequest      `json:"spotRequests"`
}

// State returns what the fake holds now.
func (c *Cloud) State() State {
	s := State{Region: c.st.region, Instances: []Instance{}, Volumes: c.Volumes(), NetworkInterfaces: c.NetworkInterfaces(), ActiveSpotRequests: []SpotRequest{}}
	for _, i := range c.Instances() {
		if i.State == StateTerminated {
			s.TerminatedCount++
			continue
		}
		s.Instances = append(s.Instances, i)
	}
	for _, r := range c.SpotRequests() {
		if r.State == "open" || r.State == "active" {
			s.ActiveSpotRequests = append(s.ActiveSpotRequests, r)
		}
	}
	return s
}

// advanceLocked applies the state transitions that are due: pending → running after the start
// delay, shutting-down → terminated after the stop delay (deleting what goes with the instance),
// terminated → expired after the retention.
func (c *state) advanceLocked() {
	now := c.clock.Now()
	for _, i := range c.instances {
		switch i.State {
		case StatePending:
			if i.failReason != "" {
				c.terminatedLocked(i)
				i.StateReason = i.failReason
				continue
			}
			if !now.Before(i.LaunchTime.Add(c.startDelay)) {
				i.State = StateRunning
			}
		case StateShuttingDown:
			if !now.Before(i.ShutdownAt.Add(c.stopDelay)) {
				c.terminatedLocked(i)
				i.TerminatedAt = i.ShutdownAt.Add(c.stopDelay) // when it was due, not when seen
			}
		}
		if i.State == StateTerminated && c.retention > 0 && !now.Before(i.TerminatedAt.Add(c.retention)) {
			delete(c.instances, i.ID)
			c.expired[i.ID] = i
		}
	}
}

// terminatedLocked completes an instance's termination: its deleteOnTermination volumes and
// interfaces are deleted, the others detached; capacity it held is given back.
func (c *state) terminatedLocked(i *Instance) {
	i.State, i.TerminatedAt = StateTerminated, c.clock.Now()
	for _, d := range i.Devices {
		v := c.volumes[d.VolumeID]
		if v == nil {
			continue
		}
		if d.DeleteOnTermination {
			delete(c.volumes, v.ID)
		} else {
			v.State, v.InstanceID, v.Device = "available", "", ""
		}
	}
	for _, id := range i.NICs {
		n := c.nics[id]
		if n == nil {
			continue
		}
		if n.DeleteOnTermination {
			delete(c.nics, id)
			if s := c.subnets[n.SubnetID]; s != nil {
				s.AvailableIPs++
			}
		} else {
			n.Status, n.InstanceID = "available", ""
		}
	}
	if r := c.reservations[i.Reservation]; r != nil && r.Used > 0 {
		r.Used--
	}
	if s := c.spots[i.SpotRequestID]; s != nil && s.State == "active" {
		s.State, s.StatusCode = "closed", "instance-terminated-by-user"
	}
}

// newID returns a fresh resource ID with prefix, e.g. i-0a1b2c3d000000001.
func (c *state) newIDLocked(prefix string) string {
	c.seq++
	return fmt.Sprintf("%s-%s%09x", prefix, c.idPrefix, c.seq)
}

// The copies of resources the fake hands out: their tags are the caller's to change.
func (i Instance) copied() Instance                 { i.Tags = maps.Clone(i.Tags); return i }
func (v Volume) copied() Volume                     { v.Tags = maps.Clone(v.Tags); return v }
func (n NetworkInterface) copied() NetworkInterface { n.Tags = maps.Clone(n.Tags); return n }
func (s SpotRequest) copied() SpotRequest           { s.Tags = maps.Clone(s.Tags); return s }
