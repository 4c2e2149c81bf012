package machine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/fallback"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/harness/ctrltest"
	"github.com/machinist-io/machinist/internal/eventually"
)

// zoned is a fake cloud for the capacity fallback: one VM store per zone (a class's
// providerSpec "zone"), zones that are out of capacity, and hooks that make a call hang until
// the controller stops (a process dying mid-step) or fail as a dead provider does. Every
// successful create checks the invariant the fallback must keep: the machine has no VM in any
// other zone.
type zoned struct {
	mu         sync.Mutex
	vms        map[string]map[string]string // zone → machine → providerID
	full       map[string]bool
	leak       bool             // a refused create leaves a half-made VM behind
	hang       map[string]*hook // "Create a" → the call to hang
	fail       map[string]int   // "Status a" → calls left that fail Unavailable
	calls      map[string]int   // "Create a" → count
	violations []string
}

// hook hangs the call after skip more calls.
type hook struct {
	skip int
	hung chan struct{}
}

func newZoned() *zoned {
	return &zoned{vms: map[string]map[string]string{}, full: map[string]bool{}, hang: map[string]*hook{}, fail: map[string]int{}, calls: map[string]int{}}
}

func zoneOf(c *v1alpha1.MachineClass) string {
	var spec struct{ Zone string }
	_ = json.Unmarshal(c.ProviderSpec.Raw, &spec)
	return spec.Zone
}

// enter counts a call and applies its hooks: a hang blocks until ctx ends, a failure returns
// Unavailable.
func (z *zoned) enter(ctx context.Context, op, zone string) error {
	k := op + " " + zone
	z.mu.Lock()
	z.calls[k]++
	h, hang := z.hang[k]
	if hang && h.skip > 0 {
		h.skip--
		hang = false
	} else if hang {
		delete(z.hang, k)
	}
	failing := z.fail[k] > 0
	if failing {
		z.fail[k]--
	}
	z.mu.Unlock()
	if hang {
		close(h.hung)
		<-ctx.Done()
		return driver.Wrap(driver.DeadlineExceeded, ctx.Err(), "zoned: "+k)
	}
	if failing {
		return driver.Errorf(driver.Unavailable, "zoned: %s: the provider is down", k)
	}
	return nil
}

