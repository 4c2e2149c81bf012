package machine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
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
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/machine"
	"github.com/machinist-io/machinist/core/controller/safety"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/registry"
	"github.com/machinist-io/machinist/core/testenv"
)

// One control plane serves every test of the package; each test works in its own namespace
// with its own manager, and names its machines after the namespace (nodes are cluster-wide).
var controlPlane *testenv.ControlPlane

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.FromSlogHandler(testLogger().Handler()))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	cp, err := testenv.StartControlPlane(ctx, testenv.Options{Log: slog.New(slog.DiscardHandler)})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	controlPlane = cp
	code := m.Run()
	if err := cp.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}

var scheme = testenv.Scheme

// drivers is a registry.Source the tests fill: it plays the configured driver endpoints, so a
// test decides which providers exist and may add one later.
type drivers struct {
	mu sync.Mutex
	m  map[string]driver.Driver
}

func (d *drivers) Driver(provider string) (driver.Driver, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	drv, ok := d.m[provider]
	return drv, ok
}

func (d *drivers) set(provider string, drv driver.Driver) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m == nil {
		d.m = map[string]driver.Driver{}
	}
	d.m[provider] = drv
}

// env is one test's namespace, clients and running controllers.
type env struct {
	t       *testing.T
	ns      string
	cfg     *rest.Config
	c       client.Client // uncached
	cs      kubernetes.Interface
	drivers *drivers

	mu      sync.Mutex
	stop    context.CancelFunc
	stopped chan struct{}
	safety  *safety.Controller
}

var nsSeq atomic.Int32

func newEnv(t *testing.T) *env {
	t.Helper()
	cfg := rest.CopyConfig(controlPlane.Config)
	c, err := client.New(cfg, client.Options{Scheme: scheme})
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
	e := &env{t: t, ns: ns, cfg: cfg, c: c, cs: cs, drivers: &drivers{}}
	t.Cleanup(e.stopControllers)
	return e
}

// fastOptions are the Machine controller's options shrunk for tests.
func fastOptions() machine.Options {
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
	o.Log = testLogger()
	return o
}

func testLogger() *slog.Logger {
	if os.Getenv("MACHINIST_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// startControllers runs the Machine controller (and, with so, the safety controller) until the
// test ends or stopControllers. withTarget false runs without a target cluster.
func (e *env) startControllers(opts machine.Options, withTarget bool, so *safety.Options) {
	e.t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stop != nil {
		e.t.Fatal("controllers already running")
	}
	skip := true
	mgr, err := ctrl.NewManager(e.cfg, manager.Options{
		Scheme:                 scheme,
		Logger:                 logr.FromSlogHandler(testLogger().Handler()),
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{e.ns: {}}},
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: &skip},
	})
	if err != nil {
		e.t.Fatal(err)
	}
	var target cluster.Cluster
	if withTarget {
		target, err = cluster.New(e.cfg, func(o *cluster.Options) { o.Scheme = scheme })
		if err != nil {
			e.t.Fatal(err)
		}
		if err := mgr.Add(target); err != nil {
			e.t.Fatal(err)
		}
	}
	resolver := &registry.Resolver{Endpoints: e.drivers}
	opts.Namespace = e.ns
	if so != nil {
		so.Namespace = e.ns
		so.Log = testLogger()
		sc, err := safety.Setup(mgr, target, resolver, *so)
		if err != nil {
			e.t.Fatal(err)
		}
		e.safety = sc
		opts.Freeze = sc
	}
	if err := machine.Setup(mgr, target, resolver, opts); err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			e.t.Errorf("manager: %v", err)
		}
	}()
	e.stop, e.stopped = cancel, done
}

// stopControllers stops the manager and waits for it, like a controller process exiting.
func (e *env) stopControllers() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stop == nil {
		return
	}
	e.stop()
	select {
	case <-e.stopped:
	case <-time.After(time.Minute):
		e.t.Error("manager did not stop within a minute")
	}
	e.stop, e.stopped = nil, nil
}

func (e *env) create(obj client.Object) {
	e.t.Helper()
	obj.SetNamespace(e.ns)
	if err := e.c.Create(context.Background(), obj); err != nil {
		e.t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
	}
}

// name returns a cluster-unique name for a machine (nodes share one namespace-less space).
func (e *env) name(s string) string { return e.ns + "-" + s }

