package fakeaws

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/machinist-io/machinist/providers/kit/fakekit"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"
	clocktesting "k8s.io/utils/clock/testing"
)

const (
	keyID  = "AKIAFAKETEST00000001"
	secret = "fake-test-secret-access-key"
	zoneA  = DefaultRegion + "a"
	zoneB  = DefaultRegion + "b"
)

// env is a seeded cloud served on loopback with an SDK client signed with its key.
type env struct {
	c      *Cloud
	srv    *fakekit.Server
	client *ec2.Client
	clock  *clocktesting.FakeClock
}

func newEnv(t *testing.T) *env {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Date(2026, 5, 20, 10, 0, 0, 0, time.UTC))
	c := New(Options{Region: "", Clock: clk})
	c.Identity.AddAccessKey(keyID, secret)
	c.Network.AddSubnet("subnet-0aaaaaaaaaaaaaaa1", "vpc-0aaaaaaaaaaaaaaa1", zoneA, "10.0.0.0/28")
	c.Network.AddSubnet("subnet-0bbbbbbbbbbbbbbb2", "vpc-0aaaaaaaaaaaaaaa1", zoneB, "10.0.16.0/20")
	c.Network.AddSubnet("subnet-0ccccccccccccccc3", "vpc-0ccccccccccccccc3", zoneA, "10.1.0.0/20")
	c.Network.AddSecurityGroup("sg-0aaaaaaaaaaaaaaa1", "vpc-0aaaaaaaaaaaaaaa1", "nodes")
	c.AddImage("ami-0aaaaaaaaaaaaaaa1", "image", "/dev/xvda")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := c.Serve(l, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return &env{c: c, srv: srv, clock: clk, client: clientFor(srv.URL, DefaultRegion, keyID, secret)}
}

// clientFor is an SDK client that retries only what never reached the fake's logic as an
// answer: a connection the transport closed while the response arrived (the SDK closes the
// request body as soon as the response headers are in, which a fast server on loopback races;
// aws/aws-sdk-go-v2#2737). Faults and EC2 errors reach the test unretried.
func clientFor(url, region, id, key string) *ec2.Client {
	return ec2.New(ec2.Options{
		Region: region, BaseEndpoint: aws.String(url),
		Credentials: credentials.NewStaticCredentialsProvider(id, key, ""),
		Retryer: retry.NewStandard(func(o *retry.StandardOptions) {
			o.Retryables = []retry.IsErrorRetryable{retry.RetryableConnectionError{}}
			o.RateLimiter = ratelimit.None
		}),
	})
}

var tokens atomic.Int64

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func (e *env) run(t *testing.T, token, subnet string, tags map[string]string, mutate ...func(*ec2.RunInstancesInput)) (*ec2.RunInstancesOutput, error) {
	t.Helper()
	in := &ec2.RunInstancesInput{
		ImageId: aws.String("ami-0aaaaaaaaaaaaaaa1"), InstanceType: "m5.large", MinCount: aws.Int32(1), MaxCount: aws.Int32(1),
		NetworkInterfaces: []ec2types.InstanceNetworkInterfaceSpecification{{SubnetId: aws.String(subnet), Groups: []string{"sg-0aaaaaaaaaaaaaaa1"}, DeviceIndex: aws.Int32(0)}},
		BlockDeviceMappings: []ec2types.BlockDeviceMapping{
			{DeviceName: aws.String("/dev/xvda"), Ebs: &ec2types.EbsBlockDevice{VolumeSize: aws.Int32(20), VolumeType: "gp3"}},
			{DeviceName: aws.String("/dev/sdb"), Ebs: &ec2types.EbsBlockDevice{VolumeSize: aws.Int32(10), VolumeType: "gp3", DeleteOnTermination: aws.Bool(false)}},
		},
	}
	if token == "" {
		// Every launch carries a token, so a retried request cannot launch twice.
		token = fmt.Sprintf("test-%d", tokens.Add(1))
	}
	in.ClientToken = aws.String(token)
	if len(tags) > 0 {
		ts := ec2types.TagSpecification{ResourceType: ec2types.ResourceTypeInstance}
		for k, v := range tags {
			ts.Tags = append(ts.Tags, ec2types.Tag{Key: aws.String(k), Value: aws.String(v)})
		}
		in.TagSpecifications = []ec2types.TagSpecification{ts}
	}
	for _, m := range mutate {
		m(in)
	}
	return e.client.RunInstances(ctx(t), in)
}

