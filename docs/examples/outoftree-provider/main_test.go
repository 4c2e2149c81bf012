package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/drivertest"
	"github.com/machinist-io/machinist/grpcbridge"
	"github.com/machinist-io/machinist/grpcbridge/dialin"
	"github.com/machinist-io/machinist/grpcbridge/mtls"
	"github.com/machinist-io/machinist/grpcbridge/mtls/mtlstest"

	"example.com/machinist-provider-jsoncloud/jsoncloud"
	"example.com/machinist-provider-jsoncloud/jsoncloud/jsoncloudtest"
)

// certs issues a server certificate for the provider and a client certificate for the
// controller, both signed by one test CA.
func certs(t testing.TB) (server, client mtls.Files) {
	ca := mtlstest.NewCA(t, "test CA")
	server = ca.IssueFiles(t, mtlstest.Leaf{CommonName: "jsoncloud-provider"}, nil)
	client = ca.IssueFiles(t, mtlstest.Leaf{CommonName: "machinist-controller"}, nil)
	return server, client
}

// startServe runs `jsoncloud-provider serve` with args on a unix socket in dir until the test
// ends, and returns the socket's address once it accepts connections.
func startServe(t testing.TB, dir string, args ...string) string {
	t.Helper()
	addr := "unix://" + filepath.Join(dir, "jsoncloud.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append([]string{"serve", "--listen", addr}, args...), slog.New(slog.DiscardHandler), io.Discard)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		// A dial, not a stat: the socket file exists from bind(2), but connections are refused
		// until listen(2).
		if c, err := net.Dial("unix", filepath.Join(dir, "jsoncloud.sock")); err == nil {
			c.Close()
			return addr
		}
		select {
		case err := <-done:
			t.Fatalf("serve ended early: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("serve did not listen within 10s")
		}
	}
}

// dial returns the driver a controller sees through the dial-out bridge.
func dial(t testing.TB, addr string, tr grpcbridge.Transport) driver.Driver {
	t.Helper()
	conn, err := grpcbridge.Dial(addr, tr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return grpcbridge.NewClient(conn, grpcbridge.WithProvider(jsoncloud.ProviderName))
}

// TestConformanceDialOut runs the kit against the driver served by `serve`, as the controller
// reaches it: over a unix socket in plain text (a sidecar) and with mutual TLS.
func TestConformanceDialOut(t *testing.T) {
	for _, way := range []string{"insecure", "mtls"} {
		t.Run(way, func(t *testing.T) {
			drivertest.Run(t, func(t testing.TB) drivertest.Target {
				dir := t.TempDir()
				path := filepath.Join(dir, "cloud.json")
				args := []string{"--cloud", path, "--token", jsoncloudtest.Token}
				tr := grpcbridge.Transport{Insecure: true}
				if way == "mtls" {
					server, client := certs(t)
					args = append(args, "--cert", server.Cert, "--key", server.Key, "--cacert", server.CA)
					tlsConfig, err := mtls.ClientConfig(client, "localhost")
					if err != nil {
						t.Fatal(err)
					}
					tr = grpcbridge.Transport{TLS: tlsConfig}
				} else {
					args = append(args, "--insecure")
				}
				addr := startServe(t, dir, args...)
				cloud, err := jsoncloud.OpenCloud(path, "")
				if err != nil {
					t.Fatal(err)
				}
				target := jsoncloudtest.Target(t, cloud)
				target.Driver = dial(t, addr, tr)
				return target
			})
		})
	}
}

func TestServeRefusesAnUnauthenticatedClient(t *testing.T) {
	dir := t.TempDir()
	server, _ := certs(t)
	addr := startServe(t, dir, "--cloud", filepath.Join(dir, "cloud.json"),
		"--cert", server.Cert, "--key", server.Key, "--cacert", server.CA)
	_, stranger := certs(t) // signed by another CA
	tlsConfig, err := mtls.ClientConfig(mtls.Files{Cert: stranger.Cert, Key: stranger.Key, CA: server.CA}, "localhost")
	if err != nil {
		t.Fatal(err)
	}
	d := dial(t, addr, grpcbridge.Transport{TLS: tlsConfig})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err = d.ListMachines(ctx, &driver.ListMachinesRequest{MachineClass: jsoncloudtest.Class(t, "workers", "shoot--a")})
	if err == nil || driver.IsCode(err, driver.OK) {
		t.Fatal("a client with a certificate of another CA was served")
	}
}

func TestServeWithoutTLSOrInsecureSaysWhatToSet(t *testing.T) {
	dir := t.TempDir()
	err := run(t.Context(), []string{"serve", "--listen", "unix://" + filepath.Join(dir, "s.sock"), "--cloud", filepath.Join(dir, "c.json")},
		slog.New(slog.DiscardHandler), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--insecure") {
		t.Fatalf("serve without TLS files = %v, want an error naming the files and --insecure", err)
	}
	if err := run(t.Context(), []string{"launch"}, slog.New(slog.DiscardHandler), io.Discard); err == nil || !strings.Contains(err.Error(), "serve|connect") {
		t.Errorf("an unknown command = %v", err)
	}
}

// startController runs a controller's dial-in listener on 127.0.0.1 with mutual TLS until the
// test ends.
func startController(t testing.TB, files mtls.Files) (*dialin.Server, string) {
	t.Helper()
	tlsConfig, err := mtls.ServerConfig(files)
	if err != nil {
		t.Fatal(err)
	}
	gs, err := grpcbridge.NewGRPCServer(grpcbridge.Transport{TLS: tlsConfig})
	if err != nil {
		t.Fatal(err)
	}
	l, err := grpcbridge.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := dialin.NewServer(dialin.Options{Log: slog.New(slog.DiscardHandler)})
	srv.RegisterService(gs)
	go gs.Serve(l)
	t.Cleanup(func() {
		srv.Close() // ends the provider streams, which GracefulStop would wait for
		gs.GracefulStop()
	})
	return srv, l.Addr().String()
}

// startConnect runs `jsoncloud-provider connect` with args until the test ends and returns its
// result channel.
func startConnect(t testing.TB, args ...string) <-chan error {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append([]string{"connect"}, args...), slog.New(slog.DiscardHandler), io.Discard)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("connect: %v", err)
		}
	})
	return done
}

