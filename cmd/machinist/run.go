//go:build !slim || machinecontroller

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmanager "sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/fallback"
	"github.com/machinist-io/machinist/core/controller/machine"
	"github.com/machinist-io/machinist/core/controller/manager"
	"github.com/machinist-io/machinist/core/controller/safety"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/registry"
	"github.com/machinist-io/machinist/grpcbridge"
	"github.com/machinist-io/machinist/grpcbridge/childproc"
	"github.com/machinist-io/machinist/grpcbridge/dialin"
	"github.com/machinist-io/machinist/grpcbridge/mtls"
)

func init() { commands = append(commands, runCommand()) }

// runCommand is `machinist run`, the all-in-one machine-controller-manager. Flag names and
// defaults are Gardener MCM's where MCM has the flag
// (docs/compatibility/mcm-controllers.md#flags-and-defaults).
func runCommand() *cli.Command {
	md, sd, gd := machine.DefaultOptions(), safety.DefaultOptions(), manager.DefaultOptions()
	cluster := "Clusters"
	serving := "Serving and leader election"
	machines := "Machine controller"
	safe := "Safety"
	drivers := "Drivers"
	return withRenamed(&cli.Command{
		Name:  "run",
		Usage: "run the machine-controller-manager: Machine, MachineSet, MachineDeployment and safety controllers",
		Description: "Watches the Machine* objects of --namespace in the control cluster and manages their VMs through\n" +
			"the drivers of their MachineClasses (a --driver-endpoint for the provider, else the compiled-in\n" +
			"driver, else a provider that dialled in). Nodes join the target cluster (--target-kubeconfig;\n" +
			"\"none\" runs without one). Serves /metrics, /healthz and /readyz on --port. See docs/controllers.md.",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Category: cluster, Name: "control-kubeconfig", EnvVars: []string{"CONTROL_KUBECONFIG"}, TakesFile: true,
				Usage: "kubeconfig of the control cluster holding the Machine* objects; inClusterConfig for the pod's service account, as in MCM (default: $KUBECONFIG, else in-cluster)"},
			&cli.StringFlag{Category: cluster, Name: "target-kubeconfig", EnvVars: []string{"TARGET_KUBECONFIG"}, TakesFile: true,
				Usage: `kubeconfig of the cluster the nodes join; "none" for no target cluster; inClusterConfig for the pod's service account (default: the control cluster)`},
			&cli.StringFlag{Category: cluster, Name: "namespace", Value: gd.Namespace, EnvVars: []string{"CONTROL_NAMESPACE"}, Usage: "namespace of the Machine* objects in the control cluster"},
			&cli.Float64Flag{Category: cluster, Name: "kube-api-qps", Value: float64(gd.KubeAPIQPS), Usage: "requests per second to the control cluster"},
			&cli.IntFlag{Category: cluster, Name: "kube-api-burst", Value: gd.KubeAPIBurst, Usage: "request burst to the control cluster"},
			&cli.Float64Flag{Category: cluster, Name: "target-kube-api-qps", Value: float64(gd.TargetKubeAPIQPS), Usage: "requests per second to the target cluster"},
			&cli.IntFlag{Category: cluster, Name: "target-kube-api-burst", Value: gd.TargetKubeAPIBurst, Usage: "request burst to the target cluster"},
			&cli.DurationFlag{Category: cluster, Name: "min-resync-period", Value: gd.MinResyncPeriod, Usage: "resync period of the informers"},

			&cli.StringFlag{Category: serving, Name: "address", Value: "", Usage: "address to serve /metrics, /healthz and /readyz on (empty: all)"},
			&cli.IntFlag{Category: serving, Name: "port", Value: gd.Port, Usage: "port of /metrics, /healthz and /readyz; -1 disables them"},
			&cli.BoolFlag{Category: serving, Name: "profiling", Usage: "serve Go's runtime profiles (CPU, heap, goroutines) at /debug/pprof/ on --port"},
			&cli.BoolFlag{Category: serving, Name: "leader-elect", Value: true, Usage: "run the controllers only in the replica holding the lease"},
			&cli.StringFlag{Category: serving, Name: "leader-elect-resource-lock", Value: "leases", Usage: "lock type; only leases is supported"},
			&cli.StringFlag{Category: serving, Name: "leader-elect-resource-name", Value: gd.LeaderElection.Name, Usage: "name of the Lease"},
			&cli.StringFlag{Category: serving, Name: "leader-elect-resource-namespace", Usage: "namespace of the Lease (default: --namespace)"},
			&cli.DurationFlag{Category: serving, Name: "leader-elect-lease-duration", Value: gd.LeaderElection.LeaseDuration, Usage: "how long a lease is valid without renewal"},
			&cli.DurationFlag{Category: serving, Name: "leader-elect-renew-deadline", Value: gd.LeaderElection.RenewDeadline, Usage: "how long the leader tries to renew before giving up"},
			&cli.DurationFlag{Category: serving, Name: "leader-elect-retry-period", Value: gd.LeaderElection.RetryPeriod, Usage: "how often candidates try to acquire the lease"},

			&cli.IntFlag{Category: machines, Name: "concurrent-syncs", Value: md.ConcurrentSyncs, Usage: "machines reconciled in parallel (for creation and for deletion each)"},
			&cli.IntFlag{Category: machines, Name: "set-concurrent-syncs", Value: gd.ConcurrentSyncs, Usage: "MachineSets and MachineDeployments reconciled in parallel"},
			&cli.BoolFlag{Category: machines, Name: "autoscaler-scaledown-annotation-during-rollout", Value: true, Usage: "keep Cluster Autoscaler from removing a deployment's nodes while it rolls out"},
			&cli.DurationFlag{Category: machines, Name: "machine-creation-timeout", Value: md.CreationTimeout, Usage: "time from creation until the node must be healthy before the machine is Failed"},
			&cli.DurationFlag{Category: machines, Name: "machine-health-timeout", Value: md.HealthTimeout, Usage: "time a machine may stay Unknown before it is Failed and replaced"},
			&cli.DurationFlag{Category: machines, Name: "machine-drain-timeout", Value: md.DrainTimeout, Usage: "time the graceful drain may take before it turns forceful"},
			&cli.DurationFlag{Category: machines, Name: "machine-inplace-update-timeout", Value: md.InPlaceUpdateTimeout, Usage: "time the agent on a node drained for an in-place update may take to label it update-result before the machine is InPlaceUpdateFailed"},
			&cli.DurationFlag{Category: machines, Name: "machine-pv-detach-timeout", Value: md.PVDetachTimeout, Usage: "wait for the volumes of an evicted pod to detach"},
			&cli.DurationFlag{Category: machines, Name: "machine-pv-reattach-timeout", Value: md.PVReattachTimeout, Usage: "wait for evicted volumes to attach elsewhere"},
			&cli.IntFlag{Category: machines, Name: "machine-max-evict-retries", Value: int(md.MaxEvictRetries), Usage: "eviction retries of a pod blocked by a PodDisruptionBudget"},
			&cli.DurationFlag{Category: machines, Name: "machine-preserve-timeout", Value: md.PreserveTimeout, Usage: "how long a machine annotated node.machine.sapcloud.io/preserve (or auto-preserved) is kept before preservation ends (a machine's spec.machinePreserveTimeout wins)"},
			&cli.StringFlag{Category: machines, Name: "node-conditions", Value: strings.Join(md.NodeConditions, ","), Usage: "node condition types that make a machine unhealthy when True"},
			&cli.DurationFlag{Category: machines, Name: "resource-exhausted-retry", Value: md.ResourceExhaustedRetry, Usage: "first wait after a quota or capacity error (later waits back off)"},
			&cli.DurationFlag{Category: machines, Name: "fallback-exhausted-ttl", Value: fallback.DefaultTTL, Usage: "how long a MachineClass whose create failed with a quota or capacity error is skipped by machines with fallback classes (machinist.io/fallback-classes)"},
			&cli.StringFlag{Category: machines, Name: "bootstrap-token-auth-extra-groups", Usage: "extra groups of the bootstrap tokens (comma-separated)"},
			&cli.StringFlag{Category: machines, Name: "max-replacements-per-deployment", Value: md.MaxReplacements.String(), Usage: "unhealthy machines of one MachineDeployment replaced at a time: a count or a percentage"},

			&cli.DurationFlag{Category: safe, Name: "machine-safety-orphan-vms-period", Value: sd.OrphanPeriod, Usage: "how often VMs without a Machine are looked for"},
			&cli.DurationFlag{Category: safe, Name: "machine-safety-orphan-vms-grace-period", Value: sd.OrphanGracePeriod, Usage: "how long a VM must be seen without a Machine before it is deleted"},
			&cli.IntFlag{Category: safe, Name: "machine-safety-orphan-vms-max-deletes", Value: sd.OrphanMaxDeletesPerPass, Usage: "orphan VMs deleted per pass at most"},
			&cli.BoolFlag{Category: safe, Name: "orphan-dry-run", Usage: "only report orphan VMs, delete none"},
			&cli.IntFlag{Category: safe, Name: "safety-up", Value: int(sd.SafetyUp), Usage: "machines above replicas + surge before a MachineSet freezes"},
			&cli.IntFlag{Category: safe, Name: "safety-down", Value: int(sd.SafetyDown), Usage: "machines below the freeze threshold before it unfreezes"},
			&cli.DurationFlag{Category: safe, Name: "machine-safety-overshooting-period", Value: sd.OvershootingPeriod, Usage: "how often MachineSets are checked for too many machines"},
			&cli.DurationFlag{Category: safe, Name: "machine-safety-apiserver-statuscheck-period", Value: sd.APIServerStatusCheckPeriod, Usage: "how often the API servers are probed"},
			&cli.DurationFlag{Category: safe, Name: "machine-safety-apiserver-statuscheck-timeout", Value: sd.APIServerStatusCheckTimeout, Usage: "unreachable time after which the Machine controller freezes"},

			&cli.StringFlag{Category: drivers, Name: "state-dir", Usage: "directory compiled-in drivers may keep state in (the local provider's machines)", EnvVars: []string{"MACHINIST_STATE_DIR"}},
			&cli.BoolFlag{Category: drivers, Name: "strict-provider-specs", Usage: "compiled-in drivers refuse providerSpecs with unknown, mis-cased or repeated fields (InvalidArgument) instead of ignoring or reading them as Gardener's providers do"},
			awsAmbientFlag(drivers),
			&cli.StringSliceFlag{Category: drivers, Name: "driver-endpoint", Usage: "NAME=ADDR: serve provider NAME by the driver server at ADDR (unix:///path.sock or host:port); repeatable"},
			&cli.StringSliceFlag{Category: drivers, Name: "driver-exec", Usage: "NAME=PATH: run the slim provider binary PATH as a child process serving provider NAME on a private unix socket (restarted if it dies, stopped with this process); repeatable"},
			&cli.StringFlag{Category: drivers, Name: "dialin-listen", Usage: "listen here for providers that dial in (e.g. :5000; machinist's protocol and the 2018 design's infra.Infragrpc); empty: no dial-in"},
			&cli.StringSliceFlag{Category: drivers, Name: "prefer-dialin", Usage: "NAME: while a provider NAME is dialled in, it serves before --driver-endpoint/--driver-exec and the compiled-in driver of that name; repeatable, * for every provider"},
			&cli.DurationFlag{Category: drivers, Name: "prefer-dialin-grace", Value: manager.DefaultPreferRemoteGrace, Usage: "how long the classes of a --prefer-dialin provider wait for its first replica to connect before --driver-endpoint/--driver-exec or the compiled-in driver serves them (0: no wait)"},
			&cli.StringFlag{Category: drivers, Name: "driver-cert", TakesFile: true, Usage: "certificate (PEM) presented to driver endpoints and to providers dialling in"},
			&cli.StringFlag{Category: drivers, Name: "driver-key", TakesFile: true, Usage: "key of --driver-cert (PEM)"},
			&cli.StringFlag{Category: drivers, Name: "driver-cacert", TakesFile: true, Usage: "CA bundle (PEM) that signs driver servers' and dialling-in providers' certificates"},
			&cli.BoolFlag{Category: drivers, Name: "driver-insecure", Usage: "plain text to driver endpoints and from dialling-in providers (unix sockets, tests); providers may then register any name"},
		}, mcmCompatFlags()...),
		Before: commandLogging,
		Action: runAction,
	}, runRenamed...)
}

