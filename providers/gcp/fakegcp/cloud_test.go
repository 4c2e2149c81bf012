package fakegcp

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/machinist-io/machinist/providers/kit/fakekit"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"
	compute "google.golang.org/api/compute/v1"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/option"
	clocktesting "k8s.io/utils/clock/testing"
)

// served is the fake behind HTTPS on loopback and a Compute API client of the demo service
// account, built as any client of the real API is.
type served struct {
	c    *Cloud
	srv  *fakekit.Server
	svc  *compute.Service
	http *http.Client // authorized as the demo service account
}

func serve(t *testing.T) *served { return serveWith(t, New(Options{})) }

func serveWith(t testing.TB, c *Cloud) *served {
	t.Helper()
	c.SetOperationDelay(20 * time.Millisecond)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := c.Serve(l, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	key := c.SeedDemo(TokenURL(srv.URL))
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(srv.CACert)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	ctx := context.WithValue(context.Background(), oauth2.HTTPClient, hc)
	cfg, err := google.JWTConfigFromJSON(key, compute.CloudPlatformScope)
	if err != nil {
		t.Fatal(err)
	}
	authorized := oauth2.NewClient(ctx, cfg.TokenSource(ctx))
	svc, err := compute.NewService(ctx, option.WithHTTPClient(authorized), option.WithEndpoint(ComputeEndpoint(srv.URL)))
	if err != nil {
		t.Fatal(err)
	}
	if c.st.contractErr != nil { // not turned off with SetContract(nil): it could not be read
		t.Fatalf("the fake cannot check requests against the Compute contract: %v", c.st.contractErr)
	}
	t.Cleanup(func() {
		if v := c.ContractViolations(); len(v) > 0 {
			t.Errorf("fakegcp broke the Compute contract: %v", v)
		}
	})
	return &served{c: c, srv: srv, svc: svc, http: authorized}
}

func (s *served) instance(name string, tags ...string) *compute.Instance {
	return &compute.Instance{
		Name: name, MachineType: "zones/" + DemoZone + "/machineTypes/n2-standard-2",
		Disks: []*compute.AttachedDisk{{Boot: true, AutoDelete: true, InitializeParams: &compute.AttachedDiskInitializeParams{
			SourceImage: "projects/" + DemoImageProject + "/global/images/family/" + DemoImageFamily, DiskType: "zones/" + DemoZone + "/diskTypes/pd-balanced"}}},
		NetworkInterfaces: []*compute.NetworkInterface{{Subnetwork: "regions/" + DemoRegion + "/subnetworks/" + DemoSubnetwork}},
		Tags:              &compute.Tags{Items: tags},
	}
}

func (s *served) insert(t *testing.T, in *compute.Instance) *compute.Operation {
	t.Helper()
	op, err := s.svc.Instances.Insert(DefaultProject, DemoZone, in).Context(t.Context()).Do()
	if err != nil {
		t.Fatalf("insert %s: %v", in.Name, err)
	}
	return op
}

func (s *served) wait(t *testing.T, op *compute.Operation) *compute.Operation {
	t.Helper()
	for op.Status != "DONE" {
		var err error
		if op, err = s.svc.ZoneOperations.Wait(DefaultProject, DemoZone, op.Name).Context(t.Context()).Do(); err != nil {
			t.Fatal(err)
		}
	}
	return op
}

// An instance exists (PROVISIONING) as soon as the insert is accepted and is RUNNING with its
// disk when the operation is done; deleting takes it and its auto-delete disk away.
func TestInstanceLifecycle(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	s := serveWith(t, New(Options{Clock: clk}))
	s.c.SetOperationDelay(time.Minute) // the operation waits for the test's clock
	op := s.insert(t, s.instance("vm-1", "a"))
	if op.Status != "RUNNING" || !strings.HasSuffix(op.TargetLink, "/zones/europe-west1-b/instances/vm-1") {
		t.Fatalf("insert operation = %+v", op)
	}
	in, err := s.svc.Instances.Get(DefaultProject, DemoZone, "vm-1").Do()
	if err != nil || in.Status != "PROVISIONING" || in.Disks[0].Source == "" {
		t.Fatalf("instance while creating: %+v %v", in, err)
	}
	clk.Step(time.Minute)
	if done := s.wait(t, op); done.Error != nil {
		t.Fatalf("operation failed: %+v", done.Error)
	}
	in, _ = s.svc.Instances.Get(DefaultProject, DemoZone, "vm-1").Do()
	if in.Status != "RUNNING" || in.NetworkInterfaces[0].NetworkIP == "" {
		t.Fatalf("instance = %+v", in)
	}
	disk, err := s.svc.Disks.Get(DefaultProject, DemoZone, "vm-1").Do()
	if err != nil || disk.Status != "READY" || !strings.HasSuffix(disk.SourceImage, "/images/"+DemoImage) {
		t.Fatalf("boot disk = %+v %v", disk, err)
	}
	if _, err := s.svc.Disks.Delete(DefaultProject, DemoZone, "vm-1").Do(); !isStatus(err, 400) {
		t.Errorf("deleting an attached disk: %v, want 400", err)
	}
	del, err := s.svc.Instances.Delete(DefaultProject, DemoZone, "vm-1").Do()
	if err != nil {
		t.Fatal(err)
	}
	if in, _ := s.svc.Instances.Get(DefaultProject, DemoZone, "vm-1").Do(); in == nil || in.Status != "STOPPING" {
		t.Errorf("instance while deleting: %+v", in)
	}
	clk.Step(time.Minute)
	s.wait(t, del)
	if len(s.c.Instances()) != 0 || len(s.c.Disks()) != 0 {
		t.Errorf("left %v %v", s.c.Instances(), s.c.Disks())
	}
	if _, err := s.svc.Instances.Delete(DefaultProject, DemoZone, "vm-1").Do(); !isStatus(err, 404) {
		t.Errorf("deleting again: %v, want 404", err)
	}
}

// Inserts are checked as Compute Engine checks them.
func TestInsertIsChecked(t *testing.T) {
	s := serve(t)
	cases := map[string]struct {
		change func(*compute.Instance)
		status int
		msg    string
	}{
		"machine type": {func(in *compute.Instance) { in.MachineType = "zones/europe-west1-b/machineTypes/n9-huge" }, 400, "Machine type with name 'n9-huge' does not exist in zone 'europe-west1-b'"},
		"image":        {func(in *compute.Instance) { in.Disks[0].InitializeParams.SourceImage = "global/images/nope" }, 404, "projects/machinist-fake/global/images/nope"},
		"disk type": {func(in *compute.Instance) {
			in.Disks[0].InitializeParams.DiskType = "zones/europe-west1-b/diskTypes/pd-x"
		}, 404, "diskTypes/pd-x"},
		"subnetwork": {func(in *compute.Instance) {
			in.NetworkInterfaces[0].Subnetwork = "regions/europe-west1/subnetworks/nope"
		}, 404, "subnetworks/nope"},
		"network":      {func(in *compute.Instance) { in.NetworkInterfaces[0].Network = "global/networks/nope" }, 404, "networks/nope"},
		"no boot disk": {func(in *compute.Instance) { in.Disks[0].Boot = false }, 400, "boot disk"},
		"label":        {func(in *compute.Instance) { in.Labels = map[string]string{"Bad": "x"} }, 400, "resource.labels"},
		"spot restarts": {func(in *compute.Instance) {
			in.Scheduling = &compute.Scheduling{ProvisioningModel: "SPOT", OnHostMaintenance: "TERMINATE"}
		}, 400, "automaticRestart"},
		"duplicate metadata": {func(in *compute.Instance) {
			in.Metadata = &compute.Metadata{Items: []*compute.MetadataItems{{Key: "a"}, {Key: "a"}}}
		}, 400, "Duplicate keys"},
		"dual stack on an IPv4 subnetwork": {func(in *compute.Instance) {
			in.NetworkInterfaces[0].StackType, in.NetworkInterfaces[0].Ipv6AccessType = "IPV4_IPV6", "EXTERNAL"
		}, 400, "must have an IPv6 range"},
		"IPv6 access type without dual stack": {func(in *compute.Instance) { in.NetworkInterfaces[0].Ipv6AccessType = "EXTERNAL" }, 400, "dual-stack"},
		"machine type not in the zone": {func(in *compute.Instance) {
			in.MachineType = "zones/" + DemoZone + "/machineTypes/c3-standard-4"
		}, 400, "Machine type with name 'c3-standard-4' does not exist in zone 'europe-west1-b'."},
	}
	s.c.WithdrawMachineType(DemoZone, "c3-standard-4")
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			in := s.instance("vm-bad")
			tc.change(in)
			_, err := s.svc.Instances.Insert(DefaultProject, DemoZone, in).Do()
			if !isStatus(err, tc.status) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err = %v, want %d with %q", err, tc.status, tc.msg)
			}
		})
	}
	if len(s.c.Instances()) != 0 || len(s.c.Disks()) != 0 {
		t.Errorf("refused inserts left %v %v", s.c.Instances(), s.c.Disks())
	}
	s.wait(t, s.insert(t, s.instance("vm-1")))
	if _, err := s.svc.Instances.Insert(DefaultProject, DemoZone, s.instance("vm-1")).Do(); !isStatus(err, 409) {
		t.Errorf("a second vm-1: %v, want 409", err)
	}
}

