package aws

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/machinist-io/machinist/providers/kit/fakekit"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/aws/fakeaws"
)

// TestCrashBetweenCreateAndRecord: a controller that launched an instance and died before
// recording it (its RunInstances answer never arrived) is followed by a fresh process whose
// create finds that instance — by tags, or through the client token while EC2's reads do not
// show it yet — so the machine has one instance.
func TestCrashBetweenCreateAndRecord(t *testing.T) {
	for _, lag := range []int{0, 3} {
		t.Run(map[int]string{0: "found by tags", 3: "found by client token"}[lag], func(t *testing.T) {
			e := newTestEnv(t)
			e.cloud.SetDescribeLag(lag)
			e.cloud.Faults.Inject(fakeaws.Fault{Rule: fakekit.Rule{Op: "RunInstances", Times: 1}, Hang: true, AfterEffect: true})

			// The first process: its RunInstances took effect, and the answer hangs until the
			// process is gone.
			first := e.newDriver()
			crashed, crash := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _ = first.CreateMachine(crashed, &driver.CreateMachineRequest{Machine: machine("m-1"), MachineClass: e.class, Secret: e.secret.DeepCopy()})
			}()
			waitFor(t, "the launch to take effect", func() bool { return e.cloud.Hung() == 1 && len(e.cloud.Instances()) == 1 })

			// The next process creates the same machine.
			e.drv = e.newDriver()
			resp := e.mustCreate(t, "m-1")

			all := e.cloud.Instances()
			if len(all) != 1 || !strings.HasSuffix(resp.ProviderID, "/"+all[0].ID) {
				t.Fatalf("instances %+v for ProviderID %s, want exactly that one", all, resp.ProviderID)
			}
			// The first process's create is abandoned ("crashed"): it must not clean up the
			// instance the machine now has, so it is cut off before its answer arrives.
			crash()
			e.cloud.Faults.Clear()
			wg.Wait()
			if live := e.liveOf("m-1"); len(live) != 1 {
				t.Errorf("live instances after the restart: %+v", live)
			}
		})
	}
}

// TestClientTokenChainAfterTermination: when the instance a machine's token launched is
// terminated (by someone else, or a spot reclaim), the next create launches a new instance
// with the next token instead of getting the terminated one back.
func TestClientTokenChainAfterTermination(t *testing.T) {
	e := newTestEnv(t)
	first := e.mustCreate(t, "m-1")
	m := machine("m-1")
	m.Spec.ProviderID = first.ProviderID
	if err := e.delete(t, e.class, m); err != nil {
		t.Fatal(err)
	}
	second := e.mustCreate(t, "m-1")
	if second.ProviderID == first.ProviderID {
		t.Fatalf("the second create returned the terminated instance %s", first.ProviderID)
	}
	third := e.mustCreate(t, "m-1")
	if third.ProviderID != second.ProviderID {
		t.Fatalf("a repeated create returned %s, want %s", third.ProviderID, second.ProviderID)
	}
	if live := e.liveOf("m-1"); len(live) != 1 {
		t.Fatalf("live instances %+v, want 1", live)
	}
	// RunInstances ran for the first create and twice for the second (the old token answered
	// with the terminated instance); the third create adopted by tags.
	if n := len(e.cloud.Requests.For("RunInstances")); n != 3 {
		t.Errorf("%d RunInstances requests, want 3", n)
	}
}

// TestConcurrentCreatesOfOneMachine launch one instance.
func TestConcurrentCreatesOfOneMachine(t *testing.T) {
	e := newTestEnv(t)
	e.cloud.SetDescribeLag(2)
	var wg sync.WaitGroup
	ids := make([]string, 4)
	errs := make([]error, 4)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := e.create(t, "m-1")
			errs[i] = err
			if resp != nil {
				ids[i] = resp.ProviderID
			}
		}()
	}
	wg.Wait()
	for i := range ids {
		if errs[i] != nil || ids[i] != ids[0] {
			t.Fatalf("creates answered %v / %v", ids, errs)
		}
	}
	if n := len(e.cloud.Instances()); n != 1 {
		t.Fatalf("%d instances, want 1", n)
	}
}

