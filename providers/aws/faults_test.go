package aws

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/machinist-io/machinist/providers/kit/fakekit"

	"k8s.io/utils/ptr"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/aws/fakeaws"
)

// TestCreateFaults injects each fault of the fake and checks the code the controllers act on,
// that the message carries EC2's error code, the request ID and the field to fix, and that a
// failed create leaves no live instance behind.
func TestCreateFaults(t *testing.T) {
	cases := []struct {
		name     string
		setup    func(t *testing.T, e *testEnv)
		class    func(s *ProviderSpec)
		code     driver.Code
		ec2Code  string // the AWS error code whose request ID the message carries; "" when none
		mentions []string
		runs     int // RunInstances requests expected; 0 means don't check
	}{
		{name: "zone out of capacity", setup: func(t *testing.T, e *testEnv) { e.cloud.Capacity.SetZoneCapacity(testZoneA, 0) },
			code: driver.ResourceExhausted, ec2Code: "InsufficientInstanceCapacity", mentions: []string{testZoneA}, runs: 1},
		{name: "vCPU quota", setup: func(t *testing.T, e *testEnv) { e.cloud.Capacity.SetVcpuQuota(1) },
			code: driver.ResourceExhausted, ec2Code: "VcpuLimitExceeded", mentions: []string{"Service Quotas"}, runs: 1},
		{name: "instance limit", setup: func(t *testing.T, e *testEnv) { e.cloud.Capacity.SetInstanceLimit(1); e.mustCreate(t, "m-0") },
			code: driver.ResourceExhausted, ec2Code: "InstanceLimitExceeded"},
		{name: "subnet without free addresses", setup: func(t *testing.T, e *testEnv) { e.cloud.Network.SetSubnetFreeAddresses(testSubnetA, 0) },
			code: driver.ResourceExhausted, ec2Code: "InsufficientFreeAddressesInSubnet", mentions: []string{testSubnetA}},
		{name: "no spot capacity", setup: func(t *testing.T, e *testEnv) { e.cloud.Capacity.SetSpotCapacity(testZoneA, 0) },
			class: func(s *ProviderSpec) { s.SpotPrice = ptr.To("") },
			code:  driver.ResourceExhausted, ec2Code: "InsufficientInstanceCapacity", mentions: []string{"Spot capacity", "spotPrice"}, runs: 1},
		{name: "spot price too low", setup: func(t *testing.T, e *testEnv) { e.cloud.Capacity.SetSpotPrice("m5.large", 0.05) },
			class: func(s *ProviderSpec) { s.SpotPrice = ptr.To("0.01") },
			code:  driver.ResourceExhausted, ec2Code: "SpotMaxPriceTooLow", mentions: []string{"providerSpec.spotPrice"}},
		{name: "throttled beyond the retries", setup: func(t *testing.T, e *testEnv) { e.cloud.Faults.Inject(fakeaws.Throttle("RunInstances", 0)) },
			code: driver.Unavailable, ec2Code: "RequestLimitExceeded", mentions: []string{"throttling"}, runs: 3},
		{name: "server errors", setup: func(t *testing.T, e *testEnv) {
			e.cloud.Faults.Inject(fakeaws.ServerErrors("RunInstances", http.StatusServiceUnavailable, 0))
		},
			code: driver.Unavailable, ec2Code: "Unavailable", runs: 3},
		{name: "server errors on the lookup", setup: func(t *testing.T, e *testEnv) {
			e.cloud.Faults.Inject(fakeaws.ServerErrors("DescribeInstances", http.StatusInternalServerError, 0))
		},
			code: driver.Unavailable, ec2Code: "InternalError", runs: 0},
		{name: "server errors after the launch", setup: func(t *testing.T, e *testEnv) {
			e.cloud.Faults.Inject(fakeaws.Fault{Rule: fakekit.Rule{Op: "DescribeInstances", Times: 1}}) // the lookup by name passes
			e.cloud.Faults.Inject(fakeaws.ServerErrors("DescribeInstances", http.StatusInternalServerError, 0))
		}, code: driver.Unavailable, ec2Code: "InternalError", mentions: []string{"was terminated"}, runs: 1},
		{name: "permission denied", setup: func(t *testing.T, e *testEnv) { e.cloud.Faults.Inject(fakeaws.Deny("RunInstances")) },
			code: driver.PermissionDenied, ec2Code: "UnauthorizedOperation", mentions: []string{"providers/aws/README.md"}, runs: 1},
		{name: "unknown access key", setup: func(t *testing.T, e *testEnv) { e.cloud.Identity.RemoveAccessKey(testAccessKey) },
			code: driver.Unauthenticated, ec2Code: "AuthFailure", mentions: []string{"providerAccessKeyId"}},
		{name: "missing AMI", class: func(s *ProviderSpec) { s.AMI = "ami-0000000000000dead" },
			code: driver.InvalidArgument, ec2Code: "InvalidAMIID.NotFound", mentions: []string{"providerSpec.ami", "ami-0000000000000dead"}},
		{name: "malformed AMI", class: func(s *ProviderSpec) { s.AMI = "ami-123" },
			code: driver.InvalidArgument, ec2Code: "InvalidAMIID.Malformed", mentions: []string{"providerSpec.ami"}},
		{name: "missing subnet", class: func(s *ProviderSpec) { s.NetworkInterfaces[0].SubnetID = "subnet-0000000000000dead" },
			code: driver.InvalidArgument, ec2Code: "InvalidSubnetID.NotFound", mentions: []string{"providerSpec.networkInterfaces[0].subnetID (subnet-0000000000000dead)"}},
		{name: "missing security group", class: func(s *ProviderSpec) {
			s.NetworkInterfaces[0].SecurityGroupIDs = []string{testSG, "sg-0000000000000dead"}
		},
			code: driver.InvalidArgument, ec2Code: "InvalidGroup.NotFound", mentions: []string{"providerSpec.networkInterfaces[0].securityGroupIDs[1] (sg-0000000000000dead)"}},
		{name: "missing key pair", class: func(s *ProviderSpec) { s.KeyName = ptr.To("nobody") },
			code: driver.InvalidArgument, ec2Code: "InvalidKeyPair.NotFound", mentions: []string{"providerSpec.keyName"}},
		{name: "missing instance profile", class: func(s *ProviderSpec) { s.IAM = IAMProfile{Name: "nobody"} },
			code: driver.InvalidArgument, ec2Code: "InvalidParameterValue", mentions: []string{"providerSpec.iam"}},
		{name: "terminated right after launch", setup: func(t *testing.T, e *testEnv) { e.cloud.Capacity.FailLaunches("Server.InsufficientInstanceCapacity") },
			code: driver.ResourceExhausted, mentions: []string{"Server.InsufficientInstanceCapacity"}, runs: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEnv(t)
			if tc.class != nil {
				e.class = e.classWith("workers", tc.class)
			}
			if tc.setup != nil {
				tc.setup(t, e)
			}
			before := len(e.cloud.Live())
			_, err := e.create(t, "m-1")
			if driver.CodeOf(err) != tc.code {
				t.Fatalf("CreateMachine = %v, want %v", err, tc.code)
			}
			msg := driver.MessageOf(err)
			if tc.ec2Code != "" {
				id := lastRequestWith(e.cloud, tc.ec2Code)
				if id == "" {
					t.Fatalf("the fake answered no %s", tc.ec2Code)
				}
				if !strings.Contains(msg, tc.ec2Code) || !strings.Contains(msg, "request ID "+id) {
					t.Errorf("message %q lacks %s or its request ID %s", msg, tc.ec2Code, id)
				}
			}
			for _, m := range tc.mentions {
				if !strings.Contains(msg, m) {
					t.Errorf("message %q does not mention %q", msg, m)
				}
			}
			if tc.runs > 0 {
				if n := len(e.cloud.Requests.For("RunInstances")); n != tc.runs {
					t.Errorf("%d RunInstances requests, want %d", n, tc.runs)
				}
			}
			e.cloud.Faults.Clear()
			if left := e.liveOf("m-1"); len(left) != 0 {
				t.Errorf("the failed create left live instances: %+v", left)
			}
			if n := len(e.cloud.Live()); n != before {
				t.Errorf("%d live instances after the failed create, %d before", n, before)
			}
		})
	}
}

