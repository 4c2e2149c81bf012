package oracle

import (
	"fmt"
	"net"
	"sort"
	"time"

	"github.com/machinist-io/machinist/providers/kit/fakekit"

	"github.com/machinist-io/machinist/providers/gcp"
	"github.com/machinist-io/machinist/providers/gcp/fakegcp"
)

// What a World holds besides fakegcp's demo resources: the network, subnetwork and image
// Gardener's published sample class names, and a dual-stack subnetwork.
const (
	SampleNetwork    = "network-name"
	SampleSubnetwork = "sub-net-name"
	SampleRange      = "ipv4-cidr-range"
	SampleImage      = "projects/coreos-cloud/global/images/coreos-stable-1688-5-3-v20180403"
	DualStackSubnet  = "nodes-dual-stack"
	PodsRange        = "ipv4-pods"
	ServiceAccount   = "oracle@" + fakegcp.DefaultProject + ".iam.gserviceaccount.com"
	UserData         = "#cloud-config\nruncmd:\n- echo oracle\n"
)

// World is a fresh fake Compute Engine served over HTTPS on loopback, seeded with what the
// scenarios' classes name, and a service account key whose token_uri is the fake's.
type World struct {
	Cloud  *fakegcp.Cloud
	Server *fakekit.Server
	Key    []byte
	mark   int
}

// NewWorld serves a fresh fake.
func NewWorld() (*World, error) {
	c := fakegcp.New(fakegcp.Options{})
	if err := c.ContractError(); err != nil {
		return nil, err
	}
	c.SetOperationDelay(20 * time.Millisecond)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv, err := c.Serve(l, nil)
	if err != nil {
		return nil, err
	}
	c.AddNetwork(fakegcp.DemoNetwork) // fakegcp.SeedDemo's resources, without its service account
	c.AddSubnetwork(fakegcp.DemoRegion, fakegcp.DemoNetwork, fakegcp.DemoSubnetwork, fakegcp.DemoSubnetworkCIDR, map[string]string{PodsRange: "100.96.0.0/11"})
	c.AddImage(fakegcp.DemoImageProject, fakegcp.DemoImage, fakegcp.DemoImageFamily)
	c.AddNetwork(SampleNetwork)
	c.AddSubnetwork(fakegcp.DemoRegion, SampleNetwork, SampleSubnetwork, "10.0.0.0/16", map[string]string{SampleRange: "100.64.0.0/16"})
	c.EnableIPv6(fakegcp.DemoRegion, SampleSubnetwork, "EXTERNAL")
	c.AddSubnetwork(fakegcp.DemoRegion, fakegcp.DemoNetwork, DualStackSubnet, "10.251.0.0/16", map[string]string{PodsRange: "100.112.0.0/12"})
	c.EnableIPv6(fakegcp.DemoRegion, DualStackSubnet, "INTERNAL")
	c.AddImage("coreos-cloud", "coreos-stable-1688-5-3-v20180403", "")
	w := &World{Cloud: c, Server: srv, Key: c.AddServiceAccount(ServiceAccount, fakegcp.TokenURL(srv.URL))}
	return w, nil
}

// SecretData is the class secret's data: Gardener's keys (the service account key and the user
// data) and machinist's computeEndpoint and caCert, which Gardener's driver ignores (its client
// reaches the fake through front.go instead).
func (w *World) SecretData() map[string][]byte {
	return map[string][]byte{
		gcp.KeyServiceAccountJSON: append([]byte(nil), w.Key...),
		gcp.KeyUserData:           []byte(UserData),
		gcp.KeyComputeEndpoint:    []byte(fakegcp.ComputeEndpoint(w.Server.URL)),
		gcp.KeyCACert:             append([]byte(nil), w.Server.CACert...),
	}
}

// Close stops the fake.
func (w *World) Close() error { return w.Server.Close() }

// take returns the Compute requests since the last take, normalized.
func (w *World) take() ([]Request, error) {
	all := w.Cloud.Requests.All()
	since := all[w.mark:]
	w.mark = len(all)
	return normalize(since)
}

// left is what the fake holds once every operation is done.
func (w *World) left() Left {
	w.Cloud.Settle()
	l := Left{Instances: []string{}, Disks: []string{}}
	for _, in := range w.Cloud.Instances() {
		l.Instances = append(l.Instances, fmt.Sprintf("%s %s", in.Name, in.Status))
	}
	for _, d := range w.Cloud.Disks() {
		l.Disks = append(l.Disks, d.Name)
	}
	sort.Strings(l.Instances)
	sort.Strings(l.Disks)
	return l
}