func (e *env) secret(name string, data map[string]string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, StringData: data}
	e.create(s)
	return s
}

func (e *env) class(name, provider string, spec any, secretName string) *v1alpha1.MachineClass {
	e.t.Helper()
	raw, err := json.Marshal(spec)
	if err != nil {
		e.t.Fatal(err)
	}
	cl := &v1alpha1.MachineClass{
		ObjectMeta:   metav1.ObjectMeta{Name: name},
		Provider:     provider,
		ProviderSpec: runtime.RawExtension{Raw: raw},
	}
	if secretName != "" {
		cl.SecretRef = &corev1.SecretReference{Name: secretName, Namespace: e.ns}
	}
	e.create(cl)
	return cl
}

func (e *env) machine(name, class string, mutate ...func(*v1alpha1.Machine)) *v1alpha1.Machine {
	m := &v1alpha1.Machine{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1alpha1.MachineSpec{Class: v1alpha1.ClassSpec{Kind: "MachineClass", Name: class}},
	}
	for _, f := range mutate {
		f(m)
	}
	e.create(m)
	return m
}

func (e *env) get(name string) *v1alpha1.Machine {
	e.t.Helper()
	m := &v1alpha1.Machine{}
	if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: name}, m); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		e.t.Fatalf("get machine %s: %v", name, err)
	}
	return m
}

func (e *env) deleteMachine(name string) {
	e.t.Helper()
	m := &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns}}
	if err := e.c.Delete(context.Background(), m); err != nil && !apierrors.IsNotFound(err) {
		e.t.Fatal(err)
	}
}

// waitMachine polls the machine until cond holds; a nil machine means it is gone.
func (e *env) waitMachine(name string, timeout time.Duration, what string, cond func(*v1alpha1.Machine) bool) *v1alpha1.Machine {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	var m *v1alpha1.Machine
	for {
		m = e.get(name)
		if cond(m) {
			return m
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("machine %s: timed out after %s waiting for %s; last state: %s", name, timeout, what, describe(m))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (e *env) waitPhase(name string, phase v1alpha1.MachinePhase, timeout time.Duration) *v1alpha1.Machine {
	e.t.Helper()
	return e.waitMachine(name, timeout, "phase "+string(phase), func(m *v1alpha1.Machine) bool {
		return m != nil && m.Status.CurrentStatus.Phase == phase
	})
}

func (e *env) waitGone(name string, timeout time.Duration) {
	e.t.Helper()
	e.waitMachine(name, timeout, "deletion", func(m *v1alpha1.Machine) bool { return m == nil })
}

func describe(m *v1alpha1.Machine) string {
	if m == nil {
		return "gone"
	}
	lo := m.Status.LastOperation
	return fmt.Sprintf("phase=%q op=%s/%s code=%q desc=%q providerID=%q labels=%v deletion=%q",
		m.Status.CurrentStatus.Phase, lo.Type, lo.State, lo.ErrorCode, lo.Description, m.Spec.ProviderID, m.Labels,
		m.Annotations[machine.AnnotationDeletion])
}

// eventuallyTrue polls cond until it holds or fails the test after timeout.
func eventuallyTrue(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// readyNode creates (or makes Ready) the node of a machine, playing the kubelet for drivers
// whose VMs do not run one.
func (e *env) readyNode(name, providerID string, ready corev1.ConditionStatus) {
	e.t.Helper()
	ctx := context.Background()
	for range 20 {
		n, err := e.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			n, err = e.cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{ProviderID: providerID}}, metav1.CreateOptions{})
		}
		if err != nil {
			e.t.Fatal(err)
		}
		now := metav1.Now()
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, Reason: "Test", LastHeartbeatTime: now, LastTransitionTime: now}}
		if _, err = e.cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err == nil {
			return
		} else if !apierrors.IsConflict(err) {
			e.t.Fatal(err)
		}
	}
	e.t.Fatal("could not set the node's status")
}

// eventReasons lists the reasons of the events recorded for an object.
func (e *env) eventReasons(name string) []string {
	e.t.Helper()
	list, err := e.cs.EventsV1().Events(e.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, ev := range list.Items {
		if ev.Regarding.Name == name {
			out = append(out, ev.Reason)
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func keyOf(e *env, name string) client.ObjectKey { return client.ObjectKey{Namespace: e.ns, Name: name} }

func inNS(e *env) client.ListOption { return client.InNamespace(e.ns) }
