package gcp

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/machinist-io/machinist/providers/kit/fakekit"

	compute "google.golang.org/api/compute/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/internal/syncbuf"
	"github.com/machinist-io/machinist/providers/gcp/fakegcp"
)

const (
	testUserData = "#cloud-config\nruncmd:\n- echo join-token-abcdef123456\n"
	clusterTag   = "kubernetes-io-cluster-shoot--dev--alpha"
	roleTag      = "kubernetes-io-role-node"
	testZone     = fakegcp.DemoZone
)

// testEnv is a fake Compute Engine served over HTTPS on loopback, seeded with the demo network,
// subnetwork, image and service account, and a driver that reaches it through the secret
// alone (computeEndpoint and caCert), as `machinist fakecloud gcp` users do.
type testEnv struct {
	cloud  *fakegcp.Cloud
	srv    *fakekit.Server
	drv    *Driver
	class  *v1alpha1.MachineClass
	secret *corev1.Secret
	logs   *syncbuf.Buffer
}

func newTestEnv(t testing.TB) *testEnv {
	t.Helper()
	c := fakegcp.New(fakegcp.Options{})
	if err := c.ContractError(); err != nil {
		t.Fatalf("the fake cannot check requests against the Compute contract: %v", err)
	}
	t.Cleanup(func() {
		if v := c.ContractViolations(); len(v) > 0 {
			t.Errorf("fakegcp broke the Compute contract: %v", v)
		}
	})
	c.SetOperationDelay(10 * time.Millisecond)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := c.Serve(l, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	key := c.SeedDemo(fakegcp.TokenURL(srv.URL))
	logs := &syncbuf.Buffer{}
	e := &testEnv{cloud: c, srv: srv, logs: logs, class: testClass("workers", baseSpec())}
	e.drv = e.newDriver(Options{})
	e.secret = &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "cloudprovider", Namespace: "shoot--dev--alpha"},
		Data: map[string][]byte{
			KeyServiceAccountJSON: key,
			KeyComputeEndpoint:    []byte(fakegcp.ComputeEndpoint(srv.URL)),
			KeyCACert:             srv.CACert,
			KeyUserData:           []byte(testUserData),
		},
	}
	return e
}

// newDriver is a driver with the test's pace (polls of milliseconds, short backoff) and logs;
// opts overrides.
func (e *testEnv) newDriver(opts Options) *Driver {
	if opts.PollInterval == 0 {
		opts.PollInterval = 5 * time.Millisecond
	}
	if opts.Retry.Steps == 0 {
		opts.Retry = wait.Backoff{Duration: 20 * time.Millisecond, Factor: 2, Steps: 3, Cap: time.Second}
	}
	if opts.CleanupTimeout == 0 {
		opts.CleanupTimeout = 20 * time.Second
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return New(opts)
}

// baseSpec is a class in the shape Gardener's GCP extension writes.
func baseSpec() *ProviderSpec {
	return &ProviderSpec{
		CanIPForward: true,
		Description:  ptr.To("Machine of Shoot alpha created by machine-controller-manager."),
		Disks: []*Disk{{
			AutoDelete: ptr.To(true), Boot: true, SizeGb: 50, Type: "pd-balanced",
			Image:  "projects/" + fakegcp.DemoImageProject + "/global/images/" + fakegcp.DemoImage,
			Labels: map[string]string{"name": "alpha", "k8s-cluster-name": "shoot--dev--alpha"},
		}},
		Labels:            map[string]string{"name": "alpha", "k8s-cluster-name": "shoot--dev--alpha"},
		MachineType:       "n2-standard-2",
		Metadata:          []*Metadata{{Key: "block-project-ssh-keys", Value: ptr.To("TRUE")}},
		NetworkInterfaces: []*NetworkInterface{{Subnetwork: fakegcp.DemoSubnetwork, DisableExternalIP: true}},
		Region:            fakegcp.DemoRegion,
		Zone:              testZone,
		Scheduling:        Scheduling{AutomaticRestart: true, OnHostMaintenance: "MIGRATE"},
		ServiceAccounts:   []ServiceAccount{{Email: "nodes@" + fakegcp.DefaultProject + ".iam.gserviceaccount.com", Scopes: []string{compute.ComputeScope}}},
		Tags:              []string{"shoot--dev--alpha", clusterTag, roleTag},
	}
}

func testClass(name string, spec *ProviderSpec) *v1alpha1.MachineClass {
	raw, err := json.Marshal(spec)
	if err != nil {
		panic(err)
	}
	return &v1alpha1.MachineClass{
		ObjectMeta:   metav1.ObjectMeta{Name: name, Namespace: "shoot--dev--alpha"},
		Provider:     "GCP",
		ProviderSpec: runtime.RawExtension{Raw: raw},
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

func (e *testEnv) list(t testing.TB, class *v1alpha1.MachineClass) map[string]string {
	t.Helper()
	resp, err := e.drv.ListMachines(context.Background(), &driver.ListMachinesRequest{MachineClass: class, Secret: e.secret.DeepCopy()})
	if err != nil {
		t.Fatalf("ListMachines: %v", err)
	}
	return resp.MachineList
}

// leftovers lists what the cloud holds for a machine once every operation is done: its
// instance and its disks.
func (e *testEnv) leftovers(name string) []string {
	e.cloud.Settle()
	var out []string
	for _, in := range e.cloud.Instances() {
		if in.Name == name {
			out = append(out, "instance "+in.Name)
		}
	}
	for _, d := range e.cloud.Disks() {
		if d.Name == name || strings.HasPrefix(d.Name, name+"-") {
			out = append(out, "disk "+d.Name)
		}
	}
	return out
}

// countVMs counts the instances of a machine name directly in the fake.
func (e *testEnv) countVMs(_ context.Context, name string) (int, error) {
	n := 0
	for _, in := range e.cloud.Instances() {
		if in.Name == name {
			n++
		}
	}
	return n, nil
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// privateKeyOf is the private key of a service account key file.
func privateKeyOf(t testing.TB, keyFile []byte) string {
	t.Helper()
	var k struct {
		PrivateKey string `json:"private_key"`
	}
	if err := json.Unmarshal(keyFile, &k); err != nil || len(k.PrivateKey) < 100 {
		t.Fatalf("not a key file: %v", err)
	}
	return k.PrivateKey
}
