package plan_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/harness/ctrltest"
	"github.com/machinist-io/machinist/harness/machinetest"
	"github.com/machinist-io/machinist/internal/logbridge"
)

var update = flag.Bool("update", false, "rewrite testdata/scenarios.golden from the plans")

// scenario is a deployment, settled, and a change of it.
type scenario struct {
	name                  string
	replicas, surge, down int32
	recreate              bool
	change                func(d *v1alpha1.MachineDeployment)
	// settled: the class and number of machines once the change is done
	class string
	after int
}

func toClassB(d *v1alpha1.MachineDeployment) { d.Spec.Template.Spec.Class.Name = "b" }

var scenarios = []scenario{
	{name: "rolling-3-surge-1-unavailable-0-class-change", replicas: 3, surge: 1, down: 0, change: toClassB, class: "b", after: 3},
	{name: "rolling-3-surge-0-unavailable-1-class-change", replicas: 3, surge: 0, down: 1, change: toClassB, class: "b", after: 3},
	{name: "rolling-4-surge-2-unavailable-1-class-change", replicas: 4, surge: 2, down: 1, change: toClassB, class: "b", after: 4},
	{name: "rolling-4-surge-0-unavailable-2-class-change", replicas: 4, surge: 0, down: 2, change: toClassB, class: "b", after: 4},
	{name: "rolling-3-surge-3-unavailable-0-class-change", replicas: 3, surge: 3, down: 0, change: toClassB, class: "b", after: 3},
	{name: "recreate-2-class-change", replicas: 2, recreate: true, change: toClassB, class: "b", after: 2},
	{name: "rolling-2-scale-to-4", replicas: 2, surge: 1, down: 0, change: func(d *v1alpha1.MachineDeployment) { d.Spec.Replicas = 4 }, class: "a", after: 4},
	{name: "rolling-2-scale-to-1", replicas: 2, surge: 1, down: 0, change: func(d *v1alpha1.MachineDeployment) { d.Spec.Replicas = 1 }, class: "a", after: 1},
}

// TestGoldenScenarios: for every scenario the plan is the golden one, and the controller then
// makes exactly the planned writes, step by step (the sizes of the sets after each write).
//
// A step of the plan is one decision of the MachineDeployment controller made on a settled world
// (rollout.Project: every set has its machines, all Running and available, none terminating).
// The controllers run as `machinist run` runs them, with one difference: the MachineDeployment
// controller decides only once the world is settled in its own cache (Options.Gate, settled),
// while the MachineSet and Machine controllers and the local provider's nodes work freely. So
// every scenario is compared step by step, those with several machines in flight too: left to
// decide on every machine event, the controller acts as each single machine becomes available,
// and its steps may then be finer than the plan's waves (TestClassChangePlansRolloutOneAtATime
// runs ungated: with one machine in flight at a time the steps are equal either way).
func TestGoldenScenarios(t *testing.T) {
	// manager.New sets klog's process-wide logger once; set it before the scenarios' managers
	// start in parallel, so none of them writes it while another's requests read it.
	logbridge.Use(ctrltest.Logger().Handler())
	var mu sync.Mutex
	got := map[string]string{}
	t.Run("scenarios", func(t *testing.T) {
		for _, sc := range scenarios {
			t.Run(sc.name, func(t *testing.T) {
				t.Parallel()
				text := runScenario(t, sc)
				mu.Lock()
				got[sc.name] = text
				mu.Unlock()
			})
		}
	})
	if t.Failed() {
		return
	}
	var b strings.Builder
	b.WriteString("# The plans of the golden scenarios (TestGoldenScenarios; go test -update rewrites it).\n")
	b.WriteString("# Each step is the MachineSets' sizes after one write of the controller, sets at 0 left out.\n")
	for _, sc := range scenarios {
		fmt.Fprintf(&b, "\n%s\n", got[sc.name])
	}
	path := filepath.Join("testdata", "scenarios.golden")
	if *update {
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to write it)", err)
	}
	if string(want) != b.String() {
		t.Fatalf("plans differ from %s (go test -update rewrites it after review):\n--- got\n%s\n--- want\n%s", path, b.String(), want)
	}
}

// runScenario settles the deployment, plans the change, applies it and compares.
func runScenario(t *testing.T, sc scenario) string {
	w := newWorld(t)
	w.class("a", nil)
	w.class("b", nil)
	d := machinetest.Deployment("", "pool", "a", sc.replicas, machinetest.Pool("pool"), sc.surge, sc.down)
	if sc.recreate {
		d.Spec.Strategy = v1alpha1.MachineDeploymentStrategy{Type: v1alpha1.RecreateMachineDeploymentStrategyType}
	}
	w.create(d)
	opts := ctrltest.ProductOptions(t, w.cfg, w.ns)
	opts.MachineDeployment.Gate = settled
	ctrltest.RunProduct(t, opts)
	w.waitSettled("pool", "a", int(sc.replicas), 4*time.Minute)

	d = w.deployment("pool")
	sc.change(d)
	p := w.plan(d)
	executed := applyAndRecord(w, d, "pool", sc.class, sc.after)
	if strings.Join(executed, "\n") != strings.Join(p.Steps, "\n") {
		t.Errorf("executed steps differ from the plan:\nplanned:\n  %s\nexecuted:\n  %s", strings.Join(p.Steps, "\n  "), strings.Join(executed, "\n  "))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s, %d replaced, maxSurge %d, maxUnavailable %d\n", sc.name, p.Action, p.MachinesReplaced, p.MaxSurge, p.MaxUnavailable)
	for i, s := range p.Steps {
		if s == "" {
			s = "(every set at 0)"
		}
		fmt.Fprintf(&b, "  step %d: %s\n", i+1, s)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// settled is the golden test's gate of the MachineDeployment controller: the world of the
// deployment's namespace is as rollout.Settle leaves it. Every machine is Running and not being
// deleted, every MachineSet has as many machines as its replicas and a status that says so for
// its generation.
func settled(ctx context.Context, c client.Reader, d *v1alpha1.MachineDeployment) bool {
	var sets v1alpha1.MachineSetList
	var machines v1alpha1.MachineList
	if c.List(ctx, &sets, client.InNamespace(d.Namespace)) != nil || c.List(ctx, &machines, client.InNamespace(d.Namespace)) != nil {
		return false
	}
	count := map[types.UID]int32{}
	for _, m := range machines.Items {
		ref := metav1.GetControllerOf(&m)
		if m.DeletionTimestamp != nil || m.Status.CurrentStatus.Phase != v1alpha1.MachineRunning || ref == nil {
			return false
		}
		count[ref.UID]++
	}
	for _, ms := range sets.Items {
		n, st := ms.Spec.Replicas, ms.Status
		if ms.DeletionTimestamp != nil || count[ms.UID] != n || st.ObservedGeneration != ms.Generation ||
			st.Replicas != n || st.ReadyReplicas != n || st.AvailableReplicas != n {
			return false
		}
	}
	return true
}
