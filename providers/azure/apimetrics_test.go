package azure

import (
	"context"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/machinist-io/machinist/core/cloudmetrics/cloudmetricsprom"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/azure/fakeazure"
)

// azureCounts reads mcm_cloud_api_requests_total, …_failed_total and the sample counts of
// …_api_request_duration_seconds of provider azure by service, checking MCM's label names.
func azureCounts(t *testing.T) (requests, failed, timed map[string]float64) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(cloudmetricsprom.Collector())
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	requests, failed, timed = map[string]float64{}, map[string]float64{}, map[string]float64{}
	dsts := map[string]map[string]float64{
		"mcm_cloud_api_requests_total":               requests,
		"mcm_cloud_api_requests_failed_total":        failed,
		"mcm_cloud_api_api_request_duration_seconds": timed,
	}
	for _, f := range fams {
		dst := dsts[f.GetName()]
		if dst == nil {
			continue
		}
		for _, m := range f.Metric {
			labels := map[string]string{}
			var names []string
			for _, l := range m.Label {
				labels[l.GetName()] = l.GetValue()
				names = append(names, l.GetName())
			}
			sort.Strings(names)
			if !slices.Equal(names, []string{"provider", "service"}) {
				t.Errorf("%s has labels %v, MCM's are provider and service", f.GetName(), names)
			}
			if labels["provider"] == ProviderName {
				dst[labels["service"]] += m.GetCounter().GetValue() + float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return requests, failed, timed
}

// TestCloudAPIRequestsCountedAsMCMsProviderCounts: a create, status, list and delete count
// their ARM operations under MCM's service names (virtual_machine_create, nic_create, …) in
// requests and durations; a refused operation counts only as failed, as MCM's Azure provider
// records it; a 404 lookup is a success.
func TestCloudAPIRequestsCountedAsMCMsProviderCounts(t *testing.T) {
	e := newTestEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	reqBefore, failBefore, _ := azureCounts(t)

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
	req, failed, timed := azureCounts(t)
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

	e.cloud.Inject(fakeazure.Deny(fakeazure.OpCreateNIC))
	if _, err := e.create(t, "metrics-2"); err == nil {
		t.Fatal("CreateMachine without the right to create NICs succeeded")
	}
	req2, failed2, _ := azureCounts(t)
	if got := failed2["nic_create"] - failed["nic_create"]; got != 1 {
		t.Errorf("failed nic_create rose by %v, want 1", got)
	}
	if req2["nic_create"] != req["nic_create"] {
		t.Errorf("nic_create requests rose by %v on a refusal; MCM counts a failure only as failed", req2["nic_create"]-req["nic_create"])
	}
}
