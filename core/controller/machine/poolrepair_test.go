package machine_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	testclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	machinistv1alpha1 "github.com/machinist-io/machinist/core/apis/machinist/v1alpha1"
	"github.com/machinist-io/machinist/harness/ctrltest"
)

// TestPoolRepairBudget: a PoolPolicy's spec.repair.maxInFlight replaces the per-deployment
// limit across the pool's deployments. A budget of 1 over three deployments of 1 replaces one
// of three unhealthy machines at a time (the per-deployment limit would replace all three); a
// budget of 50% over a deployment of 4 replaces two of four (the per-deployment limit, 1).
func TestPoolRepairBudget(t *testing.T) {
	cases := []struct {
		name        string
		maxInFlight string
		deployments map[string]int32
		failed      int
	}{
		{"one of three", "1", map[string]int32{"a": 1, "b": 1, "c": 1}, 1},
		{"half of four", "50%", map[string]int32{"d": 4}, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := ctrltest.NewEnv(t)
			drv := localProvider(t, e)
			clk := testclock.NewFakeClock(time.Now())
			e.Create(&machinistv1alpha1.PoolPolicy{
				ObjectMeta: metav1.ObjectMeta{Name: "workers"},
				Spec: machinistv1alpha1.PoolPolicySpec{
					Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"worker-pool": "workers"}},
					Repair:   machinistv1alpha1.PoolRepair{MaxInFlight: ptr.To(intstr.Parse(tc.maxInFlight))},
				},
			})
			var names []string
			for d, replicas := range tc.deployments {
				of := ownedBy(t, e, e.Name(d), replicas)
				labelDeployment(t, e, e.Name(d))
				for i := range replicas {
					n := e.Name(fmt.Sprintf("%s-%d", d, i+1))
					e.Machine(n, "local", of)
					names = append(names, n)
				}
			}
			opts := ctrltest.FastOptions()
			opts.HealthTimeout = 10 * time.Minute
			opts.Clock = clk
			e.StartControllers(opts, true, nil)
			for _, n := range names {
				e.WaitPhase(n, v1alpha1.MachineRunning, 60*time.Second)
			}
			for _, n := range names {
				if err := drv.SetHeartbeat(t.Context(), n, false); err != nil {
					t.Fatal(err)
				}
			}
			for _, n := range names {
				e.WaitPhase(n, v1alpha1.MachineUnknown, 30*time.Second)
			}
			clk.Step(11 * time.Minute) // past the health timeout of all of them
			for _, n := range names {
				e.Touch(n)
			}
			var failed, held []string
			for len(failed) < tc.failed {
				f := waitOneFailed(t, e, without(names, failed), 30*time.Second)
				failed = append(failed, f)
			}
			held = without(names, failed)
			for _, f := range failed {
				waitHeldBack(t, e, f, held)
			}
			for _, n := range held {
				if m := e.Get(n); m.Status.CurrentStatus.Phase != v1alpha1.MachineUnknown {
					t.Errorf("%s: %s; want it held back by the pool's repair budget", n, ctrltest.Describe(m))
				}
			}
		})
	}
}

// labelDeployment puts a deployment in the pool "workers".
func labelDeployment(t *testing.T, e *ctrltest.Env, name string) {
	t.Helper()
	d := &v1alpha1.MachineDeployment{}
	if err := e.C.Get(context.Background(), client.ObjectKey{Namespace: e.NS, Name: name}, d); err != nil {
		t.Fatal(err)
	}
	d.Labels = map[string]string{"worker-pool": "workers"}
	if err := e.C.Update(context.Background(), d); err != nil {
		t.Fatal(err)
	}
}

func without(all, some []string) []string {
	var out []string
	for _, n := range all {
		keep := true
		for _, s := range some {
			keep = keep && s != n
		}
		if keep {
			out = append(out, n)
		}
	}
	return out
}
