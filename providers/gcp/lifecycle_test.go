package gcp

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strings"
	"testing"

	compute "google.golang.org/api/compute/v1"
	"k8s.io/utils/ptr"

	"github.com/machinist-io/machinist/core/cloudmetrics/cloudmetricstest"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/gcp/fakegcp"
)

// A create makes the instance Gardener's provider makes: named after the machine, with the
// class's disks, labels, tags, metadata (userData first), network and service account, and
// answers with Gardener's ProviderID and the instance's addresses.
func TestCreateMakesTheInstance(t *testing.T) {
	e := newTestEnv(t)
	e.class = e.classWith("workers", func(s *ProviderSpec) {
		s.Disks = append(s.Disks, &Disk{AutoDelete: ptr.To(false), SizeGb: 100, Type: "pd-ssd", Labels: map[string]string{"volume": "data"}})
		s.NetworkInterfaces[0].DisableExternalIP = false
	})
	resp := e.mustCreate(t, "m-1")
	if resp.ProviderID != "gce:///machinist-fake/europe-west1-b/m-1" || resp.NodeName != "m-1" {
		t.Errorf("ProviderID %q, node %q", resp.ProviderID, resp.NodeName)
	}
	in, ok := e.cloud.Instance(testZone, "m-1")
	if !ok {
		t.Fatal("no instance m-1")
	}
	if in.Status != "RUNNING" || !strings.HasSuffix(in.MachineType, "/zones/europe-west1-b/machineTypes/n2-standard-2") {
		t.Errorf("status %s, machine type %s", in.Status, in.MachineType)
	}
	if got := in.Metadata.Items[0]; got.Key != "user-data" || *got.Value != testUserData || in.Metadata.Items[1].Key != "block-project-ssh-keys" {
		t.Errorf("metadata = %s, %s", got.Key, in.Metadata.Items[1].Key)
	}
	if !slices.Equal(in.Tags.Items, []string{"shoot--dev--alpha", clusterTag, roleTag}) || in.Labels["name"] != "alpha" || !in.CanIpForward {
		t.Errorf("tags %v, labels %v, canIpForward %v", in.Tags.Items, in.Labels, in.CanIpForward)
	}
	if len(in.Disks) != 2 || !in.Disks[0].Boot || !in.Disks[0].AutoDelete || in.Disks[1].AutoDelete {
		t.Errorf("disks = %+v", in.Disks)
	}
	var ips []string
	for _, a := range resp.Addresses {
		ips = append(ips, string(a.Type)+"="+a.Address)
	}
	if len(resp.Addresses) != 3 || !strings.HasPrefix(ips[0], "InternalIP=10.") || !strings.HasPrefix(ips[1], "ExternalIP=34.") || ips[2] != "Hostname=m-1" {
		t.Errorf("addresses = %v", ips)
	}
	var data *compute.Disk
	for _, d := range e.cloud.Disks() {
		if d.Name == "m-1-1" {
			data = d
		}
	}
	if data == nil || data.SizeGb != 100 || !strings.HasSuffix(data.Type, "/pd-ssd") || data.Labels["volume"] != "data" {
		t.Fatalf("data disk = %+v", data)
	}

	// Deleting keeps the disk whose autoDelete is false, as Compute Engine does, and says so.
	if err := e.delete(t, e.class, "m-1"); err != nil {
		t.Fatal(err)
	}
	if left := e.leftovers("m-1"); !slices.Equal(left, []string{"disk m-1-1"}) {
		t.Errorf("after delete: %v, want only the autoDelete: false disk", left)
	}
	if !strings.Contains(e.logs.String(), "kept a disk of the instance") {
		t.Error("the kept disk is not logged")
	}
}

