package gcp

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

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/gcp/fakegcp"
)

// TestNoOrphanWhenAnyRequestOfCreateFails runs a create once to learn every kind of request it
// makes, then fails each of them with 500 in turn, beyond the driver's retries: the create must
// fail with Unavailable naming the HTTP status, and leave no instance or disk behind.
func TestNoOrphanWhenAnyRequestOfCreateFails(t *testing.T) {
	base := newTestEnv(t)
	base.mustCreate(t, "m-0")
	var ops []string
	for _, r := range base.cloud.Requests.All() {
		if !strings.Contains(strings.Join(ops, ","), r.Op) {
			ops = append(ops, r.Op)
		}
	}
	for _, want := range []string{fakegcp.OpToken, fakegcp.OpGetInstance, fakegcp.OpInsertInstance, fakegcp.OpWaitOperation} {
		if !strings.Contains(strings.Join(ops, ","), want) {
			t.Fatalf("a create made no %s request: %v", want, ops)
		}
	}
	for _, op := range ops {
		t.Run(op, func(t *testing.T) {
			e := newTestEnv(t)
			// Enough failures to use up the retries of the first request of op; later ones
			// (the cleanup's) succeed, as after a transient outage.
			e.cloud.Faults.Inject(fakegcp.ServerErrors(op, http.StatusInternalServerError, 1+e.drv.opts.Retry.Steps))
			_, err := e.create(t, "m-1")
			if err == nil {
				t.Fatalf("create succeeded although %s failed", op)
			}
			if driver.CodeOf(err) != driver.Unavailable || !strings.Contains(err.Error(), "500") {
				t.Errorf("err = %v, want Unavailable naming the 500", err)
			}
			if left := e.leftovers("m-1"); len(left) != 0 {
				t.Errorf("failed create left %v", left)
			}
		})
	}
}

// Capacity and quota errors are ResourceExhausted (capacity fallback moves on), carry the
// operation's error details and leave nothing.
func TestCapacityAndQuotaErrorsAreResourceExhaustedAndLeaveNothing(t *testing.T) {
	cases := []struct {
		name  string
		setup func(c *fakegcp.Cloud)
		inMsg []string
	}{
		{"stockout", func(c *fakegcp.Cloud) { c.Faults.Inject(fakegcp.StockoutNext(1)) },
			[]string{"ZONE_RESOURCE_POOL_EXHAUSTED", "does not have enough resources", "projects/machinist-fake/zones/europe-west1-b", "HTTP 503"}},
		{"stockout with details", func(c *fakegcp.Cloud) {
			c.Faults.Inject(fakegcp.Fault{Rule: fakekit.Rule{Op: fakegcp.OpInsertInstance}, OpErr: &fakegcp.OperationError{Code: "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS", HTTPStatus: 503, Reason: "resource_availability"}})
		}, []string{"ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS", "compute.googleapis.com resource_availability"}},
		{"CPU quota of the region", func(c *fakegcp.Cloud) { c.SetCPUQuota(fakegcp.DemoRegion, 1) },
			[]string{"QUOTA_EXCEEDED", "Quota 'CPUS' exceeded", "quota CPUS-per-project-region of compute.googleapis.com/cpus: limit 1", "region=europe-west1", "HTTP 403"}},
		{"quota refused at once", func(c *fakegcp.Cloud) {
			c.Faults.Inject(fakegcp.Fault{Rule: fakekit.Rule{Op: fakegcp.OpInsertInstance}, Err: &fakegcp.APIError{Status: 403, Reason: "quotaExceeded", Message: "Quota 'SSD_TOTAL_GB' exceeded.  Limit: 500.0 in region europe-west1."}})
		}, []string{"quotaExceeded", "SSD_TOTAL_GB", "HTTP 403"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEnv(t)
			tc.setup(e.cloud)
			_, err := e.create(t, "m-1")
			if driver.CodeOf(err) != driver.ResourceExhausted {
				t.Fatalf("err = %v, want ResourceExhausted", err)
			}
			for _, s := range append(tc.inMsg, "create instance m-1 in europe-west1-b") {
				if !strings.Contains(driver.MessageOf(err), s) {
					t.Errorf("message %q lacks %q", driver.MessageOf(err), s)
				}
			}
			if left := e.leftovers("m-1"); len(left) != 0 {
				t.Errorf("failed create left %v", left)
			}
		})
	}
}

