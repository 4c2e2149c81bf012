package grpcbridge_test

import (
	"context"
	"io"
	"os"
	"os/exec"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/grpcbridge"
)

// The same GetMachineStatus call over hashicorp/go-plugin's gRPC plugin transport, for
// comparison with the bridge's own (docs/performance.md). go-plugin carries no messages of its
// own: a plugin registers its gRPC service on the server go-plugin makes and wraps the client
// connection go-plugin dials, so the plugin here serves the bridge's DriverService with
// grpcbridge.NewServer and calls it with grpcbridge.NewClient. What differs is go-plugin's part:
// its process start and handshake, its unix socket and gRPC options, its broker and controller
// services. Only this test file imports go-plugin; the product does not link it.

var benchHandshake = plugin.HandshakeConfig{
	ProtocolVersion:  1,
	MagicCookieKey:   "MACHINIST_BENCH_GOPLUGIN",
	MagicCookieValue: "bdb9b5b0-driver",
}

// driverPlugin is a go-plugin GRPCPlugin that carries a driver.Driver.
type driverPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	d driver.Driver
}

func (p *driverPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	grpcbridge.NewServer(p.d).Register(s)
	return nil
}

func (p *driverPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, conn *grpc.ClientConn) (any, error) {
	return grpcbridge.NewClient(conn), nil
}

var _ plugin.GRPCPlugin = (*driverPlugin)(nil)

// servePluginIfStarted serves statusDriver as a go-plugin plugin when go-plugin started this test
// binary (its handshake cookie is set), and exits when the plugin client kills it.
func servePluginIfStarted() {
	if os.Getenv(benchHandshake.MagicCookieKey) != benchHandshake.MagicCookieValue {
		return
	}
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: benchHandshake,
		Plugins:         plugin.PluginSet{"driver": &driverPlugin{d: statusDriver{}}},
		GRPCServer:      plugin.DefaultGRPCServer,
		Logger:          hclog.NewNullLogger(),
	})
	os.Exit(0)
}

// goPluginProcess starts this test binary as a go-plugin plugin, as a go-plugin host starts its
// plugins, and returns the driver it dispenses.
func goPluginProcess(b *testing.B) driver.Driver {
	self, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  benchHandshake,
		Plugins:          plugin.PluginSet{"driver": &driverPlugin{}},
		Cmd:              exec.Command(self, "-test.run=^$"),
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		Logger:           hclog.NewNullLogger(),
	})
	b.Cleanup(client.Kill)
	rpc, err := client.Client()
	if err != nil {
		b.Fatal(err)
	}
	raw, err := rpc.Dispense("driver")
	if err != nil {
		b.Fatal(err)
	}
	return raw.(driver.Driver)
}

// goPluginInProcess connects a go-plugin gRPC client and server in this process over go-plugin's
// unix socket (plugin.TestPluginGRPCConn), the counterpart of the bridge's uds case.
func goPluginInProcess(b *testing.B) driver.Driver {
	hclog.DefaultOutput = io.Discard // TestPluginGRPCConn logs at debug level to it
	client, server := plugin.TestPluginGRPCConn(b, false, plugin.PluginSet{"driver": &driverPlugin{d: statusDriver{}}})
	b.Cleanup(func() {
		client.Close()
		server.Stop()
	})
	raw, err := client.Dispense("driver")
	if err != nil {
		b.Fatal(err)
	}
	return raw.(driver.Driver)
}

// BenchmarkGetMachineStatusGoPlugin is BenchmarkGetMachineStatus's call over go-plugin: in
// process (inprocess, beside uds) and with the plugin in its own process as go-plugin runs it
// (process, beside BenchmarkGetMachineStatusSeparateProcess/process).
func BenchmarkGetMachineStatusGoPlugin(b *testing.B) {
	b.Run("inprocess", func(b *testing.B) { runStatus(b, goPluginInProcess(b)) })
	b.Run("process", func(b *testing.B) { runStatus(b, goPluginProcess(b)) })
}