// A dual-stack interface on a dual-stack subnetwork gets its IPv6 address: an external one in an
// IPv6 access config, an internal one as ipv6Address; each insert's body is recorded.
func TestDualStack(t *testing.T) {
	s := serve(t)
	s.c.AddSubnetwork(DemoRegion, DemoNetwork, "ext6", "10.1.0.0/16", nil)
	s.c.EnableIPv6(DemoRegion, "ext6", "EXTERNAL")
	s.c.AddSubnetwork(DemoRegion, DemoNetwork, "int6", "10.2.0.0/16", nil)
	s.c.EnableIPv6(DemoRegion, "int6", "INTERNAL")
	for name, subnet := range map[string]string{"vm-ext": "ext6", "vm-int": "int6"} {
		in := s.instance(name)
		in.NetworkInterfaces[0].Subnetwork = "regions/" + DemoRegion + "/subnetworks/" + subnet
		in.NetworkInterfaces[0].StackType = "IPV4_IPV6"
		s.wait(t, s.insert(t, in))
	}
	ext, _ := s.c.Instance(DemoZone, "vm-ext")
	if n := ext.NetworkInterfaces[0]; n.Ipv6AccessType != "EXTERNAL" || len(n.Ipv6AccessConfigs) != 1 || !strings.HasPrefix(n.Ipv6AccessConfigs[0].ExternalIpv6, "2600:1900:") {
		t.Errorf("external: %+v", n)
	}
	in, _ := s.c.Instance(DemoZone, "vm-int")
	if n := in.NetworkInterfaces[0]; n.Ipv6AccessType != "INTERNAL" || !strings.HasPrefix(n.Ipv6Address, "fd20:") || len(n.Ipv6AccessConfigs) != 0 {
		t.Errorf("internal: %+v", n)
	}
	inserts := s.c.Requests.For(OpInsertInstance)
	if len(inserts) != 2 || !strings.Contains(string(inserts[0].Body), `"stackType":"IPV4_IPV6"`) {
		t.Errorf("recorded inserts: %+v", inserts)
	}
	for _, r := range s.c.Requests.For(OpToken) {
		if len(r.Body) != 0 {
			t.Error("a token request's body (a signed assertion) was kept")
		}
	}
}