func (z *zoned) CreateMachine(ctx context.Context, req *driver.CreateMachineRequest) (*driver.CreateMachineResponse, error) {
	zone, name := zoneOf(req.MachineClass), req.Machine.Name
	z.mu.Lock()
	full, leak := z.full[zone], z.leak
	if full && leak {
		z.putLocked(zone, name)
	}
	z.mu.Unlock()
	if err := z.enter(ctx, "Create", zone); err != nil {
		return nil, err
	}
	if full {
		return nil, driver.Errorf(driver.ResourceExhausted, "zone %s has no capacity for the flavor", zone)
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	for other, vms := range z.vms {
		if _, ok := vms[name]; ok && other != zone {
			z.violations = append(z.violations, fmt.Sprintf("machine %s created in zone %s while zone %s holds its VM", name, zone, other))
		}
	}
	pid := z.putLocked(zone, name)
	return &driver.CreateMachineResponse{ProviderID: pid, NodeName: name}, nil
}

func (z *zoned) putLocked(zone, name string) string {
	if z.vms[zone] == nil {
		z.vms[zone] = map[string]string{}
	}
	pid := "zoned:///" + zone + "/" + name
	z.vms[zone][name] = pid
	return pid
}

func (z *zoned) GetMachineStatus(ctx context.Context, req *driver.GetMachineStatusRequest) (*driver.GetMachineStatusResponse, error) {
	zone := zoneOf(req.MachineClass)
	if err := z.enter(ctx, "Status", zone); err != nil {
		return nil, err
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	pid, ok := z.vms[zone][req.Machine.Name]
	if !ok {
		return nil, driver.Errorf(driver.NotFound, "no VM %s in zone %s", req.Machine.Name, zone)
	}
	return &driver.GetMachineStatusResponse{ProviderID: pid, NodeName: req.Machine.Name}, nil
}

func (z *zoned) DeleteMachine(ctx context.Context, req *driver.DeleteMachineRequest) (*driver.DeleteMachineResponse, error) {
	zone := zoneOf(req.MachineClass)
	if err := z.enter(ctx, "Delete", zone); err != nil {
		return nil, err
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	delete(z.vms[zone], req.Machine.Name)
	return &driver.DeleteMachineResponse{}, nil
}

func (z *zoned) InitializeMachine(context.Context, *driver.InitializeMachineRequest) (*driver.InitializeMachineResponse, error) {
	return nil, driver.Error(driver.Unimplemented, "zoned: no initialization")
}

func (z *zoned) ListMachines(_ context.Context, req *driver.ListMachinesRequest) (*driver.ListMachinesResponse, error) {
	zone := zoneOf(req.MachineClass)
	z.mu.Lock()
	defer z.mu.Unlock()
	out := map[string]string{}
	for name, pid := range z.vms[zone] {
		out[pid] = name
	}
	return &driver.ListMachinesResponse{MachineList: out}, nil
}

func (z *zoned) GetVolumeIDs(context.Context, *driver.GetVolumeIDsRequest) (*driver.GetVolumeIDsResponse, error) {
	return nil, driver.Error(driver.Unimplemented, "zoned: no volumes")
}

// hangAt makes the call op in zone after skip others hang; the returned channel closes when it
// does.
func (z *zoned) hangAt(op, zone string, skip int) <-chan struct{} {
	h := &hook{skip: skip, hung: make(chan struct{})}
	z.mu.Lock()
	z.hang[op+" "+zone] = h
	z.mu.Unlock()
	return h.hung
}

func (z *zoned) set(f func(z *zoned)) {
	z.mu.Lock()
	defer z.mu.Unlock()
	f(z)
}

func (z *zoned) count(op, zone string) int {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.calls[op+" "+zone]
}

// where lists the zones holding a VM of the machine.
func (z *zoned) where(name string) []string {
	z.mu.Lock()
	defer z.mu.Unlock()
	var out []string
	for zone, vms := range z.vms {
		if _, ok := vms[name]; ok {
			out = append(out, zone)
		}
	}
	return out
}

func (z *zoned) broken() []string {
	z.mu.Lock()
	defer z.mu.Unlock()
	return append([]string(nil), z.violations...)
}

var _ driver.Driver = (*zoned)(nil)

// fallbackEnv is a namespace with classes zone-a (primary) and zone-b of the zoned cloud, and a
// MachineSet (no MachineSet controller runs) whose machines may fall back from zone-a to zone-b.
type fallbackEnv struct {
	*ctrltest.Env
	cloud *zoned
	set   *v1alpha1.MachineSet
}

func newFallbackEnv(t *testing.T) *fallbackEnv {
	e := ctrltest.NewEnv(t)
	z := newZoned()
	e.Drivers.Set("zoned", z)
	e.Class("zone-a", "zoned", map[string]string{"zone": "a"}, "")
	e.Class("zone-b", "zoned", map[string]string{"zone": "b"}, "")
	ms := &v1alpha1.MachineSet{
		ObjectMeta: metav1.ObjectMeta{Name: "pool", Annotations: map[string]string{fallback.AnnotationClasses: "zone-b"}},
		Spec: v1alpha1.MachineSetSpec{
			// More than the tests' machines: a set with fewer replicas than machines is scaling
			// down, and its machines get no VM.
			Replicas: 100,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "pool"}},
			Template: v1alpha1.MachineTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"pool": "pool"}},
				Spec:       v1alpha1.MachineSpec{Class: v1alpha1.ClassSpec{Kind: "MachineClass", Name: "zone-a"}},
			},
		},
	}
	e.Create(ms)
	return &fallbackEnv{Env: e, cloud: z, set: ms}
}