// TestAdoptsInstanceOfAnEarlierCreate: an instance that carries the machine's Name and the
// class's tags (made by Gardener's provider, or by an earlier machinist) is adopted, not doubled.
func TestAdoptsInstanceOfAnEarlierCreate(t *testing.T) {
	e := newTestEnv(t)
	first := e.mustCreate(t, "m-1")
	other := testClass("workers-v2", func() *ProviderSpec { s := baseSpec(); s.MachineType = "m5.xlarge"; return s }())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := e.createIn(ctx, other, machine("m-1"))
	if err != nil || resp.ProviderID != first.ProviderID {
		t.Fatalf("create with another class of the same cluster = %+v, %v; want the existing %s", resp, err, first.ProviderID)
	}
	if n := len(e.cloud.Requests.For("RunInstances")); n != 1 {
		t.Errorf("%d RunInstances requests, want 1", n)
	}
}

// TestSpotInstances: spotPrice launches a one-time spot instance with the maximum price; ""
// bids up to the on-demand price; instanceMarketOptions selects the market too.
func TestSpotInstances(t *testing.T) {
	for name, tc := range map[string]struct {
		mutate   func(*ProviderSpec)
		maxPrice string
	}{
		"spotPrice":                  {func(s *ProviderSpec) { s.SpotPrice = ptr.To("0.08") }, "0.08"},
		"empty spotPrice":            {func(s *ProviderSpec) { s.SpotPrice = ptr.To("") }, ""},
		"instanceMarketOptions spot": {func(s *ProviderSpec) { s.InstanceMarketOptions = &InstanceMarketOptions{MarketType: "spot"} }, ""},
	} {
		t.Run(name, func(t *testing.T) {
			e := newTestEnv(t)
			e.class = e.classWith("spot", tc.mutate)
			e.mustCreate(t, "m-1")
			live := e.liveOf("m-1")
			spots := e.cloud.SpotRequests()
			if len(live) != 1 || live[0].Lifecycle != "spot" || len(spots) != 1 || spots[0].InstanceID != live[0].ID || spots[0].MaxPrice != tc.maxPrice {
				t.Fatalf("instances %+v, spot requests %+v", live, spots)
			}
			m := machine("m-1")
			if err := e.delete(t, e.class, m); err != nil {
				t.Fatal(err)
			}
			if st := e.cloud.State(); len(st.ActiveSpotRequests) != 0 || len(st.Instances) != 0 {
				t.Errorf("left after delete: %+v", st)
			}
		})
	}
}

// TestSourceDestCheckAndIPv6Prefixes: srcAndDstChecksEnabled false and ipv6PrefixCount make
// the status Uninitialized until InitializeMachine disabled the check (not on the EFA interface)
// and assigned the prefixes, as Gardener's provider does.
func TestSourceDestCheckAndIPv6Prefixes(t *testing.T) {
	e := newTestEnv(t)
	e.class = e.classWith("nat", func(s *ProviderSpec) {
		s.SrcAndDstChecksEnabled = ptr.To(false)
		s.NetworkInterfaces = []NetworkInterface{
			{SubnetID: testSubnetA, SecurityGroupIDs: []string{testSG}, Ipv6PrefixCount: ptr.To(int32(2))},
			{SubnetID: testSubnetA, SecurityGroupIDs: []string{testSG}, InterfaceType: ptr.To("efa"), DeviceIndex: ptr.To(int32(1))},
		}
	})
	resp := e.mustCreate(t, "m-1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	status := func() error {
		_, err := e.drv.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: machine("m-1"), MachineClass: e.class, Secret: e.secret})
		return err
	}
	if err := status(); driver.CodeOf(err) != driver.Uninitialized || !strings.Contains(driver.MessageOf(err), "source/destination check") || !strings.Contains(driver.MessageOf(err), "IPv6 prefixes") {
		t.Fatalf("status before initialization = %v, want Uninitialized naming both", err)
	}
	for range 2 { // idempotent
		init, err := e.drv.InitializeMachine(ctx, &driver.InitializeMachineRequest{Machine: machine("m-1"), MachineClass: e.class, Secret: e.secret})
		if err != nil || init.ProviderID != resp.ProviderID {
			t.Fatalf("InitializeMachine = %+v, %v", init, err)
		}
	}
	if err := status(); err != nil {
		t.Fatalf("status after initialization = %v", err)
	}
	for _, n := range e.cloud.NetworkInterfaces() {
		switch n.InterfaceType {
		case "efa":
			if !n.SourceDestCheck || len(n.Ipv6Prefixes) != 0 {
				t.Errorf("EFA interface changed: %+v", n)
			}
		default:
			if n.SourceDestCheck || len(n.Ipv6Prefixes) != 2 {
				t.Errorf("primary interface: %+v, want the check off and 2 prefixes", n)
			}
		}
	}
}