// Rate limits are retried with backoff; beyond the retries they are Unavailable.
func TestRateLimitsAreRetriedWithBackoff(t *testing.T) {
	for _, status := range []int{http.StatusForbidden, http.StatusTooManyRequests} {
		t.Run(fmt.Sprintf("HTTP %d, twice", status), func(t *testing.T) {
			e := newTestEnv(t)
			e.cloud.Faults.Inject(fakegcp.Throttle(fakegcp.OpInsertInstance, 2, status))
			e.mustCreate(t, "m-1")
			reqs := e.cloud.Requests.For(fakegcp.OpInsertInstance)
			if len(reqs) != 3 || reqs[0].Status != status || reqs[1].Status != status || reqs[2].Status != http.StatusOK {
				t.Fatalf("insert requests = %+v, want %d, %d, 200", reqs, status, status)
			}
			backoff := e.drv.opts.Retry
			for i := 1; i < len(reqs); i++ {
				if gap, least := reqs[i].Time.Sub(reqs[i-1].Time), backoff.Step(); gap < least {
					t.Errorf("attempt %d came %s after the previous one, before the backoff's %s", i+1, gap, least)
				}
			}
		})
	}
	t.Run("persistent", func(t *testing.T) {
		e := newTestEnv(t)
		e.cloud.Faults.Inject(fakegcp.Throttle(fakegcp.OpGetInstance, 0, http.StatusForbidden))
		_, err := e.create(t, "m-1")
		if driver.CodeOf(err) != driver.Unavailable || !containsAll(driver.MessageOf(err), "rateLimitExceeded", "HTTP 403", "throttling") {
			t.Fatalf("err = %v, want Unavailable naming rateLimitExceeded", err)
		}
		if n := len(e.cloud.Requests.For(fakegcp.OpGetInstance)); n != 1+e.drv.opts.Retry.Steps {
			t.Errorf("%d attempts, want 1 + %d retries", n, e.drv.opts.Retry.Steps)
		}
	})
	t.Run("a missing permission is not retried", func(t *testing.T) {
		e := newTestEnv(t)
		e.cloud.Faults.Inject(fakegcp.Deny(fakegcp.OpInsertInstance))
		_, err := e.create(t, "m-1")
		if driver.CodeOf(err) != driver.PermissionDenied || !containsAll(driver.MessageOf(err), "compute.instances.create", "forbidden", "roles/compute.instanceAdmin.v1") {
			t.Fatalf("err = %v, want PermissionDenied naming the permission and the role", err)
		}
		if n := len(e.cloud.Requests.For(fakegcp.OpInsertInstance)); n != 1 {
			t.Errorf("%d insert attempts, want 1", n)
		}
	})
	t.Run("a 5xx burst is retried away", func(t *testing.T) {
		e := newTestEnv(t)
		e.cloud.Faults.Inject(fakegcp.ServerErrors(fakegcp.OpInsertInstance, http.StatusServiceUnavailable, 2))
		e.mustCreate(t, "m-1")
		if n := len(e.cloud.Requests.For(fakegcp.OpInsertInstance)); n != 3 {
			t.Errorf("insert attempts = %d, want the two failures retried", n)
		}
		if n := len(e.cloud.Instances()); n != 1 {
			t.Errorf("%d instances, want 1", n)
		}
	})
}

