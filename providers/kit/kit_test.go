package kit_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/cloudmetrics/cloudmetricstest"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/internal/pki"
	"github.com/machinist-io/machinist/providers/kit"
)

// TestOptionsWithDefaults: a zero field takes the provider's default, a set one stays, and the
// logger is never nil.
func TestOptionsWithDefaults(t *testing.T) {
	defaults := kit.Options{MaxClientSets: 32, OperationTimeout: time.Minute, CleanupTimeout: 2 * time.Minute, PollInterval: time.Second}
	got := kit.Options{MaxClientSets: 5, PollInterval: -1}.WithDefaults(defaults)
	if got.MaxClientSets != 5 || got.OperationTimeout != time.Minute || got.CleanupTimeout != 2*time.Minute || got.PollInterval != time.Second || got.Log == nil {
		t.Errorf("WithDefaults = %+v", got)
	}
}

// TestBound: a context without deadline gets the operation timeout; one with a deadline keeps
// it; without an operation timeout the call is not bounded.
func TestBound(t *testing.T) {
	o := kit.Options{OperationTimeout: time.Hour}
	ctx, cancel := o.Bound(context.Background())
	defer cancel()
	if d, ok := ctx.Deadline(); !ok || time.Until(d) > time.Hour {
		t.Errorf("no or a late deadline: %v %v", d, ok)
	}
	short, cancelShort := context.WithTimeout(context.Background(), time.Minute)
	defer cancelShort()
	ctx2, cancel2 := o.Bound(short)
	defer cancel2()
	if d, _ := ctx2.Deadline(); time.Until(d) > time.Minute {
		t.Errorf("the caller's deadline was replaced: %v", d)
	}
	ctx3, cancel3 := kit.Options{}.Bound(context.Background())
	defer cancel3()
	if _, ok := ctx3.Deadline(); ok {
		t.Error("bounded without an operation timeout")
	}
	cleanupCtx, cancel4 := kit.Options{CleanupTimeout: time.Minute}.Cleanup(ctx)
	defer cancel4()
	cancel()
	if cleanupCtx.Err() != nil {
		t.Error("the cleanup context ended with the caller's")
	}
}

func secret(data map[string]string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: "shoot--a"}, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

// TestSecret: values are read from the first alias that holds one, trimmed; errors name the
// secret and the keys, never a value; user data must be there.
func TestSecret(t *testing.T) {
	if _, err := kit.ReadSecret("cloud", nil, "clientID"); driver.CodeOf(err) != driver.InvalidArgument || !strings.Contains(err.Error(), "cloud: the request carries no secret") || !strings.Contains(err.Error(), "clientID") {
		t.Errorf("no secret: %v", err)
	}
	s, err := kit.ReadSecret("cloud", secret(map[string]string{"id": "  ", "legacyID": " abc \n", "password": " p4ss ", "empty": ""}), "")
	if err != nil {
		t.Fatal(err)
	}
	if v := s.Value("id", "legacyID"); v != "abc" {
		t.Errorf("Value = %q, want abc from the alias", v)
	}
	if v := s.Raw("password"); v != " p4ss " {
		t.Errorf("Raw = %q", v)
	}
	if !s.Has("empty") || s.Has("missing") {
		t.Error("Has does not tell a key with an empty value from a missing one")
	}
	if s.Invalid(nil) != nil {
		t.Error("Invalid(nil) is an error")
	}
	err = s.Invalid(field.ErrorList{field.Required(kit.SecretData.Key("id"), "set it")})
	if driver.CodeOf(err) != driver.InvalidArgument || driver.MessageOf(err) != "cloud: secret shoot--a/creds is invalid: secret.data[id]: Required value: set it" {
		t.Errorf("Invalid = %v", err)
	}
	if _, err := s.UserData(); driver.CodeOf(err) != driver.InvalidArgument || !strings.Contains(err.Error(), "secret shoot--a/creds is invalid: secret.data[userData]: Required value") {
		t.Errorf("UserData without userData: %v", err)
	}
	withString := &corev1.Secret{StringData: map[string]string{kit.KeyUserData: "#cloud-config"}}
	if s, _ := kit.ReadSecret("cloud", withString, ""); s.Name() != "(unnamed)" {
		t.Errorf("Name of an unnamed secret = %q", s.Name())
	} else if ud, err := s.UserData(); err != nil || string(ud) != "#cloud-config" {
		t.Errorf("UserData from stringData = %q, %v", ud, err)
	}
}

