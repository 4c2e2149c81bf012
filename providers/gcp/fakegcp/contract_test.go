package fakegcp

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	compute "google.golang.org/api/compute/v1"
)

// The contract is the discovery document of the google.golang.org/api module the client comes
// from, and every route the fake serves is the method of that path in it.
func TestContractIsTheModulesDiscoveryDocument(t *testing.T) {
	ct, err := DefaultContract()
	if err != nil {
		t.Fatal(err)
	}
	if len(ct.Revision) != 8 || len(ct.methods) < 500 {
		t.Errorf("revision %q with %d methods: not the Compute discovery document", ct.Revision, len(ct.methods))
	}
	for _, r := range []struct{ method, path string }{
		{"POST", "projects/p/zones/z/instances"}, {"GET", "projects/p/zones/z/instances"},
		{"GET", "projects/p/zones/z/instances/i"}, {"DELETE", "projects/p/zones/z/instances/i"},
		{"GET", "projects/p/zones/z/disks"}, {"GET", "projects/p/zones/z/disks/d"}, {"DELETE", "projects/p/zones/z/disks/d"},
		{"GET", "projects/p/zones/z/machineTypes/m"}, {"GET", "projects/p/zones/z/operations"},
		{"GET", "projects/p/zones/z/operations/o"}, {"POST", "projects/p/zones/z/operations/o/wait"},
		{"GET", "projects/p/global/images/i"}, {"GET", "projects/p/global/images/family/f"},
		{"GET", "projects/p/global/networks/n"}, {"GET", "projects/p/regions/r/subnetworks/s"},
	} {
		rt, served := routeOf(r.method, r.path)
		m, _ := ct.method(r.method, r.path)
		if !served || m == nil || m.ID != rt.op {
			t.Errorf("%s %s: the fake serves %q (%v), the contract names %v", r.method, r.path, rt.op, served, m)
		}
	}
}

// Requests outside the contract are answered 400 as Compute Engine answers them.
func TestRequestsAreCheckedAgainstTheContract(t *testing.T) {
	s := serve(t)
	base := ComputeEndpoint(s.srv.URL) + "projects/" + DefaultProject + "/zones/" + DemoZone + "/instances"
	valid, _ := json.Marshal(s.instance("vm-1", "t"))
	with := func(mutate func(map[string]any)) string {
		var m map[string]any
		_ = json.Unmarshal(valid, &m)
		mutate(m)
		b, _ := json.Marshal(m)
		return string(b)
	}
	for name, tc := range map[string]struct {
		method, url, body, want string
	}{
		"unknown field":    {"POST", base, with(func(m map[string]any) { m["favouriteColour"] = "blue" }), `Unknown name "favouriteColour" at 'resource'`},
		"unknown nested":   {"POST", base, with(func(m map[string]any) { m["scheduling"] = map[string]any{"spot": true} }), `Unknown name "spot" at 'resource.scheduling'`},
		"enum":             {"POST", base, with(func(m map[string]any) { m["scheduling"] = map[string]any{"onHostMaintenance": "SOMETIMES"} }), `'resource.scheduling.onHostMaintenance', "SOMETIMES": must be one of MIGRATE, TERMINATE`},
		"wrong type":       {"POST", base, with(func(m map[string]any) { m["canIpForward"] = "yes" }), `resource.canIpForward: the string "yes", want a boolean`},
		"tag pattern":      {"POST", base, with(func(m map[string]any) { m["tags"] = map[string]any{"items": []string{"Not_A_Tag"}} }), `'resource.tags.items[0]': 'Not_A_Tag'. Must be a match of regex`},
		"no body":          {"POST", base, "", "Required field 'resource' not specified"},
		"zone pattern":     {"GET", strings.Replace(base, DemoZone, "Bad_Zone", 1), "", "Invalid value for field 'zone': 'Bad_Zone'. Must be a match of regex"},
		"unknown query":    {"GET", base + "?pageSize=3", "", `Unknown name "pageSize": Cannot bind query parameter`},
		"negative max":     {"GET", base + "?maxResults=-1", "", "Invalid value for field 'maxResults': '-1'. Must be at least 0."},
		"boolean query":    {"DELETE", base + "/vm-1?noGracefulShutdown=maybe", "", "Invalid value for field 'noGracefulShutdown': 'maybe'"},
		"no such method":   {"GET", ComputeEndpoint(s.srv.URL) + "projects/p/zones/z/teapots", "", "no method of the Compute API"},
		"instance pattern": {"GET", base + "/Vm_1", "", "Invalid value for field 'instance': 'Vm_1'"},
	} {
		req, _ := http.NewRequestWithContext(t.Context(), tc.method, tc.url, strings.NewReader(tc.body))
		resp, err := s.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		var answer struct {
			Error struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		_ = json.Unmarshal(body, &answer)
		wantStatus := 400
		if name == "no such method" {
			wantStatus = 404
		}
		if resp.StatusCode != wantStatus || !strings.Contains(answer.Error.Message, tc.want) {
			t.Errorf("%s: %d %s, want %d with %q", name, resp.StatusCode, body, wantStatus, tc.want)
		}
	}
	if n := len(s.c.Instances()); n != 0 {
		t.Errorf("%d instances made by refused requests", n)
	}
}

// An answer of the fake outside the contract is the fake's bug: it is answered 500 and recorded.
func TestAnswersAreCheckedAgainstTheContract(t *testing.T) {
	c := New(Options{})
	s := serveWith(t, c)
	c.PutInstance(DemoZone, &compute.Instance{Name: "odd", Status: "HIBERNATING"})
	_, err := s.svc.Instances.Get(DefaultProject, DemoZone, "odd").Do()
	if !isStatus(err, 500) || !strings.Contains(err.Error(), "fakegcp broke the Compute contract") {
		t.Errorf("err = %v, want 500", err)
	}
	v := c.ContractViolations()
	if len(v) != 1 || !strings.Contains(v[0], `compute.instances.get: Invalid value at 'Instance.status', "HIBERNATING"`) {
		t.Errorf("violations = %q", v)
	}
	c.st.violations = nil // seen: the cleanup check is for unexpected ones
}

// Every instance answers with its tags, metadata and labels fingerprints, as Compute Engine's
// do, tags or not: Gardener's provider reads tags.items of every instance it lists.
func TestInstancesAnswerTheirFingerprints(t *testing.T) {
	s := serve(t)
	s.c.PutInstance(DemoZone, &compute.Instance{Name: "bare"})
	s.wait(t, s.insert(t, s.instance("tagged", "a", "b")))
	list, err := s.svc.Instances.List(DefaultProject, DemoZone).Do()
	if err != nil || len(list.Items) != 2 {
		t.Fatalf("list: %v, %v", list, err)
	}
	for _, in := range list.Items {
		if in.Tags == nil || len(in.Tags.Fingerprint) != 12 || in.Metadata == nil || in.Metadata.Fingerprint == "" || in.LabelFingerprint == "" {
			t.Errorf("%s: tags %+v, metadata %+v, label fingerprint %q", in.Name, in.Tags, in.Metadata, in.LabelFingerprint)
		}
	}
	if list.Items[0].Tags.Fingerprint == list.Items[1].Tags.Fingerprint {
		t.Error("different tags have the same fingerprint")
	}
}