// machine creates a machine of the set on class.
func (f *fallbackEnv) machine(name, class string, mutate ...func(*v1alpha1.Machine)) {
	f.Machine(name, class, append([]func(*v1alpha1.Machine){func(m *v1alpha1.Machine) {
		m.Labels = map[string]string{"pool": "pool"}
		m.OwnerReferences = []metav1.OwnerReference{{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "MachineSet",
			Name: f.set.Name, UID: f.set.UID, Controller: ptr.To(true)}}
	}}, mutate...)...)
}

// waitOn waits until the machine is Available on class with its VM in zone and nowhere else.
func (f *fallbackEnv) waitOn(name, class, zone string) *v1alpha1.Machine {
	f.T.Helper()
	m := f.WaitMachine(name, 60*time.Second, "Available on "+class, func(m *v1alpha1.Machine) bool {
		return m.Status.CurrentStatus.Phase == v1alpha1.MachineAvailable && m.Spec.Class.Name == class
	})
	if got := f.cloud.where(name); len(got) != 1 || got[0] != zone {
		f.T.Fatalf("machine %s has VMs in zones %v, want only %s", name, got, zone)
	}
	if m.Annotations[fallback.AnnotationVacate] != "" {
		f.T.Fatalf("machine %s still carries %s", name, fallback.AnnotationVacate)
	}
	if v := f.cloud.broken(); len(v) > 0 {
		f.T.Fatalf("a replica had two VMs: %v", v)
	}
	return m
}

// TestFallbackMovesMachineAndSkipsMarkedClass: a create in an exhausted zone (which leaves a
// half-made VM, as a careless cloud might) marks the class; the machine is created on the next
// class at once, and the half-made VM is deleted first. The mark is published on the class, the
// CapacityFallback events name both classes and the provider's message, and a later machine
// skips the marked class without a failing create.
func TestFallbackMovesMachineAndSkipsMarkedClass(t *testing.T) {
	f := newFallbackEnv(t)
	f.cloud.set(func(z *zoned) { z.full["a"], z.leak = true, true })
	opts := ctrltest.FastOptions()
	opts.ResourceExhaustedRetry = time.Hour // only the fallback can make it
	f.StartControllers(opts, false, nil)

	first := f.Name("first")
	f.machine(first, "zone-a")
	m := f.waitOn(first, "zone-b", "b")
	if m.Status.LastOperation.ErrorCode != "" {
		t.Fatalf("lastOperation of the machine on the fallback = %+v", m.Status.LastOperation)
	}
	if n := f.cloud.count("Create", "a"); n != 1 {
		t.Fatalf("%d creates in zone a, want 1", n)
	}
	class := &v1alpha1.MachineClass{}
	if err := f.C.Get(context.Background(), f.Key("zone-a"), class); err != nil {
		t.Fatal(err)
	}
	if mk, ok := fallback.PublishedMark(class, time.Now()); !ok || !strings.Contains(mk.Message, "zone a has no capacity") {
		t.Fatalf("mark published on zone-a = %q", class.Annotations[fallback.AnnotationExhausted])
	}
	for _, obj := range []string{first, f.set.Name} {
		ev := waitEvent(t, f.Env, obj, fallback.ReasonCapacityFallback)
		if !strings.Contains(ev, "zone-a") || !strings.Contains(ev, "zone-b") || !strings.Contains(ev, "zone a has no capacity for the flavor") {
			t.Fatalf("CapacityFallback event on %s = %q, want both classes and the provider's message", obj, ev)
		}
	}

	second := f.Name("second")
	f.machine(second, "zone-a")
	f.waitOn(second, "zone-b", "b")
	if n := f.cloud.count("Create", "a"); n != 1 {
		t.Fatalf("the second machine made a create in the marked zone a (%d creates)", n)
	}

	// A machine of no fallback set is created as before: on its class, whatever the marks.
	plain := f.Name("plain")
	f.Machine(plain, "zone-a")
	f.WaitMachine(plain, 30*time.Second, "a failed create in zone a", func(m *v1alpha1.Machine) bool {
		return m.Status.LastOperation.ErrorCode == driver.ResourceExhausted.String()
	})
	if got := f.Get(plain); got.Spec.Class.Name != "zone-a" || got.Annotations[fallback.AnnotationVacate] != "" {
		t.Fatalf("a machine without fallback classes was moved: %s", ctrltest.Describe(got))
	}
}

