package azure

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/machinist-io/machinist/providers/kit"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v8"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/internal/syncbuf"
	"github.com/machinist-io/machinist/providers/azure/fakeazure"
)

const (
	testRG       = "shoot--dev--alpha"
	testLocation = "westeurope"
	testClientID = "4c1b2f0e-7d3a-4f5e-9a8b-0c1d2e3f4a5b"
	testSecret   = "client-secret-value-9f8e7d6c"
	testUserData = "#cloud-config\nruncmd:\n- echo join-token-abcdef123456\n"
	clusterTag   = "kubernetes.io-cluster-shoot--dev--alpha"
)

// testEnv is a fake Azure with one resource group, subnet and image, and a driver wired to it.
type testEnv struct {
	cloud  *fakeazure.Cloud
	drv    *Driver
	class  *v1alpha1.MachineClass
	secret *corev1.Secret
	logs   *syncbuf.Buffer
}

// newTestEnv builds the fake and the driver; opts change the driver's options.
func newTestEnv(t testing.TB, opts ...func(*Options)) *testEnv {
	t.Helper()
	c := fakeazure.New(fakeazure.Options{})
	c.AddServicePrincipal(testClientID, testSecret)
	c.AddResourceGroup(testRG, testLocation)
	c.AddSubnet(testRG, "shoot--dev--alpha", "shoot--dev--alpha-nodes", "10.250.0.0/16")
	c.AddImage(testLocation, "sap", "gardenlinux", "greatest", "1443.3.0", nil)
	c.AddImage(testLocation, "sap", "gardenlinux", "greatest", "1592.1.0", nil)
	c.AddImage(testLocation, "canonical", "ubuntu-pro", "22_04-lts", "22.4.202401010", &armcompute.PurchasePlan{Name: ptr.To("pro-22_04-lts"), Product: ptr.To("0001-com-ubuntu-pro-jammy"), Publisher: ptr.To("canonical")})
	cfg := c.Configuration()
	logs := &syncbuf.Buffer{}
	o := Options{
		Options: kit.Options{
			HTTPTransport:  c.Transport(),
			PollInterval:   time.Millisecond,
			CleanupTimeout: 20 * time.Second,
			Log:            slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		},
		Cloud: &cfg,
		Retry: policy.RetryOptions{MaxRetries: 3, RetryDelay: time.Millisecond, MaxRetryDelay: 2 * time.Second},
	}
	for _, f := range opts {
		f(&o)
	}
	drv := New(o)
	return &testEnv{cloud: c, drv: drv, class: testClass("workers", baseSpec()), secret: testSecretObj(), logs: logs}
}

// baseSpec is a zonal class in the shape Gardener writes.
func baseSpec() *ProviderSpec {
	lun := int32(0)
	zone := 1
	return &ProviderSpec{
		Location:      testLocation,
		ResourceGroup: testRG,
		Tags: map[string]string{
			"Name": "shoot--dev--alpha", clusterTag: "1", "kubernetes.io-role-node": "1",
			"worker.gardener.cloud_pool": "worker-a",
		},
		SubnetInfo: SubnetInfo{VnetName: "shoot--dev--alpha", SubnetName: "shoot--dev--alpha-nodes"},
		Properties: VirtualMachineProperties{
			HardwareProfile: HardwareProfile{VMSize: "Standard_D2s_v3"},
			StorageProfile: StorageProfile{
				ImageReference: ImageReference{URN: ptr.To("sap:gardenlinux:greatest:1592.1.0")},
				OsDisk:         OSDisk{Caching: "None", CreateOption: "FromImage", DiskSizeGB: 50, ManagedDisk: ManagedDiskParameters{StorageAccountType: "StandardSSD_LRS"}},
				DataDisks:      []DataDisk{{Name: "kubelet", Lun: &lun, DiskSizeGB: 100, StorageAccountType: "Premium_LRS"}},
			},
			OsProfile: OSProfile{AdminUsername: "core", LinuxConfiguration: LinuxConfiguration{
				DisablePasswordAuthentication: true,
				SSH:                           SSHConfiguration{PublicKeys: SSHPublicKey{Path: "/home/core/.ssh/authorized_keys", KeyData: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAItestkey"}},
			}},
			NetworkProfile: NetworkProfile{AcceleratedNetworking: ptr.To(true)},
			Zone:           &zone,
		},
	}
}

func testClass(name string, spec *ProviderSpec) *v1alpha1.MachineClass {
	raw, err := json.Marshal(spec)
	if err != nil {
		panic(err)
	}
	return &v1alpha1.MachineClass{
		ObjectMeta:   metav1.ObjectMeta{Name: name, Namespace: "shoot--dev--alpha"},
		Provider:     "Azure",
		ProviderSpec: runtime.RawExtension{Raw: raw},
	}
}

func testSecretObj() *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "cloudprovider", Namespace: "shoot--dev--alpha"},
		Data: map[string][]byte{
			KeyClientID:       []byte(testClientID),
			KeyClientSecret:   []byte(testSecret),
			KeySubscriptionID: []byte(fakeazure.DefaultSubscriptionID),
			KeyTenantID:       []byte(fakeazure.DefaultTenantID),
			KeyUserData:       []byte(testUserData),
		},
	}
}

func (e *testEnv) classWith(name string, mutate func(*ProviderSpec)) *v1alpha1.MachineClass {
	s := baseSpec()
	mutate(s)
	return testClass(name, s)
}

func machine(name string) *v1alpha1.Machine {
	return &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shoot--dev--alpha"}}
}

func (e *testEnv) createIn(ctx context.Context, class *v1alpha1.MachineClass, name string) (*driver.CreateMachineResponse, error) {
	return e.drv.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine(name), MachineClass: class, Secret: e.secret.DeepCopy()})
}

func (e *testEnv) create(t testing.TB, name string) (*driver.CreateMachineResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return e.createIn(ctx, e.class, name)
}

func (e *testEnv) mustCreate(t testing.TB, name string) *driver.CreateMachineResponse {
	t.Helper()
	resp, err := e.create(t, name)
	if err != nil {
		t.Fatalf("CreateMachine(%s): %v", name, err)
	}
	return resp
}

func (e *testEnv) delete(t testing.TB, class *v1alpha1.MachineClass, name string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := e.drv.DeleteMachine(ctx, &driver.DeleteMachineRequest{Machine: machine(name), MachineClass: class, Secret: e.secret.DeepCopy()})
	return err
}

// resourcesOf lists what the cloud holds for a machine: its VM, NIC and disks.
func (e *testEnv) resourcesOf(name string) []fakeazure.Resource {
	var out []fakeazure.Resource
	for _, r := range e.cloud.Resources() {
		if strings.EqualFold(r.Name, name) || strings.HasPrefix(strings.ToLower(r.Name), strings.ToLower(name)+"-") {
			out = append(out, r)
		}
	}
	return out
}

// countVMs counts the VMs of a machine name directly in the fake.
func (e *testEnv) countVMs(_ context.Context, name string) (int, error) {
	n := 0
	for _, r := range e.cloud.Resources() {
		if r.Type == "vm" && strings.EqualFold(r.Name, name) {
			n++
		}
	}
	return n, nil
}
