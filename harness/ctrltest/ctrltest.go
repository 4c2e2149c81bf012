// Package ctrltest is the one harness of the controllers' tests: one real kube-apiserver per test
// binary (Main), per test a namespace, clients and a driver source the test fills (NewEnv), and
// the controllers under test run like a process the test can stop and start again (Start): the
// Machine and safety controllers (Env.StartControllers), any controllers of a controller-runtime
// manager (Env.StartManager, RunManager), or machinist's whole controller manager
// (Env.StartProduct, RunProduct with ProductOptions, also on a control plane of the test's own).
// Tests that step a fake clock trigger the reconcile they expect with Env.Touch. It is imported
// by tests only.
package ctrltest

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/config"
	crmanager "sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/machine"
	"github.com/machinist-io/machinist/core/controller/manager"
	"github.com/machinist-io/machinist/core/controller/safety"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/registry"
	"github.com/machinist-io/machinist/harness/localcontrolplane"
	"github.com/machinist-io/machinist/harness/testenv"
	"github.com/machinist-io/machinist/internal/eventually"
)

// ControlPlane is the API server of the test binary, started by Main.
var ControlPlane *localcontrolplane.ControlPlane

// Main starts one control plane for every test of the binary, runs them and stops it. Call it
// from TestMain.
func Main(m *testing.M) {
	ctrl.SetLogger(logr.FromSlogHandler(Logger().Handler()))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	cp, err := localcontrolplane.Start(ctx, localcontrolplane.Options{Log: slog.New(slog.DiscardHandler)})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ControlPlane = cp
	code := m.Run()
	if err := cp.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}

// Logger discards logs unless MACHINIST_TEST_LOG is set.
func Logger() *slog.Logger {
	if os.Getenv("MACHINIST_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// Drivers is a registry.Source the test fills: it plays the configured driver endpoints, so a
// test decides which providers exist and may add one later. It counts the controllers' lookups.
type Drivers struct {
	mu      sync.Mutex
	m       map[string]driver.Driver
	lookups map[string]int
}

// Driver implements registry.Source.
func (d *Drivers) Driver(provider string) (driver.Driver, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.lookups == nil {
		d.lookups = map[string]int{}
	}
	d.lookups[provider]++
	drv, ok := d.m[provider]
	return drv, ok
}

// Set serves provider with drv from now on.
func (d *Drivers) Set(provider string, drv driver.Driver) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m == nil {
		d.m = map[string]driver.Driver{}
	}
	d.m[provider] = drv
}

// Lookups is how often provider was looked up: once per attempt of the controllers to use it.
func (d *Drivers) Lookups(provider string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lookups[provider]
}

// Env is one test's namespace, clients and running controllers.
type Env struct {
	T       *testing.T
	NS      string
	Config  *rest.Config
	C       client.Client // reads straight from the API server
	CS      kubernetes.Interface
	Drivers *Drivers
	// Safety is the safety controller while one runs.
	Safety *safety.Controller
	// SpecMode is the decoding mode of compiled-in drivers (registry.Env.SpecMode) in the
	// controllers StartControllers runs.
	SpecMode driver.SpecMode
	// ControllerConfig, when set, is the config the controllers run with instead of Config (a
	// test counting their requests wraps it).
	ControllerConfig *rest.Config

	mu   sync.Mutex
	stop func()
}

var nsSeq atomic.Int32

// NewEnv makes a namespace named after the test; the controllers stop when the test ends.
func NewEnv(t *testing.T) *Env {
	t.Helper()
	cfg := rest.CopyConfig(ControlPlane.Config)
	c, err := client.New(cfg, client.Options{Scheme: testenv.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(name) > 40 {
		name = name[:40]
	}
	ns := fmt.Sprintf("%s-%d", strings.TrimRight(name, "-"), nsSeq.Add(1))
	if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	e := &Env{T: t, NS: ns, Config: cfg, C: c, CS: cs, Drivers: &Drivers{}}
	t.Cleanup(e.StopControllers)
	return e
}

// FastOptions are the Machine controller's options shrunk for tests.
func FastOptions() machine.Options {
	o := machine.DefaultOptions()
	o.CreationTimeout = 2 * time.Minute
	o.HealthTimeout = 2 * time.Minute
	o.DrainTimeout = 2 * time.Minute
	o.PVDetachTimeout = 5 * time.Second
	o.PVReattachTimeout = time.Second
	o.ShortRetry = 100 * time.Millisecond
	o.MediumRetry = time.Second
	o.LongRetry = 10 * time.Second
	o.ResourceExhaustedRetry = 2 * time.Second
	o.EvictRetryInterval = 200 * time.Millisecond
	o.DrainPollInterval = 100 * time.Millisecond
	o.ConcurrentSyncs = 5
	o.Log = Logger()
	return o
}

// ManagerOptions are the options of a manager running controllers under test: the test scheme
// and logger, a cache of namespace ns, no listeners, and the controller settings of
// core/controller/manager (controller names reusable, the classic work queue: controller-runtime#3538).
func ManagerOptions(ns string) crmanager.Options {
	skip, priorityQueue := true, false
	return crmanager.Options{
		Scheme:                 testenv.Scheme,
		Logger:                 logr.FromSlogHandler(Logger().Handler()),
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: &skip, UsePriorityQueue: &priorityQueue},
	}
}

// ProductOptions are the options of machinist's controller manager (core/controller/manager, what
// `machinist run` runs) for a test: cfg as control and target cluster, namespace ns, no
// listener, no leader election, a state dir of the test's and the test logger.
func ProductOptions(t testing.TB, cfg *rest.Config, ns string) manager.Options {
	opts := manager.DefaultOptions()
	opts.ControlConfig, opts.TargetConfig = cfg, cfg
	opts.Namespace = ns
	opts.Port = -1
	opts.LeaderElection.Enabled = false
	opts.StateDir = t.TempDir()
	opts.Log = Logger()
	return opts
}

// Starter runs until its context ends: a controller-runtime manager, or machinist's controller
// manager.
type Starter interface {
	Start(ctx context.Context) error
}

// Start runs s until the test ends or the returned stop is called. stop cancels it and waits for
// it like for a controller process exiting (at most a minute), and reports the error it ended
// with; it may be called more than once.
func Start(t testing.TB, s Starter) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("controllers: %v", err)
				}
			case <-time.After(time.Minute):
				t.Error("controllers did not stop within a minute")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// run starts s as the test's controllers.
func (e *Env) run(s Starter) {
	e.T.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stop != nil {
		e.T.Fatal("controllers already running")
	}
	e.stop = Start(e.T, s)
}

// StopControllers stops the running controllers and waits for them, like a controller process
// exiting.
func (e *Env) StopControllers() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stop != nil {
		e.stop()
		e.stop = nil
	}
}

