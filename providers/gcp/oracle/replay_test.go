package oracle

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/machinist-io/machinist/providers/kit/oraclekit"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"
	compute "google.golang.org/api/compute/v1"

	"github.com/machinist-io/machinist/providers/gcp/fakegcp"
)

// Machinist's driver, run over every scenario against fakegcp, differs from Gardener's recorded
// transcripts only by the documented Differences, and each of them still occurs.
func TestMachinistMatchesTheCorpus(t *testing.T) {
	var applied []string
	for _, s := range Scenarios {
		want, err := ReadCorpus(CorpusDir, s.Name)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Run(t.Context(), s, oraclekit.Machinist, func(*World) (oraclekit.Target, error) { return NewMachinist(), nil })
		if err != nil {
			t.Fatalf("%s: %v", s.Name, err)
		}
		problems, used := Compare(s, want, got)
		for _, p := range problems {
			t.Errorf("%s: %s", s.Name, p)
		}
		for _, id := range used {
			if !slices.Contains(applied, id) {
				applied = append(applied, id)
			}
		}
	}
	for _, d := range Differences {
		if !slices.Contains(applied, d.ID) {
			t.Errorf("documented difference %s occurs in no scenario: remove it", d.ID)
		}
	}
}

// The fake answers each request Gardener's driver sent, replayed in order after the same
// preparations, with the status it answered then: the fake stays what Gardener's provider, proven
// on the real Compute Engine, found it to be.
func TestFakeAnswersTheCorpusAsItAnsweredGardener(t *testing.T) {
	for _, s := range Scenarios {
		t.Run(s.Name, func(t *testing.T) {
			tr, err := ReadCorpus(CorpusDir, s.Name)
			if err != nil {
				t.Fatal(err)
			}
			if len(tr.Steps) != len(s.Steps) {
				t.Fatalf("the corpus has %d steps, the scenario %d: run make test-gardener-oracle with -update", len(tr.Steps), len(s.Steps))
			}
			w, err := NewWorld()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = w.Close() })
			client := authorized(t, w)
			operation := ""
			for i, st := range s.Steps {
				if st.Before != nil {
					st.Before(w.Cloud)
				}
				for j, r := range tr.Steps[i].Requests {
					status, name := replay(t, client, w, r, operation)
					if name != "" {
						operation = name
					}
					if status != r.Status {
						t.Errorf("%s request %d %s: answered %d, Gardener got %d", tr.Steps[i].Step, j+1, line(r), status, r.Status)
					}
					if r.Op == fakegcp.OpGetOperation {
						w.Cloud.Settle() // Gardener polled 5 seconds later
					}
				}
				w.Cloud.Faults.Clear()
			}
			if left := w.left(); !slices.Equal(left.Instances, tr.Left.Instances) || !slices.Equal(left.Disks, tr.Left.Disks) {
				t.Errorf("left %+v, Gardener left %+v", left, tr.Left)
			}
			if v := w.Cloud.ContractViolations(); len(v) > 0 {
				t.Errorf("fakegcp broke the Compute contract: %v", v)
			}
		})
	}
}

// authorized is an HTTP client with the world's service account's token that trusts the fake.
func authorized(t *testing.T, w *World) *http.Client {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(w.Server.CACert)
	base := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	ctx := context.WithValue(context.Background(), oauth2.HTTPClient, base)
	cfg, err := google.JWTConfigFromJSON(w.Key, compute.CloudPlatformScope)
	if err != nil {
		t.Fatal(err)
	}
	return oauth2.NewClient(ctx, cfg.TokenSource(ctx))
}

// replay sends a recorded request (the operation's name put back into its path) and returns
// the status and, for an answer that is an operation, its name.
func replay(t *testing.T, c *http.Client, w *World, r Request, operation string) (int, string) {
	t.Helper()
	url := fakegcp.ComputeEndpoint(w.Server.URL) + strings.Replace(r.Path, "/operations/OPERATION", "/operations/"+operation, 1)
	if r.Query != "" {
		url += "?" + r.Query
	}
	var body io.Reader
	if r.Body != nil {
		b, err := json.Marshal(r.Body)
		if err != nil {
			t.Fatal(err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(t.Context(), r.Method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var answer struct {
		Kind string `json:"kind"`
		Name string `json:"name"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&answer)
	if answer.Kind == "compute#operation" {
		return resp.StatusCode, answer.Name
	}
	return resp.StatusCode, ""
}

// Compare reports what no documented difference explains: a field of the instance, an answer's
// code or provider ID, a request more or less, and what was left.
func TestCompareReportsUndocumentedDifferences(t *testing.T) {
	s := Scenarios[0]
	g, err := ReadCorpus(CorpusDir, s.Name)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Run(t.Context(), s, oraclekit.Machinist, func(*World) (oraclekit.Target, error) { return NewMachinist(), nil })
	if err != nil {
		t.Fatal(err)
	}
	if problems, _ := Compare(s, g, m); len(problems) != 0 {
		t.Fatalf("unchanged: %v", problems)
	}
	for name, tc := range map[string]struct {
		change func(m *Transcript)
		want   string
	}{
		"a label":        {func(m *Transcript) { m.Steps[0].Requests[1].Body["labels"].(map[string]any)["name"] = "other" }, `labels.name: gardener "test-mc", machinist "other"`},
		"a field more":   {func(m *Transcript) { m.Steps[0].Requests[1].Body["hostname"] = "m-1.example" }, `hostname: gardener does not send it`},
		"a code":         {func(m *Transcript) { m.Steps[1].Result.Code = "Unavailable" }, "answers: gardener OK"},
		"a provider ID":  {func(m *Transcript) { m.Steps[0].Result.ProviderID = "gce://p/z/m-1" }, "gce://p/z/m-1"},
		"a request more": {func(m *Transcript) { m.Steps[2].Requests = append(m.Steps[2].Requests, m.Steps[2].Requests[0]) }, "only machinist"},
		"a leftover":     {func(m *Transcript) { m.Left.Disks = []string{"m-1"} }, "left:"},
	} {
		changed := m
		b, _ := json.Marshal(m)
		_ = json.Unmarshal(b, &changed)
		tc.change(&changed)
		problems, _ := Compare(s, g, changed)
		if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, tc.want) }) {
			t.Errorf("%s: %v, want a problem with %q", name, problems, tc.want)
		}
	}
}
