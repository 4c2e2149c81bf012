package safety_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/machinedeployment"
	"github.com/machinist-io/machinist/core/controller/machineset"
	"github.com/machinist-io/machinist/core/controller/machineset/machinesettest"
	"github.com/machinist-io/machinist/core/controller/safety"
	"github.com/machinist-io/machinist/core/drivertest/memdriver"
	"github.com/machinist-io/machinist/core/registry"
	"github.com/machinist-io/machinist/harness/ctrltest"
	"github.com/machinist-io/machinist/harness/machinetest"
	"github.com/machinist-io/machinist/harness/testenv"
	"github.com/machinist-io/machinist/internal/eventually"
)

// TestOvershootScaleDownDoesNotFreeze: a MachineDeployment of 300 machines scaled to 0
// is above its new limit (0 + surge 1 + safety-up 2) for the whole scale-down, with the machines
// it had; none of its sets or the deployment is ever frozen, with checks every 300 ms.
func TestOvershootScaleDownDoesNotFreeze(t *testing.T) {
	e := ctrltest.NewEnv(t)
	startSetControllers(t, e)
	d := scaledUp(t, e, "pool", 300)

	freezes := watchFreezes(t, e)
	scale(t, e, d, 0)
	waitMachines(t, e, 5*time.Minute, "every machine gone", func(all, _ int) bool { return all == 0 })
	if got := freezes.stop(); len(got) > 0 {
		t.Fatalf("a scale-down froze: %v", got)
	}
	for _, name := range setNames(t, e) {
		if slices.Contains(e.EventReasons(name), "FrozeMachineSet") {
			t.Fatalf("MachineSet %s has a FrozeMachineSet event", name)
		}
	}
}

// TestOvershootRacingCreatorFreezes: a writer that keeps creating machines for a set (another
// controller, a stale cache) freezes the set and its deployment — in a steady set of 3, and in a
// set of 300 scaled to 0, whose own surplus does not freeze it but a creation does. Once the
// writer stops, the set deletes the surplus and is unfrozen.
func TestOvershootRacingCreatorFreezes(t *testing.T) {
	for _, tc := range []struct {
		name      string
		replicas  int32
		scaleDown bool
	}{
		{name: "steady", replicas: 3},
		{name: "during a scale-down", replicas: 300, scaleDown: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := ctrltest.NewEnv(t)
			startSetControllers(t, e)
			d := scaledUp(t, e, "pool", tc.replicas)
			set := currentSet(t, e)
			if tc.scaleDown {
				scale(t, e, d, 0)
			}
			stop := raceCreate(t, e, set)
			waitFrozenWithin(t, e, 2*time.Minute, set.Name, true, safety.ReasonOvershooting)
			stop()
			cur := &v1alpha1.MachineDeployment{}
			eventually.True(t, time.Minute, "deployment labelled frozen", func() bool {
				return e.C.Get(context.Background(), e.Key(d.Name), cur) == nil && cur.Labels[v1alpha1.LabelFreeze] == "True"
			})
			// Deleting goes on while frozen: the set deletes the writer's machines (and, scaled
			// down, its own) and is unfrozen below its limit.
			waitFrozenWithin(t, e, 2*time.Minute, set.Name, false, safety.ReasonUndershooting)
		})
	}
}

