package oracle

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/machinist-io/machinist/providers/kit/oraclekit"

	"github.com/machinist-io/machinist/providers/aws/fakeaws"
)

// TestReplayAgainstGardenerCorpus runs machinist's driver through every scenario against a
// fresh fake and compares what reached the fake, request by request, and what the driver
// reported with what Gardener's driver did in the recorded corpus (make test-gardener-oracle
// records it): the only differences allowed are the documented ones, and each of them must
// still be needed somewhere.
func TestReplayAgainstGardenerCorpus(t *testing.T) {
	used := map[string]int{}
	for _, s := range Scenarios {
		t.Run(s.Name, func(t *testing.T) {
			recorded, err := ReadCorpus(CorpusDir, s.Name)
			if err != nil {
				t.Fatalf("no recorded transcript of Gardener's driver: %v (make test-gardener-oracle ORACLE_UPDATE=1 records it)", err)
			}
			got := runMachinist(t, s)
			c := Compare(s, recorded, got)
			for _, m := range c.Mismatches {
				t.Errorf("%s", m)
			}
			for id, n := range c.Used {
				used[id] += n
			}
		})
	}
	if t.Failed() {
		return
	}
	for _, d := range Differences {
		if used[d.ID] == 0 {
			t.Errorf("difference %s is needed by no scenario: remove it (and its entry in docs/compatibility/aws.md)", d.ID)
		}
	}
}

func runMachinist(t *testing.T, s Scenario) Transcript {
	t.Helper()
	cloud := NewCloud()
	srv, err := Serve(cloud)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tr, err := Run(ctx, s, cloud, NewMachinist(srv.URL, time.Millisecond), "machinist")
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// TestCorpusMatchesScenarios: the corpus holds one transcript per scenario, of Gardener's
// driver, with the scenario's steps; nothing else.
func TestCorpusMatchesScenarios(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(CorpusDir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]Scenario{}
	for _, s := range Scenarios {
		if _, dup := names[s.Name]; dup {
			t.Errorf("two scenarios named %s", s.Name)
		}
		names[s.Name] = s
	}
	if len(files) != len(Scenarios) {
		t.Errorf("%d corpus files for %d scenarios", len(files), len(Scenarios))
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		s, ok := names[name]
		if !ok {
			t.Errorf("%s: no scenario of that name: remove it", f)
			continue
		}
		tr, err := ReadCorpus(CorpusDir, name)
		if err != nil || tr.Driver != "gardener" || tr.Scenario != name || len(tr.Steps) != len(s.Steps) {
			t.Errorf("%s: %v: driver %q, scenario %q, %d steps for %d", f, err, tr.Driver, tr.Scenario, len(tr.Steps), len(s.Steps))
			continue
		}
		for i, st := range s.Steps {
			if tr.Steps[i].Step != st.label(i) {
				t.Errorf("%s: step %d is %q, the scenario's %q: record the corpus again", f, i+1, tr.Steps[i].Step, st.label(i))
			}
		}
	}
}

// TestDifferencesDocumented: docs/compatibility/aws.md names each difference with Gardener's
// file and the commit they were read against.
func TestDifferencesDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "compatibility", "aws.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	if !strings.Contains(text, GardenerCommit) {
		t.Errorf("docs/compatibility/aws.md does not name Gardener's commit %s", GardenerCommit)
	}
	for _, d := range Differences {
		if !strings.Contains(text, "`"+d.ID+"`") {
			t.Errorf("docs/compatibility/aws.md does not describe difference `%s`", d.ID)
		}
		file, _, _ := strings.Cut(d.Gardener, " ")
		if !strings.Contains(text, file) {
			t.Errorf("docs/compatibility/aws.md does not name %s for difference %s", file, d.ID)
		}
	}
}

// TestNormalize: the cloud's random ID part goes, request IDs in messages and client tokens
// are replaced, tags are sorted by key per tag specification; other parameters stay.
func TestNormalize(t *testing.T) {
	tr := Transcript{Steps: []Exchange{{
		Result: oraclekit.Result{ProviderID: "aws:///eu-west-1/i-abcd1234000000002", Code: "Unavailable",
			Message:     "RequestID: 0fff2574-db90-8f2d-db0a-b32cb30950e3, api error",
			MachineList: map[string]string{"aws:///eu-west-1/i-abcd1234000000002": "m-1"}},
		Requests: []Request{{Action: "RunInstances", Params: map[string]string{
			"ClientToken": "machinist-0a1b", "ImageId": "ami-0a1b2c3d4e5f60718",
			"BlockDeviceMapping.1.Ebs.KmsKeyId":    "arn:aws:kms:eu-west-1:1:key/0a1b2c3d-aaaa-bbbb-cccc-0a1b2c3d4e5f",
			"TagSpecification.1.ResourceType":      "instance",
			"TagSpecification.1.Tag.1.Key":         "worker",
			"TagSpecification.1.Tag.1.Value":       "w",
			"TagSpecification.1.Tag.2.Key":         "Name",
			"TagSpecification.1.Tag.2.Value":       "m-1",
			"NetworkInterface.1.SecurityGroupId.1": "sg-2",
		}}},
	}}}
	Normalize(&tr, "abcd1234")
	ex := tr.Steps[0]
	want := oraclekit.Result{ProviderID: "aws:///eu-west-1/i-000000002", Code: "Unavailable", Message: "RequestID: <request-id>, api error",
		MachineList: map[string]string{"aws:///eu-west-1/i-000000002": "m-1"}}
	if !reflect.DeepEqual(ex.Result, want) {
		t.Errorf("result %+v, want %+v", ex.Result, want)
	}
	wantParams := map[string]string{
		"ClientToken": "<client-token>", "ImageId": "ami-0a1b2c3d4e5f60718",
		"BlockDeviceMapping.1.Ebs.KmsKeyId": "arn:aws:kms:eu-west-1:1:key/0a1b2c3d-aaaa-bbbb-cccc-0a1b2c3d4e5f",
		"TagSpecification.1.ResourceType":   "instance",
		"TagSpecification.1.Tag.1.Key":      "Name", "TagSpecification.1.Tag.1.Value": "m-1",
		"TagSpecification.1.Tag.2.Key": "worker", "TagSpecification.1.Tag.2.Value": "w",
		"NetworkInterface.1.SecurityGroupId.1": "sg-2",
	}
	if !reflect.DeepEqual(ex.Requests[0].Params, wantParams) {
		t.Errorf("params %v, want %v", ex.Requests[0].Params, wantParams)
	}
}

// TestSeenDropsAnswersTheClientNeverRead: a successful answer followed by another attempt of
// its invocation did not reach the client; failed answers and other invocations stay.
func TestSeenDropsAnswersTheClientNeverRead(t *testing.T) {
	reqs := []fakeaws.Request{
		{Action: "DescribeInstances", Invocation: "a", Attempt: 1},
		{Action: "DescribeInstances", Invocation: "a", Attempt: 2},
		{Action: "RunInstances", Invocation: "b", Attempt: 1, Code: "RequestLimitExceeded"},
		{Action: "RunInstances", Invocation: "b", Attempt: 2},
		{Action: "TerminateInstances", Invocation: "c", Attempt: 1},
	}
	got := seen(reqs)
	want := []fakeaws.Request{reqs[1], reqs[2], reqs[3], reqs[4]}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("seen = %+v, want %+v", got, want)
	}
}
