package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/drivertest"
	"github.com/machinist-io/machinist/grpcbridge"
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
		if _, err := os.Stat(filepath.Join(dir, "jsoncloud.sock")); err == nil {
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
	if err := run(t.Context(), []string{"launch"}, slog.New(slog.DiscardHandler), io.Discard); err == nil || !strings.Contains(err.Error(), "usage: jsoncloud-provider") {
		t.Errorf("an unknown command = %v", err)
	}
}
