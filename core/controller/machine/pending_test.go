package machine_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	crmanager "sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/machine"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/harness/ctrltest"
	"github.com/machinist-io/machinist/harness/testenv"
	"github.com/machinist-io/machinist/internal/eventually"
	"github.com/machinist-io/machinist/providers/local"
)

// The tests here make every timer that could bring a Pending machine back without an event an
// hour long (the Pending recheck, the steady-state resync, the creation timeout), so a machine
// Running within seconds got there from what the controller saw, never from a recheck.
const promptly = 20 * time.Second

func noRecheckOptions() machine.Options {
	o := ctrltest.FastOptions()
	o.PendingRecheck = time.Hour
	o.LongRetry = time.Hour
	o.CreationTimeout = 2 * time.Hour
	return o
}

// classInUse gives the class the finalizer the controller would add, so that adding it does
// not send the class's machines an extra event that would hide a missed node event.
func classInUse(t *testing.T, e *ctrltest.Env, name string) *v1alpha1.MachineClass {
	t.Helper()
	class := &v1alpha1.MachineClass{}
	if err := e.C.Get(context.Background(), e.Key(name), class); err != nil {
		t.Fatal(err)
	}
	orig := class.DeepCopy()
	controllerutil.AddFinalizer(class, v1alpha1.FinalizerMachineControllerManager)
	if err := e.C.Patch(context.Background(), class, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	return class
}

// vmWithReadyNode creates the VM of a machine called name straight at the driver, as if an
// earlier controller had, and waits until its node is Ready.
func vmWithReadyNode(t *testing.T, e *ctrltest.Env, drv driver.Driver, class *v1alpha1.MachineClass, name string) *driver.CreateMachineResponse {
	t.Helper()
	probe := &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.NS}}
	resp, err := drv.CreateMachine(context.Background(), &driver.CreateMachineRequest{Machine: probe, MachineClass: class, Secret: &corev1.Secret{}})
	if err != nil {
		t.Fatal(err)
	}
	waitNodeReady(t, e, resp.NodeName)
	return resp
}

func waitNodeReady(t *testing.T, e *ctrltest.Env, name string) {
	t.Helper()
	eventually.True(t, promptly, "node "+name+" Ready", func() bool {
		n, err := e.CS.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue
			}
		}
		return false
	})
}

// TestRecordedVMWithReadyNodeRunsWithoutRecheck: the controller stopped after recording a
// machine's VM (providerID, node label) and before writing Pending; meanwhile the node registered
// and became Ready. After the restart the creation completes by adopting the VM, and no node
// event follows (the node's events were all delivered before): the machine must still be
// Running at once, not after the Pending recheck.
func TestRecordedVMWithReadyNodeRunsWithoutRecheck(t *testing.T) {
	e := ctrltest.NewEnv(t)
	drv := localProvider(t, e)
	class := classInUse(t, e, "local")
	name := e.Name("recorded")

	resp := vmWithReadyNode(t, e, drv, class, name)
	e.Machine(name, "local", func(m *v1alpha1.Machine) {
		m.Finalizers = []string{v1alpha1.FinalizerMachineControllerManager}
		m.Labels = map[string]string{v1alpha1.LabelNode: resp.NodeName}
		m.Annotations = map[string]string{v1alpha1.AnnotationMachinePriority: v1alpha1.DefaultMachinePriority}
		m.Spec.ProviderID = resp.ProviderID
	})

	e.StartControllers(noRecheckOptions(), true, nil)
	m := e.WaitPhase(name, v1alpha1.MachineRunning, promptly)
	if m.Spec.ProviderID != resp.ProviderID {
		t.Fatalf("providerID %q, want the recorded %q", m.Spec.ProviderID, resp.ProviderID)
	}
}

// flakyInit fails InitializeMachine with Unavailable the first `failures` times: the VM and
// its node exist by then, and the retried creation adopts them.
type flakyInit struct {
	driver.Driver
	failures atomic.Int32
}

func (d *flakyInit) InitializeMachine(ctx context.Context, req *driver.InitializeMachineRequest) (*driver.InitializeMachineResponse, error) {
	if d.failures.Add(-1) >= 0 {
		return nil, driver.Error(driver.Unavailable, "initialize: network not ready (injected)")
	}
	return d.Driver.InitializeMachine(ctx, req)
}