// A slow operation is awaited only within the caller's context: the create ends with
// DeadlineExceeded and deletes the instance it started.
func TestSlowOperationEndsWithTheContextAndLeavesNothing(t *testing.T) {
	e := newTestEnv(t)
	e.cloud.Faults.Inject(fakegcp.SlowOperations(fakegcp.OpInsertInstance, 1, 2*time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := e.createIn(ctx, e.class, "m-1")
	if driver.CodeOf(err) != driver.DeadlineExceeded {
		t.Fatalf("err = %v, want DeadlineExceeded", err)
	}
	if took := time.Since(start); took > 1900*time.Millisecond {
		t.Errorf("create took %s with a 300ms deadline and a 2s operation", took)
	}
	if n := len(e.cloud.Requests.For(fakegcp.OpDeleteInstance)); n != 1 {
		t.Errorf("%d deletes of the started instance, want 1", n)
	}
	if left := e.leftovers("m-1"); len(left) != 0 {
		t.Errorf("timed-out create left %v", left)
	}
}

// Resources the class names that do not exist are InvalidArgument naming the field.
func TestMissingResourcesNameTheField(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*ProviderSpec)
		field  string
	}{
		{"image", func(s *ProviderSpec) {
			s.Disks[0].Image = "projects/sap-se-gcp-gardenlinux/global/images/gardenlinux-gone"
		}, "providerSpec.disks[0].image"},
		{"image family", func(s *ProviderSpec) { s.Disks[0].Image = "projects/debian-cloud/global/images/family/debian-99" }, "providerSpec.disks[0].image"},
		{"network", func(s *ProviderSpec) { s.NetworkInterfaces[0].Network = "no-such-network" }, "providerSpec.networkInterfaces[0].network"},
		{"subnetwork", func(s *ProviderSpec) { s.NetworkInterfaces[0].Subnetwork = "no-such-subnet" }, "providerSpec.networkInterfaces[0].subnetwork"},
		{"disk type", func(s *ProviderSpec) { s.Disks[0].Type = "pd-fastest" }, "providerSpec.disks[0].type"},
		{"accelerator", func(s *ProviderSpec) {
			s.Gpu = &GPU{AcceleratorType: "nvidia-tesla-k9000", Count: 1}
			s.Scheduling.OnHostMaintenance = "TERMINATE"
		}, "providerSpec.gpu.acceleratorType"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEnv(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err := e.createIn(ctx, e.classWith("bad", tc.mutate), "m-1")
			if driver.CodeOf(err) != driver.InvalidArgument || !strings.Contains(driver.MessageOf(err), tc.field) {
				t.Fatalf("err = %v, want InvalidArgument naming %s", err, tc.field)
			}
			if left := e.leftovers("m-1"); len(left) != 0 {
				t.Errorf("failed create left %v", left)
			}
		})
	}
}

