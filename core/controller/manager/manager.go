// Package manager assembles machinist's machine-controller-manager: one controller-runtime
// manager for the control cluster (the Machine* objects of one namespace) running the Machine,
// MachineSet, MachineDeployment and safety controllers, a cluster.Cluster for the target
// cluster the nodes join (or none), and the driver resolver (configured endpoint → compiled-in
// → dialled-in). It also serves /metrics (machinist's metrics and MCM's, see
// core/controller/mcmmetrics), /healthz and /readyz on one port, runs leader election on a
// Lease, and writes Events.
//
// Options.Half runs all of it (the all-in-one) or one of the two halves MCM runs as separate
// processes: its core, machine-controller-manager, and a provider's machine-controller (see
// Half). The halves are the same controllers, chosen at start.
package manager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	crmanager "sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	machinistv1alpha1 "github.com/machinist-io/machinist/core/apis/machinist/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/fallback"
	"github.com/machinist-io/machinist/core/controller/internal/restmemo"
	"github.com/machinist-io/machinist/core/controller/machine"
	"github.com/machinist-io/machinist/core/controller/machinedeployment"
	"github.com/machinist-io/machinist/core/controller/machineset"
	"github.com/machinist-io/machinist/core/controller/mcmmetrics"
	"github.com/machinist-io/machinist/core/controller/pool"
	"github.com/machinist-io/machinist/core/controller/poolpolicy"
	"github.com/machinist-io/machinist/core/controller/safety"
	standbypool "github.com/machinist-io/machinist/core/controller/standby/pool"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/registry"
	"github.com/machinist-io/machinist/internal/kubeconfig"
	"github.com/machinist-io/machinist/internal/logbridge"
)

// NoTarget as the target kubeconfig runs without a target cluster (MCM's "none").
const NoTarget = "none"

// Defaults of `machinist run` that are not another package's. The client rate limits are well
// above MCM's 20/30: creating a machine costs about nine requests to the control cluster, so
// 1000 machines at 20 requests per second would take over seven minutes of client throttling.
const (
	DefaultNamespace          = "default"
	DefaultPort               = 10258
	DefaultLeaseDuration      = 15 * time.Second
	DefaultRenewDeadline      = 10 * time.Second
	DefaultRetryPeriod        = 2 * time.Second
	DefaultLeaderElectionID   = "machine-controller-manager"
	DefaultConcurrentSyncs    = 10
	DefaultMinResyncPeriod    = 12 * time.Hour
	DefaultKubeAPIQPS         = 200
	DefaultKubeAPIBurst       = 300
	DefaultGracefulShutdown   = 30 * time.Second
	DefaultTargetKubeAPIQPS   = 200
	DefaultTargetKubeAPIBurst = 300

	// DefaultProviderPort and ProviderLeaderElectionID are the port and Lease of the provider
	// half, as MCM's machine-controller has them (pkg/util/provider/app/options/options.go,
	// pkg/util/provider/app/app.go of gardener/machine-controller-manager at 54caf546e0f4).
	DefaultProviderPort      = 10259
	ProviderLeaderElectionID = "machine-controller"

	// DefaultPreferRemoteGrace is how long a --prefer-dialin provider's classes wait for its
	// first replica: a provider started with the controller connects within a second or two
	// (machinist connect retries after 0.5 s), a provider of the 2018 design retries every 5 s,
	// so two of its attempts fit.
	DefaultPreferRemoteGrace = 15 * time.Second
)

// Half chooses the controllers a manager runs: all of them, or those of one of the two
// processes Gardener's MCM deployment runs side by side (one pod, two containers), so either
// container can be swapped for machinist's on its own. Each half takes the Lease of the MCM
// process it stands for, so a machinist half and the other MCM half work together and a
// machinist half and the same MCM half never run at once.
type Half int