// runRenamed: --cert, --key, --cacert and --insecure faced the drivers in run but the command's
// own server or connection elsewhere; in run they are --driver-* now, as in autoscaler.
var runRenamed = []renamed{
	{old: "cert", new: "driver-cert"}, {old: "key", new: "driver-key"}, {old: "cacert", new: "driver-cacert"}, {old: "insecure", new: "driver-insecure"},
}

func runAction(c *cli.Context) error { return runController(c, manager.AllInOne) }

// runController runs the controllers of half h (all of them for `machinist run`).
func runController(c *cli.Context, h manager.Half) error {
	opts, err := runOptions(c, h)
	if err != nil {
		return err
	}
	logIgnoredFlags(c, h, opts.Log)
	endpoints, closeEndpoints, err := dialEndpoints(c)
	if err != nil {
		return err
	}
	defer closeEndpoints()
	if endpoints != nil {
		opts.Endpoints = endpoints
	}
	opts.PreferRemote = c.StringSlice("prefer-dialin")
	if opts.PreferRemoteGrace = c.Duration("prefer-dialin-grace"); opts.PreferRemoteGrace < 0 {
		return fmt.Errorf("run: --prefer-dialin-grace %s: give 0 (no wait) or a positive duration, e.g. 15s", opts.PreferRemoteGrace)
	}
	var m *manager.Manager
	if addr := c.String("dialin-listen"); addr != "" {
		t, err := dialinTransport(c, addr)
		if err != nil {
			return err
		}
		// Registrations arrive once the manager runs, after m is set.
		shadowedBy := func(provider string) string { return m.Drivers.ShadowedBy(provider) }
		opts.Remote = func(mgr crmanager.Manager) (registry.Source, error) {
			return startDialin(mgr, addr, t, c.Bool("driver-insecure"), opts.Namespace, opts.Log, shadowedBy)
		}
	}
	m, err = manager.New(opts)
	if err != nil {
		return err
	}
	target := c.String("target-kubeconfig")
	if target == "" {
		target = "the control cluster"
	}
	opts.Log.Info("starting "+startName(h),
		"namespace", opts.Namespace, "target", target, "providers", strings.Join(registry.Names(), ","),
		"endpoints", strings.Join(c.StringSlice("driver-endpoint"), ","), "exec", strings.Join(c.StringSlice("driver-exec"), ","), "port", opts.Port, "leaderElection", opts.LeaderElection.Enabled, "lease", opts.LeaderElection.Name)
	return m.Start(c.Context)
}