func (e *Env) controllerConfig() *rest.Config {
	if e.ControllerConfig != nil {
		return e.ControllerConfig
	}
	return e.Config
}

// RunManager runs a controller-runtime manager for namespace ns of the API server at cfg
// (ManagerOptions, changed by mutate) with the controllers setup adds to it, until the test ends
// or the returned stop is called.
func RunManager(t testing.TB, cfg *rest.Config, ns string, setup func(mgr crmanager.Manager) error, mutate ...func(*crmanager.Options)) (stop func()) {
	t.Helper()
	mgr, err := newManager(cfg, ns, setup, mutate)
	if err != nil {
		t.Fatal(err)
	}
	return Start(t, mgr)
}

func newManager(cfg *rest.Config, ns string, setup func(mgr crmanager.Manager) error, mutate []func(*crmanager.Options)) (crmanager.Manager, error) {
	opts := ManagerOptions(ns)
	for _, f := range mutate {
		f(&opts)
	}
	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		return nil, err
	}
	return mgr, setup(mgr)
}

// RunProduct runs machinist's controller manager with opts (start from ProductOptions) until the
// test ends or the returned stop is called.
func RunProduct(t testing.TB, opts manager.Options) (stop func()) {
	t.Helper()
	m, err := manager.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return Start(t, m)
}

// StartManager is RunManager on the test's namespace, as the test's controllers.
func (e *Env) StartManager(setup func(mgr crmanager.Manager) error, mutate ...func(*crmanager.Options)) {
	e.T.Helper()
	mgr, err := newManager(e.controllerConfig(), e.NS, setup, mutate)
	if err != nil {
		e.T.Fatal(err)
	}
	e.run(mgr)
}