// startSetControllers runs the MachineSet, MachineDeployment and safety controllers of the
// test's namespace, with overshoot checks every 300 ms, until the test ends; a
// machinesettest.Lifecycle plays the Machine controller.
func startSetControllers(t *testing.T, e *ctrltest.Env) {
	t.Helper()
	memClass(e, memdriver.NewCloud())
	machinesettest.Start(t, e.C, e.NS, 0, 0)
	mgr, err := ctrl.NewManager(e.Config, ctrltest.ManagerOptions(e.NS))
	if err != nil {
		t.Fatal(err)
	}
	so := fastSafety()
	so.Namespace = e.NS
	so.Log = ctrltest.Logger()
	if _, err := safety.Setup(mgr, nil, &registry.Resolver{Endpoints: e.Drivers}, so); err != nil {
		t.Fatal(err)
	}
	if err := machineset.Setup(mgr, machineset.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := machinedeployment.Setup(mgr, machinedeployment.Options{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
}

// scaledUp creates a deployment of n machines (maxSurge 1) and waits until its set has made
// them all (the check counts machines whatever their phase; the lifecycle moves them on).
func scaledUp(t *testing.T, e *ctrltest.Env, name string, n int32) *v1alpha1.MachineDeployment {
	t.Helper()
	d := machinetest.Deployment(e.NS, name, "mem", n, machinetest.Pool(name), 1, 0)
	e.Create(d)
	waitMachines(t, e, 5*time.Minute, fmt.Sprintf("%d machines", n), func(all, _ int) bool { return all == int(n) })
	return d
}

func scale(t *testing.T, e *ctrltest.Env, d *v1alpha1.MachineDeployment, replicas int32) {
	t.Helper()
	patch := fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, replicas)
	if err := e.C.Patch(context.Background(), d, client.RawPatch("application/merge-patch+json", patch)); err != nil {
		t.Fatal(err)
	}
}

// waitMachines polls the namespace's machines (all, and Running ones not being deleted) every
// 50 ms until cond holds, failing the test after timeout.
func waitMachines(t *testing.T, e *ctrltest.Env, timeout time.Duration, what string, cond func(all, running int) bool) {
	t.Helper()
	var all, running int
	eventually.True(t, timeout, what, func() bool {
		var list v1alpha1.MachineList
		if err := e.C.List(context.Background(), &list, client.InNamespace(e.NS)); err != nil {
			return false
		}
		all, running = len(list.Items), 0
		for _, m := range list.Items {
			if m.DeletionTimestamp == nil && m.Status.CurrentStatus.Phase == v1alpha1.MachineRunning {
				running++
			}
		}
		return cond(all, running)
	})
}

// currentSet returns the namespace's only MachineSet.
func currentSet(t *testing.T, e *ctrltest.Env) *v1alpha1.MachineSet {
	t.Helper()
	var list v1alpha1.MachineSetList
	if err := e.C.List(context.Background(), &list, client.InNamespace(e.NS)); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 {
		t.Fatalf("want one MachineSet, have %d", len(list.Items))
	}
	return &list.Items[0]
}

func setNames(t *testing.T, e *ctrltest.Env) []string {
	t.Helper()
	var list v1alpha1.MachineSetList
	if err := e.C.List(context.Background(), &list, client.InNamespace(e.NS)); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range list.Items {
		out = append(out, s.Name)
	}
	return out
}

// raceCreate creates machines for set, five at a time every 100 ms, as a misbehaving writer
// would, until the returned stop is called (or after two minutes).
func raceCreate(t *testing.T, e *ctrltest.Env, set *v1alpha1.MachineSet) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			for range 5 {
				m := &v1alpha1.Machine{
					ObjectMeta: metav1.ObjectMeta{
						GenerateName: set.Name + "-racer-", Namespace: e.NS, Labels: set.Spec.Template.Labels,
						OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(set, v1alpha1.SchemeGroupVersion.WithKind("MachineSet"))},
					},
					Spec: set.Spec.Template.Spec,
				}
				if err := e.C.Create(ctx, m); err != nil && ctx.Err() == nil {
					t.Errorf("racing create: %v", err)
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(stop)
	return stop
}

// freezeWatch records every MachineSet or MachineDeployment of a namespace seen frozen.
type freezeWatch struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	seen   []string
}

// watchFreezes watches the namespace's sets and deployments until stop; it fails the test if a
// watch ends early (a freeze could go unseen).
func watchFreezes(t *testing.T, e *ctrltest.Env) *freezeWatch {
	t.Helper()
	c, err := client.NewWithWatch(e.Config, client.Options{Scheme: testenv.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &freezeWatch{cancel: cancel}
	for _, list := range []client.ObjectList{&v1alpha1.MachineSetList{}, &v1alpha1.MachineDeploymentList{}} {
		wi, err := c.Watch(ctx, list, client.InNamespace(e.NS))
		if err != nil {
			t.Fatal(err)
		}
		w.wg.Go(func() {
			defer wi.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case ev, ok := <-wi.ResultChan():
					if !ok {
						t.Errorf("watch of %T ended early", list)
						return
					}
					w.observe(ev)
				}
			}
		})
	}
	t.Cleanup(func() { w.stop() })
	return w
}

func (w *freezeWatch) observe(ev watch.Event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch o := ev.Object.(type) {
	case *v1alpha1.MachineSet:
		if safetyFrozen(o) {
			w.seen = append(w.seen, "MachineSet "+o.Name)
		}
	case *v1alpha1.MachineDeployment:
		if o.Labels[v1alpha1.LabelFreeze] == "True" {
			w.seen = append(w.seen, "MachineDeployment "+o.Name)
		}
	}
}

// stop ends the watches and returns what was seen frozen.
func (w *freezeWatch) stop() []string {
	w.cancel()
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seen
}