// runOptions turns the flags into the manager options of half h, refusing values that cannot
// work.
func runOptions(c *cli.Context, h manager.Half) (manager.Options, error) {
	o := manager.DefaultOptionsFor(h)
	o.Log = slog.Default()
	o.ControlKubeconfig = c.String("control-kubeconfig")
	o.TargetKubeconfig = c.String("target-kubeconfig")
	o.Namespace = c.String("namespace")
	o.KubeAPIQPS, o.KubeAPIBurst = float32(c.Float64("kube-api-qps")), c.Int("kube-api-burst")
	o.TargetKubeAPIQPS, o.TargetKubeAPIBurst = float32(c.Float64("target-kube-api-qps")), c.Int("target-kube-api-burst")
	o.MinResyncPeriod = c.Duration("min-resync-period")
	o.Address, o.Port = c.String("address"), c.Int("port")
	o.Profiling = c.Bool("profiling")
	if o.Port == 0 {
		return o, fmt.Errorf("run: --port 0: choose a port, or -1 to serve no metrics and health endpoints")
	}
	if o.Address != "" && net.ParseIP(o.Address) == nil && o.Address != "localhost" {
		return o, fmt.Errorf("run: --address %q is not an IP address", o.Address)
	}
	if lock := c.String("leader-elect-resource-lock"); lock != "leases" {
		return o, fmt.Errorf("run: --leader-elect-resource-lock %q is not supported: use leases", lock)
	}
	o.LeaderElection = manager.LeaderElection{
		Enabled:       c.Bool("leader-elect"),
		Name:          c.String("leader-elect-resource-name"),
		Namespace:     c.String("leader-elect-resource-namespace"),
		LeaseDuration: c.Duration("leader-elect-lease-duration"),
		RenewDeadline: c.Duration("leader-elect-renew-deadline"),
		RetryPeriod:   c.Duration("leader-elect-retry-period"),
	}
	if le := o.LeaderElection; le.Enabled && !(le.LeaseDuration > le.RenewDeadline && le.RenewDeadline > le.RetryPeriod) {
		return o, fmt.Errorf("run: leader election needs --leader-elect-lease-duration (%s) > --leader-elect-renew-deadline (%s) > --leader-elect-retry-period (%s)",
			le.LeaseDuration, le.RenewDeadline, le.RetryPeriod)
	}
	o.ConcurrentSyncs = c.Int("set-concurrent-syncs")
	o.MachineDeployment.NoScaleDownAnnotationDuringRollout = !c.Bool("autoscaler-scaledown-annotation-during-rollout")
	o.StateDir = c.String("state-dir")
	if c.Bool("strict-provider-specs") {
		o.SpecMode = driver.Strict
	}
	o.AmbientCredentials = ambientCredentials(c)

	mo := &o.Machine
	mo.ConcurrentSyncs = c.Int("concurrent-syncs")
	mo.CreationTimeout = c.Duration("machine-creation-timeout")
	mo.HealthTimeout = c.Duration("machine-health-timeout")
	mo.DrainTimeout = c.Duration("machine-drain-timeout")
	mo.InPlaceUpdateTimeout = c.Duration("machine-inplace-update-timeout")
	mo.PVDetachTimeout = c.Duration("machine-pv-detach-timeout")
	mo.PVReattachTimeout = c.Duration("machine-pv-reattach-timeout")
	mo.MaxEvictRetries = int32(c.Int("machine-max-evict-retries"))
	mo.PreserveTimeout = c.Duration("machine-preserve-timeout")
	mo.NodeConditions = machine.ParseNodeConditions(c.String("node-conditions"))
	mo.ResourceExhaustedRetry = c.Duration("resource-exhausted-retry")
	ttl := c.Duration("fallback-exhausted-ttl")
	if ttl <= 0 {
		return o, fmt.Errorf("run: --fallback-exhausted-ttl %s: use a positive duration such as 3m", ttl)
	}
	mo.Fallback = fallback.NewCache(ttl)
	mo.BootstrapTokenAuthExtraGroups = c.String("bootstrap-token-auth-extra-groups")
	mo.MaxReplacements = intstr.Parse(c.String("max-replacements-per-deployment"))

	so := &o.Safety
	so.OrphanPeriod = c.Duration("machine-safety-orphan-vms-period")
	so.OrphanGracePeriod = c.Duration("machine-safety-orphan-vms-grace-period")
	so.OrphanMaxDeletesPerPass = c.Int("machine-safety-orphan-vms-max-deletes")
	so.OrphanDryRun = c.Bool("orphan-dry-run")
	so.SafetyUp, so.SafetyDown = int32(c.Int("safety-up")), int32(c.Int("safety-down"))
	so.OvershootingPeriod = c.Duration("machine-safety-overshooting-period")
	so.APIServerStatusCheckPeriod = c.Duration("machine-safety-apiserver-statuscheck-period")
	so.APIServerStatusCheckTimeout = c.Duration("machine-safety-apiserver-statuscheck-timeout")
	if so.APIServerStatusCheckPeriod < so.APIServerStatusCheckTimeout {
		return o, fmt.Errorf("run: --machine-safety-apiserver-statuscheck-period (%s) must be at least --machine-safety-apiserver-statuscheck-timeout (%s)",
			so.APIServerStatusCheckPeriod, so.APIServerStatusCheckTimeout)
	}
	for name, d := range map[string]time.Duration{
		"machine-creation-timeout": mo.CreationTimeout, "machine-health-timeout": mo.HealthTimeout,
		"machine-drain-timeout": mo.DrainTimeout, "min-resync-period": o.MinResyncPeriod,
		"machine-preserve-timeout": mo.PreserveTimeout, "machine-inplace-update-timeout": mo.InPlaceUpdateTimeout,
	} {
		if d <= 0 {
			return o, fmt.Errorf("run: --%s %s must be positive", name, d)
		}
	}
	return o, mcmCompatOptions(c, h, &o)
}

