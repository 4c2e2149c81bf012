package openstack

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/openstack/fakeopenstack"
)

// TestOneTokenAcross100Operations is the guard against a Keystone token per reconcile: a hundred
// operations of every kind share one token.
func TestOneTokenAcross100Operations(t *testing.T) {
	cloud := startCloud(t, fakeopenstack.Options{})
	d, _ := testDriver(t)
	ctx := ctxT(t)
	class, secret := testClass(t), passwordSecret(cloud)
	ops := 0
	for i := range 10 {
		m := machine(fmt.Sprintf("worker-tok-%d", i))
		resp, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: m, MachineClass: class, Secret: secret.DeepCopy()})
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if _, err := d.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: m, MachineClass: class, Secret: secret.DeepCopy()}); err != nil {
				t.Fatal(err)
			}
		}
		for range 3 {
			if _, err := d.ListMachines(ctx, &driver.ListMachinesRequest{MachineClass: class, Secret: secret.DeepCopy()}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := d.GetVolumeIDs(ctx, &driver.GetVolumeIDsRequest{PVSpecs: []*corev1.PersistentVolumeSpec{{}}}); err != nil {
			t.Fatal(err)
		}
		if _, err := d.DeleteMachine(ctx, &driver.DeleteMachineRequest{Machine: withProviderID(m, resp.ProviderID), MachineClass: class, Secret: secret.DeepCopy()}); err != nil {
			t.Fatal(err)
		}
		ops += 9
	}
	for ops < 100 {
		if _, err := d.ListMachines(ctx, &driver.ListMachinesRequest{MachineClass: class, Secret: secret.DeepCopy()}); err != nil {
			t.Fatal(err)
		}
		ops++
	}
	if n := cloud.TokenRequests(); n != 1 {
		t.Errorf("%d operations asked Keystone for %d tokens, want 1", ops, n)
	}
	if n := cloud.Rejected(); n != 0 {
		t.Errorf("%d requests were rejected with 401", n)
	}
	t.Logf("%d operations, %d API requests, %d token requests", ops, cloud.Requests.Len(), cloud.TokenRequests())
}

// TestTokenRenewedBeforeExpiry shows the token is replaced while it is still valid, so no request
// is ever rejected for an expired token.
func TestTokenRenewedBeforeExpiry(t *testing.T) {
	const ttl = 2 * time.Second
	cloud := startCloud(t, fakeopenstack.Options{TokenTTL: ttl})
	d, _ := testDriver(t) // renew a quarter of the lifetime before expiry: 500ms
	ctx := ctxT(t)
	class, secret := testClass(t), passwordSecret(cloud)
	list := func() {
		t.Helper()
		if _, err := d.ListMachines(ctx, &driver.ListMachinesRequest{MachineClass: class, Secret: secret}); err != nil {
			t.Fatal(err)
		}
	}
	issued := time.Now()
	list()
	list()
	if n := cloud.TokenRequests(); n != 1 {
		t.Fatalf("%d token requests early in the token's life, want 1", n)
	}
	// Inside the renewal window but well before the token expires.
	time.Sleep(time.Until(issued.Add(ttl - 400*time.Millisecond)))
	list()
	if n := cloud.TokenRequests(); n != 2 {
		t.Fatalf("%d token requests after entering the renewal window, want 2 (renewed before expiry)", n)
	}
	if n := cloud.Rejected(); n != 0 {
		t.Fatalf("%d requests were rejected with 401; the token should have been renewed first", n)
	}
	list()
	if n := cloud.TokenRequests(); n != 2 {
		t.Fatalf("%d token requests after renewal, want the new token reused", n)
	}
}