// TestFallbackAllClassesExhausted: with every class exhausted the machine waits with the
// ResourceExhausted backoff, its failed create names every class, and it is created once a zone
// has capacity again (here: on the primary, once its mark expired).
func TestFallbackAllClassesExhausted(t *testing.T) {
	f := newFallbackEnv(t)
	f.cloud.set(func(z *zoned) { z.full["a"], z.full["b"] = true, true })
	clk := testclock.NewFakeClock(time.Now())
	opts := ctrltest.FastOptions()
	opts.ResourceExhaustedRetry = 2 * time.Second
	opts.Clock = clk
	opts.Fallback = fallback.NewCache(time.Minute).WithClock(clk)
	f.StartControllers(opts, false, nil)

	name := f.Name("waits")
	f.machine(name, "zone-a")
	m := f.WaitMachine(name, 30*time.Second, "every class exhausted", func(m *v1alpha1.Machine) bool {
		d := m.Status.LastOperation.Description
		return m.Status.LastOperation.ErrorCode == driver.ResourceExhausted.String() && strings.Contains(d, "every class") &&
			strings.Contains(d, "zone-a (") && strings.Contains(d, "zone-b (")
	})
	if m.Status.CurrentStatus.Phase != v1alpha1.MachineCrashLoopBackOff || len(f.cloud.where(name)) != 0 {
		t.Fatalf("machine with every class exhausted: %s, VMs in %v", ctrltest.Describe(m), f.cloud.where(name))
	}
	f.cloud.set(func(z *zoned) { z.full["a"] = false })
	clk.Step(2 * time.Minute) // the marks expire
	f.Touch(name)
	f.waitOn(name, "zone-a", "a")
}

// TestFallbackCrashWindows kills the controller in each step of a move (the process dies with a
// driver call in flight) and restarts it: the move resumes, and the replica ends with one VM.
func TestFallbackCrashWindows(t *testing.T) {
	steps := []struct {
		name     string
		op, zone string
		skip     int
		// where the machine ends: the class and the zone of its one VM
		class, vm string
	}{
		// In the refused create, the half-made VM already made: after the restart nothing is
		// marked and the machine is still on zone-a, which reports the VM: it is adopted.
		{"refused create", "Create", "a", 0, "zone-a", "a"},
		// After spec.class moved to zone-b, while zone-a is checked for a VM (the first look
		// at zone-a is the one before the create).
		{"vacate check", "Status", "a", 1, "zone-b", "b"},
		// While the VM left in zone-a is deleted.
		{"vacate delete", "Delete", "a", 0, "zone-b", "b"},
		// In the create on the fallback.
		{"fallback create", "Create", "b", 0, "zone-b", "b"},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			f := newFallbackEnv(t)
			f.cloud.set(func(z *zoned) { z.full["a"], z.leak = true, true })
			hung := f.cloud.hangAt(st.op, st.zone, st.skip)
			opts := ctrltest.FastOptions()
			opts.ResourceExhaustedRetry = time.Hour
			f.StartControllers(opts, false, nil)
			name := f.Name("m")
			f.machine(name, "zone-a")
			select {
			case <-hung:
			case <-time.After(60 * time.Second):
				t.Fatalf("the controller never reached %s %s", st.op, st.zone)
			}
			f.StopControllers()
			f.StartControllers(opts, false, nil)
			f.waitOn(name, st.class, st.vm)
		})
	}
}

