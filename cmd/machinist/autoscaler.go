//go:build !slim

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/urfave/cli/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/registry"
	"github.com/machinist-io/machinist/grpcbridge"
	"github.com/machinist-io/machinist/grpcbridge/autoscaler"
	"github.com/machinist-io/machinist/grpcbridge/autoscaler/deployments"
	"github.com/machinist-io/machinist/grpcbridge/autoscaler/static"
	"github.com/machinist-io/machinist/grpcbridge/mtls"
	"github.com/machinist-io/machinist/internal/graceful"
	"github.com/machinist-io/machinist/internal/kubeconfig"
)

func init() { commands = append(commands, autoscalerCommand()) }

// Defaults of `machinist autoscaler`.
const (
	defaultAutoscalerAddress = ":8086" // the port of Cluster Autoscaler's example externalgrpc server
	defaultAutoscalerHTTP    = ":8087"
)

func autoscalerCommand() *cli.Command {
	return withRenamed(&cli.Command{
		Name:  "autoscaler",
		Usage: "serve node groups to Cluster Autoscaler (--cloud-provider=externalgrpc)",
		Description: "Serves Cluster Autoscaler's externalgrpc CloudProvider service over mutual TLS.\n\n" +
			"Default mode: MachineDeployments are node groups when annotated with\n" +
			deployments.AnnotationMinSize + " and " + deployments.AnnotationMaxSize + "\n" +
			"(or cluster-api's node-group min/max annotations), or when named by --nodes; machinist's\n" +
			"controllers (machinist run) create and delete the machines.\n\n" +
			"Static mode (--config groups.yaml): groups are served straight from a driver, no controller\n" +
			"and no Machine objects; see docs/autoscaler.md for the file format.\n\n" +
			"Cluster Autoscaler's cloud-config must name this server as address: <host>:<port> where <host> is in the\n" +
			"server certificate, with cert/key/cacert of a client certificate signed by --cacert.\n" +
			"Every call is logged at -v 5; /metrics and /healthz are served on --http-address.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "listen", Value: defaultAutoscalerAddress, Usage: "gRPC listen address (host:port) of the externalgrpc service", EnvVars: []string{"MACHINIST_LISTEN"}},
			&cli.StringFlag{Name: "cert", Usage: "server certificate (PEM); its SAN must be the host Cluster Autoscaler's cloud-config address names", TakesFile: true, EnvVars: []string{"MACHINIST_TLS_CERT"}},
			&cli.StringFlag{Name: "key", Usage: "server key (PEM)", TakesFile: true, EnvVars: []string{"MACHINIST_TLS_KEY"}},
			&cli.StringFlag{Name: "cacert", Usage: "CA bundle (PEM) that signs Cluster Autoscaler's client certificate; clients without one are refused", TakesFile: true, EnvVars: []string{"MACHINIST_TLS_CA"}},
			&cli.BoolFlag{Name: "insecure", Usage: "serve plain text without client authentication; only allowed on a loopback --listen"},
			&cli.StringFlag{Name: "http-address", Value: defaultAutoscalerHTTP, Usage: "listen address of /metrics and /healthz (\"0\" disables)"},
			&cli.StringFlag{Name: "control-kubeconfig", Usage: "kubeconfig of the cluster holding the Machine* objects, or inClusterConfig (default: $KUBECONFIG, else in-cluster)", TakesFile: true, EnvVars: []string{"CONTROL_KUBECONFIG"}},
			&cli.StringFlag{Name: "namespace", Usage: "namespace of the MachineDeployments (default: all namespaces)", EnvVars: []string{"CONTROL_NAMESPACE"}},
			&cli.StringSliceFlag{Name: "nodes", Usage: "a node group <min>:<max>:<namespace>.<machineDeployment>; repeatable; wins over annotations"},
			&cli.StringFlag{Name: "config", Usage: "static groups file: serve groups straight from a driver instead of MachineDeployments", TakesFile: true},
			&cli.StringFlag{Name: "target-kubeconfig", Usage: "static mode: kubeconfig of the cluster the nodes join (Node deletion, bootstrap tokens, local provider)", TakesFile: true, EnvVars: []string{"TARGET_KUBECONFIG"}},
			&cli.StringFlag{Name: "state-dir", Value: defaultStateDir(), Usage: "static mode: directory drivers keep state in (the local provider's machines)", EnvVars: []string{"MACHINIST_STATE_DIR"}},
			&cli.BoolFlag{Name: "aws-ambient-credentials", EnvVars: []string{"MACHINIST_AWS_AMBIENT_CREDENTIALS"}, Usage: "static mode: let the compiled-in AWS driver use this process's own AWS identity for classes whose secret holds no credentials (see machinist run)"},
			&cli.DurationFlag{Name: "resync", Value: static.DefaultResync, Usage: "static mode: how often every group is listed from the cloud"},
			&cli.StringSliceFlag{Name: "driver-endpoint", Usage: "static mode: <provider>=<address> of a driver server (machinist serve) to use for that provider instead of a compiled-in driver; repeatable"},
			&cli.StringFlag{Name: "driver-cert", Usage: "static mode: client certificate (PEM) for --driver-endpoint servers", TakesFile: true},
			&cli.StringFlag{Name: "driver-key", Usage: "static mode: client key (PEM) for --driver-endpoint servers", TakesFile: true},
			&cli.StringFlag{Name: "driver-cacert", Usage: "static mode: CA bundle (PEM) that signs the --driver-endpoint servers' certificates", TakesFile: true},
			&cli.BoolFlag{Name: "driver-insecure", Usage: "static mode: talk to --driver-endpoint servers in plain text (unix sockets, loopback)"},
			&cli.StringFlag{Name: "gpu-label", Usage: "node label that marks GPU nodes and names their GPU type (GPULabel RPC)"},
		},
		Action: runAutoscaler,
	}, autoscalerRenamed...)
}