func TestCreateAdoptsOnlyItsOwnInstance(t *testing.T) {
	e := newTestEnv(t)
	e.cloud.PutInstance(testZone, &compute.Instance{Name: "m-1", Status: "PROVISIONING", Tags: &compute.Tags{Items: []string{clusterTag, roleTag}},
		NetworkInterfaces: []*compute.NetworkInterface{{NetworkIP: "10.250.0.9"}}})
	resp := e.mustCreate(t, "m-1")
	if resp.ProviderID != "gce:///machinist-fake/europe-west1-b/m-1" || resp.Addresses[0].Address != "10.250.0.9" {
		t.Errorf("adopted: %+v", resp)
	}
	if n := len(e.cloud.Requests.For(fakegcp.OpInsertInstance)); n != 0 {
		t.Errorf("%d inserts for an instance that exists", n)
	}
	e.cloud.PutInstance(testZone, &compute.Instance{Name: "m-2", Tags: &compute.Tags{Items: []string{"kubernetes-io-cluster-other", roleTag}}})
	_, err := e.create(t, "m-2")
	if driver.CodeOf(err) != driver.AlreadyExists || !strings.Contains(driver.MessageOf(err), "not this machine's") {
		t.Fatalf("err = %v, want AlreadyExists", err)
	}
	if _, ok := e.cloud.Instance(testZone, "m-2"); !ok {
		t.Error("the other cluster's instance is gone")
	}
}

func TestDeleteScopesAndProtection(t *testing.T) {
	e := newTestEnv(t)
	if err := e.delete(t, e.class, "never-made"); err != nil {
		t.Errorf("absent instance: %v", err)
	}
	// An instance of the machine's name without the class's cluster and role tags is not the
	// machine's: it survives, and the answer is Gardener's, NotFound (the controller reads it as
	// "no VM" and finishes the machine's deletion).
	for name, tags := range map[string][]string{
		"untagged":      nil,
		"other-cluster": {"kubernetes-io-cluster-other", roleTag},
		"other-role":    {clusterTag, "kubernetes-io-role-gpu"},
		"two-clusters":  {clusterTag, "kubernetes-io-cluster-other", roleTag},
		"only-names":    {"shoot--dev--alpha"},
	} {
		in := &compute.Instance{Name: name}
		if tags != nil {
			in.Tags = &compute.Tags{Items: tags}
		}
		e.cloud.PutInstance(testZone, in)
		err := e.delete(t, e.class, name)
		if driver.CodeOf(err) != driver.NotFound || !strings.Contains(driver.MessageOf(err), "not this machine's") {
			t.Errorf("%s: %v, want NotFound", name, err)
		}
		if _, ok := e.cloud.Instance(testZone, name); !ok {
			t.Errorf("%s: the instance that is not the machine's was deleted", name)
		}
	}
	if n := len(e.cloud.Requests.For(fakegcp.OpDeleteInstance)); n != 0 {
		t.Errorf("%d delete requests for instances that are not the class's", n)
	}
	e.class = e.classWith("protected", func(s *ProviderSpec) { s.DeletionProtection = true })
	e.mustCreate(t, "m-3")
	err := e.delete(t, e.class, "m-3")
	if driver.CodeOf(err) != driver.FailedPrecondition || !strings.Contains(driver.MessageOf(err), "--no-deletion-protection") {
		t.Errorf("protected instance: %v", err)
	}
	if _, ok := e.cloud.Instance(testZone, "m-3"); !ok {
		t.Error("the protected instance is gone")
	}
	// The ProviderID's zone wins over the class's.
	e.class = e.classWith("workers", func(*ProviderSpec) {})
	e.mustCreate(t, "m-4")
	other := e.classWith("elsewhere", func(s *ProviderSpec) { s.Zone = "europe-west1-c" })
	m := machine("m-4")
	m.Spec.ProviderID = "gce:///machinist-fake/europe-west1-b/m-4"
	if _, err := e.drv.DeleteMachine(t.Context(), &driver.DeleteMachineRequest{Machine: m, MachineClass: other, Secret: e.secret}); err != nil {
		t.Fatal(err)
	}
	if left := e.leftovers("m-4"); len(left) != 0 {
		t.Errorf("left %v", left)
	}
}

