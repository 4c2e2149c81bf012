package machine_test

import (
	"context"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/harness/ctrltest"
	"github.com/machinist-io/machinist/providers/local"
)

// countCreates wraps a driver and counts its CreateMachine calls per machine.
type countCreates struct {
	driver.Driver
	mu sync.Mutex
	n  map[string]int
}

func (c *countCreates) CreateMachine(ctx context.Context, req *driver.CreateMachineRequest) (*driver.CreateMachineResponse, error) {
	c.mu.Lock()
	c.n[req.Machine.Name]++
	c.mu.Unlock()
	return c.Driver.CreateMachine(ctx, req)
}

func (c *countCreates) of(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[name]
}

// TestNoVMForMachineAboutToBeDeleted: a machine without a VM whose MachineSet has fewer replicas
// than machines (scaled down; its controller is about to delete one) or that is being deleted
// gets no CreateMachine call. No MachineSet controller runs here, so the machine stays surplus
// as long as the test wants: it waits, and is created once its set needs it.
func TestNoVMForMachineAboutToBeDeleted(t *testing.T) {
	e := ctrltest.NewEnv(t)
	ld := localProvider(t, e)
	drv := &countCreates{Driver: ld, n: map[string]int{}}
	e.Drivers.Set(local.ProviderName, drv)

	ms := &v1alpha1.MachineSet{
		ObjectMeta: metav1.ObjectMeta{Name: "s", Labels: map[string]string{"pool": "s"}},
		Spec:       v1alpha1.MachineSetSpec{Replicas: 0, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "s"}}},
	}
	e.Create(ms)
	ofSet := func(m *v1alpha1.Machine) {
		m.Labels = map[string]string{"pool": "s"}
		m.OwnerReferences = []metav1.OwnerReference{{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "MachineSet", Name: ms.Name, UID: ms.UID, Controller: ptr.To(true)}}
	}
	surplus := e.Name("surplus")
	e.Machine(surplus, "local", ofSet)
	deleting := e.Name("deleting")
	e.Machine(deleting, "local", ofSet, func(m *v1alpha1.Machine) { m.Finalizers = []string{v1alpha1.FinalizerMachineControllerManager} })
	if err := e.C.Delete(context.Background(), &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: e.NS, Name: deleting}}); err != nil {
		t.Fatal(err)
	}
	e.StartControllers(ctrltest.FastOptions(), true, nil)

	e.WaitGone(deleting, 30*time.Second)
	// Many reconciles of the surplus machine (retries every ShortRetry, 100ms): none creates.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if m := e.Get(surplus); m == nil || m.Spec.ProviderID != "" || drv.of(surplus) != 0 {
			t.Fatalf("surplus machine of a set of 0 replicas: %d CreateMachine calls, %s", drv.of(surplus), ctrltest.Describe(m))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := drv.of(deleting); n != 0 {
		t.Fatalf("%d CreateMachine calls for a machine being deleted", n)
	}

	// The set needs it after all: it is created.
	patch := client.MergeFrom(ms.DeepCopy())
	ms.Spec.Replicas = 2
	if err := e.C.Patch(context.Background(), ms, patch); err != nil {
		t.Fatal(err)
	}
	e.WaitPhase(surplus, v1alpha1.MachineRunning, 60*time.Second)
	if n := drv.of(surplus); n != 1 {
		t.Fatalf("%d CreateMachine calls once the set needs the machine, want 1", n)
	}
}

// statusHook wraps a driver and runs a hook once, inside the first GetMachineStatus of a machine:
// what happens while the machine controller waits for the driver.
type statusHook struct {
	driver.Driver
	name string
	once sync.Once
	hook func()
}

func (h *statusHook) GetMachineStatus(ctx context.Context, req *driver.GetMachineStatusRequest) (*driver.GetMachineStatusResponse, error) {
	if req.Machine.Name == h.name {
		h.once.Do(h.hook)
	}
	return h.Driver.GetMachineStatus(ctx, req)
}

// TestNoVMForMachineDeletedDuringItsReconcile: while the controller asks the driver whether the
// machine has a VM, its MachineSet (scaled to 0) deletes it and writes a status that no longer
// counts it. The controller's copy of the machine is from before; the set's status says "no
// surplus". No CreateMachine call may follow (it flaked so under MCM's CRDs in the handover test).
func TestNoVMForMachineDeletedDuringItsReconcile(t *testing.T) {
	e := ctrltest.NewEnv(t)
	ld := localProvider(t, e)
	counted := &countCreates{Driver: ld, n: map[string]int{}}
	name := e.Name("victim")

	ms := &v1alpha1.MachineSet{
		ObjectMeta: metav1.ObjectMeta{Name: "s", Labels: map[string]string{"pool": "s"}},
		Spec:       v1alpha1.MachineSetSpec{Replicas: 1, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "s"}}},
	}
	e.Create(ms)
	hooked := make(chan struct{})
	e.Drivers.Set(local.ProviderName, &statusHook{Driver: counted, name: name, hook: func() {
		defer close(hooked)
		ctx := context.Background()
		// What the set's controller does on a scale-down: delete the machine, then write a
		// status from which it is gone.
		patch := client.MergeFrom(ms.DeepCopy())
		ms.Spec.Replicas = 0
		if err := e.C.Patch(ctx, ms, patch); err != nil {
			t.Error(err)
			return
		}
		if err := e.C.Delete(ctx, &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: e.NS, Name: name}}); err != nil {
			t.Error(err)
			return
		}
		ms.Status = v1alpha1.MachineSetStatus{ObservedGeneration: ms.Generation, Replicas: 0}
		if err := e.C.Status().Update(ctx, ms); err != nil {
			t.Error(err)
			return
		}
		// Let the controller's cache catch up with both before the driver answers.
		time.Sleep(time.Second)
	}})
	e.Machine(name, "local", func(m *v1alpha1.Machine) {
		m.Labels = map[string]string{"pool": "s"}
		m.OwnerReferences = []metav1.OwnerReference{{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "MachineSet", Name: ms.Name, UID: ms.UID, Controller: ptr.To(true)}}
		m.Finalizers = []string{v1alpha1.FinalizerMachineControllerManager}
	})
	e.StartControllers(ctrltest.FastOptions(), true, nil)

	select {
	case <-hooked:
	case <-time.After(30 * time.Second):
		t.Fatal("the controller never asked the driver for the machine's VM")
	}
	e.WaitGone(name, 30*time.Second)
	if n := counted.of(name); n != 0 {
		t.Fatalf("%d CreateMachine calls for a machine deleted while its reconcile waited for the driver", n)
	}
}
