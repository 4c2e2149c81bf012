package testenv

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/harness/localcontrolplane"
)

// Scheme holds the Kubernetes core types, apiextensions v1, machine.sapcloud.io/v1alpha1 and
// machinist.io/v1alpha1.
var Scheme = localcontrolplane.Scheme

// Options configure the control plane of Start.
type Options = localcontrolplane.Options

// Env is a control plane owned by one test.
type Env struct {
	// Config reaches the API server as a cluster admin, with raised QPS and burst.
	Config *rest.Config
	// KubeconfigPath is a kubeconfig file for Config.
	KubeconfigPath string
	// ControlPlane is the running control plane.
	ControlPlane *localcontrolplane.ControlPlane

	t         testing.TB
	once      sync.Once
	client    client.Client
	clientset kubernetes.Interface
}

// Option changes the Options of Start.
type Option func(*Options)

// WithCRDDirs installs the CRDs of dirs instead of the repository's kubernetes/crds.
func WithCRDDirs(dirs ...string) Option {
	return func(o *Options) { o.CRDDirs = append([]string{}, dirs...) }
}

// WithAPIServerArgs adds kube-apiserver flags ("--flag=value").
func WithAPIServerArgs(args ...string) Option {
	return func(o *Options) { o.APIServerArgs = append(o.APIServerArgs, args...) }
}

// WithKubeScheduler also runs kube-scheduler (from bin/, built by `make tools`), so pods get
// bound to nodes. Opt in only where a test needs it: it adds a few seconds to the start.
func WithKubeScheduler(args ...string) Option {
	return func(o *Options) {
		o.KubeScheduler = true
		o.SchedulerArgs = append(o.SchedulerArgs, args...)
	}
}

// WithKubeControllerManager also runs kube-controller-manager (from bin/, built by `make
// tools`) with extra flags, e.g. "--node-monitor-grace-period=10s": Deployments, ReplicaSets,
// DaemonSets, Jobs, disruption budgets, pod garbage collection and node lifecycle work as in a
// real cluster, and pods need a service account (the ServiceAccount admission plugin is on).
func WithKubeControllerManager(args ...string) Option {
	return func(o *Options) {
		o.KubeControllerManager = true
		o.ControllerManagerArgs = append(o.ControllerManagerArgs, args...)
	}
}

// WithFullControlPlane runs kube-scheduler and kube-controller-manager too.
func WithFullControlPlane() Option {
	return func(o *Options) {
		WithKubeScheduler()(o)
		WithKubeControllerManager()(o)
	}
}

// WithDir keeps the control plane's data in dir (reused if it already holds one).
func WithDir(dir string) Option { return func(o *Options) { o.Dir = dir } }

// WithQPS sets the QPS and burst of Env.Config.
func WithQPS(qps float32, burst int) Option {
	return func(o *Options) { o.QPS, o.Burst = qps, burst }
}

// Start starts a control plane for t and stops it when t ends. It fails t (saying to run
// `make tools`) when the etcd and kube-apiserver binaries are missing.
func Start(t testing.TB, opts ...Option) *Env {
	t.Helper()
	o := Options{Log: slog.New(slog.DiscardHandler)}
	for _, opt := range opts {
		opt(&o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	cp, err := localcontrolplane.Start(ctx, o)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() {
		if err := cp.Stop(); err != nil {
			t.Errorf("testenv: stop: %v", err)
		}
	})
	t.Logf("testenv: control plane at %s ready in %s (dir %s)", cp.Config.Host, time.Since(start).Round(time.Millisecond), cp.Dir)
	return &Env{Config: cp.Config, KubeconfigPath: cp.KubeconfigPath, ControlPlane: cp, t: t}
}

// Client returns a client for Config with Scheme (core, apiextensions and machine v1alpha1
// types). It reads straight from the API server (no cache).
func (e *Env) Client() client.Client {
	e.init()
	return e.client
}

// Clientset returns a typed client-go clientset for Config.
func (e *Env) Clientset() kubernetes.Interface {
	e.init()
	return e.clientset
}

func (e *Env) init() {
	e.once.Do(func() {
		var err error
		if e.client, err = client.New(rest.CopyConfig(e.Config), client.Options{Scheme: Scheme}); err != nil {
			e.t.Fatalf("testenv: client: %v", err)
		}
		if e.clientset, err = kubernetes.NewForConfig(rest.CopyConfig(e.Config)); err != nil {
			e.t.Fatalf("testenv: clientset: %v", err)
		}
	})
}

// StopAPIServer stops kube-apiserver (etcd keeps running): the API becomes unreachable until
// StartAPIServer. Call it from the test goroutine; it fails the test on error.
func (e *Env) StopAPIServer() {
	e.t.Helper()
	if err := e.ControlPlane.StopAPIServer(); err != nil {
		e.t.Fatalf("%v", err)
	}
}

// StartAPIServer brings kube-apiserver back on the same port with the same data and waits until
// it is ready. Call it from the test goroutine; it fails the test on error.
func (e *Env) StartAPIServer() {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := e.ControlPlane.StartAPIServer(ctx); err != nil {
		e.t.Fatalf("%v", err)
	}
}