// endpointSource serves providers from dialled driver servers.
type endpointSource map[string]driver.Driver

func (s endpointSource) Driver(provider string) (driver.Driver, bool) {
	d, ok := s[registry.Normalize(provider)]
	return d, ok
}

// dialEndpoints connects the --driver-endpoint NAME=ADDR driver servers and starts the
// --driver-exec NAME=PATH child providers. Connections are lazy: a server that is not up yet
// fails calls with Unavailable, which the Machine controller retries. A child must answer its
// health check before the controllers start.
func dialEndpoints(c *cli.Context) (registry.Source, func(), error) {
	specs := c.StringSlice("driver-endpoint")
	execs := c.StringSlice("driver-exec")
	if len(specs) == 0 && len(execs) == 0 {
		return nil, func() {}, nil
	}
	src := endpointSource{}
	var closers []func() error
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			_ = closers[i]()
		}
	}
	for _, spec := range execs {
		name, path, ok := strings.Cut(spec, "=")
		name = registry.Normalize(name)
		if !ok || !registry.ValidName(name) || path == "" {
			closeAll()
			return nil, nil, fmt.Errorf("run: --driver-exec %q: use NAME=PATH, e.g. openstack=/usr/local/bin/machinist-openstack", spec)
		}
		if _, dup := src[name]; dup {
			closeAll()
			return nil, nil, fmt.Errorf("run: --driver-exec: provider %q given twice", name)
		}
		opts := childproc.Options{Log: slog.Default().With("component", "driver-exec")}
		if c.Bool("aws-ambient-credentials") {
			// The child opens the driver; it gets the choice as its own flag.
			opts.Args = []string{"--aws-ambient-credentials"}
		}
		child, err := childproc.Start(c.Context, name, path, opts)
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("run: --driver-exec %s: %w", spec, err)
		}
		closers = append(closers, child.Close)
		src[name] = child.Driver()
	}
	for _, spec := range specs {
		name, addr, ok := strings.Cut(spec, "=")
		name = registry.Normalize(name)
		if !ok || !registry.ValidName(name) || addr == "" {
			closeAll()
			return nil, nil, fmt.Errorf("run: --driver-endpoint %q: use NAME=ADDR, e.g. openstack=unix:///run/machinist/openstack.sock", spec)
		}
		if _, dup := src[name]; dup {
			closeAll()
			return nil, nil, fmt.Errorf("run: --driver-endpoint: provider %q given twice (or also in --driver-exec)", name)
		}
		t, err := endpointTransport(c, addr)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		conn, err := grpcbridge.Dial(addr, t)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		closers = append(closers, conn.Close)
		src[name] = grpcbridge.NewClient(conn, grpcbridge.WithProvider(name))
	}
	names := make([]string, 0, len(src))
	for n := range src {
		names = append(names, n)
	}
	sort.Strings(names)
	slog.Default().Info("driver endpoints configured", "providers", strings.Join(names, ","))
	return src, closeAll, nil
}