const (
	// AllInOne runs every controller (`machinist run`), on Lease machine-controller-manager by
	// default.
	AllInOne Half = iota
	// CoreHalf is MCM's machine-controller-manager: the MachineSet and MachineDeployment
	// controllers and the overshooting freeze; Lease machine-controller-manager, port 10258.
	CoreHalf
	// ProviderHalf is MCM's machine-controller of a provider: the Machine controller (with the
	// MachineClass, Secret and Node controllers), the orphan-VM collector and the API-server
	// freeze; Lease machine-controller, port 10259.
	ProviderHalf
)

// String is the name of the MCM program the half stands for.
func (h Half) String() string {
	switch h {
	case CoreHalf:
		return "machine-controller-manager"
	case ProviderHalf:
		return "machine-controller"
	default:
		return "all-in-one"
	}
}

// runsCore and runsProvider say which halves' controllers h runs.
func (h Half) runsCore() bool     { return h != ProviderHalf }
func (h Half) runsProvider() bool { return h != CoreHalf }

// LeaderElection configures leader election (MCM's --leader-elect* flags).
type LeaderElection struct {
	// Enabled runs the controllers only in the replica holding the lease (--leader-elect).
	Enabled bool
	// Namespace of the Lease; "" is the control namespace (--leader-elect-resource-namespace).
	Namespace string
	// Name of the Lease (--leader-elect-resource-name).
	Name string
	// LeaseDuration, RenewDeadline and RetryPeriod as in client-go's leader election
	// (--leader-elect-lease-duration 15s, --leader-elect-renew-deadline 10s,
	// --leader-elect-retry-period 2s).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// Options configure the controller manager. Zero fields take their defaults.
type Options struct {
	// Half is the set of controllers to run; the zero value is all of them.
	Half Half
	// ControlKubeconfig is the kubeconfig of the control cluster holding the Machine* objects
	// (--control-kubeconfig): a file, "inClusterConfig", or "" for $KUBECONFIG, else the
	// in-cluster config (internal/kubeconfig).
	ControlKubeconfig string
	// ControlConfig, when set, is used instead of ControlKubeconfig.
	ControlConfig *rest.Config
	// TargetKubeconfig is the kubeconfig of the cluster the nodes join (--target-kubeconfig): a
	// file or "inClusterConfig"; "" is the control cluster, "none" means no target cluster.
	TargetKubeconfig string
	// TargetConfig, when set, is used instead of TargetKubeconfig.
	TargetConfig *rest.Config
	// Namespace of the Machine* objects (--namespace, "default").
	Namespace string
	// KubeAPIQPS and KubeAPIBurst limit the requests to the control cluster
	// (--kube-api-qps, --kube-api-burst); TargetKubeAPIQPS/Burst those to the target cluster.
	KubeAPIQPS, TargetKubeAPIQPS     float32
	KubeAPIBurst, TargetKubeAPIBurst int
	// Address and Port serve /metrics, /healthz and /readyz (--address, --port 10258); Port < 0
	// disables the server.
	Address string
	Port    int
	// Profiling serves Go's runtime profiles at /debug/pprof/ on the same port (--profiling), as
	// kube-controller-manager's --profiling does; off by default, since profiles show internals.
	Profiling bool
	// LeaderElection of the controllers.
	LeaderElection LeaderElection
	// MinResyncPeriod is the informers' resync period (--min-resync-period, 12h).
	MinResyncPeriod time.Duration
	// ConcurrentSyncs is how many MachineSets and MachineDeployments are reconciled at once
	// (--concurrent-syncs of MCM's core, 10); the Machine controller's is in Machine.
	ConcurrentSyncs int

	Machine           machine.Options
	Safety            safety.Options
	MachineSet        machineset.Options
	MachineDeployment machinedeployment.Options

	// StateDir is passed to compiled-in drivers (registry.Env.StateDir; --state-dir).
	StateDir string
	// SpecMode is how compiled-in drivers decode providerSpecs (registry.Env.SpecMode;
	// --strict-provider-specs).
	SpecMode driver.SpecMode
	// AmbientCredentials names the providers whose compiled-in drivers may act with the
	// process's own cloud identity when a secret holds no credentials
	// (registry.Env.AmbientCredentials; --aws-ambient-credentials).
	AmbientCredentials []string
	// Endpoints serve providers from driver servers this process dials (--driver-endpoint,
	// --driver-exec); nil means none.
	Endpoints registry.Source
	// Remote, when set, is called once the manager exists and returns the providers that dial in.
	// It may add a listener to mgr as a Runnable and read MachineClasses and Secrets through
	// mgr's cache.
	Remote func(mgr crmanager.Manager) (registry.Source, error)
	// PreferRemote names the providers whose dialled-in replicas serve before an endpoint or
	// the compiled-in driver of the same name ("*": all; --prefer-dialin).
	PreferRemote []string
	// PreferRemoteGrace is how long the classes of a PreferRemote provider wait for its first
	// replica before the endpoint or compiled-in driver serves them (registry.Resolver.PreferGrace;
	// --prefer-dialin-grace).
	PreferRemoteGrace time.Duration

	// Log is the structured logger of everything, controller-runtime and client-go included.
	Log *slog.Logger
	// Clock is the time of every controller's timeouts, periods and expiries, given to each
	// controller whose options name no clock of their own; nil means the real clock. Tests pass
	// a fake clock (k8s.io/utils/clock/testing) and step it instead of waiting.
	Clock clock.Clock
}

// DefaultOptions returns the defaults of every option of the all-in-one, those of the
// controllers included.
func DefaultOptions() Options { return DefaultOptionsFor(AllInOne) }

// DefaultOptionsFor returns the defaults of every option of half h: the all-in-one's, with the
// provider half's own port and Lease name.
func DefaultOptionsFor(h Half) Options {
	o := Options{
		Half:               h,
		Namespace:          DefaultNamespace,
		KubeAPIQPS:         DefaultKubeAPIQPS,
		KubeAPIBurst:       DefaultKubeAPIBurst,
		TargetKubeAPIQPS:   DefaultTargetKubeAPIQPS,
		TargetKubeAPIBurst: DefaultTargetKubeAPIBurst,
		Port:               DefaultPort,
		LeaderElection: LeaderElection{
			Enabled:       true,
			Name:          DefaultLeaderElectionID,
			LeaseDuration: DefaultLeaseDuration,
			RenewDeadline: DefaultRenewDeadline,
			RetryPeriod:   DefaultRetryPeriod,
		},
		MinResyncPeriod:   DefaultMinResyncPeriod,
		ConcurrentSyncs:   DefaultConcurrentSyncs,
		PreferRemoteGrace: DefaultPreferRemoteGrace,
		Machine:           machine.DefaultOptions(),
		Safety:            safety.DefaultOptions(),
		MachineSet:        machineset.DefaultOptions(),
		MachineDeployment: machinedeployment.DefaultOptions(),
	}
	if h == ProviderHalf {
		o.Port = DefaultProviderPort
		o.LeaderElection.Name = ProviderLeaderElectionID
	}
	return o
}

// Manager is an assembled, not yet started controller manager.
type Manager struct {
	// Manager is the controller-runtime manager of the control cluster.
	crmanager.Manager
	// Target is the target cluster, nil without one.
	Target cluster.Cluster
	// Drivers resolves MachineClasses to drivers.
	Drivers *registry.Resolver
	// Safety is the running safety controller.
	Safety *safety.Controller

	log *slog.Logger
}

// Scheme holds the types the controllers use: Kubernetes core types, machine.sapcloud.io and
// machinist.io.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(v1alpha1.AddToScheme(s))
	utilruntime.Must(machinistv1alpha1.AddToScheme(s))
	return s
}