func code(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// TestSignatureVersion4: only requests signed with a known key, its secret and the cloud's
// region get in; the error carries EC2's code and a request ID.
func TestSignatureVersion4(t *testing.T) {
	e := newEnv(t)
	if _, err := e.client.DescribeInstances(ctx(t), &ec2.DescribeInstancesInput{}); err != nil {
		t.Fatalf("signed request: %v", err)
	}
	for name, tc := range map[string]struct {
		client *ec2.Client
		code   string
	}{
		"unknown key":  {clientFor(e.srv.URL, DefaultRegion, "AKIAUNKNOWN000000000", secret), "AuthFailure"},
		"wrong secret": {clientFor(e.srv.URL, DefaultRegion, keyID, "wrong"), "SignatureDoesNotMatch"},
		"other region": {clientFor(e.srv.URL, "us-east-1", keyID, secret), "AuthFailure"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := tc.client.DescribeInstances(ctx(t), &ec2.DescribeInstancesInput{})
			var re *awshttp.ResponseError
			if code(err) != tc.code || !errors.As(err, &re) || re.ServiceRequestID() == "" {
				t.Fatalf("err = %v, want %s with a request ID", err, tc.code)
			}
		})
	}
}

// TestInstanceLifecycle: pending → running after the start delay, shutting-down → terminated
// after the stop delay; termination deletes the volumes and interfaces marked so and keeps the
// others; terminated instances stay visible.
func TestInstanceLifecycle(t *testing.T) {
	e := newEnv(t)
	e.c.SetStartDelay(time.Minute)
	e.c.SetStopDelay(time.Minute)
	out, err := e.run(t, "", "subnet-0bbbbbbbbbbbbbbb2", map[string]string{"Name": "m-1"})
	if err != nil {
		t.Fatal(err)
	}
	id := *out.Instances[0].InstanceId
	state := func() string {
		d, err := e.client.DescribeInstances(ctx(t), &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
		if err != nil {
			t.Fatal(err)
		}
		return string(d.Reservations[0].Instances[0].State.Name)
	}
	if s := state(); s != StatePending {
		t.Fatalf("state %s, want pending", s)
	}
	e.clock.Step(time.Minute)
	if s := state(); s != StateRunning {
		t.Fatalf("state %s, want running", s)
	}
	if _, err := e.client.TerminateInstances(ctx(t), &ec2.TerminateInstancesInput{InstanceIds: []string{id}}); err != nil {
		t.Fatal(err)
	}
	if s := state(); s != StateShuttingDown {
		t.Fatalf("state %s, want shutting-down", s)
	}
	if n := len(e.c.Volumes()); n != 2 {
		t.Fatalf("%d volumes while shutting down, want 2", n)
	}
	e.clock.Step(time.Minute)
	if s := state(); s != StateTerminated {
		t.Fatalf("state %s, want terminated", s)
	}
	vols := e.c.Volumes()
	if len(vols) != 1 || vols[0].Device != "" || vols[0].State != "available" || vols[0].Size != 10 {
		t.Fatalf("volumes after termination %+v, want the kept data volume, detached", vols)
	}
	if n := len(e.c.NetworkInterfaces()); n != 0 {
		t.Fatalf("%d interfaces after termination", n)
	}
}

// TestClientToken: a repeated RunInstances with a token answers the same reservation, also
// after termination; other parameters with the same token are IdempotentParameterMismatch.
func TestClientToken(t *testing.T) {
	e := newEnv(t)
	first, err := e.run(t, "tok-1", "subnet-0bbbbbbbbbbbbbbb2", nil)
	if err != nil {
		t.Fatal(err)
	}
	again, err := e.run(t, "tok-1", "subnet-0bbbbbbbbbbbbbbb2", nil)
	if err != nil || *again.Instances[0].InstanceId != *first.Instances[0].InstanceId || *again.ReservationId != *first.ReservationId {
		t.Fatalf("repeated request = %v, %v", again, err)
	}
	if _, err := e.client.TerminateInstances(ctx(t), &ec2.TerminateInstancesInput{InstanceIds: []string{*first.Instances[0].InstanceId}}); err != nil {
		t.Fatal(err)
	}
	after, err := e.run(t, "tok-1", "subnet-0bbbbbbbbbbbbbbb2", nil)
	if err != nil || *after.Instances[0].InstanceId != *first.Instances[0].InstanceId || after.Instances[0].State.Name != ec2types.InstanceStateNameTerminated {
		t.Fatalf("request after termination = %+v, %v; want the terminated instance", after.Instances, err)
	}
	_, err = e.run(t, "tok-1", "subnet-0bbbbbbbbbbbbbbb2", nil, func(in *ec2.RunInstancesInput) { in.InstanceType = "m5.xlarge" })
	if code(err) != "IdempotentParameterMismatch" {
		t.Fatalf("other parameters = %v", err)
	}
	if n := len(e.c.Instances()); n != 1 {
		t.Fatalf("%d instances, want 1", n)
	}
}

// TestRunInstancesChecks: what EC2 refuses, with its codes.
func TestRunInstancesChecks(t *testing.T) {
	e := newEnv(t)
	for name, tc := range map[string]struct {
		subnet string
		mutate func(*ec2.RunInstancesInput)
		code   string
	}{
		"unknown image":    {mutate: func(in *ec2.RunInstancesInput) { in.ImageId = aws.String("ami-0000000000000dead") }, code: "InvalidAMIID.NotFound"},
		"malformed image":  {mutate: func(in *ec2.RunInstancesInput) { in.ImageId = aws.String("image-1") }, code: "InvalidAMIID.Malformed"},
		"unknown type":     {mutate: func(in *ec2.RunInstancesInput) { in.InstanceType = "m99.huge" }, code: "InvalidParameterValue"},
		"unknown subnet":   {subnet: "subnet-0000000000000dead", code: "InvalidSubnetID.NotFound"},
		"group elsewhere":  {subnet: "subnet-0ccccccccccccccc3", code: "InvalidParameter"},
		"unknown key pair": {mutate: func(in *ec2.RunInstancesInput) { in.KeyName = aws.String("nobody") }, code: "InvalidKeyPair.NotFound"},
		"io1 without iops": {mutate: func(in *ec2.RunInstancesInput) { in.BlockDeviceMappings[1].Ebs.VolumeType = "io1" }, code: "InvalidParameterCombination"},
		"bad device":       {mutate: func(in *ec2.RunInstancesInput) { in.BlockDeviceMappings[1].DeviceName = aws.String("sdb") }, code: "InvalidBlockDeviceMapping"},
		"reserved tag": {mutate: func(in *ec2.RunInstancesInput) {
			in.TagSpecifications = []ec2types.TagSpecification{{ResourceType: "instance", Tags: []ec2types.Tag{{Key: aws.String("aws:x"), Value: aws.String("y")}}}}
		}, code: "InvalidParameterValue"},
		"no free address": {subnet: "subnet-0aaaaaaaaaaaaaaa1", mutate: func(in *ec2.RunInstancesInput) { in.MinCount, in.MaxCount = aws.Int32(12), aws.Int32(12) }, code: "InsufficientFreeAddressesInSubnet"},
	} {
		t.Run(name, func(t *testing.T) {
			subnet := tc.subnet
			if subnet == "" {
				subnet = "subnet-0bbbbbbbbbbbbbbb2"
			}
			var mutate []func(*ec2.RunInstancesInput)
			if tc.mutate != nil {
				mutate = append(mutate, tc.mutate)
			}
			_, err := e.run(t, "", subnet, nil, mutate...)
			if code(err) != tc.code {
				t.Fatalf("err = %v, want %s", err, tc.code)
			}
		})
	}
	if n := len(e.c.Instances()); n != 0 {
		t.Errorf("refused requests made %d instances", n)
	}
	// A /28 has 16 addresses; AWS keeps 5: 11 instances fit.
	if _, err := e.run(t, "", "subnet-0aaaaaaaaaaaaaaa1", nil, func(in *ec2.RunInstancesInput) { in.MinCount, in.MaxCount = aws.Int32(11), aws.Int32(11) }); err != nil {
		t.Fatalf("11 instances in a /28: %v", err)
	}
}

// TestDescribeFiltersAndPages: filters are ANDed, their values ORed, with * and ? wildcards;
// pages follow NextToken; EC2's parameter rules hold.
func TestDescribeFiltersAndPages(t *testing.T) {
	e := newEnv(t)
	for i := range 12 {
		tags := map[string]string{"Name": fmt.Sprintf("m-%02d", i), "kubernetes.io/cluster/a": "1"}
		if i%3 == 0 {
			tags["kubernetes.io/role/node"] = "1"
		}
		if _, err := e.run(t, "", "subnet-0bbbbbbbbbbbbbbb2", tags); err != nil {
			t.Fatal(err)
		}
	}
	count := func(t *testing.T, filters ...ec2types.Filter) int {
		t.Helper()
		n := 0
		in := &ec2.DescribeInstancesInput{Filters: filters, MaxResults: aws.Int32(5)}
		pages := 0
		for {
			out, err := e.client.DescribeInstances(ctx(t), in)
			if err != nil {
				t.Fatal(err)
			}
			pages++
			for _, r := range out.Reservations {
				n += len(r.Instances)
			}
			if out.NextToken == nil {
				break
			}
			in.NextToken = out.NextToken
		}
		if want := max(1, (n+4)/5); pages != want {
			t.Errorf("%d pages for %d instances of 5 a page, want %d", pages, n, want)
		}
		return n
	}
	f := func(name string, values ...string) ec2types.Filter {
		return ec2types.Filter{Name: aws.String(name), Values: values}
	}
	for name, tc := range map[string]struct {
		filters []ec2types.Filter
		want    int
	}{
		"all":                {nil, 12},
		"tag-key":            {[]ec2types.Filter{f("tag-key", "kubernetes.io/role/node")}, 4},
		"two tag-keys ANDed": {[]ec2types.Filter{f("tag-key", "kubernetes.io/cluster/a"), f("tag-key", "kubernetes.io/role/node")}, 4},
		"values ORed":        {[]ec2types.Filter{f("tag:Name", "m-01", "m-02")}, 2},
		"star":               {[]ec2types.Filter{f("tag:Name", "m-1*")}, 2},
		"question mark":      {[]ec2types.Filter{f("tag:Name", "m-0?")}, 10},
		"state":              {[]ec2types.Filter{f("instance-state-name", "running", "pending")}, 12},
		"zone":               {[]ec2types.Filter{f("availability-zone", zoneA)}, 0},
		"no such tag":        {[]ec2types.Filter{f("tag:Name", "x")}, 0},
		"state and tag":      {[]ec2types.Filter{f("instance-state-name", "terminated"), f("tag-key", "kubernetes.io/cluster/a")}, 0},
	} {
		t.Run(name, func(t *testing.T) {
			if got := count(t, tc.filters...); got != tc.want {
				t.Errorf("%d instances, want %d", got, tc.want)
			}
		})
	}
	for name, tc := range map[string]struct {
		in   *ec2.DescribeInstancesInput
		code string
	}{
		"unknown filter":      {&ec2.DescribeInstancesInput{Filters: []ec2types.Filter{f("color", "red")}}, "InvalidParameterValue"},
		"page too small":      {&ec2.DescribeInstancesInput{MaxResults: aws.Int32(4)}, "InvalidParameterValue"},
		"ids and a page size": {&ec2.DescribeInstancesInput{InstanceIds: []string{"i-0aaaaaaaaaaaaaaa1"}, MaxResults: aws.Int32(5)}, "InvalidParameterCombination"},
		"unknown id":          {&ec2.DescribeInstancesInput{InstanceIds: []string{"i-0aaaaaaaaaaaaaaa1"}}, "InvalidInstanceID.NotFound"},
		"malformed id":        {&ec2.DescribeInstancesInput{InstanceIds: []string{"instance-1"}}, "InvalidInstanceID.Malformed"},
		"bad token":           {&ec2.DescribeInstancesInput{MaxResults: aws.Int32(5), NextToken: aws.String("bogus!")}, "InvalidParameterValue"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := e.client.DescribeInstances(ctx(t), tc.in); code(err) != tc.code {
				t.Fatalf("err = %v, want %s", err, tc.code)
			}
		})
	}
	vols, err := e.client.DescribeVolumes(ctx(t), &ec2.DescribeVolumesInput{Filters: []ec2types.Filter{f("attachment.delete-on-termination", "false")}, MaxResults: aws.Int32(5)})
	if err != nil || len(vols.Volumes) != 5 || vols.NextToken == nil {
		t.Fatalf("DescribeVolumes = %d volumes (next %v), %v; want a first page of 5", len(vols.Volumes), vols.NextToken, err)
	}
}

