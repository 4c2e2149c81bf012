package openstack

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/machinist-io/machinist/providers/kit/fakekit"

	"github.com/machinist-io/machinist/providers/kit"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/internal/syncbuf"
	"github.com/machinist-io/machinist/providers/openstack/fakeopenstack"
)

const (
	clusterKey = "kubernetes.io-cluster-shoot--garden--dev"
	roleKey    = "kubernetes.io-role-node"
	userData   = "#cloud-config\nhostname: <<MACHINE_NAME>>\nbootstrap-token: 0123456789abcdef-token\n"
)

// testDriver returns a driver with fast polls whose logs go to the returned buffer.
func testDriver(t testing.TB, tune ...func(*Options)) (*Driver, *syncbuf.Buffer) {
	t.Helper()
	logs := &syncbuf.Buffer{}
	opts := Options{
		Options: kit.Options{
			Log:            slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
			PollInterval:   5 * time.Millisecond,
			CleanupTimeout: 10 * time.Second,
		},
		MaxRetryWait: 20 * time.Millisecond,
		HTTPTimeout:  10 * time.Second,
	}
	for _, f := range tune {
		f(&opts)
	}
	return New(opts), logs
}

// baseSpec is a valid spec on the fake cloud: one network, no pre-created port, image disk.
func baseSpec() MachineProviderConfigSpec {
	return MachineProviderConfigSpec{
		ImageName:        fakeopenstack.ImageName,
		Region:           fakeopenstack.DefaultRegion,
		AvailabilityZone: fakeopenstack.AvailabilityZone,
		FlavorName:       fakeopenstack.FlavorSmall,
		KeyName:          fakeopenstack.KeyName,
		SecurityGroups:   []string{fakeopenstack.SecurityGroupName},
		Tags:             map[string]string{clusterKey: "1", roleKey: "1", "owner": "machinist-tests"},
		NetworkID:        fakeopenstack.NetworkID,
	}
}

// classOf wraps a spec the way Gardener writes providerSpec.
func classOf(t testing.TB, name string, spec MachineProviderConfigSpec) *v1alpha1.MachineClass {
	t.Helper()
	raw, err := json.Marshal(MachineProviderConfig{APIVersion: APIVersion, Kind: Kind, Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	return &v1alpha1.MachineClass{
		TypeMeta:     metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "MachineClass"},
		ObjectMeta:   metav1.ObjectMeta{Name: name, Namespace: "shoot--garden--dev"},
		Provider:     "OpenStack",
		ProviderSpec: runtime.RawExtension{Raw: raw},
		SecretRef:    &corev1.SecretReference{Name: "cloudprovider", Namespace: "shoot--garden--dev"},
	}
}

func testClass(t testing.TB, mutate ...func(*MachineProviderConfigSpec)) *v1alpha1.MachineClass {
	t.Helper()
	spec := baseSpec()
	for _, m := range mutate {
		m(&spec)
	}
	return classOf(t, "worker-a", spec)
}

func passwordSecret(c *fakeopenstack.Cloud) *corev1.Secret {
	data := c.PasswordSecret()
	data[KeyUserData] = []byte(userData)
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "cloudprovider", Namespace: "shoot--garden--dev"}, Data: data}
}

func appCredSecret(c *fakeopenstack.Cloud) *corev1.Secret {
	data := c.AppCredentialSecret()
	data[KeyUserData] = []byte(userData)
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "cloudprovider-appcred", Namespace: "shoot--garden--dev"}, Data: data}
}

func machine(name string) *v1alpha1.Machine {
	return &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shoot--garden--dev"}}
}

func withProviderID(m *v1alpha1.Machine, pid string) *v1alpha1.Machine {
	m = m.DeepCopy()
	m.Spec.ProviderID = pid
	return m
}

func ctxT(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// leftovers describes every server, port and volume of the cloud that carries name, for
// assertions that nothing leaked.
func leftovers(c *fakeopenstack.Cloud, name string) []string {
	var out []string
	for _, s := range c.Servers() {
		if s.Name == name {
			out = append(out, "server "+s.ID+" ("+s.Status+")")
		}
	}
	for _, p := range c.Ports() {
		if p.Name == name {
			out = append(out, "port "+p.ID+" device="+p.DeviceID)
		}
	}
	for _, v := range c.Volumes() {
		if v.Name == name || strings.Contains(v.Name, name) {
			out = append(out, "volume "+v.ID+" ("+v.Status+")")
		}
	}
	return out
}

// allResources counts every server, port and volume in the cloud.
func allResources(c *fakeopenstack.Cloud) (servers, ports, volumes int) {
	return len(c.Servers()), len(c.Ports()), len(c.Volumes())
}

// startCloud serves a fake OpenStack on loopback until the test ends.
func startCloud(t testing.TB, o fakeopenstack.Options) *fakeopenstack.Cloud {
	t.Helper()
	c := fakeopenstack.New(o)
	fakekit.Start(t, c)
	return c
}
