package mcmcrds

import (
	"os"
	"reflect"
	"slices"
	"testing"
)

// TestFactsMatchMCMCRDs re-reads the facts from a checkout of MCM's CRDs, when one is given:
//
//	MCM_CRDS=/path/to/machine-controller-manager/kubernetes/crds go test ./core/testenv/mcmcrds
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
		s := Read(crd)
		if want := sortedCopy(f.Required); !reflect.DeepEqual(s.Required, want) {
			t.Errorf("%s: required %q, facts %q", crd.Name, s.Required, want)
		}
		if want := sortedCopy(f.Preserve); !reflect.DeepEqual(s.Preserve, want) {
			t.Errorf("%s: preserve %q, facts %q", crd.Name, s.Preserve, want)
		}
		if len(s.Properties) != f.Properties {
			t.Errorf("%s: %d properties, facts %d", crd.Name, len(s.Properties), f.Properties)
		}
		v := crd.Spec.Versions[0]
		status := v.Subresources != nil && v.Subresources.Status != nil
		scale := v.Subresources != nil && v.Subresources.Scale != nil
		if status != f.StatusSubresource || scale != f.Scale || (scale && v.Subresources.Scale.LabelSelectorPath != nil) {
			t.Errorf("%s: subresources %+v, facts status %v scale %v (without label selector)", crd.Name, v.Subresources, f.StatusSubresource, f.Scale)
		}
	}
}

func sortedCopy(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}