// New assembles the controller manager: clients, caches, leader election, the HTTP endpoints
// and every controller. Start runs it.
func New(opts Options) (*Manager, error) {
	opts = opts.withDefaults()
	logger := logr.FromSlogHandler(opts.Log.Handler())
	// klog's and controller-runtime's process-wide loggers forward to the latest manager's handler.
	logbridge.Use(opts.Log.Handler())
	setGlobalLoggers.Do(func() { ctrl.SetLogger(logbridge.Logger("")) })

	controlCfg, err := restConfig(opts.ControlConfig, opts.ControlKubeconfig, "control")
	if err != nil {
		return nil, err
	}
	controlCfg.QPS, controlCfg.Burst = opts.KubeAPIQPS, opts.KubeAPIBurst
	controlCfg.UserAgent = "machinist-controller-manager"
	withAnswerTimeout(controlCfg)

	scheme := Scheme()
	mopts := managerOptions(opts, scheme, logger)
	m := &Manager{log: opts.Log}
	mgr, err := ctrl.NewManager(controlCfg, mopts)
	if err != nil {
		return nil, fmt.Errorf("manager: control cluster %s: %w", controlCfg.Host, err)
	}
	m.Manager = mgr
	if opts.Port >= 0 {
		if err := mgr.Add(m.endpoints(net.JoinHostPort(opts.Address, strconv.Itoa(opts.Port)), opts.Profiling)); err != nil {
			return nil, fmt.Errorf("manager: add the metrics and health server: %w", err)
		}
	}
	if err := checkCRDs(mgr); err != nil {
		return nil, err
	}

	if err := m.addTarget(opts, controlCfg, scheme, logger); err != nil {
		return nil, err
	}

	var targetCfg *rest.Config
	if m.Target != nil {
		targetCfg = m.Target.GetConfig()
	}
	m.Drivers = &registry.Resolver{
		Endpoints: opts.Endpoints,
		Env: registry.Env{Target: targetCfg, StateDir: opts.StateDir, Log: opts.Log.With("component", "driver"), SpecMode: opts.SpecMode,
			AmbientCredentials: opts.AmbientCredentials,
			UpdateTargets:      &machinedeployment.UpdateTargets{Reader: mgr.GetClient(), Namespace: opts.Namespace}},
	}
	m.Drivers.PreferRemote, m.Drivers.PreferGrace, m.Drivers.Clock = opts.PreferRemote, opts.PreferRemoteGrace, opts.Clock
	if opts.Remote != nil {
		if m.Drivers.Remote, err = opts.Remote(mgr); err != nil {
			return nil, fmt.Errorf("manager: dial-in providers: %w", err)
		}
	}

	if err := m.setupControllers(opts); err != nil {
		return nil, err
	}
	return m, nil
}