// TestPlacementAnnotation: without providerSpec.placement, the machine's node template
// annotation machine.sapcloud.io/awsPlacement places the instance (Gardener's fallback); a
// broken one is InvalidArgument naming it.
func TestPlacementAnnotation(t *testing.T) {
	e := newTestEnv(t)
	m := machine("m-1")
	m.Spec.NodeTemplateSpec.ObjectMeta = metav1.ObjectMeta{Annotations: map[string]string{PlacementAnnotation: `{"Tenancy":"dedicated","GroupName":"pg-1"}`}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := e.createIn(ctx, e.class, m); err != nil {
		t.Fatal(err)
	}
	if live := e.liveOf("m-1"); len(live) != 1 || live[0].Tenancy != "dedicated" || live[0].PlacementGroup != "pg-1" {
		t.Fatalf("instances %+v, want tenancy dedicated in pg-1", live)
	}
	bad := machine("m-2")
	bad.Spec.NodeTemplateSpec.ObjectMeta = metav1.ObjectMeta{Annotations: map[string]string{PlacementAnnotation: `{"Tenancy":`}}
	_, err := e.createIn(ctx, e.class, bad)
	if driver.CodeOf(err) != driver.InvalidArgument || !strings.Contains(driver.MessageOf(err), PlacementAnnotation) {
		t.Fatalf("create with a broken annotation = %v", err)
	}
}

// TestUserDataLimit: user data beyond EC2's 16 KB is refused before anything is launched.
func TestUserDataLimit(t *testing.T) {
	e := newTestEnv(t)
	e.secret.Data[KeyUserData] = []byte(strings.Repeat("x", maxUserData+1))
	_, err := e.create(t, "m-1")
	if driver.CodeOf(err) != driver.InvalidArgument || !strings.Contains(driver.MessageOf(err), "userData") {
		t.Fatalf("CreateMachine = %v", err)
	}
	if n := len(e.cloud.Requests.All()); n != 0 {
		t.Errorf("%d requests reached EC2", n)
	}
}

// TestDeleteScopes: delete by providerID takes exactly that instance (the orphan collector's
// way of removing a second instance of a live machine), by name every instance of the machine;
// Gardener's region form of the providerID works; another cluster's instance is left alone.
func TestDeleteScopes(t *testing.T) {
	e := newTestEnv(t)
	keep := e.mustCreate(t, "m-1")
	// A second instance with the machine's name: delete by providerID must not take it.
	dup := e.launchRaw(t, "m-1", e.class)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Gardener's providerID form: aws:///<region>/<id>.
	id := keep.ProviderID[strings.LastIndex(keep.ProviderID, "/")+1:]
	m := machine("m-1")
	m.Spec.ProviderID = "aws:///" + testRegion + "/" + id
	if err := e.delete(t, e.class, m); err != nil {
		t.Fatal(err)
	}
	if live := e.liveOf("m-1"); len(live) != 1 || live[0].ID != dup {
		t.Fatalf("live after delete by Gardener's providerID: %+v, want the duplicate %s only", live, dup)
	}

	// By name: every live instance of the machine in the class's cluster and role.
	e.mustCreate(t, "m-2")
	if err := e.delete(t, e.class, machine("m-2")); err != nil {
		t.Fatal(err)
	}
	if live := e.liveOf("m-2"); len(live) != 0 {
		t.Fatalf("live after delete by name: %+v", live)
	}

	// Another cluster's instance is not terminated, even by ID.
	foreign := e.classWith("foreign", func(s *ProviderSpec) {
		delete(s.Tags, clusterTag)
		s.Tags["kubernetes.io/cluster/shoot--dev--beta"] = "1"
	})
	resp, err := e.createIn(ctx, foreign, machine("m-3"))
	if err != nil {
		t.Fatal(err)
	}
	fm := machine("m-3")
	fm.Spec.ProviderID = resp.ProviderID
	err = e.delete(t, e.class, fm)
	if driver.CodeOf(err) != driver.FailedPrecondition {
		t.Fatalf("delete of another cluster's instance = %v, want FailedPrecondition", err)
	}
	if live := e.liveOf("m-3"); len(live) != 1 {
		t.Fatalf("another cluster's instance: %+v", live)
	}
	// A providerID that names no instance of EC2's is success; a malformed one is refused.
	gone := machine("m-4")
	gone.Spec.ProviderID = "aws:///" + testRegion + "/i-0123456789abcdef0"
	if err := e.delete(t, e.class, gone); err != nil {
		t.Fatalf("delete of an unknown instance = %v", err)
	}
	bad := machine("m-5")
	bad.Spec.ProviderID = "gce://p/z/m-5"
	if err := e.delete(t, e.class, bad); driver.CodeOf(err) != driver.InvalidArgument {
		t.Fatalf("delete with a foreign providerID = %v, want InvalidArgument", err)
	}
}

// TestStatusFindsDuplicates: two live instances with one machine's name are OutOfRange,
// naming both; delete by name takes both.
func TestStatusFindsDuplicates(t *testing.T) {
	e := newTestEnv(t)
	e.mustCreate(t, "m-1")
	dup := e.launchRaw(t, "m-1", e.class)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := e.drv.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: machine("m-1"), MachineClass: e.class, Secret: e.secret})
	if driver.CodeOf(err) != driver.OutOfRange || !strings.Contains(driver.MessageOf(err), dup) {
		t.Fatalf("GetMachineStatus = %v, want OutOfRange naming %s", err, dup)
	}
	if err := e.delete(t, e.class, machine("m-1")); err != nil {
		t.Fatal(err)
	}
	if live := e.liveOf("m-1"); len(live) != 0 {
		t.Fatalf("live after delete by name: %+v", live)
	}
}

