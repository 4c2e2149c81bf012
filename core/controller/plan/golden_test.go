package plan_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

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
	// wide: more than one machine is in flight at a time. The plan shows waves as if each
	// wave's machines became available together; the controller acts as each one does, so its
	// steps may be finer. Then the executed steps are checked against the budget and the end
	// the plan shows, not one by one.
	wide bool
}

func toClassB(d *v1alpha1.MachineDeployment) { d.Spec.Template.Spec.Class.Name = "b" }

var scenarios = []scenario{
	{name: "rolling-3-surge-1-unavailable-0-class-change", replicas: 3, surge: 1, down: 0, change: toClassB, class: "b", after: 3},
	{name: "rolling-3-surge-0-unavailable-1-class-change", replicas: 3, surge: 0, down: 1, change: toClassB, class: "b", after: 3},
	{name: "rolling-4-surge-2-unavailable-1-class-change", replicas: 4, surge: 2, down: 1, change: toClassB, class: "b", after: 4, wide: true},
	{name: "recreate-2-class-change", replicas: 2, recreate: true, change: toClassB, class: "b", after: 2},
	{name: "rolling-2-scale-to-4", replicas: 2, surge: 1, down: 0, change: func(d *v1alpha1.MachineDeployment) { d.Spec.Replicas = 4 }, class: "a", after: 4},
	{name: "rolling-2-scale-to-1", replicas: 2, surge: 1, down: 0, change: func(d *v1alpha1.MachineDeployment) { d.Spec.Replicas = 1 }, class: "a", after: 1},
}

// TestGoldenScenarios: for every scenario the plan is the golden one, and the controller then
// makes exactly the planned writes, step by step (the sizes of the sets after each write).
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
	w.start()
	w.waitSettled("pool", "a", int(sc.replicas), 4*time.Minute)

	d = w.deployment("pool")
	sc.change(d)
	p := w.plan(d)
	executed := applyAndRecord(w, d, "pool", sc.class, sc.after)
	if sc.wide {
		checkWithinPlan(t, sc, p.Steps, executed)
	} else if strings.Join(executed, "\n") != strings.Join(p.Steps, "\n") {
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

// checkWithinPlan: the executed steps end where the plan ends and never hold more machines than
// replicas + maxSurge, nor fewer than replicas - maxUnavailable.
func checkWithinPlan(t *testing.T, sc scenario, planned, executed []string) {
	t.Helper()
	if len(planned) == 0 || len(executed) == 0 || planned[len(planned)-1] != executed[len(executed)-1] {
		t.Errorf("executed steps %q do not end where the plan %q ends", executed, planned)
	}
	for i, s := range executed {
		if n := sumSizes(s); n > sc.replicas+sc.surge || n < sc.replicas-sc.down {
			t.Errorf("executed step %d %q holds %d machines, outside %d..%d", i+1, s, n, sc.replicas-sc.down, sc.replicas+sc.surge)
		}
	}
}
