package machinedeployment_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/machinedeployment"
	"github.com/machinist-io/machinist/core/controller/machineset"
	"github.com/machinist-io/machinist/core/testenv"
	"github.com/machinist-io/machinist/internal/localcontrolplane"
	"github.com/machinist-io/machinist/internal/machinetest"
)

// One control plane serves every test of the package; each test has its own namespace.
var controlPlane *localcontrolplane.ControlPlane

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	cp, err := localcontrolplane.Start(ctx, localcontrolplane.Options{Log: slog.New(slog.DiscardHandler)})
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

var nsCounter atomic.Int32

// env is one test's namespace, clients and running controllers.
type env struct {
	t  *testing.T
	ns string
	c  client.WithWatch
}

func newEnv(t *testing.T) *env {
	t.Helper()
	c, err := client.NewWithWatch(controlPlane.Config, client.Options{Scheme: testenv.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	ns := fmt.Sprintf("mcd-%d-%d", os.Getpid()%1000, nsCounter.Add(1))
	if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	return &env{t: t, ns: ns, c: c}
}

// startControllers runs the MachineSet and MachineDeployment controllers for the namespace until
// the returned stop is called (or the test ends).
func (e *env) startControllers() (stop func()) {
	e.t.Helper()
	log := slog.New(slog.NewTextHandler(testWriter{e.t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	mgr, err := ctrl.NewManager(controlPlane.Config, manager.Options{
		Scheme:                 testenv.Scheme,
		Logger:                 logr.FromSlogHandler(log.Handler()),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{e.ns: {}}},
		Controller:             config.Controller{SkipNameValidation: ptr.To(true), UsePriorityQueue: ptr.To(false)}, // as core/controller/manager (controller-runtime#3538)
	})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := machineset.Setup(mgr, machineset.Options{}); err != nil {
		e.t.Fatal(err)
	}
	if err := machinedeployment.Setup(mgr, machinedeployment.Options{}); err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				e.t.Errorf("manager: %v", err)
			}
		})
	}
	e.t.Cleanup(stop)
	return stop
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
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

// eventually polls cond until it holds or timeout passes, then fails with what cond last said.
func (e *env) eventually(timeout time.Duration, what string, cond func() (bool, string)) {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for {
		ok, msg := cond()
		if ok {
			return
		}
		last = msg
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out after %s waiting for %s: %s", timeout, what, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
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
