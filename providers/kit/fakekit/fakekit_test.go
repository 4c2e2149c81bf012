package fakekit_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/machinist-io/machinist/providers/kit/fakekit"
)

type fault struct {
	fakekit.Rule
	Status int `json:"status"`
}

type request struct{ Op string }

func (r request) Operation() string { return r.Op }

// TestFaultsApplyTheirTimes: a fault applies Times times (0: until cleared), in injection
// order, to the requests it matches; Each lets a request take several.
func TestFaultsApplyTheirTimes(t *testing.T) {
	var fs fakekit.Faults[fault]
	fs.Inject(fault{Rule: fakekit.Rule{Op: "create", Times: 2}, Status: 503})
	fs.Inject(fault{Rule: fakekit.Rule{}, Status: 500})
	take := func(op string) int {
		f, ok := fs.Take(func(f fault) bool { return f.Matches(op) })
		if !ok {
			return 0
		}
		return f.Status
	}
	var got []int
	for range 3 {
		got = append(got, take("create"))
	}
	got = append(got, take("delete"))
	if want := []int{503, 503, 500, 500}; !equal(got, want) {
		t.Errorf("statuses %v, want %v", got, want)
	}
	n := 0
	fs.Each(func(fault) bool { n++; return true })
	if n != 1 || fs.Hits() != 5 {
		t.Errorf("Each saw %d faults with uses left (want 1), hits %d (want 5)", n, fs.Hits())
	}
	fs.Clear()
	if take("delete") != 0 {
		t.Error("a cleared fault applied")
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestJournal keeps requests in order and finds them by operation.
func TestJournal(t *testing.T) {
	var j fakekit.Journal[request]
	for _, op := range []string{"a", "b", "a"} {
		j.Add(request{op})
	}
	if j.Len() != 3 || len(j.For("a")) != 2 || j.All()[1].Op != "b" {
		t.Errorf("journal %v", j.All())
	}
	j.Reset()
	if j.Len() != 0 {
		t.Error("Reset kept requests")
	}
}

// TestControl answers the control requests of every fake, and refuses a fault it cannot take.
func TestControl(t *testing.T) {
	c := &fakekit.Control[fault, request]{
		Name: "fake", State: func() any { return map[string]int{"vms": 1} }, Faults: &fakekit.Faults[fault]{}, Requests: &fakekit.Journal[request]{},
		Check: func(f fault) error {
			if f.Status < 400 {
				return errors.New("status must be an error")
			}
			return nil
		},
		Example: `{"op":"create","status":503}`,
	}
	cleared := false
	c.Clear = func() { cleared = true }
	c.Requests.Add(request{"create"})
	srv := fakekit.Serve(listen(t), c)
	defer srv.Close()
	do := func(method, what, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+fakekit.ControlPrefix+what, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := do(http.MethodGet, "state", ""); code != http.StatusOK || !strings.Contains(body, `"vms":1`) {
		t.Errorf("GET state = %d %s", code, body)
	}
	if code, _ := do(http.MethodPost, "faults", `{"op":"create","times":1,"status":503}`); code != http.StatusNoContent {
		t.Errorf("POST faults = %d", code)
	}
	if f, ok := c.Faults.Take(func(f fault) bool { return f.Matches("create") }); !ok || f.Status != 503 || f.Times != 1 {
		t.Errorf("the posted fault = %+v %v", f, ok)
	}
	for _, bad := range []string{`{"op":"create","status":200}`, `{"opp":"create","status":503}`, `not json`} {
		if code, body := do(http.MethodPost, "faults", bad); code != http.StatusBadRequest || !strings.Contains(body, `e.g. {"op":"create"`) {
			t.Errorf("POST faults %s = %d %s, want 400 with the example", bad, code, body)
		}
	}
	if code, _ := do(http.MethodDelete, "faults", ""); code != http.StatusNoContent || !cleared {
		t.Errorf("DELETE faults = %d, cleared %v", code, cleared)
	}
	var reqs []request
	if code, body := do(http.MethodGet, "requests", ""); code != http.StatusOK || json.Unmarshal([]byte(body), &reqs) != nil || len(reqs) != 1 {
		t.Errorf("GET requests = %d %s", code, body)
	}
	if code, _ := do(http.MethodDelete, "requests", ""); code != http.StatusNoContent || c.Requests.Len() != 0 {
		t.Errorf("DELETE requests = %d, %d left", code, c.Requests.Len())
	}
	if code, _ := do(http.MethodGet, "nothing", ""); code != http.StatusNotFound {
		t.Errorf("GET of an unknown control request = %d", code)
	}
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

type servable struct{ tls bool }

func (s servable) Serve(l net.Listener, wrap func(http.Handler) http.Handler) (*fakekit.Server, error) {
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	if s.tls {
		return fakekit.ServeTLS("fake", l, h)
	}
	return fakekit.Serve(l, h), nil
}

// TestServers: a fake over HTTPS is trusted through its CACert only; Start serves on loopback
// until the test ends, and Close runs OnClose first.
func TestServers(t *testing.T) {
	plain := fakekit.Start(t, servable{})
	if !strings.HasPrefix(plain.URL, "http://127.0.0.1:") || plain.CACert != nil {
		t.Errorf("plain server %q %v", plain.URL, plain.CACert)
	}
	secure := fakekit.Start(t, servable{tls: true})
	if _, err := http.Get(secure.URL); err == nil {
		t.Error("the HTTPS fake was trusted without its CA")
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(secure.CACert)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	resp, err := client.Get(secure.URL + "/")
	if err != nil {
		t.Fatalf("GET with the fake's CA: %v", err)
	}
	_ = resp.Body.Close()

	srv, err := servable{}.Serve(listen(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	srv.OnClose(func() { closed = true })
	if err := srv.Close(); err != nil || !closed {
		t.Errorf("Close = %v, OnClose ran: %v", err, closed)
	}
	if _, err := http.Get(srv.URL); err == nil {
		t.Error("the server answers after Close")
	}
}
