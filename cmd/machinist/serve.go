package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"google.golang.org/grpc"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/registry"
	"github.com/machinist-io/machinist/grpcbridge"
	"github.com/machinist-io/machinist/grpcbridge/childproc"
	"github.com/machinist-io/machinist/grpcbridge/mtls"
)

func init() { commands = append(commands, serveCommand()) }

// serveCommand is `machinist serve`: a driver server (dial-out). The controller points
// --driver-endpoint NAME=ADDR at it; `run --driver-exec` starts it as a child process.
func serveCommand() *cli.Command {
	return withRenamed(&cli.Command{
		Name:  "serve",
		Usage: "serve compiled-in drivers over gRPC for a controller to call (dial-out)",
		Description: "Listens on --listen (unix:///path.sock or host:port) and serves the driver of each --provider\n" +
			"(default: every compiled-in provider) as the machinist.driver.v1 service, plus the standard gRPC\n" +
			"health service. With several providers, calls are routed by MachineClass.provider. Connections\n" +
			"use mutual TLS (--cert, --key, --cacert: clients need a certificate signed by --cacert) unless\n" +
			"--insecure is given. See docs/grpc-bridge.md.",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "listen", Usage: "address to serve on: unix:///path.sock or host:port", Required: true, EnvVars: []string{"MACHINIST_LISTEN"}},
			&cli.StringSliceFlag{Name: "provider", Usage: "provider to serve; repeatable (default: every compiled-in provider)"},
			&cli.DurationFlag{Name: "grace-period", Value: 10 * time.Second, Usage: "how long calls in flight may finish on shutdown"},
			&cli.IntFlag{Name: "parent-pid", Usage: "exit when this process stops being our parent (set by run --driver-exec)"},
		}, append(driverEnvFlags(), bridgeTLSFlags("clients")...)...),
		Action: runServe,
	}, targetRenamed)
}

// targetRenamed: --kubeconfig named the target cluster in serve, connect and driver but the
// control cluster in autoscaler; it is --target-kubeconfig here, as in run, and falls back to
// TARGET_KUBECONFIG as there (it was MACHINIST_KUBECONFIG).
var targetRenamed = renamed{old: "kubeconfig", new: "target-kubeconfig", oldEnv: "MACHINIST_KUBECONFIG"}

func runServe(c *cli.Context) error {
	t, err := bridgeServerTransport(c)
	if err != nil {
		return err
	}
	drivers, closeAll, err := openDrivers(c)
	if err != nil {
		return err
	}
	defer closeAll()
	ctx := c.Context
	if ppid := c.Int("parent-pid"); ppid != 0 {
		var cancel func()
		ctx, cancel = childproc.WatchParent(ctx, ppid, 500*time.Millisecond)
		defer cancel()
	}
	return grpcbridge.Serve(ctx, grpcbridge.ServeOptions{
		Listen:      c.String("listen"),
		Transport:   t,
		Drivers:     drivers,
		Log:         slog.Default(),
		GracePeriod: c.Duration("grace-period"),
		Ready: func(addr net.Addr) {
			fmt.Fprintf(c.App.Writer, "serving %s on %s\n", strings.Join(sortedKeys(drivers), ", "), addr)
		},
	})
}

// driverEnvFlags are what compiled-in drivers are opened with (serve and connect).
func driverEnvFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "state-dir", Usage: "directory drivers keep state in (the local provider's machines)", Value: defaultStateDir(), EnvVars: []string{"MACHINIST_STATE_DIR"}},
		&cli.StringFlag{Name: "target-kubeconfig", Usage: "kubeconfig of the target cluster the machines' nodes join, or inClusterConfig (default: none)", EnvVars: []string{"TARGET_KUBECONFIG"}, TakesFile: true},
		awsAmbientFlag(""),
	}
}

// openDrivers opens the compiled-in driver of each --provider (default: all).
func openDrivers(c *cli.Context) (map[string]driver.Driver, func(), error) {
	names := c.StringSlice("provider")
	if len(names) == 0 {
		names = registry.Names()
	}
	if len(names) == 0 {
		return nil, nil, errors.New("this binary has no compiled-in provider: build it with -tags provider_<name>")
	}
	env := registry.Env{StateDir: c.String("state-dir"), Log: slog.Default(), AmbientCredentials: ambientCredentials(c)}
	if path := c.String("target-kubeconfig"); path != "" {
		env.Target = registry.Kubeconfig(path)
	}
	if env.StateDir != "" {
		if err := os.MkdirAll(env.StateDir, 0o700); err != nil {
			return nil, nil, fmt.Errorf("--state-dir: %w", err)
		}
	}
	drivers := map[string]driver.Driver{}
	closeAll := func() {
		for _, d := range drivers {
			closeDriver(d)
		}
	}
	for _, n := range names {
		name := registry.Normalize(n)
		if _, dup := drivers[name]; dup {
			continue
		}
		d, err := registry.Open(name, env)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		drivers[name] = d
	}
	return drivers, closeAll, nil
}