// TestDescribeLag: a new instance is missing from the first reads after its launch.
func TestDescribeLag(t *testing.T) {
	e := newEnv(t)
	e.c.SetDescribeLag(2)
	out, err := e.run(t, "", "subnet-0bbbbbbbbbbbbbbb2", nil)
	if err != nil {
		t.Fatal(err)
	}
	id := *out.Instances[0].InstanceId
	for range 2 {
		if _, err := e.client.DescribeInstances(ctx(t), &ec2.DescribeInstancesInput{InstanceIds: []string{id}}); code(err) != "InvalidInstanceID.NotFound" {
			t.Fatalf("read during the lag = %v", err)
		}
	}
	if _, err := e.client.DescribeInstances(ctx(t), &ec2.DescribeInstancesInput{InstanceIds: []string{id}}); err != nil {
		t.Fatalf("read after the lag = %v", err)
	}
}

// TestFaultsAndControl: faults apply to their action and number of requests, also when posted
// to the control endpoint; the state endpoint dumps what the fake holds.
func TestFaultsAndControl(t *testing.T) {
	e := newEnv(t)
	post := func(method, what, body string) int {
		req, _ := http.NewRequestWithContext(ctx(t), method, e.srv.URL+fakekit.ControlPrefix+what, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	if s := post(http.MethodPost, "faults", `{"op":"RunInstances","times":1,"status":503,"code":"RequestLimitExceeded","message":"Request limit exceeded."}`); s != http.StatusNoContent {
		t.Fatalf("POST faults: %d", s)
	}
	if s := post(http.MethodPost, "faults", `{"actoin":"x"}`); s != http.StatusBadRequest {
		t.Fatalf("POST of a misspelt fault: %d, want 400", s)
	}
	if _, err := e.client.DescribeInstances(ctx(t), &ec2.DescribeInstancesInput{}); err != nil {
		t.Fatalf("another action failed: %v", err)
	}
	if _, err := e.run(t, "", "subnet-0bbbbbbbbbbbbbbb2", nil); code(err) != "RequestLimitExceeded" {
		t.Fatalf("first RunInstances = %v", err)
	}
	if _, err := e.run(t, "", "subnet-0bbbbbbbbbbbbbbb2", nil); err != nil {
		t.Fatalf("second RunInstances = %v", err)
	}
	e.c.Faults.Inject(LostResponse("TerminateInstances", 1))
	id := e.c.Instances()[0].ID
	if _, err := e.client.TerminateInstances(ctx(t), &ec2.TerminateInstancesInput{InstanceIds: []string{id}}); code(err) != "InternalError" {
		t.Fatalf("TerminateInstances with a lost answer = %v", err)
	}
	if s := e.c.Instances()[0].State; s != StateTerminated {
		t.Fatalf("the lost answer's request did not take effect: %s", s)
	}
	if s := post(http.MethodDelete, "faults", ""); s != http.StatusNoContent {
		t.Fatalf("DELETE faults: %d", s)
	}
	resp, err := http.Get(e.srv.URL + fakekit.ControlPrefix + "state")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(body), `"terminatedInstances":1`) {
		t.Errorf("state dump %s", body)
	}
}

// TestRecorder: every request is recorded with its action, answer code and flattened
// parameters (no credentials), dumped as JSON on the control endpoint and forgotten on DELETE.
func TestRecorder(t *testing.T) {
	e := newEnv(t)
	e.c.Faults.Inject(Throttle("RunInstances", 1))
	if _, err := e.run(t, "tok-1", "subnet-0bbbbbbbbbbbbbbb2", map[string]string{"Name": "m-1"}); code(err) != "RequestLimitExceeded" {
		t.Fatalf("RunInstances = %v", err)
	}
	reqs := e.c.Requests.All()
	if len(reqs) != 1 {
		t.Fatalf("recorded %d requests, want 1", len(reqs))
	}
	r := reqs[0]
	want := map[string]string{"ClientToken": "tok-1", "ImageId": "ami-0aaaaaaaaaaaaaaa1", "InstanceType": "m5.large",
		"NetworkInterface.1.SubnetId": "subnet-0bbbbbbbbbbbbbbb2", "BlockDeviceMapping.2.Ebs.DeleteOnTermination": "false",
		"TagSpecification.1.ResourceType": "instance", "TagSpecification.1.Tag.1.Key": "Name", "TagSpecification.1.Tag.1.Value": "m-1"}
	for k, v := range want {
		if r.Params[k] != v {
			t.Errorf("recorded %s = %q, want %q", k, r.Params[k], v)
		}
	}
	if r.Action != "RunInstances" || r.Code != "RequestLimitExceeded" || r.RequestID == "" || r.Params["Action"] != "" || r.Params["Version"] != "" ||
		r.Invocation == "" || r.Attempt != 1 {
		t.Errorf("recorded %+v", r)
	}
	for k, v := range r.Params {
		if strings.Contains(v, secret) || strings.Contains(v, keyID) {
			t.Errorf("parameter %s carries a credential", k)
		}
	}
	resp, err := http.Get(e.srv.URL + fakekit.ControlPrefix + "requests")
	if err != nil {
		t.Fatal(err)
	}
	var dumped []Request
	err = json.NewDecoder(resp.Body).Decode(&dumped)
	_ = resp.Body.Close()
	if err != nil || len(dumped) != 1 || dumped[0].Params["ClientToken"] != "tok-1" {
		t.Fatalf("dump = %+v, %v", dumped, err)
	}
	req, _ := http.NewRequestWithContext(ctx(t), http.MethodDelete, e.srv.URL+fakekit.ControlPrefix+"requests", nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE requests: %v %v", resp, err)
	} else {
		_ = resp.Body.Close()
	}
	if n := len(e.c.Requests.All()); n != 0 {
		t.Fatalf("%d requests after DELETE", n)
	}
}

// TestInstanceTypes: an instance type the table does not hold is InvalidParameterValue, as EC2
// answers an unknown type; a type of another architecture than the AMI's is refused with EC2's
// message; an arm64 instance reports its architecture.
func TestInstanceTypes(t *testing.T) {
	e := newEnv(t)
	e.c.AddImageFor("ami-0aaaaaaaaaaaaaaa2", "arm-image", "/dev/xvda", "arm64")
	withType := func(typ, ami string) func(*ec2.RunInstancesInput) {
		return func(in *ec2.RunInstancesInput) {
			in.InstanceType, in.ImageId = ec2types.InstanceType(typ), aws.String(ami)
		}
	}
	_, err := e.run(t, "", "subnet-0bbbbbbbbbbbbbbb2", nil, withType("m5.huge", "ami-0aaaaaaaaaaaaaaa1"))
	if code(err) != "InvalidParameterValue" || !strings.Contains(err.Error(), "Invalid value 'm5.huge' for InstanceType") {
		t.Fatalf("unknown type = %v", err)
	}
	_, err = e.run(t, "", "subnet-0bbbbbbbbbbbbbbb2", nil, withType("m7g.large", "ami-0aaaaaaaaaaaaaaa1"))
	if code(err) != "InvalidParameterValue" || !strings.Contains(err.Error(), "architecture 'arm64' of the specified instance type does not match the architecture 'x86_64'") {
		t.Fatalf("arm64 type on an x86_64 AMI = %v", err)
	}
	out, err := e.run(t, "", "subnet-0bbbbbbbbbbbbbbb2", nil, withType("m7g.large", "ami-0aaaaaaaaaaaaaaa2"))
	if err != nil || out.Instances[0].Architecture != ec2types.ArchitectureValuesArm64 {
		t.Fatalf("arm64 launch = %+v, %v", out, err)
	}
	if gpu := InstanceTypes["p4d.24xlarge"]; gpu.VCPUs != 96 || gpu.GPUs != 8 || gpu.MemoryMiB != 1152*1024 {
		t.Errorf("p4d.24xlarge = %+v", gpu)
	}
}

// TestPlacementGroups: a group is taken by ID or name (not both), must exist, and a partition
// number only fits a partition group's range; DescribeInstances shows the group.
func TestPlacementGroups(t *testing.T) {
	e := newEnv(t)
	e.c.AddPlacementGroup("pg-0aaaaaaaaaaaaaaa1", "workers", "partition", 3)
	e.c.AddPlacementGroup("pg-0bbbbbbbbbbbbbbb2", "tight", "cluster", 0)
	place := func(pl ec2types.Placement) func(*ec2.RunInstancesInput) {
		return func(in *ec2.RunInstancesInput) { in.Placement = &pl }
	}
	for name, tc := range map[string]struct {
		pl   ec2types.Placement
		code string
	}{
		"by ID with a partition": {ec2types.Placement{GroupId: aws.String("pg-0aaaaaaaaaaaaaaa1"), PartitionNumber: aws.Int32(2)}, ""},
		"by name":                {ec2types.Placement{GroupName: aws.String("tight")}, ""},
		"unknown ID":             {ec2types.Placement{GroupId: aws.String("pg-0ccccccccccccccc3")}, "InvalidPlacementGroup.Unknown"},
		"unknown name":           {ec2types.Placement{GroupName: aws.String("loose")}, "InvalidPlacementGroup.Unknown"},
		"ID and name":            {ec2types.Placement{GroupId: aws.String("pg-0aaaaaaaaaaaaaaa1"), GroupName: aws.String("workers")}, "InvalidParameterCombination"},
		"partition out of range": {ec2types.Placement{GroupId: aws.String("pg-0aaaaaaaaaaaaaaa1"), PartitionNumber: aws.Int32(4)}, "InvalidParameterValue"},
		"partition of a cluster": {ec2types.Placement{GroupName: aws.String("tight"), PartitionNumber: aws.Int32(1)}, "InvalidParameterCombination"},
		"malformed ID":           {ec2types.Placement{GroupId: aws.String("workers")}, "InvalidParameterValue"},
	} {
		out, err := e.run(t, "", "subnet-0bbbbbbbbbbbbbbb2", nil, place(tc.pl))
		if code(err) != tc.code {
			t.Errorf("%s: %v, want %q", name, err, tc.code)
			continue
		}
		if tc.code != "" {
			continue
		}
		d, err := e.client.DescribeInstances(ctx(t), &ec2.DescribeInstancesInput{InstanceIds: []string{*out.Instances[0].InstanceId}})
		if err != nil {
			t.Fatal(err)
		}
		got := d.Reservations[0].Instances[0].Placement
		if tc.pl.GroupId != nil && (aws.ToString(got.GroupId) != *tc.pl.GroupId || aws.ToString(got.GroupName) != "workers" || aws.ToInt32(got.PartitionNumber) != 2) {
			t.Errorf("%s: placement %+v", name, got)
		}
		if tc.pl.GroupName != nil && (aws.ToString(got.GroupId) != "pg-0bbbbbbbbbbbbbbb2" || aws.ToString(got.GroupName) != "tight") {
			t.Errorf("%s: placement %+v", name, got)
		}
	}
}

// TestTerminatedRetention: a terminated instance stays visible for the retention (an hour by
// default, by the cloud's clock), then DescribeInstances and TerminateInstances no longer know
// its ID, filters no longer find it, and its client token still answers with it.
func TestTerminatedRetention(t *testing.T) {
	e := newEnv(t)
	out, err := e.run(t, "tok-gone", "subnet-0bbbbbbbbbbbbbbb2", nil)
	if err != nil {
		t.Fatal(err)
	}
	id := *out.Instances[0].InstanceId
	if _, err := e.client.TerminateInstances(ctx(t), &ec2.TerminateInstancesInput{InstanceIds: []string{id}}); err != nil {
		t.Fatal(err)
	}
	describe := func() (*ec2.DescribeInstancesOutput, error) {
		return e.client.DescribeInstances(ctx(t), &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	}
	e.clock.Step(DefaultTerminatedRetention - time.Second)
	if d, err := describe(); err != nil || d.Reservations[0].Instances[0].State.Name != ec2types.InstanceStateNameTerminated {
		t.Fatalf("terminated instance within the retention: %+v, %v", d, err)
	}
	e.clock.Step(time.Second)
	if _, err := describe(); code(err) != "InvalidInstanceID.NotFound" {
		t.Fatalf("terminated instance after the retention: %v, want InvalidInstanceID.NotFound", err)
	}
	if _, err := e.client.TerminateInstances(ctx(t), &ec2.TerminateInstancesInput{InstanceIds: []string{id}}); code(err) != "InvalidInstanceID.NotFound" {
		t.Fatalf("TerminateInstances after the retention: %v", err)
	}
	all, err := e.client.DescribeInstances(ctx(t), &ec2.DescribeInstancesInput{})
	if err != nil || len(all.Reservations) != 0 || len(e.c.Instances()) != 0 {
		t.Fatalf("listing after the retention: %+v, %v, %+v", all, err, e.c.Instances())
	}
	again, err := e.run(t, "tok-gone", "subnet-0bbbbbbbbbbbbbbb2", nil)
	if err != nil || *again.Instances[0].InstanceId != id || again.Instances[0].State.Name != ec2types.InstanceStateNameTerminated {
		t.Fatalf("the client token after the retention: %+v, %v", again, err)
	}
	// A shorter retention applies to instances already terminated.
	e.c.SetTerminatedRetention(time.Minute)
	out, err = e.run(t, "", "subnet-0bbbbbbbbbbbbbbb2", nil)
	if err != nil {
		t.Fatal(err)
	}
	id = *out.Instances[0].InstanceId
	if _, err := e.client.TerminateInstances(ctx(t), &ec2.TerminateInstancesInput{InstanceIds: []string{id}}); err != nil {
		t.Fatal(err)
	}
	e.clock.Step(time.Minute)
	if _, err := describe(); code(err) != "InvalidInstanceID.NotFound" {
		t.Fatalf("after a one-minute retention: %v", err)
	}
}