// endpointTransport secures a connection to a driver server: mTLS from --driver-cert/-key/-cacert,
// or plain text with --driver-insecure.
func endpointTransport(c *cli.Context, addr string) (grpcbridge.Transport, error) {
	if c.Bool("driver-insecure") {
		return grpcbridge.Transport{Insecure: true}, nil
	}
	files, err := driverFiles(c)
	if err != nil {
		return grpcbridge.Transport{}, fmt.Errorf("run: --driver-endpoint %s: %w", addr, err)
	}
	serverName := "localhost"
	if host, _, err := net.SplitHostPort(addr); err == nil && !strings.HasPrefix(addr, "unix:") {
		serverName = host
	}
	cfg, err := mtls.ClientConfig(files, serverName)
	if err != nil {
		return grpcbridge.Transport{}, fmt.Errorf("run: --driver-endpoint %s: %w", addr, err)
	}
	return grpcbridge.Transport{TLS: cfg}, nil
}

// dialinTransport secures the dial-in listener: mTLS requiring client certificates signed by
// --driver-cacert (a provider may register only the names its certificate authorizes), or plain text
// with --driver-insecure, which only a loopback address or a unix socket may serve.
func dialinTransport(c *cli.Context, addr string) (grpcbridge.Transport, error) {
	if c.Bool("driver-insecure") {
		if err := loopbackOnly(addr, true); err != nil {
			return grpcbridge.Transport{}, fmt.Errorf("run: --dialin-listen with --driver-insecure: plain text is served only on loopback or a unix socket: %w; or serve mutual TLS with --driver-cert, --driver-key and --driver-cacert", err)
		}
		return grpcbridge.Transport{Insecure: true}, nil
	}
	files, err := driverFiles(c)
	if err != nil {
		return grpcbridge.Transport{}, fmt.Errorf("run: --dialin-listen: %w", err)
	}
	cfg, err := mtls.ServerConfig(files)
	if err != nil {
		return grpcbridge.Transport{}, fmt.Errorf("run: --dialin-listen: %w", err)
	}
	return grpcbridge.Transport{TLS: cfg}, nil
}