func sortedKeys(m map[string]driver.Driver) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// bridgeTLSFlags are the transport flags of serve, connect and driver --endpoint; peer names
// the other side in the help text.
func bridgeTLSFlags(peer string) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "cert", Usage: "certificate (PEM) this side presents; reloaded when the file changes", TakesFile: true, EnvVars: []string{"MACHINIST_TLS_CERT"}},
		&cli.StringFlag{Name: "key", Usage: "key (PEM) of --cert", TakesFile: true, EnvVars: []string{"MACHINIST_TLS_KEY"}},
		&cli.StringFlag{Name: "cacert", Usage: "CA bundle (PEM) that signs the " + peer + "' certificates", TakesFile: true, EnvVars: []string{"MACHINIST_TLS_CA"}},
		&cli.BoolFlag{Name: "insecure", Usage: "plain text instead of mutual TLS (unix sockets, loopback tests)"},
	}
}

func tlsFiles(c *cli.Context) (mtls.Files, error) {
	f := mtls.Files{Cert: c.String("cert"), Key: c.String("key"), CA: c.String("cacert")}
	if c.Bool("insecure") {
		if f != (mtls.Files{}) {
			return f, errors.New("--insecure and --cert/--key/--cacert contradict each other: choose one")
		}
		return f, nil
	}
	if f.Validate() != nil {
		return f, errors.New("give --cert, --key and --cacert for mutual TLS, or --insecure for plain text (unix sockets, loopback)")
	}
	return f, nil
}

// bridgeServerTransport secures a listener from the TLS flags.
func bridgeServerTransport(c *cli.Context) (grpcbridge.Transport, error) {
	f, err := tlsFiles(c)
	if err != nil || c.Bool("insecure") {
		return grpcbridge.Transport{Insecure: c.Bool("insecure")}, err
	}
	cfg, err := mtls.ServerConfig(f)
	return grpcbridge.Transport{TLS: cfg}, err
}

// bridgeClientTransport secures a connection to addr from the TLS flags; the server certificate
// must be valid for serverName, or for the host of addr when serverName is empty (localhost for a
// unix socket).
func bridgeClientTransport(c *cli.Context, addr, serverName string) (grpcbridge.Transport, error) {
	f, err := tlsFiles(c)
	if err != nil || c.Bool("insecure") {
		return grpcbridge.Transport{Insecure: c.Bool("insecure")}, err
	}
	if serverName == "" {
		serverName = "localhost"
		if host, _, err := net.SplitHostPort(addr); err == nil && !strings.HasPrefix(addr, "unix:") && host != "" {
			serverName = host
		}
	}
	cfg, err := mtls.ClientConfig(f, serverName)
	return grpcbridge.Transport{TLS: cfg}, err
}

// endpointFlags select a driver server for `machinist driver`.
func endpointFlags() []cli.Flag {
	return append([]cli.Flag{
		&cli.StringFlag{Name: "endpoint", Usage: "call the driver through the driver server at ADDR (unix:///path.sock or host:port; see machinist serve) instead of a compiled-in driver", EnvVars: []string{"MACHINIST_ENDPOINT"}},
		&cli.StringFlag{Name: "server-name", Usage: "name the --endpoint server's certificate must carry (default: its host)"},
	}, bridgeTLSFlags("servers")...)
}

// remoteDriver is a driver server's driver and the connection to close with it.
type remoteDriver struct {
	driver.Driver
	provider string
	conn     *grpc.ClientConn
}

func (r remoteDriver) Close() error { return r.conn.Close() }

// StopMachine, StartMachine and Capabilities forward the server's optional power capability,
// which the embedded interface would hide.
func (r remoteDriver) StopMachine(ctx context.Context, req *driver.StopMachineRequest) (*driver.StopMachineResponse, error) {
	p, err := driver.PowerOf(ctx, r.provider, r.Driver)
	if err != nil {
		return nil, err
	}
	return p.StopMachine(ctx, req)
}

func (r remoteDriver) StartMachine(ctx context.Context, req *driver.StartMachineRequest) (*driver.StartMachineResponse, error) {
	p, err := driver.PowerOf(ctx, r.provider, r.Driver)
	if err != nil {
		return nil, err
	}
	return p.StartMachine(ctx, req)
}

func (r remoteDriver) Capabilities(ctx context.Context) (driver.Capabilities, error) {
	return driver.CapabilitiesOf(ctx, r.Driver)
}

var (
	_ driver.PowerDriver        = remoteDriver{}
	_ driver.CapabilityReporter = remoteDriver{}
)

// dialDriver returns the driver of provider served at --endpoint.
func dialDriver(c *cli.Context, provider string) (driver.Driver, error) {
	addr := c.String("endpoint")
	t, err := bridgeClientTransport(c, addr, c.String("server-name"))
	if err != nil {
		return nil, fmt.Errorf("--endpoint %s: %w", addr, err)
	}
	conn, err := grpcbridge.Dial(addr, t)
	if err != nil {
		return nil, err
	}
	name := registry.Normalize(provider)
	return remoteDriver{Driver: grpcbridge.NewClient(conn, grpcbridge.WithProvider(name)), provider: name, conn: conn}, nil
}