// ListMachines reads the whole zone page by page, without a list filter (Compute Engine refuses
// filters on tags.items, and so does the fake), and lists only the class's cluster and role.
func TestListFiltersOnTheClientAndPages(t *testing.T) {
	e := newTestEnv(t)
	e.cloud.SetPageSize(2)
	for i := range 5 {
		e.mustCreate(t, fmt.Sprintf("m-%d", i))
	}
	other := e.classWith("other-role", func(s *ProviderSpec) { s.Tags = []string{clusterTag, "kubernetes-io-role-gpu"} })
	if _, err := e.createIn(t.Context(), other, "g-0"); err != nil {
		t.Fatal(err)
	}
	e.cloud.PutInstance(testZone, &compute.Instance{Name: "untagged"})
	e.cloud.PutInstance(testZone, &compute.Instance{Name: "shared", Tags: &compute.Tags{Items: []string{clusterTag, "kubernetes-io-cluster-other", roleTag}}})
	e.cloud.PutInstance("europe-west1-c", &compute.Instance{Name: "m-9", Tags: &compute.Tags{Items: []string{clusterTag, roleTag}}})
	e.cloud.Requests.Reset()
	got := e.list(t, e.class)
	var names []string
	for id, name := range got {
		if id != "gce:///machinist-fake/europe-west1-b/"+name {
			t.Errorf("%s -> %s", id, name)
		}
		names = append(names, name)
	}
	sort.Strings(names)
	if !slices.Equal(names, []string{"m-0", "m-1", "m-2", "m-3", "m-4"}) {
		t.Errorf("listed %v", names)
	}
	reqs := e.cloud.Requests.For(fakegcp.OpListInstances)
	if len(reqs) != 4 {
		t.Fatalf("%d list requests, want 4 pages of at most 2 (8 instances in the zone)", len(reqs))
	}
	for _, r := range reqs {
		if q, _ := url.ParseQuery(r.Query); q.Has("filter") || r.Status != 200 {
			t.Errorf("list request %s answered %d, want no filter and 200", r.Query, r.Status)
		}
	}
	if got := e.list(t, other); len(got) != 1 || got["gce:///machinist-fake/europe-west1-b/g-0"] != "g-0" {
		t.Errorf("other role lists %v", got)
	}
}

// TestCloudAPIRequestsCountedAsMCMsProviderCounts: the calls count under MCM's service names;
// a 404 lookup is a success; a refused call counts only as failed; retries are one call.
func TestCloudAPIRequestsCountedAsMCMsProviderCounts(t *testing.T) {
	e := newTestEnv(t)
	req0, fail0, timed0 := cloudmetricstest.Counts(t, ProviderName)
	e.mustCreate(t, "m-1") // get (404), insert, wait, get
	e.list(t, e.class)
	if _, err := e.drv.GetMachineStatus(context.Background(), &driver.GetMachineStatusRequest{Machine: machine("m-1"), MachineClass: e.class, Secret: e.secret}); err != nil {
		t.Fatal(err)
	}
	if err := e.delete(t, e.class, "m-1"); err != nil { // get, delete, wait
		t.Fatal(err)
	}
	e.cloud.Faults.Inject(fakegcp.Throttle(fakegcp.OpInsertInstance, 1, 403))
	e.cloud.Faults.Inject(fakegcp.Deny(fakegcp.OpDeleteInstance))
	e.mustCreate(t, "m-2") // the throttled insert is retried: one call
	if err := e.delete(t, e.class, "m-2"); driver.CodeOf(err) != driver.PermissionDenied {
		t.Fatalf("denied delete: %v", err)
	}
	req, fail, timed := cloudmetricstest.Counts(t, ProviderName)
	want := map[string][3]float64{ // requests, failed, timed
		serviceInstanceGet:    {5, 0, 5},
		serviceInstanceCreate: {2, 0, 2},
		serviceInstanceList:   {1, 0, 1},
		serviceInstanceDelete: {1, 1, 1},
		serviceOperationsGet:  {3, 0, 3},
	}
	for svc, w := range want {
		got := [3]float64{req[svc] - req0[svc], fail[svc] - fail0[svc], timed[svc] - timed0[svc]}
		if got[0] < w[0] || got[1] != w[1] || got[2] != got[0] {
			t.Errorf("%s: requests, failed, timed = %v, want at least %v", svc, got, w)
		}
	}
}