// TestExpiredTokenRenewedOn401 covers tokens revoked or expired early on the server side.
func TestExpiredTokenRenewedOn401(t *testing.T) {
	cloud := startCloud(t, fakeopenstack.Options{})
	d, _ := testDriver(t)
	ctx := ctxT(t)
	class, secret := testClass(t), passwordSecret(cloud)
	if _, err := d.ListMachines(ctx, &driver.ListMachinesRequest{MachineClass: class, Secret: secret}); err != nil {
		t.Fatal(err)
	}
	cloud.ExpireAllTokens()
	resp, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine("worker-401"), MachineClass: class, Secret: secret})
	if err != nil {
		t.Fatalf("CreateMachine after the token expired: %v", err)
	}
	if resp.ProviderID == "" || cloud.TokenRequests() != 2 || cloud.Rejected() != 1 {
		t.Fatalf("token requests %d, rejected %d; want one 401 answered by one new token", cloud.TokenRequests(), cloud.Rejected())
	}
}

// TestSessionsPerCredentialSet checks that each credential set gets its own client, concurrent
// first uses authenticate once, and the cache is bounded.
func TestSessionsPerCredentialSet(t *testing.T) {
	cloud := startCloud(t, fakeopenstack.Options{})
	d, logs := testDriver(t, func(o *Options) { o.MaxClientSets = 2 })
	ctx := ctxT(t)
	class := testClass(t)
	byName := passwordSecret(cloud)
	byID := passwordSecret(cloud)
	delete(byID.Data, KeyTenantName)
	byID.Data[KeyTenantID] = []byte(fakeopenstack.ProjectID)
	appCred := appCredSecret(cloud)

	var wg sync.WaitGroup
	errs := make([]error, 20)
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = d.ListMachines(ctx, &driver.ListMachinesRequest{MachineClass: class, Secret: byName.DeepCopy()})
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := cloud.TokenRequests(); n != 1 {
		t.Fatalf("20 concurrent first uses made %d token requests, want 1", n)
	}
	if _, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine("worker-appcred"), MachineClass: class, Secret: appCred}); err != nil {
		t.Fatalf("CreateMachine with an application credential: %v", err)
	}
	if _, err := d.ListMachines(ctx, &driver.ListMachinesRequest{MachineClass: class, Secret: byID}); err != nil {
		t.Fatalf("ListMachines with a project ID: %v", err)
	}
	if n := cloud.TokenRequests(); n != 3 {
		t.Fatalf("three credential sets made %d token requests, want 3", n)
	}
	if n := d.sessions.size(); n != 2 {
		t.Fatalf("%d cached sessions, want the limit 2", n)
	}
	// The least recently used set (byName) was dropped: using it again authenticates again.
	if _, err := d.ListMachines(ctx, &driver.ListMachinesRequest{MachineClass: class, Secret: byName}); err != nil {
		t.Fatal(err)
	}
	if n := cloud.TokenRequests(); n != 4 {
		t.Fatalf("token requests %d, want 4 after the evicted set came back", n)
	}
	for _, s := range []string{fakeopenstack.Password, fakeopenstack.AppCredentialSecret} {
		if strings.Contains(logs.String(), s) {
			t.Fatalf("a credential reached the logs")
		}
	}
}

// BenchmarkGetMachineStatus measures a status read on a warm session: the cost is one Nova list,
// never a Keystone round trip (tokens/op stays 0).
func BenchmarkGetMachineStatus(b *testing.B) {
	cloud := startCloud(b, fakeopenstack.Options{})
	d, _ := testDriver(b)
	ctx := ctxT(b)
	class, secret := testClass(b), passwordSecret(cloud)
	m := machine("worker-bench")
	if _, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: m, MachineClass: class, Secret: secret}); err != nil {
		b.Fatal(err)
	}
	cloud.Requests.Reset()
	tokens := cloud.TokenRequests()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := d.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: m, MachineClass: class, Secret: secret}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(cloud.Requests.Len())/float64(b.N), "requests/op")
	b.ReportMetric(float64(cloud.TokenRequests()-tokens)/float64(b.N), "tokens/op")
}
