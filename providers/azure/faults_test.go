package azure

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/machinist-io/machinist/providers/kit/fakekit"

	"github.com/machinist-io/machinist/providers/kit"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"k8s.io/utils/ptr"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/azure/fakeazure"
)

// TestNoLeaksWhenAnyStepOfCreateFails runs a create once to learn every request it makes, then
// fails each of those requests (and the polls of each LRO) with a persistent 500 in turn: the
// create must fail with Unavailable, carry the ARM code and request id, and leave no VM, NIC or
// disk behind.
func TestNoLeaksWhenAnyStepOfCreateFails(t *testing.T) {
	class := func(e *testEnv) {
		// Include a data disk made from an image, so its create and tag steps are exercised.
		e.class = e.classWith("img", func(s *ProviderSpec) {
			lun := int32(5)
			s.Properties.StorageProfile.DataDisks = append(s.Properties.StorageProfile.DataDisks, DataDisk{Name: "cache", Lun: &lun, DiskSizeGB: 32, StorageAccountType: "Premium_LRS", ImageRef: &ImageReference{SharedGalleryImageID: ptr.To("/SharedGalleries/s/Images/cache/Versions/1.0.0")}})
		})
	}
	base := newTestEnv(t)
	class(base)
	base.mustCreate(t, "m-0")
	type step struct {
		op   string
		poll bool
	}
	var steps []step
	seen := map[step]bool{}
	for _, r := range base.cloud.Requests.All() {
		s := step{r.Op, r.Poll}
		if r.Host != fakeazure.ARMHost || seen[s] {
			continue
		}
		seen[s] = true
		steps = append(steps, s)
	}
	if len(steps) < 10 {
		t.Fatalf("a create made only %d kinds of request: %+v", len(steps), steps)
	}
	for _, s := range steps {
		t.Run(fmt.Sprintf("%s/poll=%v", s.op, s.poll), func(t *testing.T) {
			e := newTestEnv(t)
			class(e)
			e.cloud.Faults.Inject(fakeazure.Fault{Rule: fakekit.Rule{Op: s.op}, Poll: s.poll, Err: fakeazure.ErrServer(http.StatusInternalServerError)})
			_, err := e.create(t, "m-1")
			if err == nil {
				// Reading the NIC's address for the response is best effort.
				if s.op != fakeazure.OpGetNIC {
					t.Fatalf("create succeeded although %s failed", s.op)
				}
				return
			}
			if driver.CodeOf(err) != driver.Unavailable || !strings.Contains(err.Error(), "InternalServerError") || !strings.Contains(err.Error(), "x-ms-request-id") {
				t.Errorf("err = %v, want Unavailable with the ARM code and request id", err)
			}
			e.cloud.Settle()
			if left := e.resourcesOf("m-1"); len(left) != 0 {
				t.Errorf("failed create left %+v", left)
			}
		})
	}
}