// driverFiles returns the --driver-cert, --driver-key and --driver-cacert files (run, autoscaler),
// or says which flags to give when one is missing.
func driverFiles(c *cli.Context) (mtls.Files, error) {
	f := mtls.Files{Cert: c.String("driver-cert"), Key: c.String("driver-key"), CA: c.String("driver-cacert")}
	if f.Validate() != nil {
		return f, errors.New("give --driver-cert, --driver-key and --driver-cacert for mutual TLS, or --driver-insecure for plain text (unix sockets, loopback)")
	}
	return f, nil
}

// startDialin adds the dial-in listener to the manager. It runs only while this replica leads:
// providers connect to the replica whose controllers use them, and reconnect (with backoff) to
// the next leader. Classes and Secrets pulled by name come from the manager's cache.
func startDialin(mgr crmanager.Manager, addr string, t grpcbridge.Transport, insecure bool, namespace string, log *slog.Logger, shadowedBy func(string) string) (registry.Source, error) {
	srv := dialin.NewServer(dialin.Options{
		Source:     cacheObjects{c: mgr.GetClient(), namespace: namespace},
		Log:        log.With("component", "dialin"),
		Insecure:   insecure,
		ShadowedBy: shadowedBy,
	})
	gs, err := grpcbridge.NewGRPCServer(t)
	if err != nil {
		return nil, err
	}
	srv.RegisterService(gs)
	err = mgr.Add(crmanager.RunnableFunc(func(ctx context.Context) error {
		l, err := grpcbridge.Listen(addr)
		if err != nil {
			return fmt.Errorf("run: --dialin-listen: %w", err)
		}
		log.Info("listening for providers that dial in", "address", l.Addr().String(), "tls", !insecure)
		defer dialinMetrics.add(srv)()
		served := make(chan error, 1)
		go func() { served <- gs.Serve(l) }()
		select {
		case <-ctx.Done():
			srv.Close()
			gs.GracefulStop()
			return nil
		case err := <-served:
			srv.Close()
			return fmt.Errorf("run: dial-in listener: %w", err)
		}
	}))
	if err != nil {
		return nil, err
	}
	return srv, nil
}

// cacheObjects answers dialled-in providers' pulls by name from the manager's cache; only
// objects of the controller's namespace are served.
type cacheObjects struct {
	c         client.Reader
	namespace string
}

func (s cacheObjects) MachineClass(ctx context.Context, namespace, name string) (*v1alpha1.MachineClass, error) {
	class := &v1alpha1.MachineClass{}
	if err := s.get(ctx, namespace, name, class); err != nil {
		return nil, err
	}
	return class, nil
}

func (s cacheObjects) Secret(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
	secret := &corev1.Secret{}
	if err := s.get(ctx, namespace, name, secret); err != nil {
		return nil, err
	}
	return secret, nil
}

func (s cacheObjects) get(ctx context.Context, namespace, name string, obj client.Object) error {
	if namespace != s.namespace {
		return driver.Errorf(driver.PermissionDenied, "namespace %q is not served: this controller manages namespace %q", namespace, s.namespace)
	}
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return driver.Errorf(driver.NotFound, "%s/%s not found", namespace, name)
		}
		return driver.Wrap(driver.Unavailable, err, "read from the controller's cache")
	}
	return nil
}
