package deployments

import (
	"strings"
	"testing"
)

func TestParseFlagGroup(t *testing.T) {
	g, err := ParseFlagGroup("1:10:shoot--dev.workers.v2")
	if err != nil || g.Min != 1 || g.Max != 10 || g.MachineDeployment.Namespace != "shoot--dev" || g.MachineDeployment.Name != "workers.v2" {
		t.Fatalf("%+v, %v", g, err)
	}
	for in, want := range map[string]string{
		"1:10":              "want <min>:<max>",
		"a:10:ns.md":        `min size "a"`,
		"5:1:ns.md":         "min size 5 is above max size 1",
		"0:1:workers":       "is not <namespace>.<machineDeployment>",
		"0:1:Bad_NS.md":     "namespace",
		"0:1:ns.UPPER_case": "machineDeployment",
	} {
		if _, err := ParseFlagGroup(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", in, err, want)
		}
	}
}

func TestBoundsFromAnnotations(t *testing.T) {
	for name, tc := range map[string]struct {
		ann     map[string]string
		ok      bool
		min     int
		problem string
	}{
		"ours":          {map[string]string{AnnotationMinSize: "1", AnnotationMaxSize: "3"}, true, 1, ""},
		"cluster-api":   {map[string]string{CAPIAnnotationMinSize: "2", CAPIAnnotationMaxSize: "3"}, true, 2, ""},
		"ours win":      {map[string]string{AnnotationMinSize: "0", AnnotationMaxSize: "3", CAPIAnnotationMinSize: "2", CAPIAnnotationMaxSize: "3"}, true, 0, ""},
		"none":          {map[string]string{"other": "x"}, false, 0, ""},
		"half":          {map[string]string{AnnotationMaxSize: "3"}, false, 0, "set both"},
		"not a number":  {map[string]string{AnnotationMinSize: "one", AnnotationMaxSize: "3"}, false, 0, "not a non-negative integer"},
		"min above max": {map[string]string{AnnotationMinSize: "4", AnnotationMaxSize: "3"}, false, 0, "above max"},
		"negative":      {map[string]string{CAPIAnnotationMinSize: "-1", CAPIAnnotationMaxSize: "3"}, false, 0, "not a non-negative integer"},
	} {
		b, _, ok, problem := BoundsFromAnnotations(tc.ann)
		if ok != tc.ok || (ok && b.Min != tc.min) || !strings.Contains(problem, tc.problem) || (tc.problem == "" && problem != "") {
			t.Errorf("%s: %+v ok=%v problem=%q", name, b, ok, problem)
		}
	}
}

func TestTriggerDeletionFormat(t *testing.T) {
	entries := parseTriggerDeletion("[m2~2026-01-01T00:00:00Z, m1~2026-01-02T00:00:00Z,,m3]")
	if len(entries) != 3 || entries["m1"] != "2026-01-02T00:00:00Z" || entries["m3"] != "" {
		t.Fatalf("%v", entries)
	}
	if got := formatTriggerDeletion(entries); got != "m1~2026-01-02T00:00:00Z,m2~2026-01-01T00:00:00Z,m3" {
		t.Fatalf("formatted %q", got)
	}
}