// setupControllers adds the controllers of opts.Half: the same controllers with the same
// options whichever half runs them. Across two processes the halves share what they share in
// one through the API: machines, their phases, and the exhausted-class marks capacity fallback
// publishes on MachineClasses.
func (m *Manager) setupControllers(opts Options) error {
	core, provider := opts.Half.runsCore(), opts.Half.runsProvider()
	sopts := opts.Safety
	sopts.Namespace = opts.Namespace
	sopts.WithoutOvershoot = sopts.WithoutOvershoot || !core
	sopts.WithoutMachineSafety = sopts.WithoutMachineSafety || !provider
	if sopts.Log == nil {
		sopts.Log = opts.Log.With("controller", "safety")
	}
	sc, err := safety.Setup(m.Manager, m.Target, m.Drivers, sopts)
	if err != nil {
		return fmt.Errorf("manager: safety controller: %w", err)
	}
	m.Safety = sc
	if err := mcmmetrics.Setup(m.Manager, mcmmetrics.Options{Namespace: opts.Namespace, Frozen: sc.Frozen,
		WithoutMachines: !provider, WithoutSets: !core}); err != nil {
		return fmt.Errorf("manager: MCM's metrics: %w", err)
	}

	mo := opts.Machine
	if mo.Fallback == nil {
		mo.Fallback = fallback.NewCache(fallback.DefaultTTL).WithClock(mo.Clock)
	}
	if provider {
		mo.Namespace = opts.Namespace
		mo.Freeze = sc
		if mo.Log == nil {
			mo.Log = opts.Log.With("controller", "machine")
		}
		if err := machine.Setup(m.Manager, m.Target, m.Drivers, mo); err != nil {
			return fmt.Errorf("manager: machine controller: %w", err)
		}
	}
	if !core {
		return nil
	}

	mso := opts.MachineSet
	mso.Fallback = mo.Fallback // one cache of exhausted classes for both in one process
	if m.Target != nil && mso.Nodes == nil {
		mso.Nodes = m.Target.GetClient() // preserve annotations of Nodes (the Machine controller's cache)
	}
	if mso.ConcurrentSyncs <= 0 {
		mso.ConcurrentSyncs = opts.ConcurrentSyncs
	}
	if err := machineset.Setup(m.Manager, mso); err != nil {
		return fmt.Errorf("manager: machineset controller: %w", err)
	}
	mdo := opts.MachineDeployment
	if mdo.ConcurrentSyncs <= 0 {
		mdo.ConcurrentSyncs = opts.ConcurrentSyncs
	}
	if m.Target != nil {
		mdo.Target, mdo.TargetCache = m.Target.GetClient(), m.Target.GetCache()
	}
	if mdo.Log == nil {
		mdo.Log = opts.Log.With("controller", "machinedeployment")
	}
	if err := machinedeployment.Setup(m.Manager, mdo); err != nil {
		return fmt.Errorf("manager: machinedeployment controller: %w", err)
	}
	if err := standbypool.Setup(m.Manager, standbypool.Options{Drivers: m.Drivers,
		Log: opts.Log.With("controller", "standbypool")}); err != nil {
		return fmt.Errorf("manager: standby pool: %w", err)
	}
	if !pool.Served(m.Manager.GetRESTMapper()) {
		opts.Log.Info("PoolPolicies are not served (machinist's CRDs are not installed): MachineDeployments keep their own budgets")
		return nil
	}
	ppo := poolpolicy.Options{Log: opts.Log.With("controller", "poolpolicy"), Clock: mdo.Clock}
	if m.Target != nil {
		ppo.Target = m.Target.GetClient()
	}
	if err := poolpolicy.Setup(m.Manager, ppo); err != nil {
		return fmt.Errorf("manager: poolpolicy controller: %w", err)
	}
	return nil
}