// A repeated insert with the same requestId answers the first operation.
func TestRequestIDDeduplicates(t *testing.T) {
	s := serve(t)
	first, err := s.svc.Instances.Insert(DefaultProject, DemoZone, s.instance("vm-1")).RequestId("9c1e4b7e-2a51-4a3c-9d43-0d5b1e2f3a40").Do()
	if err != nil {
		t.Fatal(err)
	}
	again, err := s.svc.Instances.Insert(DefaultProject, DemoZone, s.instance("vm-1")).RequestId("9c1e4b7e-2a51-4a3c-9d43-0d5b1e2f3a40").Do()
	if err != nil || again.Name != first.Name {
		t.Fatalf("repeated insert = %v %v, want operation %s", again, err, first.Name)
	}
}

// Operations fail as the faults and quotas say, and a failed insert leaves nothing.
func TestOperationFaults(t *testing.T) {
	s := serve(t)
	s.c.Faults.Inject(StockoutNext(1))
	op := s.wait(t, s.insert(t, s.instance("vm-1")))
	if op.Error == nil || op.Error.Errors[0].Code != "ZONE_RESOURCE_POOL_EXHAUSTED" || op.HttpErrorStatusCode != 503 ||
		!strings.Contains(op.Error.Errors[0].Message, "projects/machinist-fake/zones/europe-west1-b") {
		t.Fatalf("stockout operation = %+v", op)
	}
	if len(s.c.Instances()) != 0 || len(s.c.Disks()) != 0 {
		t.Errorf("a stockout left %v %v", s.c.Instances(), s.c.Disks())
	}
	s.c.SetCPUQuota(DemoRegion, 3)
	s.wait(t, s.insert(t, s.instance("vm-2")))
	op = s.wait(t, s.insert(t, s.instance("vm-3")))
	if op.Error == nil || op.Error.Errors[0].Code != "QUOTA_EXCEEDED" || op.Error.Errors[0].ErrorDetails[0].QuotaInfo.Limit != 3 {
		t.Fatalf("quota operation = %+v", op)
	}
	s.c.Faults.Inject(SlowOperations(OpInsertInstance, 1, time.Hour))
	s.c.SetWaitTimeout(50 * time.Millisecond)
	op = s.insert(t, s.instance("vm-4"))
	got, err := s.svc.ZoneOperations.Wait(DefaultProject, DemoZone, op.Name).Do()
	if err != nil || got.Status != "RUNNING" {
		t.Fatalf("wait on a slow operation = %+v %v, want RUNNING after the wait timeout", got, err)
	}
	s.c.Faults.Inject(Throttle(OpGetInstance, 1, 403))
	_, err = s.svc.Instances.Get(DefaultProject, DemoZone, "vm-2").Do()
	var ge *googleapi.Error
	if !errors.As(err, &ge) || ge.Code != 403 || ge.Errors[0].Reason != "rateLimitExceeded" {
		t.Fatalf("rate limited get = %v", err)
	}
	if _, err := s.svc.Instances.Get(DefaultProject, DemoZone, "vm-2").Do(); err != nil {
		t.Fatalf("the fault outlived its times: %v", err)
	}
}