// TestFallbackWaitsForADeadProvider: while the provider cannot say whether the old zone holds a
// VM, nothing is created on the new one.
func TestFallbackWaitsForADeadProvider(t *testing.T) {
	f := newFallbackEnv(t)
	name := f.Name("m")
	f.cloud.set(func(z *zoned) { z.full["a"] = true; z.putLocked("a", name); z.fail["Status a"] = 1 << 20 })
	// Moved to zone-b, zone-a not checked yet (as the controller leaves it after the move).
	f.machine(name, "zone-b", func(m *v1alpha1.Machine) { m.Annotations = map[string]string{fallback.AnnotationVacate: "zone-a"} })
	f.StartControllers(ctrltest.FastOptions(), false, nil)
	eventually.True(t, 30*time.Second, "vacate retried", func() bool { return f.cloud.count("Status", "a") >= 3 })
	if n := f.cloud.count("Create", "b"); n != 0 {
		t.Fatalf("%d creates in zone b while zone a could not be checked", n)
	}
	f.cloud.set(func(z *zoned) { z.fail["Status a"] = 0 })
	f.waitOn(name, "zone-b", "b")
}

// TestFallbackResumesFromStoredState starts the controller on the states a crash can leave
// behind, written as the controller writes them: the mark published but the machine not moved
// yet, and the machine moved but the old zone not checked yet; and deletes a machine in the
// middle of a move. The half-made VM in zone-a never survives.
func TestFallbackResumesFromStoredState(t *testing.T) {
	f := newFallbackEnv(t)
	f.cloud.set(func(z *zoned) { z.full["a"] = true })
	now := time.Now()
	class := &v1alpha1.MachineClass{}
	if err := f.C.Get(context.Background(), f.Key("zone-a"), class); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(class.DeepCopy())
	class.Annotations = map[string]string{fallback.AnnotationExhausted: fallback.Mark{Until: now.Add(time.Hour), Message: "zone a is full"}.Encode()}
	if err := f.C.Patch(context.Background(), class, patch); err != nil {
		t.Fatal(err)
	}

	marked, moved, deleted := f.Name("marked"), f.Name("moved"), f.Name("deleted")
	for _, n := range []string{marked, moved, deleted} {
		f.cloud.set(func(z *zoned) { z.putLocked("a", n) })
	}
	f.machine(marked, "zone-a")
	f.machine(moved, "zone-b", func(m *v1alpha1.Machine) { m.Annotations = map[string]string{fallback.AnnotationVacate: "zone-a"} })
	f.machine(deleted, "zone-b", func(m *v1alpha1.Machine) {
		m.Annotations = map[string]string{fallback.AnnotationVacate: "zone-a"}
		m.Finalizers = []string{v1alpha1.FinalizerMachineControllerManager}
	})
	if err := f.C.Delete(context.Background(), f.Get(deleted)); err != nil {
		t.Fatal(err)
	}
	f.StartControllers(ctrltest.FastOptions(), false, nil)

	// The adopted mark moves the machine without a create in zone a; its leftover is deleted.
	f.waitOn(marked, "zone-b", "b")
	f.waitOn(moved, "zone-b", "b")
	f.WaitGone(deleted, 30*time.Second)
	if got := f.cloud.where(deleted); len(got) != 0 {
		t.Fatalf("the machine deleted mid-move left VMs in %v", got)
	}
	if n := f.cloud.count("Create", "a"); n != 0 {
		t.Fatalf("%d creates in the marked zone a", n)
	}
}

// waitEvent waits for an event of reason about the object named name and returns its note.
func waitEvent(t *testing.T, e *ctrltest.Env, name, reason string) string {
	t.Helper()
	var note string
	eventually.True(t, 30*time.Second, "event "+reason+" on "+name, func() bool {
		list, err := e.CS.EventsV1().Events(e.NS).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, ev := range list.Items {
			if ev.Regarding.Name == name && ev.Reason == reason {
				note = ev.Note
				return true
			}
		}
		return false
	})
	return note
}
