package azure

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/machinist-io/machinist/providers/kit/fakekit"

	"github.com/machinist-io/machinist/providers/kit"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/azure/fakeazure"
)

// servedFake serves a seeded fake over HTTPS on loopback, as `machinist fakecloud azure` does.
func servedFake(t *testing.T) (*fakeazure.Cloud, *fakekit.Server) {
	t.Helper()
	c := fakeazure.New(fakeazure.Options{})
	c.SeedDemo()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := c.Serve(l, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return c, srv
}

// customCloudSecret is the secret `machinist fakecloud azure` prints.
func customCloudSecret(srv *fakekit.Server) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "fakeazure", Namespace: "default"}, Data: map[string][]byte{
		KeyClientID:                     []byte(fakeazure.DemoClientID),
		KeyClientSecret:                 []byte(fakeazure.DemoClientSecret),
		KeyTenantID:                     []byte(fakeazure.DefaultTenantID),
		KeySubscriptionID:               []byte(fakeazure.DefaultSubscriptionID),
		KeyActiveDirectoryAuthorityHost: []byte(srv.URL + "/"),
		KeyResourceManagerEndpoint:      []byte(srv.URL + "/"),
		KeyCACert:                       srv.CACert,
		KeyUserData:                     []byte(testUserData),
	}}
}

func fakecloudClass(t *testing.T) *v1alpha1.MachineClass {
	t.Helper()
	raw, err := os.ReadFile("../../kubernetes/samples/fakecloud/azure-machineclass.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var class v1alpha1.MachineClass
	if err := yaml.UnmarshalStrict(raw, &class); err != nil {
		t.Fatal(err)
	}
	return &class
}

// TestCustomCloudAgainstTheServedFake drives the real SDK over HTTPS, with nothing but the
// secret's custom cloud keys (no test transport, no Options.Cloud): create, list and delete leave
// nothing behind, the fake's control endpoint dumps its state and switches faults, and once the
// fake is gone a fresh login is Unavailable with the refused connection as its cause.
func TestCustomCloudAgainstTheServedFake(t *testing.T) {
	c, srv := servedFake(t)
	d := New(Options{Options: kit.Options{PollInterval: time.Millisecond}})
	class, secret := fakecloudClass(t), customCloudSecret(srv)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	resp, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine("demo-1"), MachineClass: class, Secret: secret})
	if err != nil {
		t.Fatalf("CreateMachine: %v", err)
	}
	if resp.ProviderID != "azure:///westeurope/demo-1" {
		t.Errorf("providerID %q", resp.ProviderID)
	}
	list, err := d.ListMachines(ctx, &driver.ListMachinesRequest{MachineClass: class, Secret: secret})
	if err != nil || list.MachineList[resp.ProviderID] != "demo-1" {
		t.Fatalf("ListMachines = %v, %v", list, err)
	}
	if n := len(c.Resources()); n < 2 {
		t.Fatalf("the fake holds %d resources after create, want a VM, a NIC and disks", n)
	}

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(srv.CACert)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	control := func(method, what, body string) *http.Response {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, srv.URL+fakekit.ControlPrefix+what, strings.NewReader(body))
		r, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Body.Close() })
		return r
	}
	fault := `{"Op":"` + fakeazure.OpCreateVM + `","Err":{"Status":409,"Code":"OperationNotAllowed","Message":"Operation could not be completed as it results in exceeding approved standardDSv3Family Cores quota."}}`
	if r := control(http.MethodPost, "faults", fault); r.StatusCode != http.StatusNoContent {
		t.Fatalf("inject fault: %s", r.Status)
	}
	_, err = d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine("demo-2"), MachineClass: class, Secret: secret})
	if driver.CodeOf(err) != driver.ResourceExhausted {
		t.Fatalf("CreateMachine with the quota fault = %v, want ResourceExhausted", err)
	}
	if r := control(http.MethodDelete, "faults", ""); r.StatusCode != http.StatusNoContent {
		t.Fatalf("clear faults: %s", r.Status)
	}

	if _, err := d.DeleteMachine(ctx, &driver.DeleteMachineRequest{Machine: machine("demo-1"), MachineClass: class, Secret: secret}); err != nil {
		t.Fatalf("DeleteMachine: %v", err)
	}
	var state fakeazure.State
	r := control(http.MethodGet, "state", "")
	if err := json.NewDecoder(r.Body).Decode(&state); err != nil || len(state.Resources) != 0 || state.Requests == 0 {
		t.Fatalf("state after delete: %+v %v (a failed create or the delete leaked)", state, err)
	}

	// A new credential set logs in afresh; with the fake gone the connection is refused.
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	other := secret.DeepCopy()
	other.Data[KeyClientSecret] = []byte("another-secret-value")
	_, err = New(Options{Options: kit.Options{PollInterval: time.Millisecond}, Retry: fastRetry()}).ListMachines(ctx, &driver.ListMachinesRequest{MachineClass: class, Secret: other})
	msg := driver.MessageOf(err)
	if driver.CodeOf(err) != driver.Unavailable || !strings.Contains(msg, "cannot reach Microsoft Entra ID at 127.0.0.1:") || !strings.Contains(msg, "connection refused") {
		t.Fatalf("login with the fake gone = %v, want Unavailable with the refused connection", err)
	}
	if strings.Contains(msg, "another-secret-value") {
		t.Fatal("the secret is in the error")
	}
}