func lastRequestWith(c *fakeaws.Cloud, code string) string {
	reqs := c.Requests.All()
	for i := len(reqs) - 1; i >= 0; i-- {
		if reqs[i].Code == code {
			return reqs[i].RequestID
		}
	}
	return ""
}

// TestTransientFaultsAreRetried: throttling, a server error and a lost answer that clear within
// the SDK's attempts end in one instance; so do answers lost every time, since the instance
// the launch made carries the machine's client token.
func TestTransientFaultsAreRetried(t *testing.T) {
	for name, f := range map[string]fakeaws.Fault{
		"throttled once":    fakeaws.Throttle("RunInstances", 1),
		"server error once": fakeaws.ServerErrors("RunInstances", http.StatusInternalServerError, 1),
		"answer lost once":  fakeaws.LostResponse("RunInstances", 1),
		"every answer lost": fakeaws.LostResponse("RunInstances", 0),
		"lookup throttled":  fakeaws.Throttle("DescribeInstances", 2),
	} {
		t.Run(name, func(t *testing.T) {
			e := newTestEnv(t)
			e.cloud.Faults.Inject(f)
			resp := e.mustCreate(t, "m-1")
			live := e.liveOf("m-1")
			if len(live) != 1 || !strings.HasSuffix(resp.ProviderID, "/"+live[0].ID) {
				t.Fatalf("instances %+v for ProviderID %s, want exactly that one", live, resp.ProviderID)
			}
			if n := len(e.cloud.Instances()); n != 1 {
				t.Errorf("%d instances made, want 1", n)
			}
		})
	}
}