// Start runs the manager until ctx is done, then closes the drivers it opened.
func (m *Manager) Start(ctx context.Context) error {
	err := m.Manager.Start(ctx)
	if cerr := m.Drivers.Close(); cerr != nil {
		m.log.Warn("closing drivers", "err", cerr)
	}
	return err
}

// endpoints serves /metrics, /healthz and /readyz (and /debug/pprof/ with profiling) on addr in
// every replica, leader or not, from before the caches sync, as MCM serves them on one port.
// /metrics gathers controller-runtime's registry (where every controller registers) through
// mcmmetrics.Gatherer, which adds MCM's work-queue families; controller-runtime's own metrics
// server cannot, so it is off.
func (m *Manager) endpoints(addr string, profiling bool) *crmanager.Server {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(mcmmetrics.Gatherer(metrics.Registry), promhttp.HandlerOpts{
		ErrorHandling: promhttp.HTTPErrorOnError,
		ErrorLog:      slog.NewLogLogger(m.log.Handler(), slog.LevelError),
	}))
	for path, h := range m.healthHandlers() {
		mux.Handle(path, h)
	}
	if profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return &crmanager.Server{
		Name:            "metrics and health",
		Server:          &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 30 * time.Second},
		ShutdownTimeout: ptr.To(5 * time.Second),
	}
}

// healthHandlers serves /healthz (the process answers) and /readyz (the caches of the control
// and target clusters are synced) next to /metrics, as MCM serves them on one port.
func (m *Manager) healthHandlers() map[string]http.Handler {
	live := &healthz.Handler{Checks: map[string]healthz.Checker{"ping": healthz.Ping}}
	ready := &healthz.Handler{Checks: map[string]healthz.Checker{
		"ping": healthz.Ping,
		"control-cache": func(*http.Request) error {
			if m.Manager == nil {
				return errors.New("manager not built")
			}
			return cacheSynced(m.GetCache())
		},
		"target-cache": func(*http.Request) error {
			if m.Target == nil {
				return nil
			}
			return cacheSynced(m.Target.GetCache())
		},
	}}
	h := map[string]http.Handler{}
	for path, handler := range map[string]http.Handler{"/healthz": live, "/readyz": ready} {
		h[path] = http.StripPrefix(path, handler)
		h[path+"/"] = http.StripPrefix(path, handler)
	}
	return h
}