func TestCapacityAndQuotaErrorsAreResourceExhaustedAndLeaveNothing(t *testing.T) {
	cases := []struct {
		name   string
		setup  func(c *fakeazure.Cloud)
		code   driver.Code
		inMsg  []string
		failed bool // the VM existed in provisioning state Failed
	}{
		{"SkuNotAvailable", func(c *fakeazure.Cloud) { c.SetSkuUnavailable(testLocation, "Standard_D2s_v3", "1") }, driver.ResourceExhausted, []string{"SkuNotAvailable", "HTTP 409"}, false},
		{"core quota", func(c *fakeazure.Cloud) { c.SetCoreQuota(testLocation, 1) }, driver.ResourceExhausted, []string{"OperationNotAllowed", "quota", "Current Limit: 1"}, false},
		{"family quota", func(c *fakeazure.Cloud) {
			c.Faults.Inject(fakeazure.Fault{Rule: fakekit.Rule{Op: fakeazure.OpCreateVM}, Err: fakeazure.ErrFamilyQuota("standardDSv3Family", testLocation, 8, 8, 2)})
		}, driver.ResourceExhausted, []string{"QuotaExceeded", "standardDSv3Family"}, false},
		{"resource quota", func(c *fakeazure.Cloud) {
			c.Faults.Inject(fakeazure.Fault{Rule: fakekit.Rule{Op: fakeazure.OpCreateVM}, Err: fakeazure.ErrResourceQuota("Microsoft.Compute/virtualMachines", 800)})
		}, driver.ResourceExhausted, []string{"ResourceQuotaExceeded"}, false},
		{"ZonalAllocationFailed", func(c *fakeazure.Cloud) { c.FailNextAllocation("ZonalAllocationFailed") }, driver.ResourceExhausted, []string{"ZonalAllocationFailed", "sufficient capacity"}, true},
		{"AllocationFailed", func(c *fakeazure.Cloud) { c.FailNextAllocation("AllocationFailed") }, driver.ResourceExhausted, []string{"AllocationFailed"}, true},
		{"denied", func(c *fakeazure.Cloud) { c.Faults.Inject(fakeazure.Deny(fakeazure.OpCreateVM)) }, driver.PermissionDenied, []string{"AuthorizationFailed", "Microsoft.Compute/virtualMachines/write"}, false},
		{"throttled beyond the retry budget", func(c *fakeazure.Cloud) {
			c.Faults.Inject(fakeazure.Throttle(fakeazure.OpCreateVM, 0, 30*time.Second))
		}, driver.Unavailable, []string{"TooManyRequests", "HTTP 429"}, false},
		{"service unavailable", func(c *fakeazure.Cloud) {
			c.Faults.Inject(fakeazure.ServerErrors(fakeazure.OpCreateVM, http.StatusServiceUnavailable, 0))
		}, driver.Unavailable, []string{"ServiceUnavailable", "HTTP 503"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEnv(t)
			tc.setup(e.cloud)
			_, err := e.create(t, "m-1")
			if driver.CodeOf(err) != tc.code {
				t.Fatalf("err = %v, want %s", err, tc.code)
			}
			for _, s := range append(tc.inMsg, "x-ms-request-id", "create VM m-1") {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("message %q lacks %q", driver.MessageOf(err), s)
				}
			}
			if tc.failed && len(e.cloud.Requests.For(fakeazure.OpDeleteVM)) == 0 {
				t.Error("the Failed VM was not deleted")
			}
			if left := e.resourcesOf("m-1"); len(left) != 0 {
				t.Errorf("failed create left %+v", left)
			}
		})
	}
}

func TestRetryAfterIsHonoured(t *testing.T) {
	t.Run("whole seconds", func(t *testing.T) {
		e := newTestEnv(t)
		e.cloud.Faults.Inject(fakeazure.Throttle(fakeazure.OpGetVM, 1, time.Second))
		e.mustCreate(t, "m-1")
		reqs := e.cloud.Requests.For(fakeazure.OpGetVM)
		if len(reqs) < 2 || reqs[0].Status != http.StatusTooManyRequests || reqs[1].Status != http.StatusNotFound {
			t.Fatalf("GET VM requests = %+v, want 429 then 404", reqs)
		}
		if gap := reqs[1].Time.Sub(reqs[0].Time); gap < time.Second {
			t.Errorf("retried after %s, before Retry-After: 1", gap)
		}
	})
	t.Run("milliseconds, twice", func(t *testing.T) {
		e := newTestEnv(t)
		e.cloud.Faults.Inject(fakeazure.Throttle(fakeazure.OpCreateVM, 2, 300*time.Millisecond))
		e.mustCreate(t, "m-1")
		var initial []fakeazure.Request
		for _, r := range e.cloud.Requests.For(fakeazure.OpCreateVM) {
			if !r.Poll {
				initial = append(initial, r)
			}
		}
		if len(initial) != 3 || initial[2].Status != http.StatusCreated {
			t.Fatalf("VM create requests = %+v, want 429, 429, 201", initial)
		}
		for i := 1; i < 3; i++ {
			if gap := initial[i].Time.Sub(initial[i-1].Time); gap < 300*time.Millisecond {
				t.Errorf("attempt %d came %s after the previous one, before retry-after-ms: 300", i+1, gap)
			}
		}
	})
	t.Run("persistent throttling ends in Unavailable after the retries", func(t *testing.T) {
		e := newTestEnv(t)
		e.cloud.Faults.Inject(fakeazure.Throttle(fakeazure.OpGetVM, 0, 100*time.Millisecond))
		_, err := e.create(t, "m-1")
		if driver.CodeOf(err) != driver.Unavailable || !strings.Contains(err.Error(), "TooManyRequests") {
			t.Fatalf("err = %v, want Unavailable naming TooManyRequests", err)
		}
		reqs := e.cloud.Requests.For(fakeazure.OpGetVM)
		if len(reqs) != 4 {
			t.Errorf("%d attempts, want 1 + 3 retries", len(reqs))
		}
		for i := 1; i < len(reqs); i++ {
			if gap := reqs[i].Time.Sub(reqs[i-1].Time); gap < 100*time.Millisecond {
				t.Errorf("attempt %d came after %s", i+1, gap)
			}
		}
	})
	t.Run("a 5xx burst is retried away", func(t *testing.T) {
		e := newTestEnv(t)
		e.cloud.Faults.Inject(fakeazure.ServerErrors(fakeazure.OpCreateNIC, http.StatusBadGateway, 2))
		e.mustCreate(t, "m-1")
		if n := len(e.cloud.Requests.For(fakeazure.OpCreateNIC)); n < 3 {
			t.Errorf("NIC create attempts = %d, want the two failures retried", n)
		}
	})
}