// TestRetriedCreationWithReadyNodeRunsWithoutRecheck: the first creation attempt made the VM,
// whose node registered Ready at once, and then failed (InitializeMachine Unavailable). The
// retry adopts the VM after the node's events were delivered; the machine must be Running at
// once.
func TestRetriedCreationWithReadyNodeRunsWithoutRecheck(t *testing.T) {
	e := ctrltest.NewEnv(t)
	drv := &flakyInit{Driver: localProvider(t, e)}
	drv.failures.Store(1)
	e.Drivers.Set(local.ProviderName, drv)
	classInUse(t, e, "local")
	e.StartControllers(noRecheckOptions(), true, nil)

	name := e.Name("retried")
	e.Machine(name, "local")
	e.WaitPhase(name, v1alpha1.MachineRunning, promptly)
	if drv.failures.Load() > 0 {
		t.Fatal("InitializeMachine was never called: the test did not exercise a retried creation")
	}
	e.WaitEventReasons(name, 30*time.Second, "CreateFailed") // the failed first attempt's
}

// TestFreshMachinesRunWithoutRecheck: machines created together, each node registering Ready
// before CreateMachine returns (the local provider), are all Running without a recheck, and
// none is reported as adopting the VM the controller itself just made (a reconcile reading a
// cache that does not show the machine's VM yet must not act on it).
func TestFreshMachinesRunWithoutRecheck(t *testing.T) {
	e := ctrltest.NewEnv(t)
	localProvider(t, e)
	classInUse(t, e, "local")
	e.StartControllers(noRecheckOptions(), true, nil)

	var names []string
	for i := range 8 {
		n := e.Name(fmt.Sprintf("m%d", i))
		names = append(names, n)
		e.Machine(n, "local")
	}
	for _, n := range names {
		e.WaitPhase(n, v1alpha1.MachineRunning, promptly)
	}
	for _, n := range names {
		var reasons []string
		eventually.True(t, 10*time.Second, "events Created and Joined of "+n, func() bool {
			reasons = e.EventReasons(n)
			return slices.Contains(reasons, "Created") && slices.Contains(reasons, "Joined")
		})
		if slices.Contains(reasons, "Adopted") {
			t.Errorf("machine %s: events %v: the controller reported adopting the VM it created", n, reasons)
		}
	}
}

// laggingCache serves chosen machines from a snapshot instead of the informer cache: a cache
// that has not caught up with the controller's own writes yet, on demand.
type laggingCache struct {
	cache.Cache
	mu     sync.Mutex
	stale  map[client.ObjectKey]*v1alpha1.Machine
	served atomic.Int32
}

func (c *laggingCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if m, ok := obj.(*v1alpha1.Machine); ok {
		c.mu.Lock()
		s := c.stale[key]
		c.mu.Unlock()
		if s != nil {
			s.DeepCopyInto(m)
			c.served.Add(1)
			return nil
		}
	}
	return c.Cache.Get(ctx, key, obj, opts...)
}

// serveStale makes reads of key return snapshot (nil: the real cache again).
func (c *laggingCache) serveStale(key client.ObjectKey, snapshot *v1alpha1.Machine) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stale[key] = snapshot
	c.served.Store(0)
}

// startWithLaggingCache runs the Machine controller (with the test's API server as target
// cluster too) on a manager whose cache is a laggingCache, until the test ends. cfg nil means
// the test's config.
func startWithLaggingCache(t *testing.T, e *ctrltest.Env, opts machine.Options, cfg *rest.Config) *laggingCache {
	t.Helper()
	lc := &laggingCache{stale: map[client.ObjectKey]*v1alpha1.Machine{}}
	e.ControllerConfig = cfg
	e.StartControllers(opts, true, nil, func(o *crmanager.Options) {
		o.NewCache = func(cfg *rest.Config, o cache.Options) (cache.Cache, error) {
			c, err := cache.New(cfg, o)
			lc.Cache = c
			return lc, err
		}
	})
	return lc
}

// eventCount counts the events of reason on the named object, series included.
func eventCount(t *testing.T, e *ctrltest.Env, name, reason string) int {
	t.Helper()
	list, err := e.CS.EventsV1().Events(e.NS).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ev := range list.Items {
		if ev.Regarding.Name != name || ev.Reason != reason {
			continue
		}
		n++
		if ev.Series != nil && ev.Series.Count > 1 {
			n += int(ev.Series.Count) - 1
		}
	}
	return n
}

