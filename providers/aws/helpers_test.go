package aws

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/machinist-io/machinist/providers/kit/fakekit"

	"github.com/machinist-io/machinist/providers/kit"

	awscredentials "github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/internal/syncbuf"
	"github.com/machinist-io/machinist/providers/aws/fakeaws"
)

const (
	testRegion  = "eu-west-1"
	testZoneA   = "eu-west-1a"
	testZoneB   = "eu-west-1b"
	testVPC     = "vpc-0a1b2c3d4e5f60718"
	testSubnetA = "subnet-0aaaaaaaaaaaaaaa1"
	testSubnetB = "subnet-0bbbbbbbbbbbbbbb2"
	testSG      = "sg-0a1b2c3d4e5f60718"
	testAMI     = "ami-0a1b2c3d4e5f60718"
	testKeyName = "shoot--dev--alpha-ssh"
	testProfile = "shoot--dev--alpha-nodes"
	// testPlacementGroup is a partition group of 3, named pg-1.
	testPlacementGroup = "pg-0a1b2c3d4e5f60718"
	testAccessKey      = "AKIAMACHINISTTEST001"
	testSecretKey      = "machinist-test-secret-access-key-9f8e7d6c"
	testUserData       = "#cloud-config\nruncmd:\n- echo join-token-abcdef123456\n"
	clusterTag         = "kubernetes.io/cluster/shoot--dev--alpha"
	roleTag            = "kubernetes.io/role/node"
)

// testEnv is a fake EC2 served on loopback with a VPC of two zones, a security group, an AMI,
// a key pair and an instance profile, and a driver whose secret points at it.
type testEnv struct {
	cloud  *fakeaws.Cloud
	srv    *fakekit.Server
	drv    *Driver
	class  *v1alpha1.MachineClass
	secret *corev1.Secret
	logs   *syncbuf.Buffer
	// ambient is Options.AmbientCredentials of the drivers newDriver makes.
	ambient bool
}

func newTestEnv(t testing.TB) *testEnv {
	t.Helper()
	c := newTestCloud()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := c.Serve(l, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	logs := &syncbuf.Buffer{}
	e := &testEnv{cloud: c, srv: srv, logs: logs, class: testClass("workers", baseSpec())}
	e.drv = e.newDriver()
	e.secret = testSecretObj(srv.URL)
	return e
}

func newTestCloud() *fakeaws.Cloud {
	c := fakeaws.New(fakeaws.Options{Region: testRegion})
	c.Identity.AddAccessKey(testAccessKey, testSecretKey)
	c.Network.AddSubnet(testSubnetA, testVPC, testZoneA, "10.250.0.0/19")
	c.Network.AddSubnet(testSubnetB, testVPC, testZoneB, "10.250.32.0/19")
	c.Network.AddSecurityGroup(testSG, testVPC, "shoot--dev--alpha-nodes")
	c.AddImage(testAMI, "gardenlinux-1592.1.0", "/dev/xvda")
	c.AddKeyPair(testKeyName)
	c.Identity.AddInstanceProfile(testProfile)
	c.AddPlacementGroup(testPlacementGroup, "pg-1", "partition", 3)
	return c
}

// newDriver is a driver for the env with short waits: a fresh one stands for a restarted
// process (no cached clients).
func (e *testEnv) newDriver() *Driver {
	return New(Options{
		Options: kit.Options{
			PollInterval:   5 * time.Millisecond,
			CleanupTimeout: 20 * time.Second,
			Log:            slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		},
		MaxAttempts:        3,
		MaxRetryWait:       5 * time.Millisecond,
		VisibleTimeout:     10 * time.Second,
		AmbientCredentials: e.ambient,
	})
}

// baseSpec is a worker class in the shape Gardener's AWS extension writes.
func baseSpec() *ProviderSpec {
	return &ProviderSpec{
		AMI:         testAMI,
		Region:      testRegion,
		MachineType: "m5.large",
		IAM:         IAMProfile{Name: testProfile},
		KeyName:     ptr.To(testKeyName),
		BlockDevices: []BlockDeviceMapping{
			{DeviceName: RootDeviceName, Ebs: EbsBlockDevice{VolumeSize: 50, VolumeType: "gp3", Encrypted: true, DeleteOnTermination: ptr.To(true)}},
			{DeviceName: "/dev/sdb", Ebs: EbsBlockDevice{VolumeSize: 100, VolumeType: "gp3", Throughput: ptr.To(int32(250)), Iops: 4000}},
		},
		NetworkInterfaces: []NetworkInterface{{SubnetID: testSubnetA, SecurityGroupIDs: []string{testSG}}},
		Tags: map[string]string{
			"Name": "shoot--dev--alpha", clusterTag: "1", roleTag: "1",
			"worker.gardener.cloud/pool": "worker-a",
		},
		InstanceMetadataOptions: &InstanceMetadataOptions{HTTPTokens: "required", HTTPPutResponseHopLimit: ptr.To(int32(2))},
	}
}

func testClass(name string, spec *ProviderSpec) *v1alpha1.MachineClass {
	raw, err := json.Marshal(spec)
	if err != nil {
		panic(err)
	}
	return &v1alpha1.MachineClass{
		ObjectMeta:   metav1.ObjectMeta{Name: name, Namespace: "shoot--dev--alpha"},
		Provider:     "AWS",
		ProviderSpec: runtime.RawExtension{Raw: raw},
	}
}

func testSecretObj(endpoint string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "cloudprovider", Namespace: "shoot--dev--alpha"},
		Data: map[string][]byte{
			KeyAccessKeyID:     []byte(testAccessKey),
			KeySecretAccessKey: []byte(testSecretKey),
			KeyEC2Endpoint:     []byte(endpoint),
			KeyUserData:        []byte(testUserData),
		},
	}
}