// The custom cloud keys are checked, named, and never echoed.
func TestCustomCloudSecretKeys(t *testing.T) {
	_, srv := servedFake(t)
	cases := map[string]struct {
		change func(map[string][]byte)
		want   string
	}{
		"login without ARM":     {func(d map[string][]byte) { delete(d, KeyResourceManagerEndpoint) }, "data[resourceManagerEndpoint]: Required value"},
		"ARM without login":     {func(d map[string][]byte) { delete(d, KeyActiveDirectoryAuthorityHost) }, "data[activeDirectoryAuthorityHost]: Required value"},
		"plain http":            {func(d map[string][]byte) { d[KeyResourceManagerEndpoint] = []byte("http://127.0.0.1:1/") }, "data[resourceManagerEndpoint]: Invalid value"},
		"not a CA":              {func(d map[string][]byte) { d[KeyCACert] = []byte("not-pem-secret-bits") }, "data[caCert]: Invalid value"},
		"audience not a URI":    {func(d map[string][]byte) { d[KeyResourceManagerAudience] = []byte("no-scheme") }, "data[resourceManagerAudience]: Invalid value"},
		"untrusted certificate": {func(d map[string][]byte) { delete(d, KeyCACert) }, "certificate"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			secret := customCloudSecret(srv)
			tc.change(secret.Data)
			_, err := New(Options{Options: kit.Options{PollInterval: time.Millisecond}, Retry: fastRetry()}).ListMachines(context.Background(), &driver.ListMachinesRequest{MachineClass: fakecloudClass(t), Secret: secret})
			if err == nil || !strings.Contains(driver.MessageOf(err), tc.want) {
				t.Fatalf("err = %v, want it to name %q", err, tc.want)
			}
			for _, v := range []string{"127.0.0.1:1", "not-pem-secret-bits", "no-scheme", fakeazure.DemoClientSecret} {
				if strings.Contains(driver.MessageOf(err), v) {
					t.Errorf("the error echoes %q: %v", v, err)
				}
			}
		})
	}
	class := fakecloudClass(t)
	class.ProviderSpec.Raw = bytes.Replace(class.ProviderSpec.Raw, []byte(`"location"`), []byte(`"cloudConfiguration":{"name":"AzurePublic"},"location"`), 1)
	_, err := New(Options{}).ListMachines(context.Background(), &driver.ListMachinesRequest{MachineClass: class, Secret: customCloudSecret(srv)})
	if driver.CodeOf(err) != driver.InvalidArgument || !strings.Contains(driver.MessageOf(err), "cloudConfiguration.name") {
		t.Fatalf("custom cloud and cloudConfiguration.name: %v", err)
	}
}

func fastRetry() policy.RetryOptions {
	return policy.RetryOptions{MaxRetries: 1, RetryDelay: time.Millisecond, MaxRetryDelay: time.Millisecond}
}