func TestAuthenticationFailures(t *testing.T) {
	t.Run("wrong client secret", func(t *testing.T) {
		e := newTestEnv(t)
		e.secret.Data[KeyClientSecret] = []byte("wrong-secret-value-123")
		_, err := e.create(t, "m-1")
		if driver.CodeOf(err) != driver.Unauthenticated || !strings.Contains(err.Error(), "AADSTS7000215") {
			t.Fatalf("err = %v, want Unauthenticated with AADSTS7000215", err)
		}
		if strings.Contains(err.Error(), "wrong-secret-value-123") || strings.Contains(e.logs.String(), "wrong-secret-value-123") {
			t.Error("the client secret shows in the error or the logs")
		}
		if len(e.cloud.Resources()) != 0 {
			t.Errorf("resources made: %+v", e.cloud.Resources())
		}
	})
	t.Run("revoked token", func(t *testing.T) {
		e := newTestEnv(t)
		e.mustCreate(t, "m-1")
		e.cloud.RevokeTokens()
		_, err := e.drv.GetMachineStatus(context.Background(), &driver.GetMachineStatusRequest{Machine: machine("m-1"), MachineClass: e.class, Secret: e.secret})
		if driver.CodeOf(err) != driver.Unauthenticated || !strings.Contains(err.Error(), "InvalidAuthenticationToken") {
			t.Fatalf("err = %v, want Unauthenticated with InvalidAuthenticationToken", err)
		}
	})
	t.Run("no secret or user data in logs", func(t *testing.T) {
		e := newTestEnv(t)
		e.mustCreate(t, "m-1")
		if err := e.delete(t, e.class, "m-1"); err != nil {
			t.Fatal(err)
		}
		logs := e.logs.String()
		if !strings.Contains(logs, "created VM") {
			t.Fatalf("expected progress logs, got %q", logs)
		}
		for _, s := range []string{testSecret, "join-token-abcdef123456"} {
			if strings.Contains(logs, s) {
				t.Errorf("logs contain %q", s)
			}
		}
	})
}