// TestStaleMachineReadWritesNothing: a reconcile that reads a machine older than what the
// controller already wrote (the cache lags behind, and the node's events woke the machine
// again at once) must not act on it: a Running machine seen as not yet created must not be
// adopted again and put back to Pending, nor one seen as still Pending join a second time. Its
// first write conflicts, and nothing is written or reported.
func TestStaleMachineReadWritesNothing(t *testing.T) {
	e := ctrltest.NewEnv(t)
	ctx := context.Background()
	localProvider(t, e)
	classInUse(t, e, "local")
	lc := startWithLaggingCache(t, e, noRecheckOptions(), nil)

	name := e.Name("stale")
	first := e.Machine(name, "local") // its resourceVersion is a genuine older version
	e.WaitPhase(name, v1alpha1.MachineRunning, promptly)
	eventually.True(t, 10*time.Second, "events Created and Joined", func() bool {
		return eventCount(t, e, name, "Created") > 0 && eventCount(t, e, name, "Joined") > 0
	})
	if c, a, j := eventCount(t, e, name, "Created"), eventCount(t, e, name, "Adopted"), eventCount(t, e, name, "Joined"); c != 1 || a != 0 || j != 1 {
		t.Fatalf("events Created %d, Adopted %d, Joined %d; want 1, 0, 1", c, a, j)
	}

	cases := []struct {
		seen  string
		stale func(cur *v1alpha1.Machine) *v1alpha1.Machine
	}{
		{"VM not recorded yet", func(cur *v1alpha1.Machine) *v1alpha1.Machine {
			s := cur.DeepCopy()
			s.ResourceVersion = first.ResourceVersion
			s.Status = v1alpha1.MachineStatus{}
			s.Spec.ProviderID = ""
			delete(s.Labels, v1alpha1.LabelNode)
			delete(s.Annotations, v1alpha1.AnnotationMachinePriority)
			delete(s.Annotations, v1alpha1.AnnotationMachineJoinDuration)
			return s
		}},
		{"still Pending", func(cur *v1alpha1.Machine) *v1alpha1.Machine {
			s := cur.DeepCopy()
			s.ResourceVersion = first.ResourceVersion
			s.Status.CurrentStatus.Phase = v1alpha1.MachinePending
			s.Status.CurrentStatus.TimeoutActive = true
			s.Status.LastOperation = v1alpha1.LastOperation{Type: v1alpha1.MachineOperationCreate, State: v1alpha1.MachineStateProcessing, Description: "Creating machine on cloud provider"}
			delete(s.Annotations, v1alpha1.AnnotationMachineJoinDuration)
			return s
		}},
	}
	for i, tc := range cases {
		t.Run(tc.seen, func(t *testing.T) {
			cur := e.Get(name)
			lc.serveStale(e.Key(name), tc.stale(cur))
			// Wake the machine with a label change, as an event would.
			orig := cur.DeepCopy()
			cur.Labels[fmt.Sprintf("poke-%d", i)] = "1"
			if err := e.C.Patch(ctx, cur, client.MergeFrom(orig)); err != nil {
				t.Fatal(err)
			}
			// Two stale reads: the first reconcile is over and was retried. One that acted on
			// the stale read instead wrote the machine or reported something.
			eventually.True(t, promptly, "a retried stale reconcile, a write or an event", func() bool {
				return lc.served.Load() >= 2 || e.Get(name).ResourceVersion != cur.ResourceVersion ||
					eventCount(t, e, name, "Adopted") > 0 || eventCount(t, e, name, "Joined") > 1
			})
			lc.serveStale(e.Key(name), nil)
			if now := e.Get(name); now.ResourceVersion != cur.ResourceVersion {
				t.Fatalf("the reconcile of a stale read wrote the machine: %s", ctrltest.Describe(now))
			}
			if n := eventCount(t, e, name, "Adopted"); n != 0 {
				t.Fatalf("%d Adopted events for the machine's own VM", n)
			}
			if n := eventCount(t, e, name, "Joined"); n != 1 {
				t.Fatalf("%d Joined events, want 1", n)
			}
		})
	}
	if m := e.WaitPhase(name, v1alpha1.MachineRunning, promptly); m.Labels[v1alpha1.LabelNode] != name {
		t.Fatalf("machine after the stale reads: %s", ctrltest.Describe(m))
	}
}

// requestCounter counts the API requests of a client by verb and resource, and the conflicts.
type requestCounter struct {
	mu        sync.Mutex
	counts    map[string]int
	conflicts map[string]int
	selectors []string // of the machine LISTs by label
}