func TestServiceNames(t *testing.T) {
	for _, tc := range []struct{ method, path, want string }{
		{"POST", "/compute/v1/projects/p/zones/z/instances", serviceInstanceCreate},
		{"GET", "/compute/v1/projects/p/zones/z/instances", serviceInstanceList},
		{"GET", "/compute/v1/projects/p/zones/z/instances/m", serviceInstanceGet},
		{"DELETE", "/compute/v1/projects/p/zones/z/instances/m", serviceInstanceDelete},
		{"POST", "/compute/v1/projects/p/zones/z/operations/op-1/wait", serviceOperationsGet},
		{"GET", "/compute/v1/projects/p/zones/z/operations/op-1", serviceOperationsGet},
		{"GET", "/compute/v1/projects/p/zones/z/disks/d", serviceDiskGet},
		{"GET", "/compute/v1/projects/p/global/images/family/f", serviceImageGet},
		{"GET", "/compute/v1/projects/p/regions/r/subnetworks/s", serviceSubnetworkGet},
		{"GET", "/token", serviceOther},
	} {
		if got := serviceOf(tc.method, tc.path); got != tc.want {
			t.Errorf("%s %s = %s, want %s", tc.method, tc.path, got, tc.want)
		}
	}
}

// A preempted Spot VM is gone when its termination action is DELETE (the machine has no
// instance: NotFound, not listed) and TERMINATED with STOP (still the machine's, and deleted
// with it).
func TestPreemptedSpotVMs(t *testing.T) {
	e := newTestEnv(t)
	for action, name := range map[string]string{"DELETE": "m-del", "STOP": "m-stop"} {
		class := e.classWith("spot-"+strings.ToLower(action), func(s *ProviderSpec) {
			s.Scheduling = Scheduling{ProvisioningModel: "SPOT", InstanceTerminationAction: action, OnHostMaintenance: "TERMINATE"}
		})
		if _, err := e.createIn(t.Context(), class, name); err != nil {
			t.Fatal(err)
		}
		if _, err := e.cloud.Preempt(testZone, name); err != nil {
			t.Fatal(err)
		}
	}
	e.cloud.Settle()
	status := func(name string) error {
		_, err := e.drv.GetMachineStatus(t.Context(), &driver.GetMachineStatusRequest{Machine: machine(name), MachineClass: e.class, Secret: e.secret})
		return err
	}
	if err := status("m-del"); driver.CodeOf(err) != driver.NotFound {
		t.Errorf("status of the deleted Spot VM: %v, want NotFound", err)
	}
	if err := status("m-stop"); err != nil {
		t.Errorf("status of the stopped Spot VM: %v", err)
	}
	if in, _ := e.cloud.Instance(testZone, "m-stop"); in == nil || in.Status != "TERMINATED" {
		t.Errorf("stopped Spot VM: %+v", in)
	}
	if got := e.list(t, e.class); len(got) != 1 || got["gce:///machinist-fake/europe-west1-b/m-stop"] != "m-stop" {
		t.Errorf("listed %v", got)
	}
	for _, name := range []string{"m-del", "m-stop"} {
		if err := e.delete(t, e.class, name); err != nil {
			t.Errorf("delete %s: %v", name, err)
		}
		if left := e.leftovers(name); len(left) != 0 {
			t.Errorf("%s left %v", name, left)
		}
	}
}
