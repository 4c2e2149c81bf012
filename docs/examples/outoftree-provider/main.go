// Command jsoncloud-provider serves the jsoncloud driver to a machinist controller, in either
// direction:
//
//	# dial-out: the controller dials this server (--driver-endpoint jsoncloud=ADDR), e.g. as a
//	# sidecar on a shared unix socket
//	jsoncloud-provider serve --listen unix:///run/machinist/jsoncloud.sock --cloud cloud.json --insecure
//
//	# dial-in: this process dials the controller's provider listener and registers jsoncloud; the
//	# client certificate must carry the URI SAN machinist://provider/jsoncloud
//	jsoncloud-provider connect --controller machinist.example.com:5000 --cloud cloud.json \
//	    --cert tls.crt --key tls.key --cacert ca.crt
//
// Both use mutual TLS unless --insecure is given; the certificates are re-read when they change.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/grpcbridge"
	"github.com/machinist-io/machinist/grpcbridge/dialin"
	"github.com/machinist-io/machinist/grpcbridge/mtls"

	"example.com/machinist-provider-jsoncloud/jsoncloud"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(ctx, os.Args[1:], log, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "jsoncloud-provider:", err)
		stop()
		os.Exit(1)
	}
}

const usage = "usage: jsoncloud-provider serve|connect [flags] (-h for the flags of each)"

func run(ctx context.Context, args []string, log *slog.Logger, out io.Writer) error {
	if len(args) == 0 {
		return errors.New(usage)
	}
	var c options
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&c.cloud, "cloud", "cloud.json", "the cloud's JSON file (created when missing)")
	fs.StringVar(&c.token, "token", os.Getenv("JSONCLOUD_TOKEN"), "API token a new cloud file requires in each class's secret (key token)")
	fs.StringVar(&c.files.Cert, "cert", "", "this side's TLS certificate (PEM)")
	fs.StringVar(&c.files.Key, "key", "", "the key of --cert (PEM)")
	fs.StringVar(&c.files.CA, "cacert", "", "CA bundle (PEM) that signs the other side's certificate")
	fs.BoolVar(&c.insecure, "insecure", false, "plain text without TLS: only for unix sockets and tests")
	switch args[0] {
	case "serve":
		listen := fs.String("listen", "unix:///tmp/jsoncloud.sock", "address to serve on: unix:///path.sock or host:port")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		return serve(ctx, c, *listen, log)
	case "connect":
		controller := fs.String("controller", "", "the controller's provider listener: host:port or unix:///path.sock")
		serverName := fs.String("server-name", "", "name the controller's certificate must carry (default: the host of --controller)")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		return connect(ctx, c, *controller, *serverName, log)
	}
	return fmt.Errorf("unknown command %q: %s", args[0], usage)
}

// options are the flags both commands share.
type options struct {
	cloud, token string
	files        mtls.Files
	insecure     bool
}

func (o options) driver(log *slog.Logger) (*jsoncloud.Driver, error) {
	cloud, err := jsoncloud.OpenCloud(o.cloud, o.token)
	if err != nil {
		return nil, err
	}
	return jsoncloud.New(cloud, log), nil
}

// transport is mutual TLS from the files, or plain text when --insecure is given.
func (o options) transport(server bool, serverName string) (grpcbridge.Transport, error) {
	if o.insecure {
		return grpcbridge.Transport{Insecure: true}, nil
	}
	if err := o.files.Validate(); err != nil {
		return grpcbridge.Transport{}, err
	}
	tlsConfig, err := mtls.ServerConfig(o.files)
	if !server {
		tlsConfig, err = mtls.ClientConfig(o.files, serverName)
	}
	return grpcbridge.Transport{TLS: tlsConfig}, err
}

// serve is dial-out: a gRPC driver server the controller calls.
func serve(ctx context.Context, o options, listen string, log *slog.Logger) error {
	d, err := o.driver(log)
	if err != nil {
		return err
	}
	t, err := o.transport(true, "")
	if err != nil {
		return err
	}
	srv, err := grpcbridge.NewGRPCServer(t)
	if err != nil {
		return err
	}
	grpcbridge.NewServer(d, grpcbridge.WithProviders(jsoncloud.ProviderName), grpcbridge.WithServerLogger(log)).Register(srv)
	l, err := grpcbridge.Listen(listen)
	if err != nil {
		return err
	}
	go func() {
		<-ctx.Done()
		srv.GracefulStop()
	}()
	log.Info("serving the jsoncloud driver", "address", listen, "tls", !o.insecure)
	return srv.Serve(l)
}

// connect is dial-in: it registers jsoncloud with the controller and serves the operations sent
// over the stream, reconnecting with backoff, until ctx ends or the controller refuses it.
func connect(ctx context.Context, o options, controller, serverName string, log *slog.Logger) error {
	if controller == "" {
		return errors.New("connect: no --controller: give the controller's provider listener, e.g. machinist.example.com:5000")
	}
	d, err := o.driver(log)
	if err != nil {
		return err
	}
	t, err := o.transport(false, serverName)
	if err != nil {
		return err
	}
	p, err := dialin.NewConnector(dialin.ConnectorOptions{
		Controller: controller,
		Transport:  t,
		Drivers:    map[string]driver.Driver{jsoncloud.ProviderName: d},
		Log:        log,
	})
	if err != nil {
		return err
	}
	defer p.Close()
	log.Info("serving the jsoncloud driver to the controller", "controller", controller, "tls", !o.insecure)
	return p.Run(ctx)
}