func (e *testEnv) classWith(name string, mutate func(*ProviderSpec)) *v1alpha1.MachineClass {
	s := baseSpec()
	mutate(s)
	return testClass(name, s)
}

func machine(name string) *v1alpha1.Machine {
	return &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shoot--dev--alpha", UID: k8stypes.UID("uid-" + name)}}
}

func (e *testEnv) createIn(ctx context.Context, class *v1alpha1.MachineClass, m *v1alpha1.Machine) (*driver.CreateMachineResponse, error) {
	return e.drv.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: m, MachineClass: class, Secret: e.secret.DeepCopy()})
}

func (e *testEnv) create(t testing.TB, name string) (*driver.CreateMachineResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return e.createIn(ctx, e.class, machine(name))
}

func (e *testEnv) mustCreate(t testing.TB, name string) *driver.CreateMachineResponse {
	t.Helper()
	resp, err := e.create(t, name)
	if err != nil {
		t.Fatalf("CreateMachine(%s): %v", name, err)
	}
	return resp
}

func (e *testEnv) delete(t testing.TB, class *v1alpha1.MachineClass, m *v1alpha1.Machine) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := e.drv.DeleteMachine(ctx, &driver.DeleteMachineRequest{Machine: m, MachineClass: class, Secret: e.secret.DeepCopy()})
	return err
}

// liveOf returns the live instances (not shutting down or terminated) named after a machine.
func (e *testEnv) liveOf(name string) []fakeaws.Instance {
	var out []fakeaws.Instance
	for _, i := range e.cloud.Live() {
		if i.Tags[NameTag] == name {
			out = append(out, i)
		}
	}
	return out
}

// countVMs counts a machine's live instances directly in the fake.
func (e *testEnv) countVMs(_ context.Context, name string) (int, error) {
	return len(e.liveOf(name)), nil
}

// launchRaw launches an instance with the machine's tags straight through the SDK, as another
// controller (or a person) would, and returns its ID.
func (e *testEnv) launchRaw(t testing.TB, name string, class *v1alpha1.MachineClass) string {
	t.Helper()
	spec, _, err := specs.Decode(class, driver.Lenient)
	if err != nil {
		t.Fatal(err)
	}
	client := ec2.New(ec2.Options{
		Region:       testRegion,
		Credentials:  awscredentials.NewStaticCredentialsProvider(testAccessKey, testSecretKey, ""),
		BaseEndpoint: ptr.To(e.srv.URL),
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := client.RunInstances(ctx, runInput(spec, name, []byte(testUserData), "/dev/xvda", nil))
	if err != nil {
		t.Fatal(err)
	}
	return ptr.Deref(out.Instances[0].InstanceId, "")
}