func TestAuthenticationFailures(t *testing.T) {
	t.Run("a key the cloud does not know", func(t *testing.T) {
		e := newTestEnv(t)
		other := fakegcp.New(fakegcp.Options{}).AddServiceAccount("stranger@elsewhere.iam.gserviceaccount.com", fakegcp.TokenURL(e.srv.URL))
		e.secret.Data[KeyServiceAccountJSON] = other
		_, err := e.create(t, "m-1")
		if driver.CodeOf(err) != driver.Unauthenticated || !containsAll(driver.MessageOf(err), "invalid_grant", "HTTP 400") {
			t.Fatalf("err = %v, want Unauthenticated with invalid_grant", err)
		}
		key := privateKeyOf(t, other)
		if strings.Contains(err.Error(), key[40:80]) || strings.Contains(e.logs.String(), key[40:80]) {
			t.Error("the private key shows in the error or the logs")
		}
		if len(e.cloud.Instances()) != 0 {
			t.Errorf("instances made: %v", e.cloud.Instances())
		}
	})
	t.Run("revoked tokens", func(t *testing.T) {
		e := newTestEnv(t)
		e.mustCreate(t, "m-1")
		e.cloud.RevokeTokens()
		_, err := e.drv.GetMachineStatus(context.Background(), &driver.GetMachineStatusRequest{Machine: machine("m-1"), MachineClass: e.class, Secret: e.secret})
		if driver.CodeOf(err) != driver.Unauthenticated || !containsAll(driver.MessageOf(err), "HTTP 401", "authError") {
			t.Fatalf("err = %v, want Unauthenticated with the 401", err)
		}
	})
	t.Run("token endpoint answers 503", func(t *testing.T) {
		e := newTestEnv(t)
		e.cloud.Faults.Inject(fakegcp.ServerErrors(fakegcp.OpToken, http.StatusServiceUnavailable, 0))
		_, err := e.create(t, "m-1")
		if driver.CodeOf(err) != driver.Unavailable || !containsAll(driver.MessageOf(err), "HTTP 503", "not checked") {
			t.Fatalf("err = %v, want Unavailable naming the 503", err)
		}
	})
	t.Run("token endpoint unreachable", func(t *testing.T) {
		e := newTestEnv(t)
		_ = e.srv.Close()
		_, err := e.create(t, "m-1")
		msg := driver.MessageOf(err)
		if driver.CodeOf(err) != driver.Unavailable || !containsAll(msg, "cannot reach the token endpoint", "connection refused") {
			t.Fatalf("err = %v, want Unavailable with the cause", err)
		}
		if strings.Contains(msg, "refused the credentials") {
			t.Errorf("the error blames the credentials: %s", msg)
		}
	})
	t.Run("no secret or user data in logs", func(t *testing.T) {
		e := newTestEnv(t)
		e.mustCreate(t, "m-1")
		if err := e.delete(t, e.class, "m-1"); err != nil {
			t.Fatal(err)
		}
		logs := e.logs.String()
		if !strings.Contains(logs, "created instance") || !strings.Contains(logs, "deleted instance") {
			t.Fatalf("expected progress logs, got %q", logs)
		}
		key := privateKeyOf(t, e.secret.Data[KeyServiceAccountJSON])
		for _, s := range []string{key[40:80], "join-token-abcdef123456"} {
			if strings.Contains(logs, s) {
				t.Errorf("logs contain %q", s)
			}
		}
	})
}