// StartControllers runs the Machine controller (and, with so, the safety controller) until the
// test ends or StopControllers. withTarget false runs without a target cluster; mutate changes
// the manager's options.
func (e *Env) StartControllers(opts machine.Options, withTarget bool, so *safety.Options, mutate ...func(*crmanager.Options)) {
	e.T.Helper()
	e.StartManager(func(mgr crmanager.Manager) error {
		var target cluster.Cluster
		if withTarget {
			var err error
			if target, err = cluster.New(e.controllerConfig(), func(o *cluster.Options) { o.Scheme = testenv.Scheme }); err != nil {
				return err
			}
			if err := mgr.Add(target); err != nil {
				return err
			}
		}
		resolver := &registry.Resolver{Endpoints: e.Drivers, Env: registry.Env{SpecMode: e.SpecMode}}
		opts.Namespace = e.NS
		if so != nil {
			so.Namespace = e.NS
			so.Log = Logger()
			sc, err := safety.Setup(mgr, target, resolver, *so)
			if err != nil {
				return err
			}
			e.Safety = sc
			opts.Freeze = sc
		}
		return machine.Setup(mgr, target, resolver, opts)
	}, mutate...)
}

// StartProduct is RunProduct on the test's namespace (ProductOptions, with the test's drivers as
// configured endpoints, changed by mutate), as the test's controllers.
func (e *Env) StartProduct(mutate func(*manager.Options)) {
	e.T.Helper()
	opts := ProductOptions(e.T, e.Config, e.NS)
	opts.Endpoints = e.Drivers
	if mutate != nil {
		mutate(&opts)
	}
	m, err := manager.New(opts)
	if err != nil {
		e.T.Fatal(err)
	}
	e.run(m)
}

// Touch changes an annotation of the machine, so the controllers reconcile it now. A test that
// steps a fake clock touches the machines whose timeouts it made pass: the requeue the
// controller computed from the clock still waits in real time.
func (e *Env) Touch(name string) {
	e.T.Helper()
	touches := fmt.Sprint(touchSeq.Add(1))
	patch := []byte(`{"metadata":{"annotations":{"test.machinist.io/touch":"` + touches + `"}}}`)
	m := &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: e.NS, Name: name}}
	if err := e.C.Patch(context.Background(), m, client.RawPatch(types.MergePatchType, patch)); err != nil {
		e.T.Fatalf("touch machine %s: %v", name, err)
	}
}

var touchSeq atomic.Int64

// Create creates obj in the test's namespace.
func (e *Env) Create(obj client.Object) {
	e.T.Helper()
	obj.SetNamespace(e.NS)
	if err := e.C.Create(context.Background(), obj); err != nil {
		e.T.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
	}
}

// Name returns a cluster-unique machine name (nodes share one cluster-wide name space).
func (e *Env) Name(s string) string { return e.NS + "-" + s }

// Key is the key of name in the test's namespace.
func (e *Env) Key(name string) client.ObjectKey { return client.ObjectKey{Namespace: e.NS, Name: name} }

// Secret creates a secret.
func (e *Env) Secret(name string, data map[string]string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, StringData: data}
	e.Create(s)
	return s
}

// Class creates a MachineClass with the JSON of spec as providerSpec.
func (e *Env) Class(name, provider string, spec any, secretName string) *v1alpha1.MachineClass {
	e.T.Helper()
	raw, err := json.Marshal(spec)
	if err != nil {
		e.T.Fatal(err)
	}
	cl := &v1alpha1.MachineClass{
		ObjectMeta:   metav1.ObjectMeta{Name: name},
		Provider:     provider,
		ProviderSpec: runtime.RawExtension{Raw: raw},
	}
	if secretName != "" {
		cl.SecretRef = &corev1.SecretReference{Name: secretName, Namespace: e.NS}
	}
	e.Create(cl)
	return cl
}

// Machine creates a machine of class.
func (e *Env) Machine(name, class string, mutate ...func(*v1alpha1.Machine)) *v1alpha1.Machine {
	m := &v1alpha1.Machine{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1alpha1.MachineSpec{Class: v1alpha1.ClassSpec{Kind: "MachineClass", Name: class}},
	}
	for _, f := range mutate {
		f(m)
	}
	e.Create(m)
	return m
}

