package mcmcrds

import (
	"os"
	"testing"
)

// TestFactsMatchMCMCRDs re-reads the facts from a checkout of MCM's CRDs, when one is given:
//
//	MCM_CRDS=/path/to/machine-controller-manager/kubernetes/crds go test ./harness/testenv/mcmcrds
//
// CI has no such checkout (it cannot fetch), so the test is skipped there; run it when MCM's
// CRDs change and update All (and Source) from what it reports.
func TestFactsMatchMCMCRDs(t *testing.T) {
	dir := os.Getenv("MCM_CRDS")
	if dir == "" {
		t.Skip("MCM_CRDS is not set: no checkout of MCM's CRDs to compare the facts with")
	}
	crds, err := ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(crds) != len(All) {
		t.Fatalf("%d CRDs in %s, facts about %d", len(crds), dir, len(All))
	}
	for _, crd := range crds {
		f, ok := Of(crd.Spec.Names.Plural)
		if !ok {
			t.Errorf("no facts about %s", crd.Name)
			continue
		}
		for _, m := range Mismatches(crd, f) {
			t.Error(m)
		}
	}
}
