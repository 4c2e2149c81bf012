package aws

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/machinist-io/machinist/providers/kit"

	corev1 "k8s.io/api/core/v1"

	"github.com/machinist-io/machinist/core/driver"
)

// TestSecretKeys reads Gardener's keys and their alternative names, tells which credentials a
// secret selects, and names missing or bad keys without echoing a value.
func TestSecretKeys(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("eyJ.token"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		data     map[string]string
		ambient  bool // --aws-ambient-credentials
		mode     credentialMode
		mentions []string // in the error; none means valid
	}{
		"gardener keys":    {data: map[string]string{KeyAccessKeyID: "AKIAX", KeySecretAccessKey: "s3cr3t-value"}, mode: staticKeys},
		"alternative keys": {data: map[string]string{KeyAlternativeAccessKeyID: "AKIAX", KeyAlternativeSecretAccessKey: "s3cr3t-value"}, mode: staticKeys},
		"an empty key falls back to the alternative": {data: map[string]string{KeyAccessKeyID: " ", KeyAlternativeAccessKeyID: "AKIAX", KeySecretAccessKey: "s3cr3t-value"}, mode: staticKeys},
		"id without secret":                          {data: map[string]string{KeyAccessKeyID: "AKIAX"}, mentions: []string{"secret.data[providerSecretAccessKey]"}},
		"secret without id":                          {data: map[string]string{KeySecretAccessKey: "s3cr3t-value"}, mentions: []string{"secret.data[providerAccessKeyId]"}},
		"no keys: refused, naming the keys Gardener accepts": {data: map[string]string{KeyUserData: "#cloud-config"}, mentions: []string{
			"secret.data[providerAccessKeyId]", "providerSecretAccessKey", "accessKeyID", "secretAccessKey", "workloadIdentityTokenFile", "roleARN", "--aws-ambient-credentials"}},
		"empty keys: refused":                     {data: map[string]string{KeyAccessKeyID: "", KeySecretAccessKey: " "}, mentions: []string{"holds no AWS credentials"}},
		"no keys, ambient allowed: default chain": {data: map[string]string{}, ambient: true, mode: defaultChain},
		"keys win over ambient":                   {data: map[string]string{KeyAccessKeyID: "AKIAX", KeySecretAccessKey: "s3cr3t-value"}, ambient: true, mode: staticKeys},
		"workload identity":                       {data: map[string]string{KeyWorkloadIdentityTokenFile: tokenFile, KeyRoleARN: "arn:aws:iam::123456789012:role/nodes"}, mode: webIdentity},
		"workload identity wins over keys": {data: map[string]string{KeyWorkloadIdentityTokenFile: tokenFile, KeyRoleARN: "arn:aws:iam::123456789012:role/nodes",
			KeyAccessKeyID: "AKIAX", KeySecretAccessKey: "s3cr3t-value"}, mode: webIdentity},
		"token without role":         {data: map[string]string{KeyWorkloadIdentityTokenFile: tokenFile}, mentions: []string{"secret.data[roleARN]"}},
		"bad role":                   {data: map[string]string{KeyWorkloadIdentityTokenFile: tokenFile, KeyRoleARN: "nodes"}, mentions: []string{"secret.data[roleARN]", "arn:aws:iam::"}},
		"empty token file key":       {data: map[string]string{KeyWorkloadIdentityTokenFile: "", KeyRoleARN: "arn:aws:iam::1:role/r"}, mentions: []string{"secret.data[workloadIdentityTokenFile]"}},
		"unreadable token file":      {data: map[string]string{KeyWorkloadIdentityTokenFile: "/nonexistent/token", KeyRoleARN: "arn:aws:iam::1:role/r"}, mentions: []string{"cannot be read"}},
		"http endpoint off loopback": {data: map[string]string{KeyEC2Endpoint: "http://ec2.example.com"}, mentions: []string{"secret.data[ec2Endpoint]", "https://"}},
		"https endpoint":             {data: map[string]string{KeyEC2Endpoint: "https://ec2.eu-west-1.amazonaws.com", KeySTSEndpoint: "http://127.0.0.1:9"}, ambient: true, mode: defaultChain},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := &corev1.Secret{Data: map[string][]byte{}}
			s.Name, s.Namespace = "cloudprovider", "shoot--dev--alpha"
			for k, v := range tc.data {
				s.Data[k] = []byte(v)
			}
			c, _, err := credentialsFrom(s, tc.ambient)
			if len(tc.mentions) == 0 {
				if err != nil || c.mode != tc.mode {
					t.Fatalf("credentials = %v (%v), want %v", c.mode, err, tc.mode)
				}
				return
			}
			if driver.CodeOf(err) != driver.InvalidArgument {
				t.Fatalf("err = %v, want InvalidArgument", err)
			}
			msg := driver.MessageOf(err)
			for _, m := range tc.mentions {
				if !strings.Contains(msg, m) {
					t.Errorf("message %q does not mention %q", msg, m)
				}
			}
			for _, secret := range []string{"s3cr3t-value", "AKIAX", tokenFile} {
				if strings.Contains(msg, secret) {
					t.Errorf("message %q shows a secret value", msg)
				}
			}
		})
	}
	if _, _, err := credentialsFrom(nil, true); driver.CodeOf(err) != driver.InvalidArgument {
		t.Errorf("no secret = %v", err)
	}
}

