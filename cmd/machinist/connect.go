package main

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/urfave/cli/v2"

	"github.com/machinist-io/machinist/grpcbridge/dialin"
)

func init() { commands = append(commands, connectCommand()) }

// connectCommand is `machinist connect`: a provider process that dials in to a controller
// (run --dialin-listen) and serves its compiled-in drivers over the Register stream.
func connectCommand() *cli.Command {
	return withRenamed(&cli.Command{
		Name:  "connect",
		Usage: "dial in to a controller and serve compiled-in drivers over the stream (dial-in)",
		Description: "Connects to --controller (a machinist run with --dialin-listen), registers each --provider\n" +
			"(default: every compiled-in provider) and serves the operations the controller sends, until\n" +
			"stopped. Lost connections are retried with capped exponential backoff. The client certificate\n" +
			"(--cert) must authorize each provider name with a URI SAN machinist://provider/<name>\n" +
			"(machinist://provider/* for any); the controller refuses other names and this command exits.\n" +
			"See docs/grpc-bridge.md.",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "controller", Usage: "the controller's dial-in address, host:port", Value: "localhost" + dialin.DefaultAddress, EnvVars: []string{"MACHINIST_CONTROLLER"}},
			&cli.StringSliceFlag{Name: "provider", Usage: "provider to serve; repeatable (default: every compiled-in provider)"},
			&cli.StringFlag{Name: "instance", Usage: "name of this replica in the controller's logs (default: host name)", EnvVars: []string{"POD_NAME"}},
			&cli.StringFlag{Name: "server-name", Usage: "name the controller's certificate must carry (default: the host of --controller)"},
		}, append(driverEnvFlags(), bridgeTLSFlags("controller")...)...),
		Action: runConnect,
	}, targetRenamed)
}

func runConnect(c *cli.Context) error {
	addr := c.String("controller")
	t, err := bridgeClientTransport(c, addr, c.String("server-name"))
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	drivers, closeAll, err := openDrivers(c)
	if err != nil {
		return err
	}
	defer closeAll()
	p, err := dialin.NewConnector(dialin.ConnectorOptions{
		Controller: addr,
		Transport:  t,
		Drivers:    drivers,
		Instance:   c.String("instance"),
		Log:        slog.Default(),
	})
	if err != nil {
		return err
	}
	defer p.Close()
	slog.Info("connecting to the controller", "controller", addr, "providers", sortedKeys(drivers), "tls", t.TLS != nil)
	if err := p.Run(c.Context); err != nil {
		if errors.Is(err, dialin.ErrRefused) {
			return fmt.Errorf("connect: %w: issue the client certificate with a URI SAN machinist://provider/<name> for each --provider", err)
		}
		return err
	}
	return nil
}