// waitFor polls cond until it holds (bounded).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// TestPlacementGroup: providerSpec.placement.groupId and partitionNumber place the instance in
// the group's partition; a group EC2 does not know is InvalidArgument naming the field.
func TestPlacementGroup(t *testing.T) {
	e := newTestEnv(t)
	e.class = e.classWith("workers", func(s *ProviderSpec) {
		s.Placement = &Placement{GroupID: ptr.To(testPlacementGroup), PartitionNumber: ptr.To(int32(2))}
	})
	e.mustCreate(t, "m-1")
	if live := e.liveOf("m-1"); len(live) != 1 || live[0].PlacementID != testPlacementGroup || live[0].PlacementGroup != "pg-1" || live[0].Partition != 2 {
		t.Fatalf("instances %+v, want partition 2 of %s", live, testPlacementGroup)
	}
	e.class = e.classWith("workers", func(s *ProviderSpec) { s.Placement = &Placement{GroupID: ptr.To("pg-0000000000000dead")} })
	_, err := e.create(t, "m-2")
	if driver.CodeOf(err) != driver.InvalidArgument || !strings.Contains(driver.MessageOf(err), "InvalidPlacementGroup.Unknown") || !strings.Contains(driver.MessageOf(err), "providerSpec.placement") {
		t.Fatalf("create in an unknown group = %v", err)
	}
}