// Workload identity: credentialsConfig of type external_account runs oauth2's real token
// exchange and impersonation against the fake's STS and IAM Credentials endpoints, reading the
// token from the one allowed file.
func TestWorkloadIdentity(t *testing.T) {
	e := newTestEnv(t)
	file := filepath.Join(t.TempDir(), "token")
	subject := "eyJhbGciOiJSUzI1NiJ9.projected-service-account-token.sig"
	if err := os.WriteFile(file, []byte(subject+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.cloud.AddWorkloadIdentity(subject, "principal://iam.googleapis.com/projects/761094522011/locations/global/workloadIdentityPools/gardener/subject/shoot--dev--alpha")
	e.drv = e.newDriver(Options{WorkloadIdentityTokenFile: file})
	config := func(tokenURL, impersonation, tokenFile string) []byte {
		return fmt.Appendf(nil, `{"type":"external_account","audience":"//iam.googleapis.com/projects/761094522011/locations/global/workloadIdentityPools/gardener/providers/gardener","subject_token_type":"urn:ietf:params:oauth:token-type:jwt","token_url":%q,"service_account_impersonation_url":%q,"credential_source":{"file":%q},"universe_domain":"googleapis.com"}`,
			tokenURL, impersonation, tokenFile)
	}
	e.secret.Data = map[string][]byte{
		KeyCredentialsConfig: config(fakegcp.STSURL(e.srv.URL), fakegcp.ImpersonationURL(e.srv.URL, fakegcp.DemoServiceAccount), file),
		KeyProjectID:         []byte(fakegcp.DefaultProject),
		KeyComputeEndpoint:   []byte(fakegcp.ComputeEndpoint(e.srv.URL)),
		KeyCACert:            e.srv.CACert,
		KeyUserData:          []byte(testUserData),
	}
	e.mustCreate(t, "m-1")
	if len(e.cloud.Requests.For(fakegcp.OpSTSToken)) != 1 || len(e.cloud.Requests.For(fakegcp.OpGenerateToken)) != 1 {
		t.Errorf("token requests: STS %d, impersonation %d; want one each", len(e.cloud.Requests.For(fakegcp.OpSTSToken)), len(e.cloud.Requests.For(fakegcp.OpGenerateToken)))
	}
	for name, tc := range map[string]struct {
		data  []byte
		field string
	}{
		"token from another file":   {config(fakegcp.STSURL(e.srv.URL), "", "/etc/passwd"), "credential_source.file"},
		"token to another endpoint": {config("https://sts.attacker.example/v1/token", "", file), "token_url"},
		"impersonation elsewhere":   {config(fakegcp.STSURL(e.srv.URL), "https://iam.attacker.example/v1/projects/-/serviceAccounts/x:generateAccessToken", file), "service_account_impersonation_url"},
	} {
		t.Run(name, func(t *testing.T) {
			s := e.secret.DeepCopy()
			s.Data[KeyCredentialsConfig] = tc.data
			_, err := e.drv.CreateMachine(context.Background(), &driver.CreateMachineRequest{Machine: machine("m-2"), MachineClass: e.class, Secret: s})
			if driver.CodeOf(err) != driver.InvalidArgument || !strings.Contains(driver.MessageOf(err), tc.field) {
				t.Fatalf("err = %v, want InvalidArgument naming %s", err, tc.field)
			}
		})
	}
	// Without computeEndpoint only Google's STS is allowed, as in Gardener.
	s := e.secret.DeepCopy()
	delete(s.Data, KeyComputeEndpoint)
	if _, err := credentialsFrom(s, file); driver.CodeOf(err) != driver.InvalidArgument || !strings.Contains(driver.MessageOf(err), "https://sts.googleapis.com/v1/token") {
		t.Errorf("a fake STS without computeEndpoint: %v", err)
	}
}

func TestAlternativeSecretKeyAndProjectID(t *testing.T) {
	e := newTestEnv(t)
	e.secret.Data[KeyServiceAccountJSONAlternative] = e.secret.Data[KeyServiceAccountJSON]
	delete(e.secret.Data, KeyServiceAccountJSON)
	resp := e.mustCreate(t, "m-1")
	if resp.ProviderID != "gce:///machinist-fake/europe-west1-b/m-1" {
		t.Errorf("ProviderID = %q", resp.ProviderID)
	}
}

func TestClientsAreReusedPerCredentialSet(t *testing.T) {
	e := newTestEnv(t)
	e.mustCreate(t, "m-1")
	e.mustCreate(t, "m-2")
	e.list(t, e.class)
	if n := len(e.cloud.Requests.For(fakegcp.OpToken)); n != 1 {
		t.Errorf("token requests = %d, want 1: the client (and its token) is reused", n)
	}
	if n := e.drv.cache.Len(); n != 1 {
		t.Errorf("client sets = %d, want 1", n)
	}
	// A rotated key gets its own client set.
	e.secret.Data[KeyServiceAccountJSON] = e.cloud.AddServiceAccount("rotated@machinist-fake.iam.gserviceaccount.com", fakegcp.TokenURL(e.srv.URL))
	e.mustCreate(t, "m-3")
	if n := e.drv.cache.Len(); n != 2 {
		t.Errorf("client sets after rotation = %d, want 2", n)
	}
	if n := len(e.cloud.Requests.For(fakegcp.OpToken)); n != 2 {
		t.Errorf("token requests after rotation = %d, want 2", n)
	}
}