func TestWorkloadIdentity(t *testing.T) {
	e := newTestEnv(t)
	const wiClient = "9d8c7b6a-0000-4000-8000-00000000f1d0"
	assertion := "eyJhbGciOiJSUzI1NiJ9.workload-identity-assertion.sig"
	e.cloud.AddFederatedPrincipal(wiClient, assertion)
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte(assertion), 0o600); err != nil {
		t.Fatal(err)
	}
	e.secret.Data = map[string][]byte{
		KeyClientID:                  []byte(wiClient),
		KeyWorkloadIdentityTokenFile: []byte(file),
		KeySubscriptionID:            []byte(fakeazure.DefaultSubscriptionID),
		KeyTenantID:                  []byte(fakeazure.DefaultTenantID),
		KeyUserData:                  []byte(testUserData),
	}
	e.mustCreate(t, "m-1")

	if err := os.WriteFile(file, []byte("a-different-assertion"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Same credential set: the cached token still works although the file changed.
	if _, err := e.create(t, "m-2"); err != nil {
		t.Errorf("cached workload identity token: %v", err)
	}
	missing := e.secret.DeepCopy()
	missing.Data[KeyWorkloadIdentityTokenFile] = []byte(filepath.Join(t.TempDir(), "absent"))
	_, err := e.drv.CreateMachine(context.Background(), &driver.CreateMachineRequest{Machine: machine("m-3"), MachineClass: e.class, Secret: missing})
	if driver.CodeOf(err) != driver.InvalidArgument || !strings.Contains(err.Error(), KeyWorkloadIdentityTokenFile) {
		t.Errorf("missing token file: err = %v, want InvalidArgument naming %s", err, KeyWorkloadIdentityTokenFile)
	}
}

func TestDeprecatedSecretKeys(t *testing.T) {
	e := newTestEnv(t)
	e.secret.Data = map[string][]byte{
		KeyAzureClientID:       []byte(testClientID),
		KeyAzureClientSecret:   []byte(testSecret),
		KeyAzureSubscriptionID: []byte(fakeazure.DefaultSubscriptionID),
		KeyAzureTenantID:       []byte(fakeazure.DefaultTenantID),
		KeyUserData:            []byte(testUserData),
	}
	e.mustCreate(t, "m-1")
}

func TestClientSetsAreReusedPerCredentialSet(t *testing.T) {
	e := newTestEnv(t)
	e.mustCreate(t, "m-1")
	e.mustCreate(t, "m-2")
	if _, err := e.drv.ListMachines(context.Background(), &driver.ListMachinesRequest{MachineClass: e.class, Secret: e.secret.DeepCopy()}); err != nil {
		t.Fatal(err)
	}
	if n := len(e.cloud.Requests.For(fakeazure.OpToken)); n != 1 {
		t.Errorf("token requests = %d, want 1: the credential (and its token) is reused", n)
	}
	if n := e.drv.cache.Len(); n != 1 {
		t.Errorf("client sets = %d, want 1", n)
	}
	// A rotated secret gets its own client set.
	e.cloud.AddServicePrincipal(testClientID, "rotated-secret-value")
	e.secret.Data[KeyClientSecret] = []byte("rotated-secret-value")
	e.mustCreate(t, "m-3")
	if n := e.drv.cache.Len(); n != 2 {
		t.Errorf("client sets after rotation = %d, want 2", n)
	}
}

// TestLoginOutagesAreUnavailable: when Microsoft Entra ID cannot be reached (no route, DNS,
// refused connection) or answers with a server error, the error is Unavailable with the cause,
// so the controller retries and nobody rotates a good secret; only a refusal of the credentials
// is Unauthenticated.
func TestLoginOutagesAreUnavailable(t *testing.T) {
	t.Run("endpoint unreachable", func(t *testing.T) {
		e := newTestEnv(t)
		cfg := e.cloud.Configuration()
		cfg.ActiveDirectoryAuthorityHost = "https://login.unreachable.test/"
		e.drv = New(Options{Options: kit.Options{HTTPTransport: e.cloud.Transport(), PollInterval: time.Millisecond}, Cloud: &cfg,
			Retry: policy.RetryOptions{MaxRetries: 1, RetryDelay: time.Millisecond, MaxRetryDelay: time.Millisecond}})
		_, err := e.create(t, "m-1")
		msg := driver.MessageOf(err)
		if driver.CodeOf(err) != driver.Unavailable || !strings.Contains(msg, "no such host") || !strings.Contains(msg, "cannot reach Microsoft Entra ID") {
			t.Fatalf("err = %v, want Unavailable with the cause", err)
		}
		for _, wrong := range []string{"refused the credentials", "check clientID", testSecret} {
			if strings.Contains(msg, wrong) {
				t.Errorf("the error says %q: %s", wrong, msg)
			}
		}
		if len(e.cloud.Resources()) != 0 {
			t.Errorf("resources made: %+v", e.cloud.Resources())
		}
	})
	t.Run("token endpoint answers 503", func(t *testing.T) {
		e := newTestEnv(t)
		e.cloud.Faults.Inject(fakeazure.ServerErrors(fakeazure.OpToken, http.StatusServiceUnavailable, 100))
		_, err := e.create(t, "m-1")
		if driver.CodeOf(err) != driver.Unavailable || !strings.Contains(driver.MessageOf(err), "503") {
			t.Fatalf("err = %v, want Unavailable naming the 503", err)
		}
	})
}