// autoscalerRenamed: --kubeconfig named the control cluster here but the target cluster in
// serve, connect and driver; --address was the gRPC listener here but run's metrics address;
// --cert, --key and --cacert fell back to MACHINIST_AUTOSCALER_* here, MACHINIST_TLS_* elsewhere.
var autoscalerRenamed = []renamed{{old: "kubeconfig", new: "control-kubeconfig"}, {old: "address", new: "listen"},
	{new: "cert", oldEnv: "MACHINIST_AUTOSCALER_CERT"}, {new: "key", oldEnv: "MACHINIST_AUTOSCALER_KEY"}, {new: "cacert", oldEnv: "MACHINIST_AUTOSCALER_CACERT"}}

// servedSource is a node-group source that reports when it is loaded.
type servedSource interface {
	autoscaler.NodeGroupSource
	Ready() bool
}

func runAutoscaler(c *cli.Context) error {
	log := slog.Default()
	listenAddr := c.String("listen")
	creds, err := autoscalerCredentials(c, listenAddr)
	if err != nil {
		return err
	}
	if c.String("config") != "" && len(c.StringSlice("nodes")) > 0 {
		return fmt.Errorf("--nodes names MachineDeployment groups and --config static groups: use one mode")
	}

	ctx, cancel := context.WithCancel(c.Context)
	defer cancel()
	var (
		p    servedSource
		wait = func() {}
	)
	if path := c.String("config"); path != "" {
		sp, closeDrivers, err := newStaticSource(c, path, log)
		if err != nil {
			return err
		}
		defer closeDrivers()
		p, wait = sp, sp.Wait
	} else {
		dp, err := newDeploymentsSource(c, log)
		if err != nil {
			return err
		}
		p = dp
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics, err := autoscaler.NewMetrics(reg)
	if err != nil {
		return err
	}
	httpSrv, err := serveAutoscalerHTTP(c.String("http-address"), reg, p, log)
	if err != nil {
		return err
	}
	if httpSrv != nil {
		defer shutdownHTTP(httpSrv)
	}

	lis, err := net.Listen("tcp", listenAddr)
	if err != nil {
		return fmt.Errorf("autoscaler: listen on --listen %s: %w", listenAddr, err)
	}
	defer lis.Close()

	// Load every group before answering: an empty first answer would mislead Cluster Autoscaler.
	switch sp := p.(type) {
	case *static.Source:
		err = sp.Start(ctx)
	case *deployments.Source:
		err = sp.Start(ctx)
	}
	if err != nil {
		return err
	}
	defer func() { cancel(); wait() }()

	srv := autoscaler.NewServer(autoscaler.Config{
		Source: p, GPULabel: c.String("gpu-label"), Log: log, Metrics: metrics,
		LogCalls: c.Int("v") >= 5,
	})
	g := autoscaler.NewGRPCServer(srv, grpc.Creds(creds))
	serveErr := make(chan error, 1)
	go func() { serveErr <- g.Serve(lis) }()
	log.Info("autoscaler: serving Cluster Autoscaler", "address", lis.Addr().String(), "tls", !c.Bool("insecure"), "groups", len(p.NodeGroups()))

	select {
	case err := <-serveErr:
		return fmt.Errorf("autoscaler: gRPC server: %w", err)
	case <-ctx.Done():
	}
	if graceful.Stop(g.GracefulStop, g.Stop, 10*time.Second) {
		log.Warn("autoscaler: calls were still in flight after 10 s; stopped them")
	}
	log.Info("autoscaler: stopped")
	return nil
}

// autoscalerCredentials returns mTLS credentials exactly as Cluster Autoscaler's client expects them (client
// certificate required and verified against --cacert), or plain text with --insecure, which is
// refused unless the server listens on loopback only.
func autoscalerCredentials(c *cli.Context, listenAddr string) (credentials.TransportCredentials, error) {
	files := mtls.Files{Cert: c.String("cert"), Key: c.String("key"), CA: c.String("cacert")}
	if c.Bool("insecure") {
		if files != (mtls.Files{}) {
			return nil, fmt.Errorf("--insecure and --cert/--key/--cacert contradict each other: drop one")
		}
		if err := loopbackOnly(listenAddr, false); err != nil {
			return nil, fmt.Errorf("--insecure serves without TLS, so it is only allowed on loopback: --listen %w; or serve mutual TLS with --cert, --key and --cacert", err)
		}
		return insecure.NewCredentials(), nil
	}
	if err := files.Validate(); err != nil {
		return nil, fmt.Errorf("autoscaler: %w", err)
	}
	tlsConfig, err := mtls.ServerConfig(files)
	if err != nil {
		return nil, fmt.Errorf("autoscaler: %w", err)
	}
	return credentials.NewTLS(tlsConfig), nil
}

func newDeploymentsSource(c *cli.Context, log *slog.Logger) (*deployments.Source, error) {
	var groups []deployments.FlagGroup
	for _, s := range c.StringSlice("nodes") {
		g, err := deployments.ParseFlagGroup(s)
		if err != nil {
			return nil, err
		}
		if ns := c.String("namespace"); ns != "" && g.MachineDeployment.Namespace != ns {
			return nil, fmt.Errorf("--nodes %q is outside --namespace %s: fix the namespace or drop --namespace", s, ns)
		}
		groups = append(groups, g)
	}
	cfg, err := kubeconfig.Load(c.String("control-kubeconfig"))
	if err != nil {
		return nil, fmt.Errorf("autoscaler: control cluster (--control-kubeconfig): %w", err)
	}
	return deployments.New(deployments.Config{
		Control: cfg, Namespace: c.String("namespace"), Groups: groups, GPULabel: c.String("gpu-label"), Log: log,
	})
}

func newStaticSource(c *cli.Context, path string, log *slog.Logger) (*static.Source, func(), error) {
	groups, err := static.LoadFile(path)
	if err != nil {
		return nil, nil, err
	}
	var target *rest.Config
	var cs kubernetes.Interface
	if tk := c.String("target-kubeconfig"); tk != "" {
		if target, err = kubeconfig.Load(tk); err != nil {
			return nil, nil, fmt.Errorf("autoscaler: --target-kubeconfig: %w", err)
		}
		if cs, err = kubernetes.NewForConfig(target); err != nil {
			return nil, nil, fmt.Errorf("autoscaler: target cluster client: %w", err)
		}
	}
	endpoints, closeEndpoints, err := driverEndpoints(c)
	if err != nil {
		return nil, nil, err
	}
	resolver := &registry.Resolver{Endpoints: endpoints, Env: registry.Env{Target: target, StateDir: c.String("state-dir"), Log: log, AmbientCredentials: ambientCredentials(c)}}
	closeAll := func() { _ = resolver.Close(); closeEndpoints() }
	p, err := static.New(static.Config{
		Groups: groups, Drivers: resolver, Target: cs, GPULabel: c.String("gpu-label"),
		Resync: c.Duration("resync"), Log: log,
	})
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	return p, closeAll, nil
}

// driverEndpoints dials the --driver-endpoint servers; their drivers win over compiled-in ones
// for the providers they name, as in the controller manager.
func driverEndpoints(c *cli.Context) (registry.Source, func(), error) {
	specs := c.StringSlice("driver-endpoint")
	if len(specs) == 0 {
		return nil, func() {}, nil
	}
	t := grpcbridge.Transport{Insecure: c.Bool("driver-insecure")}
	if !t.Insecure {
		files, err := driverFiles(c)
		if err != nil {
			return nil, nil, fmt.Errorf("--driver-endpoint: %w", err)
		}
		tlsConfig, err := mtls.ClientConfig(files, "")
		if err != nil {
			return nil, nil, fmt.Errorf("--driver-endpoint: %w", err)
		}
		t.TLS = tlsConfig
	}
	drivers := map[string]driver.Driver{}
	var conns []*grpc.ClientConn
	closeAll := func() {
		for _, conn := range conns {
			_ = conn.Close()
		}
	}
	for _, spec := range specs {
		name, addr, ok := strings.Cut(spec, "=")
		name = registry.Normalize(name)
		if !ok || !registry.ValidName(name) || addr == "" {
			closeAll()
			return nil, nil, fmt.Errorf("--driver-endpoint %q: want <provider>=<address>, e.g. openstack=unix:///run/machinist/openstack.sock", spec)
		}
		conn, err := grpcbridge.Dial(addr, t)
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("--driver-endpoint %q: %w", spec, err)
		}
		conns = append(conns, conn)
		drivers[name] = grpcbridge.NewClient(conn, grpcbridge.WithProvider(name))
	}
	return grpcbridge.NewRouter(drivers), closeAll, nil
}

// serveAutoscalerHTTP serves /metrics, /healthz (the process is up) and /readyz (every group is
// loaded) until shutdown.
func serveAutoscalerHTTP(addr string, reg *prometheus.Registry, p servedSource, log *slog.Logger) (*http.Server, error) {
	if addr == "" || addr == "0" {
		return nil, nil
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !p.Ready() {
			http.Error(w, "node groups not loaded yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("autoscaler: listen on --http-address %s: %w", addr, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("autoscaler: HTTP server stopped", "error", err)
		}
	}()
	log.Info("autoscaler: serving /metrics, /healthz and /readyz", "address", lis.Addr().String())
	return srv, nil
}

func shutdownHTTP(srv *http.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(ctx)
}
