package safety

import (
	"testing"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// TestOwnsAcrossSpellings: a Running machine accounts for its VM however the driver's list spells
// the VM's ID (a machine taken over from Gardener's AWS provider records aws:///<region>/i-…, the
// list says aws:///<zone>/i-…; GCE's two and three slashes), and for no other VM, which is then a
// duplicate.
func TestOwnsAcrossSpellings(t *testing.T) {
	running := func(pid string) *v1alpha1.Machine {
		m := &v1alpha1.Machine{Spec: v1alpha1.MachineSpec{ProviderID: pid}}
		m.Status.CurrentStatus.Phase = v1alpha1.MachineRunning
		return m
	}
	for _, tc := range []struct {
		recorded, listed string
		owns             bool
	}{
		{"aws:///eu-west-1/i-0abc", "aws:///eu-west-1a/i-0abc", true},
		{"aws:///eu-west-1/i-0abc", "aws:///eu-west-1a/i-0abd", false},
		{"gce:///proj/zone-b/worker-1", "gce://proj/zone-b/worker-1", true},
		{"gce:///proj/zone-b/worker-1", "gce:///proj/zone-c/worker-1", false},
		{"openstack:///5c1a", "openstack:///5c1a", true},
		{"openstack:///5c1a", "openstack:///5c1b", false},
	} {
		if got := owns(running(tc.recorded), tc.listed); got != tc.owns {
			t.Errorf("machine with %s owns listed %s = %v, want %v", tc.recorded, tc.listed, got, tc.owns)
		}
	}
}