// TestTransport: the secret's CA bundle is the only trust; a bundle without a certificate and a
// broken client key pair are errors the provider maps to its keys.
func TestTransport(t *testing.T) {
	caPEM, cert, err := pki.LoopbackServer("kit-test", nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = fmt.Fprint(w, "ok") }))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the untrusted handshake is expected
	srv.StartTLS()
	defer srv.Close()

	untrusted, err := kit.Transport(kit.TLS{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = (&http.Client{Transport: untrusted}).Get(srv.URL)
	if !kit.UntrustedCertificate(err) {
		t.Errorf("a server of an unknown CA: %v, want an untrusted certificate", err)
	}
	if _, err := kit.Transport(kit.TLS{CACert: "not PEM"}); !errors.Is(err, kit.ErrNoPEMCertificate) {
		t.Errorf("CA without PEM: %v", err)
	}
	if _, err := kit.Transport(kit.TLS{ClientCert: string(caPEM)}); !errors.Is(err, kit.ErrClientKeyPair) {
		t.Errorf("client certificate without key: %v", err)
	}
	trusted, err := kit.Transport(kit.TLS{CACert: string(caPEM)})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: trusted}).Get(srv.URL)
	if err != nil {
		t.Fatalf("a server of the secret's CA: %v", err)
	}
	_ = resp.Body.Close()
	own := http.DefaultTransport
	if got, _ := (kit.Options{HTTPTransport: own}).Transport(kit.TLS{CACert: "not PEM"}); got != own {
		t.Error("Options.Transport did not use HTTPTransport")
	}
}