// TestAlternativeKeysReachEC2 signs requests with the alternative key names' credentials.
func TestAlternativeKeysReachEC2(t *testing.T) {
	e := newTestEnv(t)
	e.secret.Data = map[string][]byte{
		KeyAlternativeAccessKeyID:     []byte(testAccessKey),
		KeyAlternativeSecretAccessKey: []byte(testSecretKey),
		KeyEC2Endpoint:                []byte(e.srv.URL),
		KeyUserData:                   []byte(testUserData),
	}
	e.mustCreate(t, "m-1")
	// A wrong secret key is refused by the signature check.
	e.secret.Data[KeyAlternativeSecretAccessKey] = []byte("not-the-secret-key")
	_, err := e.create(t, "m-2")
	if driver.CodeOf(err) != driver.Unauthenticated || !strings.Contains(driver.MessageOf(err), "SignatureDoesNotMatch") || strings.Contains(driver.MessageOf(err), "not-the-secret-key") {
		t.Fatalf("create with a wrong secret key = %v", err)
	}
}

// TestWorkloadIdentity exchanges the projected token for session credentials with STS's
// AssumeRoleWithWebIdentity, as Gardener's provider does, and reuses the session.
func TestWorkloadIdentity(t *testing.T) {
	e := newTestEnv(t)
	const role = "arn:aws:iam::123456789012:role/shoot--dev--alpha-machines"
	e.cloud.Identity.AddWebIdentityRole(role, "eyJhbGciOi.projected.token")
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("eyJhbGciOi.projected.token"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.secret.Data = map[string][]byte{
		KeyWorkloadIdentityTokenFile: []byte(tokenFile),
		KeyRoleARN:                   []byte(role),
		KeySTSEndpoint:               []byte(e.srv.URL),
		KeyEC2Endpoint:               []byte(e.srv.URL),
		KeyUserData:                  []byte(testUserData),
	}
	e.mustCreate(t, "m-1")
	e.mustCreate(t, "m-2")
	if n := len(e.cloud.Requests.For("AssumeRoleWithWebIdentity")); n != 1 {
		t.Errorf("%d AssumeRoleWithWebIdentity requests for two creates, want 1 (the session is reused)", n)
	}
	// A token the role's trust policy does not accept.
	if err := os.WriteFile(tokenFile, []byte("eyJ.someone.else"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.drv = e.newDriver()
	_, err := e.create(t, "m-3")
	if driver.CodeOf(err) != driver.Unauthenticated || !strings.Contains(driver.MessageOf(err), "InvalidIdentityToken") || !strings.Contains(driver.MessageOf(err), "roleARN") {
		t.Fatalf("create with a rejected token = %v", err)
	}
}

// TestAmbientCredentials: with Options.AmbientCredentials (--aws-ambient-credentials) a secret
// without keys uses the SDK's default chain of the process's environment: access keys in the
// environment, IRSA (a web identity token file and role ARN in the environment), the EC2
// instance profile (IMDS), and, with none, Unauthenticated. Without the option, the same secret
// is refused before any request, however the environment is set up.
func TestAmbientCredentials(t *testing.T) {
	e := newTestEnv(t)
	const role = "arn:aws:iam::123456789012:role/machinist-irsa"
	e.cloud.Identity.AddWebIdentityRole(role, "irsa-token")
	tokenFile := filepath.Join(t.TempDir(), "irsa-token")
	if err := os.WriteFile(tokenFile, []byte("irsa-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	isolate := func(t *testing.T) {
		dir := t.TempDir()
		for k, v := range map[string]string{
			"AWS_CONFIG_FILE": filepath.Join(dir, "config"), "AWS_SHARED_CREDENTIALS_FILE": filepath.Join(dir, "credentials"),
			"AWS_PROFILE": "", "AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "AWS_SESSION_TOKEN": "",
			"AWS_WEB_IDENTITY_TOKEN_FILE": "", "AWS_ROLE_ARN": "", "AWS_CONTAINER_CREDENTIALS_FULL_URI": "",
			"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "", "AWS_EC2_METADATA_DISABLED": "true", "AWS_ENDPOINT_URL": "",
		} {
			t.Setenv(k, v)
		}
	}
	secret := map[string][]byte{KeyEC2Endpoint: []byte(e.srv.URL), KeyUserData: []byte(testUserData)}
	for name, tc := range map[string]struct {
		env        map[string]string
		setup      func()
		notAmbient bool
		code       driver.Code
		request    string // the credential request the fake must have seen
	}{
		"not allowed: refused although the environment has keys and IMDS serves a role": {notAmbient: true, code: driver.InvalidArgument,
			env:   map[string]string{"AWS_ACCESS_KEY_ID": testAccessKey, "AWS_SECRET_ACCESS_KEY": testSecretKey, "AWS_EC2_METADATA_DISABLED": "false", "AWS_EC2_METADATA_SERVICE_ENDPOINT": e.srv.URL + "/"},
			setup: func() { e.cloud.Identity.ServeInstanceProfile("seed-nodes") }},
		"environment keys": {env: map[string]string{"AWS_ACCESS_KEY_ID": testAccessKey, "AWS_SECRET_ACCESS_KEY": testSecretKey}},
		"IRSA": {env: map[string]string{"AWS_WEB_IDENTITY_TOKEN_FILE": tokenFile, "AWS_ROLE_ARN": role, "AWS_ENDPOINT_URL_STS": e.srv.URL},
			request: "AssumeRoleWithWebIdentity"},
		"instance profile": {env: map[string]string{"AWS_EC2_METADATA_DISABLED": "false", "AWS_EC2_METADATA_SERVICE_ENDPOINT": e.srv.URL + "/"},
			setup: func() { e.cloud.Identity.ServeInstanceProfile("machinist-nodes") }},
		"none": {code: driver.Unauthenticated},
	} {
		t.Run(name, func(t *testing.T) {
			isolate(t)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			if tc.setup != nil {
				tc.setup()
			}
			e.ambient = !tc.notAmbient
			e.drv = e.newDriver()
			e.secret.Data = secret
			before := len(e.cloud.Requests.For(tc.request))
			requests := len(e.cloud.Requests.All())
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			_, err := e.drv.ListMachines(ctx, &driver.ListMachinesRequest{MachineClass: e.class, Secret: e.secret})
			if driver.CodeOf(err) != tc.code {
				t.Fatalf("ListMachines = %v, want %v", err, tc.code)
			}
			if tc.code == driver.Unauthenticated && !strings.Contains(driver.MessageOf(err), "no AWS credentials") {
				t.Errorf("message %q does not say there are no credentials", driver.MessageOf(err))
			}
			if tc.request != "" && len(e.cloud.Requests.For(tc.request)) != before+1 {
				t.Errorf("no %s request", tc.request)
			}
			if tc.notAmbient {
				msg := driver.MessageOf(err)
				for _, key := range []string{KeyAccessKeyID, KeySecretAccessKey, KeyAlternativeAccessKeyID, KeyWorkloadIdentityTokenFile, KeyRoleARN, "--aws-ambient-credentials"} {
					if !strings.Contains(msg, key) {
						t.Errorf("refusal %q does not name %s", msg, key)
					}
				}
				if n := len(e.cloud.Requests.All()); n != requests {
					t.Errorf("the refused secret made %d requests", n-requests)
				}
				if strings.Contains(msg, testSecretKey) {
					t.Errorf("refusal %q shows the environment's secret key", msg)
				}
			}
		})
	}
}

// TestOneClientPerCredentialSetAndRegion: calls with the same secret share a client; a rotated
// secret or another region gets its own.
func TestOneClientPerCredentialSetAndRegion(t *testing.T) {
	e := newTestEnv(t)
	e.mustCreate(t, "m-1")
	e.mustCreate(t, "m-2")
	if n := e.drv.cache.Len(); n != 1 {
		t.Fatalf("%d clients after two creates with one secret, want 1", n)
	}
	rotated := e.secret.DeepCopy()
	rotated.Data[KeySecretAccessKey] = []byte("rotated-secret-access-key")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _ = e.drv.ListMachines(ctx, &driver.ListMachinesRequest{MachineClass: e.class, Secret: rotated})
	other := e.classWith("us", func(s *ProviderSpec) { s.Region = "us-east-1" })
	_, _ = e.drv.ListMachines(ctx, &driver.ListMachinesRequest{MachineClass: other, Secret: e.secret})
	if n := e.drv.cache.Len(); n != 3 {
		t.Fatalf("%d clients, want 3 (a rotated secret and another region get their own)", n)
	}
	d := New(Options{Options: kit.Options{MaxClientSets: 2}})
	for _, region := range []string{"eu-west-1", "eu-central-1", "us-east-1"} {
		if _, err := d.clients(ctx, credentials{mode: staticKeys, accessKeyID: "a", secretAccessKey: "b"}, region); err != nil {
			t.Fatal(err)
		}
	}
	if n := d.cache.Len(); n != 2 {
		t.Errorf("%d clients kept, want the 2 most recent", n)
	}
}
