package openstack

import (
	"slices"
	"testing"

	"github.com/machinist-io/machinist/core/cloudmetrics/cloudmetricstest"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/openstack/fakeopenstack"
)

// TestCloudAPIRequestsCountedAsMCMsProviderCounts: creating and deleting a boot-from-volume
// machine counts requests to nova, neutron, cinder and glance (MCM's service names, glance for
// the image lookup MCM makes through nova), none to Keystone; a quota refusal counts a failed
// nova request, a 404 none.
func TestCloudAPIRequestsCountedAsMCMsProviderCounts(t *testing.T) {
	cloud := startCloud(t, fakeopenstack.Options{})
	d, _ := testDriver(t)
	ctx := ctxT(t)
	secret := passwordSecret(cloud)
	class := testClass(t, func(s *MachineProviderConfigSpec) { s.RootDiskSize = 20 })
	reqBefore, failBefore, _ := cloudmetricstest.Counts(t, ProviderName)

	m := machine("worker-metrics")
	resp, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: m, MachineClass: class, Secret: secret})
	if err != nil {
		t.Fatalf("CreateMachine: %v", err)
	}
	if _, err := d.DeleteMachine(ctx, &driver.DeleteMachineRequest{Machine: withProviderID(m, resp.ProviderID), MachineClass: class, Secret: secret}); err != nil {
		t.Fatalf("DeleteMachine: %v", err)
	}
	// The server is gone: Nova answers 404, which MCM does not count as a failure.
	if _, err := d.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: withProviderID(m, resp.ProviderID), MachineClass: class, Secret: secret}); !driver.IsCode(err, driver.NotFound) {
		t.Fatalf("GetMachineStatus of a deleted machine: %v, want NotFound", err)
	}
	cloud.Faults.Inject(fakeopenstack.ServerQuotaExceeded(1))
	if _, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine("worker-quota"), MachineClass: class, Secret: secret}); err == nil {
		t.Fatal("CreateMachine beyond quota succeeded")
	}

	req, failed, _ := cloudmetricstest.Counts(t, ProviderName)
	for svc, n := range req {
		if !slices.Contains([]string{serviceNova, serviceNeutron, serviceCinder, serviceGlance}, svc) {
			t.Errorf("requests counted for service %q (%v): Keystone and unknown endpoints are not counted", svc, n)
		}
	}
	for _, svc := range []string{serviceNova, serviceNeutron, serviceCinder, serviceGlance} {
		if req[svc] <= reqBefore[svc] {
			t.Errorf("no %s requests counted (%v before, %v after)", svc, reqBefore[svc], req[svc])
		}
	}
	if got := failed[serviceNova] - failBefore[serviceNova]; got != 1 {
		t.Errorf("failed nova requests rose by %v, want 1 (the quota refusal; the 404 is no failure)", got)
	}
	for _, svc := range []string{serviceNeutron, serviceCinder, serviceGlance} {
		if failed[svc] != failBefore[svc] {
			t.Errorf("failed %s requests rose by %v, want 0", svc, failed[svc]-failBefore[svc])
		}
	}
}
