package v1alpha1_test

import (
	"maps"
	"testing"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// TestScaleDownDisabledMarks: a controller's mark (MCM's record key or machinist's old one) is
// set with MCM's keys and removed with every record; an operator's mark is never touched.
func TestScaleDownDisabledMarks(t *testing.T) {
	const (
		sdd    = v1alpha1.AnnotationCAScaleDownDisabled
		mcm    = v1alpha1.AnnotationCAScaleDownDisabledByMCM
		legacy = v1alpha1.LegacyAnnotationCAScaleDownDisabledByMCM
	)
	if mcm != "cluster-autoscaler.kubernetes.io/scale-down-disabled-by-mcm" {
		t.Fatalf("MCM's key is %q", mcm)
	}
	for _, tc := range []struct {
		name             string
		in               map[string]string
		unmarked, marked map[string]string
		unmarkCh, markCh bool
	}{
		{"none", map[string]string{}, map[string]string{}, map[string]string{sdd: "true", mcm: "true"}, false, true},
		{"MCM's", map[string]string{sdd: "true", mcm: "true"}, map[string]string{}, map[string]string{sdd: "true", mcm: "true"}, true, false},
		{"machinist's old", map[string]string{sdd: "true", legacy: "true"}, map[string]string{}, map[string]string{sdd: "true", mcm: "true"}, true, true},
		{"record without value", map[string]string{sdd: "true", mcm: ""}, map[string]string{}, map[string]string{sdd: "true", mcm: "true"}, true, true},
		{"operator's", map[string]string{sdd: "true", "x": "y"}, map[string]string{sdd: "true", "x": "y"}, map[string]string{sdd: "true", "x": "y"}, false, false},
		// MCM overwrites any value but "true" when it marks a node.
		{"operator's false", map[string]string{sdd: "false"}, map[string]string{sdd: "false"}, map[string]string{sdd: "true", mcm: "true"}, false, true},
	} {
		a := maps.Clone(tc.in)
		if ch := v1alpha1.UnmarkScaleDownDisabled(a); ch != tc.unmarkCh || !maps.Equal(a, tc.unmarked) {
			t.Errorf("%s: unmark → %v (changed %v), want %v (%v)", tc.name, a, ch, tc.unmarked, tc.unmarkCh)
		}
		a = maps.Clone(tc.in)
		if ch := v1alpha1.MarkScaleDownDisabled(a); ch != tc.markCh || !maps.Equal(a, tc.marked) {
			t.Errorf("%s: mark → %v (changed %v), want %v (%v)", tc.name, a, ch, tc.marked, tc.markCh)
		}
	}
}