// Lists filter in the grammar the discovery document gives (AIP-160 comparisons of scalar
// fields, or eq/ne regular expressions) and page with maxResults and pageToken.
func TestListFiltersAndPages(t *testing.T) {
	s := serve(t)
	s.c.SetOperationDelay(0)
	for _, vm := range []struct {
		name   string
		labels map[string]string
	}{{"a-1", map[string]string{"role": "node", "env": "dev"}}, {"a-2", map[string]string{"role": "node"}}, {"a-3", map[string]string{"role": "gpu"}}, {"b-1", nil}, {"a-4", map[string]string{"role": "node"}}} {
		in := s.instance(vm.name, "c1")
		in.Labels = vm.labels
		s.insert(t, in)
	}
	list := func(filter string, maxResults int64) ([]string, int) {
		var names []string
		pages := 0
		err := s.svc.Instances.List(DefaultProject, DemoZone).Filter(filter).MaxResults(maxResults).Pages(t.Context(), func(l *compute.InstanceList) error {
			pages++
			for _, in := range l.Items {
				names = append(names, in.Name)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("list %q: %v", filter, err)
		}
		return names, pages
	}
	for filter, want := range map[string]string{
		`labels.role = node`:                                           "a-1,a-2,a-4",
		`(labels.role = "node") (name != "a-2")`:                       "a-1,a-4",
		`(labels.role = "node") AND (name != "a-2")`:                   "a-1,a-4",
		`(labels.role = "gpu") OR (labels.env = "dev")`:                "a-1,a-3",
		`(name = "b-1") OR (labels.role = gpu) AND (status = RUNNING)`: "a-3,b-1",
		`name eq a-.*`: "a-1,a-2,a-3,a-4",
		`(name eq 'a-.*') (labels.role ne "node")`: "a-3",
		`labels.env:*`:                       "a-1",
		`scheduling.automaticRestart = true`: "a-1,a-2,a-3,a-4,b-1",
		`name > "a-3"`:                       "a-4,b-1",
	} {
		got, _ := list(filter, 0)
		if strings.Join(got, ",") != want {
			t.Errorf("filter %s: %v, want %s", filter, got, want)
		}
	}
	if got, pages := list(`labels.role = "node"`, 2); strings.Join(got, ",") != "a-1,a-2,a-4" || pages != 2 {
		t.Errorf("paged: %v in %d pages", got, pages)
	}
	if _, err := s.svc.Instances.List(DefaultProject, DemoZone).PageToken("bm9wZQ").Do(); !isStatus(err, 400) {
		t.Errorf("a foreign page token: %v, want 400", err)
	}
}

// Filters outside the documented grammar are answered as Compute Engine answers them, with the
// 400 users report for them (googleapis/google-cloud-go#11318, google-api-go-client#815, #406,
// #1019, nodejs-compute#48, prometheus#5499, #8233): repeated fields (tags.items,
// networkInterfaces), objects, indexes, gcloud's operators, unparenthesized conjunctions, regular
// expressions joined by AND or mixed with comparisons, invalid regular expressions.
func TestListRefusesFiltersOutsideTheGrammar(t *testing.T) {
	s := serve(t)
	for _, filter := range []string{
		`tags.items=mytargets`,
		`(tags.items:"kubernetes-io-cluster-shoot--dev--alpha") (tags.items:"kubernetes-io-role-node")`,
		`networkInterfaces.network:vpc1 AND tags.items=(vm-tag)`,
		`networkInterfaces[0].network="https://www.googleapis.com/compute/v1/projects/p/global/networks/default"`,
		`networkInterfaces.network = "https://www.googleapis.com/compute/v1/projects/p/global/networks/default"`,
		`items[*].tags=['asg-collector-staging']`,
		`tags = "asg-collector-staging"`,
		`metadata.lifecycle=day AND metadata.lifecycle!=on-demand AND name!~gke`,
		`status eq RUNNING AND name eq somehostname`,
		`name eq *collector*`,
		`(name eq a-.*) AND (status eq RUNNING)`,
		`(name eq a-.*) (status = RUNNING)`,
		`name = a-1 AND status = RUNNING`,
		`nosuchfield = 1`,
		`(name = "a") OR`,
		`(name = "a"`,
	} {
		_, err := s.svc.Instances.List(DefaultProject, DemoZone).Filter(filter).Do()
		var ge *googleapi.Error
		want := "Invalid value for field 'filter': '" + filter + "'. Invalid list filter expression."
		if !errors.As(err, &ge) || ge.Code != 400 || ge.Message != want || len(ge.Errors) != 1 || ge.Errors[0].Reason != "invalid" {
			t.Errorf("filter %s: %v, want 400 %q", filter, err, want)
		}
	}
}

// Only signed assertions of known accounts get tokens, and only tokens get answers.
func TestTokens(t *testing.T) {
	s := serve(t)
	if _, err := s.svc.Instances.List(DefaultProject, DemoZone).Do(); err != nil {
		t.Fatal(err)
	}
	s.c.RemoveServiceAccount(DemoServiceAccount)
	if _, err := s.svc.Instances.List(DefaultProject, DemoZone).Do(); !isStatus(err, 401) {
		t.Errorf("a deleted account's token: %v, want 401", err)
	}
	if got := len(s.c.Requests.For(OpToken)); got != 1 {
		t.Errorf("%d token requests, want 1 (the client caches its token)", got)
	}
}

func isStatus(err error, status int) bool {
	var ge *googleapi.Error
	return errors.As(err, &ge) && ge.Code == status
}
