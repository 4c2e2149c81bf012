package openstackreal

import (
	"context"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/kit"
)

// TestStopStartAndShelve stops and starts a machine's server through the driver with Nova's
// os-stop/os-start (the default standby mode), then shelves and unshelves it (mode shelve): the
// server reaches SHUTOFF and SHELVED_OFFLOADED, comes back ACTIVE with the same ID and address,
// GetMachineStatus reports it while it is down, and nothing is left after the delete.
func TestStopStartAndShelve(t *testing.T) {
	need(t)
	t.Parallel()
	const cluster = "kubernetes.io-cluster-shoot--machinist--standby"
	spec := simpleSpec(t)
	spec.Tags = map[string]string{cluster: "1", roleKey: "1"}
	plain := classOf(t, "real-standby", spec)
	shelve := plain.DeepCopy()
	shelve.Annotations = map[string]string{kit.StandbyModeAnnotation: "shelve"}
	d, _ := newDriver(t)
	c := userClients(t, osr(t, "PROJECT"))
	secret := passwordSecret(t, osr(t, "PROJECT"))
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	m := &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "standby-0", Namespace: "default"}}
	created, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: m, MachineClass: plain, Secret: secret})
	if err != nil {
		t.Fatalf("CreateMachine: %v", err)
	}
	t.Cleanup(func() {
		dctx, dcancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer dcancel()
		if _, err := d.DeleteMachine(dctx, &driver.DeleteMachineRequest{Machine: m, MachineClass: plain, Secret: secret}); err != nil {
			t.Errorf("DeleteMachine: %v", err)
		}
		if left, err := c.leftovers(dctx, cluster); err != nil || len(left) > 0 {
			t.Errorf("after the delete the cloud holds %v (%v)", left, err)
		}
	})
	id := created.ProviderID[len(created.ProviderID)-36:]
	for _, step := range []struct {
		class *v1alpha1.MachineClass
		down  string
	}{{plain, "SHUTOFF"}, {shelve, "SHELVED_OFFLOADED"}} {
		began := time.Now()
		if _, err := d.StopMachine(ctx, &driver.StopMachineRequest{Machine: m, MachineClass: step.class, Secret: secret}); err != nil {
			t.Fatalf("StopMachine (%s): %v", step.down, err)
		}
		waitServer(t, ctx, c, id, step.down)
		t.Logf("%s after %s", step.down, time.Since(began).Round(time.Millisecond))
		st, err := d.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: m, MachineClass: step.class, Secret: secret})
		if err != nil || st.ProviderID != created.ProviderID {
			t.Fatalf("GetMachineStatus of the %s server = %+v, %v; want it reported", step.down, st, err)
		}
		began = time.Now()
		started, err := d.StartMachine(ctx, &driver.StartMachineRequest{Machine: m, MachineClass: step.class, Secret: secret})
		if err != nil {
			t.Fatalf("StartMachine from %s: %v", step.down, err)
		}
		if started.ProviderID != created.ProviderID || len(started.Addresses) == 0 || started.Addresses[0] != created.Addresses[0] {
			t.Fatalf("StartMachine from %s = %+v; want CreateMachine's identity %+v", step.down, started, created)
		}
		waitServer(t, ctx, c, id, "ACTIVE")
		t.Logf("ACTIVE again from %s after %s", step.down, time.Since(began).Round(time.Millisecond))
	}
}

// waitServer waits until the server is in status with no task running.
func waitServer(t *testing.T, ctx context.Context, c *clients, id, status string) {
	t.Helper()
	var last string
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		s, err := servers.Get(ctx, c.compute, id).Extract()
		if err != nil {
			return false, err
		}
		last = s.Status + "/" + s.TaskState
		return s.Status == status && s.TaskState == "", nil
	})
	if err != nil {
		t.Fatalf("server %s did not reach %s (last %s): %v", id, status, last, err)
	}
}