// providerCerts issues a controller server certificate and a provider client certificate
// authorizing names.
func providerCerts(t testing.TB, names ...string) (controller, provider mtls.Files) {
	ca := mtlstest.NewCA(t, "test CA")
	var uris []string
	for _, n := range names {
		uris = append(uris, mtls.ProviderURI(n).String())
	}
	controller = ca.IssueFiles(t, mtlstest.Leaf{CommonName: "machinist-controller"}, nil)
	provider = ca.IssueFiles(t, mtlstest.Leaf{CommonName: "jsoncloud-provider", URIs: uris}, nil)
	return controller, provider
}

// TestConformanceDialIn runs the kit against the driver `connect` registered with a controller,
// through the controller's side of the stream, over TCP with mutual TLS.
func TestConformanceDialIn(t *testing.T) {
	drivertest.Run(t, func(t testing.TB) drivertest.Target {
		ctrlFiles, provFiles := providerCerts(t, jsoncloud.ProviderName)
		srv, addr := startController(t, ctrlFiles)
		path := filepath.Join(t.TempDir(), "cloud.json")
		startConnect(t, "--controller", addr, "--cloud", path, "--token", jsoncloudtest.Token,
			"--cert", provFiles.Cert, "--key", provFiles.Key, "--cacert", provFiles.CA)
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		if err := srv.WaitFor(ctx, jsoncloud.ProviderName, 1); err != nil {
			t.Fatal(err)
		}
		remote, ok := srv.Driver(jsoncloud.ProviderName)
		if !ok {
			t.Fatal("jsoncloud connected but the controller has no driver for it")
		}
		cloud, err := jsoncloud.OpenCloud(path, "")
		if err != nil {
			t.Fatal(err)
		}
		target := jsoncloudtest.Target(t, cloud)
		target.Driver = remote
		return target
	})
}

// TestConnectIsRefusedForANameTheCertificateDoesNotAllow: a certificate for another provider
// cannot register jsoncloud, and connect ends instead of retrying forever.
func TestConnectIsRefusedForANameTheCertificateDoesNotAllow(t *testing.T) {
	ctrlFiles, provFiles := providerCerts(t, "someothercloud")
	srv, addr := startController(t, ctrlFiles)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	err := run(ctx, []string{"connect", "--controller", addr, "--cloud", filepath.Join(t.TempDir(), "cloud.json"),
		"--cert", provFiles.Cert, "--key", provFiles.Key, "--cacert", provFiles.CA}, slog.New(slog.DiscardHandler), io.Discard)
	if !errors.Is(err, dialin.ErrRefused) {
		t.Fatalf("connect with a certificate for another provider = %v, want dialin.ErrRefused", err)
	}
	if _, ok := srv.Driver(jsoncloud.ProviderName); ok {
		t.Error("the controller serves jsoncloud from a provider whose certificate does not allow it")
	}
}