// TestReach: a token request that gets no response is remembered until one gets a response; one
// whose caller gave up is not.
func TestReach(t *testing.T) {
	var r kit.Reach
	down := r.Watch(roundTrip(func(*http.Request) (*http.Response, error) { return nil, errors.New("connection refused") }))
	up := r.Watch(roundTrip(func(*http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: http.StatusBadRequest, Body: http.NoBody}, nil
	}))
	req, _ := http.NewRequest(http.MethodPost, "https://login.example.com/token", nil)
	_, _ = down.RoundTrip(req)
	if host, cause := r.Last(); host != "login.example.com" || cause == nil {
		t.Errorf("after a failure: %q %v", host, cause)
	}
	_, _ = up.RoundTrip(req)
	if host, cause := r.Last(); host != "" || cause != nil {
		t.Errorf("after a response: %q %v", host, cause)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _ = down.RoundTrip(req.WithContext(ctx))
	if _, cause := r.Last(); cause != nil {
		t.Errorf("a canceled request was recorded: %v", cause)
	}
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestAPIMetrics: a success counts and is timed, a 404 is a success, a 5xx or no answer counts
// as failed only; Count counts every request and failed ones twice, untimed.
func TestAPIMetrics(t *testing.T) {
	const provider = "kittest"
	status := 200
	tr := kit.APIMetrics(provider).Transport(roundTrip(func(*http.Request) (*http.Response, error) {
		if status == 0 {
			return nil, errors.New("refused")
		}
		return &http.Response{StatusCode: status, Body: http.NoBody}, nil
	}), func(r *http.Request) string { return strings.TrimPrefix(r.URL.Path, "/") })
	for _, s := range []int{200, 404, 503, 0} {
		status = s
		req, _ := http.NewRequest(http.MethodGet, "http://cloud.invalid/get", nil)
		_, _ = tr.RoundTrip(req)
	}
	kit.APIMetrics(provider).Count("count", false)
	kit.APIMetrics(provider).Count("count", true)
	req, failed, timed := cloudmetricstest.Counts(t, provider)
	if req["get"] != 2 || failed["get"] != 2 || timed["get"] != 2 {
		t.Errorf("get: requests %v failed %v timed %v, want 2 2 2", req["get"], failed["get"], timed["get"])
	}
	if req["count"] != 2 || failed["count"] != 1 || timed["count"] != 0 {
		t.Errorf("count: requests %v failed %v timed %v, want 2 1 0", req["count"], failed["count"], timed["count"])
	}
}

type testSpec struct {
	Zone string            `json:"zone"`
	Size int               `json:"size"`
	Tags map[string]string `json:"tags"`
}

func class(provider, raw string) *v1alpha1.MachineClass {
	return &v1alpha1.MachineClass{ObjectMeta: metav1.ObjectMeta{Name: "c"}, Provider: provider, ProviderSpec: runtime.RawExtension{Raw: []byte(raw)}}
}

// TestSpec: Decode validates the whole spec and adds the hint; DecodeScope reads past a value of
// the wrong type and checks only the scope; Check is Decode's warnings and error.
func TestSpec(t *testing.T) {
	specs := kit.Spec[testSpec]{
		Provider: "cloud", Names: driver.FoldedNames,
		Validate: func(s *testSpec) field.ErrorList {
			if s.Size <= 0 {
				return field.ErrorList{field.Required(driver.ProviderSpecPath.Child("size"), "set it")}
			}
			return nil
		},
		Scope: func(s *testSpec) field.ErrorList {
			if s.Zone == "" {
				return field.ErrorList{field.Required(driver.ProviderSpecPath.Child("zone"), "set it")}
			}
			return nil
		},
		Hint: func(c *v1alpha1.MachineClass) string {
			if strings.Contains(string(c.ProviderSpec.Raw), "sise") {
				return "size is spelt size"
			}
			return ""
		},
	}
	if s, w, err := specs.Decode(class("Cloud", `{"zone":"a","size":2,"extra":1}`), driver.Lenient); err != nil || s.Size != 2 || len(w) != 1 {
		t.Errorf("Decode = %+v %v %v", s, w, err)
	}
	_, _, err := specs.Decode(class("cloud", `{"zone":"a","sise":2}`), driver.Lenient)
	if msg := driver.MessageOf(err); driver.CodeOf(err) != driver.InvalidArgument || !strings.Contains(msg, "providerSpec.size") || !strings.Contains(msg, "(size is spelt size)") {
		t.Errorf("invalid spec: %v", err)
	}
	if _, err := specs.Check(class("other", `{"zone":"a","size":1}`), driver.Lenient); driver.CodeOf(err) != driver.InvalidArgument {
		t.Errorf("another provider's class: %v", err)
	}
	if s, err := specs.DecodeScope(class("cloud", `{"zone":"a","size":"big"}`)); err != nil || s.Zone != "a" {
		t.Errorf("DecodeScope past a wrong type = %+v %v", s, err)
	}
	for raw, want := range map[string]string{``: "providerSpec is empty", `{"zone":`: "not valid JSON", `{"size":1}`: "providerSpec.zone"} {
		if _, err := specs.DecodeScope(class("cloud", raw)); driver.CodeOf(err) != driver.InvalidArgument || !strings.Contains(err.Error(), want) {
			t.Errorf("DecodeScope(%q) = %v, want %q", raw, err, want)
		}
	}
}

// TestErrorsCommon maps what every cloud shares, and nothing else.
func TestErrorsCommon(t *testing.T) {
	e := kit.Errors{Provider: "cloud", Cloud: "Cloud API", CAKey: "caCert"}
	coded := driver.Error(driver.NotFound, "gone")
	for _, tc := range []struct {
		err  error
		code driver.Code
		text string
	}{
		{coded, driver.NotFound, "gone"},
		{fmt.Errorf("get: %w", context.DeadlineExceeded), driver.DeadlineExceeded, "cloud: get vm: timed out; Cloud API may still finish it"},
		{context.Canceled, driver.Canceled, "cloud: get vm: canceled"},
	} {
		got, ok := e.Common("get vm", tc.err)
		if !ok || driver.CodeOf(got) != tc.code || !strings.Contains(got.Error(), tc.text) {
			t.Errorf("Common(%v) = %v %v, want %v %q", tc.err, got, ok, tc.code, tc.text)
		}
	}
	if st, ok := e.Common("get vm", nil); !ok || st != nil {
		t.Errorf("Common(nil) = %v %v", st, ok)
	}
	if _, ok := e.Common("get vm", errors.New("500")); ok {
		t.Error("Common mapped a cloud's own error")
	}
	if err := e.Unreachable("get vm", errors.New("connection refused")); driver.CodeOf(err) != driver.Unavailable || !strings.Contains(err.Error(), "Cloud API gave no answer") {
		t.Errorf("Unreachable = %v", err)
	}
}

// TestVolumes picks the cloud's in-tree and CSI volumes and skips the rest.
func TestVolumes(t *testing.T) {
	v := kit.Volumes{CSIDriver: "disk.csi.example.com", InTree: func(s *corev1.PersistentVolumeSpec) string {
		if s.Cinder == nil {
			return ""
		}
		return s.Cinder.VolumeID
	}}
	specs := []*corev1.PersistentVolumeSpec{
		nil,
		{PersistentVolumeSource: corev1.PersistentVolumeSource{Cinder: &corev1.CinderPersistentVolumeSource{VolumeID: "in-tree"}}},
		{PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "disk.csi.example.com", VolumeHandle: "csi"}}},
		{PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "other", VolumeHandle: "x"}}},
		{PersistentVolumeSource: corev1.PersistentVolumeSource{NFS: &corev1.NFSVolumeSource{}}},
	}
	if got := v.IDs(specs).VolumeIDs; strings.Join(got, ",") != "in-tree,csi" {
		t.Errorf("IDs = %v", got)
	}
	if got := v.IDs(nil).VolumeIDs; got == nil || len(got) != 0 {
		t.Errorf("IDs(nil) = %#v, want an empty list", got)
	}
	if _, err := kit.MachineName("cloud", nil); driver.CodeOf(err) != driver.InvalidArgument {
		t.Errorf("MachineName(nil) = %v", err)
	}
}

// TestEnumStrings sorts.
func TestEnumStrings(t *testing.T) {
	type size string
	if got := kit.EnumStrings([]size{"b", "a"}); strings.Join(got, ",") != "a,b" {
		t.Errorf("EnumStrings = %v", got)
	}
}