// TestSlowStart: a create returns while the instance is still pending; status reports it.
func TestSlowStart(t *testing.T) {
	e := newTestEnv(t)
	e.cloud.SetStartDelay(time.Hour)
	resp := e.mustCreate(t, "m-1")
	live := e.liveOf("m-1")
	if len(live) != 1 || live[0].State != fakeaws.StatePending {
		t.Fatalf("instances %+v, want one pending", live)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := e.drv.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: machine("m-1"), MachineClass: e.class, Secret: e.secret})
	if err != nil || st.ProviderID != resp.ProviderID {
		t.Fatalf("GetMachineStatus = %+v, %v", st, err)
	}
}

// TestInvisibleInstanceIsTerminated: when EC2's reads never show the launched instance within
// the wait, the create fails and terminates it.
func TestInvisibleInstanceIsTerminated(t *testing.T) {
	e := newTestEnv(t)
	e.drv.opts.VisibleTimeout = 200 * time.Millisecond
	e.cloud.SetDescribeLag(1 << 30)
	_, err := e.create(t, "m-1")
	if driver.CodeOf(err) != driver.Unavailable || !strings.Contains(driver.MessageOf(err), "did not show up") || !strings.Contains(driver.MessageOf(err), "was terminated") {
		t.Fatalf("CreateMachine = %v, want Unavailable saying the instance did not show up and was terminated", err)
	}
	if n := len(e.cloud.Requests.For("TerminateInstances")); n != 1 {
		t.Errorf("%d TerminateInstances requests, want 1", n)
	}
	e.cloud.SetDescribeLag(0)
	if left := e.cloud.Live(); len(left) != 0 {
		t.Errorf("live instances: %+v", left)
	}
}

// TestTimeouts: a caller whose deadline passes while EC2 holds the answer gets
// DeadlineExceeded. A launch that took effect is left to the next create of the machine (a new
// leader may be making it right now), which adopts it: one instance.
func TestTimeouts(t *testing.T) {
	for name, f := range map[string]fakeaws.Fault{
		"before the launch": {Rule: fakekit.Rule{Op: "RunInstances"}, Hang: true},
		"after the launch":  {Rule: fakekit.Rule{Op: "RunInstances"}, Hang: true, AfterEffect: true},
		"while waiting":     {Rule: fakekit.Rule{Op: "DescribeInstances"}, Hang: true},
	} {
		t.Run(name, func(t *testing.T) {
			e := newTestEnv(t)
			if f.Op == "DescribeInstances" {
				// Let the name lookup through; hang the wait for the launched instance.
				e.cloud.Faults.Inject(fakeaws.Fault{Rule: fakekit.Rule{Op: "DescribeInstances", Times: 1}})
			}
			e.cloud.Faults.Inject(f)
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			_, err := e.createIn(ctx, e.class, machine("m-1"))
			if driver.CodeOf(err) != driver.DeadlineExceeded {
				t.Fatalf("CreateMachine = %v, want DeadlineExceeded", err)
			}
			e.cloud.Faults.Clear()
			resp := e.mustCreate(t, "m-1")
			live := e.liveOf("m-1")
			if len(live) != 1 || !strings.HasSuffix(resp.ProviderID, "/"+live[0].ID) || len(e.cloud.Instances()) != 1 {
				t.Fatalf("instances %+v after the retried create (ProviderID %s), want one", e.cloud.Instances(), resp.ProviderID)
			}
		})
	}
}
