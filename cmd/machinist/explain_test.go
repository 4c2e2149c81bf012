//go:build !slim

package main

import (
	"slices"
	"strings"
	"testing"
)

// TestFlagsFirst: kubectl's flags after the arguments are moved before them, for explain and
// plan only.
func TestFlagsFirst(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"kubectl-machinist explain machine m1 -n ns --kubeconfig k", "kubectl-machinist explain -n ns --kubeconfig k machine m1"},
		{"machinist explain -o json machinedeployment d --context=c", "machinist explain -o json --context=c machinedeployment d"},
		{"machinist plan -f - -o json", "machinist plan -f - -o json"},
		{"machinist plan x.yaml -f y.yaml", "machinist plan -f y.yaml x.yaml"},
		{"machinist driver create --class c", "machinist driver create --class c"},
		{"machinist explain machine m -- -odd", "machinist explain machine m -odd"},
	} {
		if got := strings.Join(flagsFirst(strings.Fields(tc.in)), " "); got != tc.want {
			t.Errorf("flagsFirst(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if args := []string{"machinist", "version"}; !slices.Equal(flagsFirst(args), args) {
		t.Error("other commands changed")
	}
}
