package azure

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/machinist-io/machinist/core/cloudmetrics/cloudmetricstest"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/azure/fakeazure"
)

// TestCloudAPIRequestsCountedAsMCMsProviderCounts: a create, status, list and delete count
// their ARM operations under MCM's service names (virtual_machine_create, nic_create, …) in
// requests and durations; a refused operation counts only as failed, as MCM's Azure provider
// records it; a 404 lookup is a success.
func TestCloudAPIRequestsCountedAsMCMsProviderCounts(t *testing.T) {
	e := newTestEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	reqBefore, failBefore, _ := cloudmetricstest.Counts(t, ProviderName)

	resp := e.mustCreate(t, "metrics-1")
	m := machine("metrics-1")
	m.Spec.ProviderID = resp.ProviderID
	if _, err := e.drv.ListMachines(ctx, &driver.ListMachinesRequest{MachineClass: e.class, Secret: e.secret.DeepCopy()}); err != nil {
		t.Fatalf("ListMachines: %v", err)
	}
	if err := e.delete(t, e.class, "metrics-1"); err != nil {
		t.Fatalf("DeleteMachine: %v", err)
	}
	if _, err := e.drv.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: m, MachineClass: e.class, Secret: e.secret.DeepCopy()}); !driver.IsCode(err, driver.NotFound) {
		t.Fatalf("GetMachineStatus of a deleted machine: %v, want NotFound", err)
	}
	req, failed, timed := cloudmetricstest.Counts(t, ProviderName)
	for _, svc := range []string{"virtual_machine_create", "virtual_machine_get", "virtual_machine_delete", "nic_create", "subnet_get", "resource_list"} {
		if req[svc] <= reqBefore[svc] {
			t.Errorf("no %s requests counted: %v", svc, req)
		}
		if timed[svc] != req[svc] {
			t.Errorf("%s: %v requests but %v timed; MCM times every successful one", svc, req[svc], timed[svc])
		}
	}
	for svc := range req {
		if strings.Contains(svc, ".") {
			t.Errorf("operation %s is counted under its SDK name: give it an MCM-style name in apiServices", svc)
		}
	}
	for svc, n := range failed {
		if n != failBefore[svc] {
			t.Errorf("failed %s requests rose by %v in a run without failures (404s included)", svc, n-failBefore[svc])
		}
	}

	e.cloud.Faults.Inject(fakeazure.Deny(fakeazure.OpCreateNIC))
	if _, err := e.create(t, "metrics-2"); err == nil {
		t.Fatal("CreateMachine without the right to create NICs succeeded")
	}
	req2, failed2, _ := cloudmetricstest.Counts(t, ProviderName)
	if got := failed2["nic_create"] - failed["nic_create"]; got != 1 {
		t.Errorf("failed nic_create rose by %v, want 1", got)
	}
	if req2["nic_create"] != req["nic_create"] {
		t.Errorf("nic_create requests rose by %v on a refusal; MCM counts a failure only as failed", req2["nic_create"]-req["nic_create"])
	}
}
