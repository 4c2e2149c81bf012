package aws

import (
	"context"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"github.com/machinist-io/machinist/core/cloudmetrics/cloudmetricstest"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/aws/fakeaws"
)

// TestCloudAPIRequestsCountedAsMCMsProviderCounts: each EC2 operation counts once (its retries
// included) under MCM's AWS service names (instance_get_by_id, instance_get_by_tag_and_status,
// instance_terminate, instance_disable_source_dest_check) or machinist's own after the same
// pattern; a success counts and is timed, a failure counts only as failed, as MCM records it.
func TestCloudAPIRequestsCountedAsMCMsProviderCounts(t *testing.T) {
	e := newTestEnv(t)
	e.class = e.classWith("nat", func(s *ProviderSpec) { s.SrcAndDstChecksEnabled = ptr.To(false) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	reqBefore, failBefore, _ := cloudmetricstest.Counts(t, ProviderName)

	e.cloud.Faults.Inject(fakeaws.Throttle("RunInstances", 1)) // retried by the SDK: one operation
	resp := e.mustCreate(t, "metrics-1")
	m := machine("metrics-1")
	m.Spec.ProviderID = resp.ProviderID
	if _, err := e.drv.InitializeMachine(ctx, &driver.InitializeMachineRequest{Machine: m, MachineClass: e.class, Secret: e.secret}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.drv.ListMachines(ctx, &driver.ListMachinesRequest{MachineClass: e.class, Secret: e.secret}); err != nil {
		t.Fatal(err)
	}
	if err := e.delete(t, e.class, m); err != nil {
		t.Fatal(err)
	}
	req, failed, timed := cloudmetricstest.Counts(t, ProviderName)
	for svc, want := range map[string]float64{
		serviceRunInstances: 1, serviceDescribeImages: 1, serviceTerminate: 1, serviceDisableSrcDst: 1,
	} {
		if got := req[svc] - reqBefore[svc]; got != want {
			t.Errorf("%s counted %v times, want %v", svc, got, want)
		}
	}
	for _, svc := range []string{serviceGetByID, serviceGetByTags} {
		if req[svc] <= reqBefore[svc] {
			t.Errorf("no %s requests counted: %v", svc, req)
		}
	}
	for svc := range req {
		if timed[svc] != req[svc] {
			t.Errorf("%s: %v requests but %v timed; MCM times every successful one", svc, req[svc], timed[svc])
		}
		if svc != serviceGetByID && svc != serviceGetByTags && svc != serviceRunInstances && svc != serviceDescribeImages &&
			svc != serviceTerminate && svc != serviceDisableSrcDst && svc != serviceAssignIpv6Prefix {
			t.Errorf("operation %s is counted under its SDK name: give it a name in apiService", svc)
		}
	}
	for svc, n := range failed {
		if n != failBefore[svc] {
			t.Errorf("failed %s requests rose by %v in a run without failures", svc, n-failBefore[svc])
		}
	}

	e.cloud.Faults.Inject(fakeaws.Deny("RunInstances"))
	if _, err := e.create(t, "metrics-2"); !driver.IsCode(err, driver.PermissionDenied) {
		t.Fatalf("CreateMachine without ec2:RunInstances = %v", err)
	}
	req2, failed2, _ := cloudmetricstest.Counts(t, ProviderName)
	if got := failed2[serviceRunInstances] - failed[serviceRunInstances]; got != 1 {
		t.Errorf("failed %s rose by %v, want 1", serviceRunInstances, got)
	}
	if req2[serviceRunInstances] != req[serviceRunInstances] {
		t.Errorf("%s requests rose on a refusal; MCM counts a failure only as failed", serviceRunInstances)
	}
}