// countRequests returns a counter and a copy of the environment's config whose requests it
// counts.
func countRequests(e *ctrltest.Env) (*requestCounter, *rest.Config) {
	c := &requestCounter{counts: map[string]int{}, conflicts: map[string]int{}}
	cfg := rest.CopyConfig(e.Config)
	cfg.Wrap(c.wrap)
	return c, cfg
}

func (c *requestCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		what := req.Method + " " + requestResource(req.URL)
		if req.Method == http.MethodGet && req.URL.Query().Get("labelSelector") != "" {
			what = "LIST-SELECTED " + requestResource(req.URL)
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		c.counts[what]++
		if what == "LIST-SELECTED machines" {
			c.selectors = append(c.selectors, req.URL.Query().Get("labelSelector"))
		}
		if err == nil && resp.StatusCode == http.StatusConflict {
			c.conflicts[what]++
		}
		return resp, err
	})
}

func (c *requestCounter) get(m map[string]int, what string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return m[what]
}

// String renders the counts so far; the controllers may still be counting.
func (c *requestCounter) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprintf("requests: %v; conflicts: %v", c.counts, c.conflicts)
}

// requestResource names the resource (and subresource) of an API path:
// /apis/machine.sapcloud.io/v1alpha1/namespaces/ns/machines/m/status → machines/status.
func requestResource(u *url.URL) string {
	parts := strings.Split(strings.Trim(u.Path, "/"), "/")
	for i, p := range parts {
		if p == "namespaces" && i+2 < len(parts) {
			parts = parts[i+2:]
			break
		}
		if p == "v1" || p == "v1alpha1" {
			parts = parts[i+1:]
			if len(parts) > 0 && parts[0] == "namespaces" && len(parts) > 2 {
				parts = parts[2:]
			}
			break
		}
	}
	if len(parts) >= 3 {
		return parts[0] + "/" + parts[2]
	}
	if len(parts) > 0 {
		return parts[0]
	}
	return u.Path
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestNewMachinesCostNoExtraRequests: machines created together, whose nodes register Ready
// while they are created, each cost the controller exactly the writes of their way to Running
// (3 machine PATCHes: finalizer, VM record, join duration; one status update, Pending → Running,
// plus one for each machine whose node the cache did not show yet when the creation ended —
// it goes Pending first) though every one is woken again while its reconcile still writes: no
// reconcile acts on a cached machine older than our own writes (no conflicts), and the node
// controller never asks the API server for the machine of a node that was just recorded.
func TestNewMachinesCostNoExtraRequests(t *testing.T) {
	e := ctrltest.NewEnv(t)
	localProvider(t, e)
	classInUse(t, e, "local")
	rc, cfg := countRequests(e)
	pending := watchPending(t, e)
	startWithLaggingCache(t, e, noRecheckOptions(), cfg)

	const n = 8
	names := runningMachines(e, "m", n)
	// Let the reconciles the last writes woke finish.
	time.Sleep(time.Second)

	wentPending := pending()
	t.Logf("%s; machines that were Pending: %d of %d", rc, wentPending, n)
	if got := rc.get(rc.counts, "PATCH machines"); got != 3*n {
		t.Errorf("%d machine PATCHes, want %d", got, 3*n)
	}
	if got := rc.get(rc.counts, "PUT machines/status"); got != n+wentPending {
		t.Errorf("%d machine status updates, want %d (one each, and one more for each of the %d machines that were Pending)", got, n+wentPending, wentPending)
	}
	for _, what := range []string{"PATCH machines", "PUT machines/status"} {
		if got := rc.get(rc.conflicts, what); got != 0 {
			t.Errorf("%d conflicts on %s: a reconcile acted on an outdated machine", got, what)
		}
	}
	// (The node controller also sees the nodes other tests left in the shared API server.)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, sel := range rc.selectors {
		for _, name := range names {
			if sel == v1alpha1.LabelNode+"="+name {
				t.Errorf("uncached LIST of the machines of node %s", name)
			}
		}
	}
}

// watchPending watches the test namespace's machines and returns how many were ever seen in
// phase Pending so far.
func watchPending(t *testing.T, e *ctrltest.Env) func() int {
	t.Helper()
	var mu sync.Mutex
	seen := map[string]bool{}
	watchVersions(t, e, func(m *v1alpha1.Machine) {
		if m.Status.CurrentStatus.Phase == v1alpha1.MachinePending {
			mu.Lock()
			seen[m.Name] = true
			mu.Unlock()
		}
	})
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(seen)
	}
}

