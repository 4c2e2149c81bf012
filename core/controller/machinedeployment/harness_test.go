package machinedeployment_test

import (
	"context"
	"testing"

	"k8s.io/utils/clock"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/machinedeployment"
	"github.com/machinist-io/machinist/core/controller/machineset"
	"github.com/machinist-io/machinist/harness/ctrltest"
	"github.com/machinist-io/machinist/harness/machinetest"
	"github.com/machinist-io/machinist/harness/testenv"
)

// One control plane serves every test of the package; each test has its own namespace.
func TestMain(m *testing.M) { ctrltest.Main(m) }

// env is one test's namespace, clients and running controllers.
type env struct {
	t    *testing.T
	ns   string
	c    client.WithWatch
	ctrl *ctrltest.Env
	// clock, when set, is the controllers' clock.
	clock clock.PassiveClock
}

func newEnv(t *testing.T) *env {
	t.Helper()
	ce := ctrltest.NewEnv(t)
	c, err := client.NewWithWatch(ce.Config, client.Options{Scheme: testenv.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, ns: ce.NS, c: c, ctrl: ce}
}

// startControllers runs the MachineSet and MachineDeployment controllers for the namespace until
// the returned stop is called (or the test ends).
func (e *env) startControllers() (stop func()) {
	e.t.Helper()
	e.ctrl.StartManager(func(mgr manager.Manager) error {
		if err := machineset.Setup(mgr, machineset.Options{Clock: e.clock}); err != nil {
			return err
		}
		return machinedeployment.Setup(mgr, machinedeployment.Options{Clock: e.clock})
	})
	return e.ctrl.StopControllers
}

func (e *env) deployment(name string, replicas int32, class string, surge, unavailable int) *v1alpha1.MachineDeployment {
	return machinetest.Deployment(e.ns, name, class, replicas, machinetest.Pool(name), int32(surge), int32(unavailable))
}

func (e *env) create(obj client.Object) {
	e.t.Helper()
	if err := e.c.Create(context.Background(), obj); err != nil {
		e.t.Fatal(err)
	}
}

// update re-reads obj, applies change and writes it, retrying on conflicts.
func update[T client.Object](e *env, obj T, change func(T)) {
	e.t.Helper()
	for range 20 {
		if err := e.c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			e.t.Fatal(err)
		}
		change(obj)
		err := e.c.Update(context.Background(), obj)
		if err == nil {
			return
		}
		if !isConflict(err) {
			e.t.Fatal(err)
		}
	}
	e.t.Fatalf("update %s: too many conflicts", obj.GetName())
}

func (e *env) machines() []v1alpha1.Machine {
	e.t.Helper()
	var list v1alpha1.MachineList
	if err := e.c.List(context.Background(), &list, client.InNamespace(e.ns)); err != nil {
		e.t.Fatal(err)
	}
	return list.Items
}

func (e *env) sets() []v1alpha1.MachineSet {
	e.t.Helper()
	var list v1alpha1.MachineSetList
	if err := e.c.List(context.Background(), &list, client.InNamespace(e.ns)); err != nil {
		e.t.Fatal(err)
	}
	return list.Items
}

// running counts machines by class: all (terminating included) and Running.
func running(ms []v1alpha1.Machine, class string) (all, run int) {
	for _, m := range ms {
		if class != "" && m.Spec.Class.Name != class {
			continue
		}
		all++
		if m.DeletionTimestamp == nil && m.Status.CurrentStatus.Phase == v1alpha1.MachineRunning {
			run++
		}
	}
	return all, run
}
