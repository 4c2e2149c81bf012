package driver

import "testing"

func TestSameProviderID(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		same bool
	}{
		{"openstack:///5c1a", "openstack:///5c1a", true},
		{"openstack:///5c1a", "openstack:///5c1b", false},
		// GCE: the cloud controller manager's two slashes, Gardener's three.
		{"gce://proj/europe-west1-b/shoot-worker-1", "gce:///proj/europe-west1-b/shoot-worker-1", true},
		{"gce://proj/europe-west1-b/shoot-worker-1", "gce:///proj/europe-west1-c/shoot-worker-1", false},
		{"gce://proj/europe-west1-b/shoot-worker-1", "gce:///other/europe-west1-b/shoot-worker-1", false},
		// AWS: the zone form of the cloud controller manager and machinist, Gardener's region form.
		{"aws:///eu-west-1a/i-0abc", "aws:///eu-west-1/i-0abc", true},
		{"aws:///eu-west-1a/i-0abc", "aws:///eu-west-1a/i-0abd", false},
		{"aws:///eu-west-1a/i-0abc", "aws://eu-west-1a/i-0abc", true},
		// Different clouds never match, nor does an empty ID.
		{"aws:///i-0abc", "gce:///i-0abc", false},
		{"", "", false},
		{"local:///m-1", "", false},
		{"azure:///subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/vm-1", "azure:///subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/vm-1", true},
		{"azure:///subscriptions/s/resourceGroups/rg1/providers/Microsoft.Compute/virtualMachines/vm-1", "azure:///subscriptions/s/resourceGroups/rg2/providers/Microsoft.Compute/virtualMachines/vm-1", false},
		// Not a URL: compared as it is.
		{"vm-1", "vm-1", true},
		{"vm-1", "vm-2", false},
	} {
		if got := SameProviderID(tc.a, tc.b); got != tc.same {
			t.Errorf("SameProviderID(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.same)
		}
		if got := SameProviderID(tc.b, tc.a); got != tc.same {
			t.Errorf("SameProviderID(%q, %q) = %v, want %v (symmetry)", tc.b, tc.a, got, tc.same)
		}
		if tc.a != "" && tc.b != "" && (ProviderIDKey(tc.a) == ProviderIDKey(tc.b)) != tc.same {
			t.Errorf("ProviderIDKey(%q) = %q, ProviderIDKey(%q) = %q: equal keys must mean the same VM", tc.a, ProviderIDKey(tc.a), tc.b, ProviderIDKey(tc.b))
		}
	}
}