// watchVersions calls see with every version of the test namespace's machines written from now
// on (a watch delivers every version).
func watchVersions(t *testing.T, e *ctrltest.Env, see func(*v1alpha1.Machine)) {
	t.Helper()
	c, err := client.NewWithWatch(e.Config, client.Options{Scheme: testenv.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.Watch(context.Background(), &v1alpha1.MachineList{}, client.InNamespace(e.NS))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if m, ok := ev.Object.(*v1alpha1.Machine); ok {
				see(m)
			}
		}
	}()
	t.Cleanup(func() { w.Stop(); <-done })
}

// TestDeletionsCostNoExtraRequests: deleting machines whose nodes have no pods costs the
// controller one status update (Terminating) and two machine PATCHes (the deletion marker, the
// finalizer's removal) each: the quick steps run straight on without being recorded. Only a VM
// deletion slower than 2 s (a loaded test machine) records its step too (one more of each).
func TestDeletionsCostNoExtraRequests(t *testing.T) {
	e := ctrltest.NewEnv(t)
	localProvider(t, e)
	classInUse(t, e, "local")
	rc, cfg := countRequests(e)
	var mu sync.Mutex
	slow := map[string]bool{}
	watchVersions(t, e, func(m *v1alpha1.Machine) {
		if strings.Contains(m.Annotations[machine.AnnotationDeletion], `"step":"InitiateVMDeletion"`) {
			mu.Lock()
			slow[m.Name] = true
			mu.Unlock()
		}
	})
	startWithLaggingCache(t, e, noRecheckOptions(), cfg)

	const n = 6
	names := runningMachines(e, "d", n)
	time.Sleep(time.Second)
	patches, statuses := rc.get(rc.counts, "PATCH machines"), rc.get(rc.counts, "PUT machines/status")
	for _, name := range names {
		e.DeleteMachine(name)
	}
	for _, name := range names {
		e.WaitGone(name, promptly)
	}

	mu.Lock()
	recorded := len(slow)
	mu.Unlock()
	t.Logf("%s; slow VM deletions recorded: %d", rc, recorded)
	if got := rc.get(rc.counts, "PATCH machines") - patches; got != 2*n+recorded {
		t.Errorf("%d machine PATCHes for %d deletions, want %d", got, n, 2*n+recorded)
	}
	if got := rc.get(rc.counts, "PUT machines/status") - statuses; got != n+recorded {
		t.Errorf("%d machine status updates for %d deletions, want %d", got, n, n+recorded)
	}
}

// TestHealthyNodeAtCreationOneStatusWrite: a machine whose node is Ready in the cache when its
// creation ends goes from creation to Running in one status update (no Pending write), with
// both events, Adopted (or Created) first.
func TestHealthyNodeAtCreationOneStatusWrite(t *testing.T) {
	e := ctrltest.NewEnv(t)
	drv := localProvider(t, e)
	class := classInUse(t, e, "local")
	name := e.Name("ready")
	resp := vmWithReadyNode(t, e, drv, class, name)

	rc, cfg := countRequests(e)
	pending := watchPending(t, e)
	startWithLaggingCache(t, e, noRecheckOptions(), cfg)
	// The controllers' caches hold the Ready node before the machine exists.
	time.Sleep(time.Second)
	e.Machine(name, "local")
	m := e.WaitPhase(name, v1alpha1.MachineRunning, promptly)
	time.Sleep(time.Second)

	if got := rc.get(rc.counts, "PUT machines/status"); got != 1 || pending() != 0 {
		t.Errorf("%d status updates (Pending seen: %v), want 1 straight to Running", got, pending() != 0)
	}
	if m.Spec.ProviderID != resp.ProviderID || m.Annotations[v1alpha1.AnnotationMachineJoinDuration] == "" ||
		!strings.Contains(m.Status.LastOperation.Description, "successfully joined the cluster") {
		t.Errorf("machine: %s", ctrltest.Describe(m))
	}
	if a, j := eventCount(t, e, name, "Adopted"), eventCount(t, e, name, "Joined"); a != 1 || j != 1 {
		t.Errorf("%d Adopted and %d Joined events, want one each", a, j)
	}
}

// runningMachines creates n local machines named prefix0… and waits until each is Running.
func runningMachines(e *ctrltest.Env, prefix string, n int) []string {
	e.T.Helper()
	names := make([]string, n)
	for i := range names {
		names[i] = e.Name(fmt.Sprintf("%s%d", prefix, i))
		e.Machine(names[i], "local")
	}
	for _, name := range names {
		e.WaitPhase(name, v1alpha1.MachineRunning, promptly)
	}
	return names
}