// Get reads a machine; nil when it does not exist.
func (e *Env) Get(name string) *v1alpha1.Machine {
	e.T.Helper()
	m := &v1alpha1.Machine{}
	if err := e.C.Get(context.Background(), e.Key(name), m); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		e.T.Fatalf("get machine %s: %v", name, err)
	}
	return m
}

// DeleteMachine asks for a machine's deletion.
func (e *Env) DeleteMachine(name string) {
	e.T.Helper()
	m := &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.NS}}
	if err := e.C.Delete(context.Background(), m); err != nil && !apierrors.IsNotFound(err) {
		e.T.Fatal(err)
	}
}

// WaitMachine polls the machine until cond holds; a nil machine means it is gone.
func (e *Env) WaitMachine(name string, timeout time.Duration, what string, cond func(*v1alpha1.Machine) bool) *v1alpha1.Machine {
	e.T.Helper()
	var m *v1alpha1.Machine
	eventually.Explained(e.T, timeout, "machine "+name+": "+what, func() (bool, string) {
		m = e.Get(name)
		return cond(m), Describe(m)
	})
	return m
}

// WaitPhase waits for a machine's phase.
func (e *Env) WaitPhase(name string, phase v1alpha1.MachinePhase, timeout time.Duration) *v1alpha1.Machine {
	e.T.Helper()
	return e.WaitMachine(name, timeout, "phase "+string(phase), func(m *v1alpha1.Machine) bool {
		return m != nil && m.Status.CurrentStatus.Phase == phase
	})
}

// WaitGone waits until the machine no longer exists.
func (e *Env) WaitGone(name string, timeout time.Duration) {
	e.T.Helper()
	e.WaitMachine(name, timeout, "deletion", func(m *v1alpha1.Machine) bool { return m == nil })
}

// Describe renders what matters of a machine for failure messages.
func Describe(m *v1alpha1.Machine) string {
	if m == nil {
		return "gone"
	}
	lo := m.Status.LastOperation
	return fmt.Sprintf("phase=%q op=%s/%s code=%q desc=%q providerID=%q labels=%v deletion=%q",
		m.Status.CurrentStatus.Phase, lo.Type, lo.State, lo.ErrorCode, lo.Description, m.Spec.ProviderID, m.Labels,
		m.Annotations[machine.AnnotationDeletion])
}

// ReadyNode creates (or sets the Ready condition of) a machine's node, playing the kubelet for
// drivers whose VMs run none.
func (e *Env) ReadyNode(name, providerID string, ready corev1.ConditionStatus) {
	e.T.Helper()
	ctx := context.Background()
	for range 20 {
		n, err := e.CS.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			n, err = e.CS.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{ProviderID: providerID}}, metav1.CreateOptions{})
		}
		if err != nil {
			e.T.Fatal(err)
		}
		now := metav1.Now()
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, Reason: "Test", LastHeartbeatTime: now, LastTransitionTime: now}}
		if _, err = e.CS.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err == nil {
			return
		} else if !apierrors.IsConflict(err) {
			e.T.Fatal(err)
		}
	}
	e.T.Fatal("could not set the node's status")
}

// EventReasons lists the reasons of the events recorded for an object of the namespace.
func (e *Env) EventReasons(name string) []string {
	e.T.Helper()
	list, err := e.CS.EventsV1().Events(e.NS).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		e.T.Fatal(err)
	}
	var out []string
	for _, ev := range list.Items {
		if ev.Regarding.Name == name {
			out = append(out, ev.Reason)
		}
	}
	return out
}

// WaitEventReasons waits until the events about name include every one of reasons and returns
// the reasons of all its events. The recorder writes events in the background, so an event can
// reach the API server after the change it describes is visible: read them with this, not once.
func (e *Env) WaitEventReasons(name string, timeout time.Duration, reasons ...string) []string {
	e.T.Helper()
	var got []string
	eventually.True(e.T, timeout, fmt.Sprintf("events %v about %s", reasons, name), func() bool {
		got = e.EventReasons(name)
		for _, r := range reasons {
			if !slices.Contains(got, r) {
				return false
			}
		}
		return true
	})
	return got
}