// checkCRDs fails early, saying what to do, when the control cluster does not serve the
// machine.sapcloud.io kinds (instead of the controllers failing to sync their caches later).
func checkCRDs(mgr crmanager.Manager) error {
	var missing []string
	for _, kind := range []string{"Machine", "MachineClass", "MachineSet", "MachineDeployment"} {
		_, err := mgr.GetRESTMapper().RESTMapping(schema.GroupKind{Group: v1alpha1.GroupName, Kind: kind}, v1alpha1.SchemeGroupVersion.Version)
		if meta.IsNoMatchError(err) {
			missing = append(missing, kind)
			continue
		}
		if err != nil {
			return fmt.Errorf("manager: look up %s in the control cluster: %w", kind, err)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("manager: the control cluster does not serve %s.%s/%s: install the CRDs with `kubectl apply -f kubernetes/crds/`",
			strings.Join(missing, ", "), v1alpha1.GroupName, v1alpha1.SchemeGroupVersion.Version)
	}
	return nil
}

func cacheSynced(c cache.Cache) error {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if !c.WaitForCacheSync(ctx) {
		return errors.New("informer caches are not synced yet")
	}
	return nil
}

// restConfig returns a cluster's config: the given one, else the one its kubeconfig flag's value
// names by internal/kubeconfig's rules (a file, inClusterConfig, or "" for $KUBECONFIG, else the
// in-cluster config).
func restConfig(cfg *rest.Config, value, which string) (*rest.Config, error) {
	if cfg != nil {
		return rest.CopyConfig(cfg), nil
	}
	c, err := kubeconfig.Load(value)
	if err != nil {
		return nil, fmt.Errorf("manager: %s cluster (--%s-kubeconfig): %w", which, which, err)
	}
	return c, nil
}

func (o Options) withDefaults() Options {
	d := DefaultOptions()
	if o.Namespace == "" {
		o.Namespace = d.Namespace
	}
	if o.KubeAPIQPS <= 0 {
		o.KubeAPIQPS = d.KubeAPIQPS
	}
	if o.KubeAPIBurst <= 0 {
		o.KubeAPIBurst = d.KubeAPIBurst
	}
	if o.TargetKubeAPIQPS <= 0 {
		o.TargetKubeAPIQPS = d.TargetKubeAPIQPS
	}
	if o.TargetKubeAPIBurst <= 0 {
		o.TargetKubeAPIBurst = d.TargetKubeAPIBurst
	}
	if o.Port == 0 {
		o.Port = d.Port
	}
	le := &o.LeaderElection
	if le.Name == "" {
		le.Name = d.LeaderElection.Name
	}
	if le.LeaseDuration <= 0 {
		le.LeaseDuration = d.LeaderElection.LeaseDuration
	}
	if le.RenewDeadline <= 0 {
		le.RenewDeadline = d.LeaderElection.RenewDeadline
	}
	if le.RetryPeriod <= 0 {
		le.RetryPeriod = d.LeaderElection.RetryPeriod
	}
	if o.MinResyncPeriod <= 0 {
		o.MinResyncPeriod = d.MinResyncPeriod
	}
	if o.ConcurrentSyncs <= 0 {
		o.ConcurrentSyncs = d.ConcurrentSyncs
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Machine.Clock == nil {
		o.Machine.Clock = o.Clock
	}
	if o.Safety.Clock == nil {
		o.Safety.Clock = o.Clock
	}
	if o.MachineSet.Clock == nil {
		o.MachineSet.Clock = o.Clock
	}
	if o.MachineDeployment.Clock == nil {
		o.MachineDeployment.Clock = o.Clock
	}
	return o
}

// setGlobalLoggers guards controller-runtime's process-wide logger (it keeps only the first).
var setGlobalLoggers sync.Once

// managerOptions are the control cluster manager's options: its cache (the namespace, the
// resync period, no managedFields), leader election, no servers of its own (the manager's
// endpoints serve metrics and health) and controller-runtime's controller settings.
func managerOptions(opts Options, scheme *runtime.Scheme, logger logr.Logger) crmanager.Options {
	mopts := crmanager.Options{
		Scheme: scheme,
		Logger: logger,
		// The namespace-restricted cache asks the mapper on every read whether the object is
		// namespaced; restmemo keeps the answers.
		MapperProvider: restmemo.Provider,
		Cache: cache.Options{
			DefaultNamespaces: map[string]cache.Config{opts.Namespace: {}},
			SyncPeriod:        &opts.MinResyncPeriod,
			// No controller reads managedFields: without them every cached object is smaller
			// and cheaper to copy (an update without them keeps the server's).
			DefaultTransform: cache.TransformStripManagedFields(),
		},
		LeaderElection:                opts.LeaderElection.Enabled,
		LeaderElectionID:              opts.LeaderElection.Name,
		LeaderElectionNamespace:       opts.LeaderElection.Namespace,
		LeaderElectionResourceLock:    "leases",
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 &opts.LeaderElection.LeaseDuration,
		RenewDeadline:                 &opts.LeaderElection.RenewDeadline,
		RetryPeriod:                   &opts.LeaderElection.RetryPeriod,
		Metrics:                       metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:        "0",
		GracefulShutdownTimeout:       ptr.To(DefaultGracefulShutdown),
		// Controller names are fixed in code; skipping their process-wide uniqueness check lets a
		// process run the manager again after stopping it (tests restart the controllers).
		// The priority queue of controller-runtime v0.24 can deadlock on shutdown: a ready item
		// handed to a worker that already returned blocks the queue's lock, its workers never
		// finish and the manager waits out the whole graceful-shutdown period
		// (kubernetes-sigs/controller-runtime#3538, fixed in v0.25, which needs the Kubernetes
		// 1.37 modules). The classic rate-limited queue has no such race.
		Controller: config.Controller{SkipNameValidation: ptr.To(true), UsePriorityQueue: ptr.To(false)},
	}
	if mopts.LeaderElectionNamespace == "" {
		mopts.LeaderElectionNamespace = opts.Namespace
	}
	return mopts
}

// addTarget adds the target cluster the nodes join (none with NoTarget): the given config, the
// target kubeconfig, or the control cluster's config when neither is given.
func (m *Manager) addTarget(opts Options, controlCfg *rest.Config, scheme *runtime.Scheme, logger logr.Logger) error {
	if opts.TargetKubeconfig == NoTarget {
		return nil
	}
	var err error
	targetCfg := opts.TargetConfig
	if targetCfg == nil {
		if opts.TargetKubeconfig == "" {
			targetCfg = rest.CopyConfig(controlCfg) // bounded already
		} else if targetCfg, err = restConfig(nil, opts.TargetKubeconfig, "target"); err != nil {
			return err
		} else {
			withAnswerTimeout(targetCfg)
		}
	} else {
		targetCfg = rest.CopyConfig(targetCfg)
		withAnswerTimeout(targetCfg)
	}
	targetCfg.QPS, targetCfg.Burst = opts.TargetKubeAPIQPS, opts.TargetKubeAPIBurst
	targetCfg.UserAgent = "machinist-controller-manager"
	m.Target, err = cluster.New(targetCfg, func(o *cluster.Options) {
		o.Scheme = scheme
		o.Logger = logger.WithName("target")
		o.Cache.SyncPeriod = &opts.MinResyncPeriod
		o.Cache.DefaultTransform = cache.TransformStripManagedFields()
	})
	if err != nil {
		return fmt.Errorf("manager: target cluster %s: %w", targetCfg.Host, err)
	}
	if err := m.Manager.Add(m.Target); err != nil {
		return fmt.Errorf("manager: add target cluster: %w", err)
	}
	return nil
}
