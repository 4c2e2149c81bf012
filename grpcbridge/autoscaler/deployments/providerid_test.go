package deployments

import (
	"log/slog"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/grpcbridge/autoscaler"
)

// TestNodeSpellingsFindTheirMachine: Cluster Autoscaler sends nodes as their kubelet or cloud
// controller manager spelled the provider ID, which is not always the machine's spelling (GCE's
// two slashes against Gardener's three, AWS's zone against Gardener's region). Each finds its
// machine; another VM's ID finds none.
func TestNodeSpellingsFindTheirMachine(t *testing.T) {
	ix := newIndex(slog.New(slog.DiscardHandler), time.Now, nil)
	machines := map[string]string{
		"gcp-1": "gce:///proj/europe-west1-b/shoot-worker-1",
		"aws-1": "aws:///eu-west-1/i-0abc",
		"os-1":  "openstack:///5c1a",
	}
	for name, pid := range machines {
		ix.putMachine(&v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: "1"}, Spec: v1alpha1.MachineSpec{ProviderID: pid}})
	}
	for nodeID, want := range map[string]string{
		"gce://proj/europe-west1-b/shoot-worker-1":  "gcp-1",
		"gce:///proj/europe-west1-b/shoot-worker-1": "gcp-1",
		"aws:///eu-west-1a/i-0abc":                  "aws-1",
		"openstack:///5c1a":                         "os-1",
		"gce://proj/europe-west1-c/shoot-worker-1":  "",
		"aws:///eu-west-1a/i-0abd":                  "",
	} {
		ix.mu.RLock()
		m := ix.machineForNodeLocked(autoscaler.Node{ProviderID: nodeID, Name: "unrelated"})
		ix.mu.RUnlock()
		got := ""
		if m != nil {
			got = m.Name
		}
		if got != want {
			t.Errorf("node %s: machine %q, want %q", nodeID, got, want)
		}
	}
}

// TestInstanceIDIsTheNodesSpelling: a GCE machine is reported with the ID its node carries, or
// Cluster Autoscaler would take it for an unregistered node and delete it.
func TestInstanceIDIsTheNodesSpelling(t *testing.T) {
	for recorded, want := range map[string]string{
		"gce:///proj/europe-west1-b/shoot-worker-1": "gce://proj/europe-west1-b/shoot-worker-1",
		"gce://proj/europe-west1-b/shoot-worker-1":  "gce://proj/europe-west1-b/shoot-worker-1",
		"aws:///eu-west-1a/i-0abc":                  "aws:///eu-west-1a/i-0abc",
		"local:///m-1":                              "local:///m-1",
	} {
		m := &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m"}, Spec: v1alpha1.MachineSpec{ProviderID: recorded}}
		if got := Instance(m).ID; got != want {
			t.Errorf("Instance(%s).ID = %s, want %s", recorded, got, want)
		}
	}
}
