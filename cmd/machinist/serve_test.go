package main

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/grpcbridge"
	"github.com/machinist-io/machinist/grpcbridge/dialin"
	"github.com/machinist-io/machinist/grpcbridge/mtls"
	"github.com/machinist-io/machinist/grpcbridge/mtls/mtlstest"
	"github.com/machinist-io/machinist/internal/syncbuf"
)

// bg is a command running in-process in the background.
type bg struct {
	out    *syncbuf.Buffer
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

// background runs the CLI in-process until stop or the end of the test.
func background(t *testing.T, args ...string) *bg {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	b := &bg{out: &syncbuf.Buffer{}, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(b.done)
		b.err = newApp(b.out, b.out).RunContext(ctx, append([]string{"machinist"}, args...))
	}()
	t.Cleanup(func() {
		if err := b.stop(); errors.Is(err, errNotStopped) {
			t.Errorf("machinist %s did not stop", args[0])
		}
	})
	return b
}

var errNotStopped = errors.New("did not stop")

// stop cancels the command (as SIGTERM does) and returns its error.
func (b *bg) stop() error {
	b.cancel()
	select {
	case <-b.done:
		return b.err
	case <-time.After(15 * time.Second):
		return errNotStopped
	}
}

func (b *bg) exited() bool {
	select {
	case <-b.done:
		return true
	default:
		return false
	}
}

var servingRE = regexp.MustCompile(`serving \S+ on (\S+)`)

// waitServing returns the address a serve printed to out; exited tells when it ended early.
func waitServing(t *testing.T, out *syncbuf.Buffer, exited func() bool) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if m := servingRE.FindStringSubmatch(out.String()); m != nil {
			return m[1]
		}
		if exited != nil && exited() {
			t.Fatalf("serve exited:\n%s", out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("serve did not start:\n%s", out)
	return ""
}

func socketPath(t *testing.T) string {
	dir, err := os.MkdirTemp("", "mcli")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "d.sock")
}

// TestServeAndDriverEndpoint: machinist serve exposes the local provider on a unix socket and
// `machinist driver ... --endpoint` drives it through the bridge like a compiled-in driver.
func TestServeAndDriverEndpoint(t *testing.T) {
	state := t.TempDir()
	sock := "unix://" + socketPath(t)
	srv := background(t, "serve", "--listen", sock, "--provider", "local", "--insecure", "--state-dir", state)
	waitServing(t, srv.out, srv.exited)
	class := writeFile(t, "class.yaml", localClass)
	remote := []string{"--endpoint", sock, "--insecure", "--state-dir", t.TempDir()} // the client's own state dir stays empty

	created := mustRun(t, append([]string{"driver", "create", "--class", class, "--machine", "m-remote", "-o", "json"}, remote...)...)
	var view struct{ ProviderID string }
	if err := json.Unmarshal([]byte(created), &view); err != nil || !strings.HasPrefix(view.ProviderID, "local:///") {
		t.Fatalf("create through --endpoint: %q %v", created, err)
	}
	if _, err := os.Stat(filepath.Join(state, "local", "machines", "m-remote.json")); err != nil {
		t.Fatalf("the machine is not in the server's state dir: %v", err)
	}
	if list := mustRun(t, append([]string{"driver", "list", "--class", class}, remote...)...); !strings.Contains(list, "m-remote") {
		t.Fatalf("list through --endpoint:\n%s", list)
	}
	mustRun(t, append([]string{"driver", "delete", "--class", class, "--machine", "m-remote"}, remote...)...)
	_, errText := run(t, append([]string{"driver", "status", "--class", class, "--machine", "m-remote"}, remote...)...)
	if !strings.Contains(errText, "NotFound") {
		t.Fatalf("status of a deleted machine through --endpoint: %q", errText)
	}

	// No transport choice is an error that says what to give.
	_, errText = run(t, "driver", "list", "--class", class, "--endpoint", sock)
	if !strings.Contains(errText, "--insecure") || !strings.Contains(errText, "cert") {
		t.Fatalf("endpoint without TLS flags: %q", errText)
	}
	if err := srv.stop(); err != nil {
		t.Fatalf("serve after SIGTERM-like stop: %v", err)
	}
}

// certsFor issues a CA, a server certificate and a client certificate authorizing providers.
func certsFor(t *testing.T, providers ...string) (ca *mtlstest.CA, server, client mtls.Files) {
	ca = mtlstest.NewCA(t, "cli-ca")
	var uris []string
	for _, p := range providers {
		uris = append(uris, mtls.ProviderURI(p).String())
	}
	return ca, ca.IssueFiles(t, mtlstest.Leaf{CommonName: "server"}, nil), ca.IssueFiles(t, mtlstest.Leaf{CommonName: "client", URIs: uris}, nil)
}

func TestServeWithMutualTLS(t *testing.T) {
	_, server, client := certsFor(t)
	srv := background(t, "serve", "--listen", "127.0.0.1:0", "--provider", "local", "--state-dir", t.TempDir(),
		"--cert", server.Cert, "--key", server.Key, "--cacert", server.CA)
	addr := waitServing(t, srv.out, srv.exited)
	class := writeFile(t, "class.yaml", localClass)
	mustRun(t, "driver", "create", "--class", class, "--machine", "m-tls", "--endpoint", addr, "--cert", client.Cert, "--key", client.Key, "--cacert", client.CA)
	if got := mustRun(t, "driver", "list", "--class", class, "--endpoint", addr, "--cert", client.Cert, "--key", client.Key, "--cacert", client.CA); !strings.Contains(got, "m-tls") {
		t.Fatalf("list over mTLS:\n%s", got)
	}
	// Plain text is refused by a TLS server.
	_, errText := run(t, "driver", "list", "--class", class, "--endpoint", addr, "--insecure", "--timeout", "5s")
	if !strings.Contains(errText, "Unavailable") {
		t.Fatalf("plain-text client against an mTLS server: %q", errText)
	}
	// And contradicting flags are refused before dialling.
	_, errText = run(t, "serve", "--listen", "127.0.0.1:0", "--insecure", "--cert", server.Cert)
	if !strings.Contains(errText, "contradict") {
		t.Fatalf("--insecure with --cert: %q", errText)
	}
}

// TestConnect: machinist connect dials in to a controller with a certificate authorizing
// "local" and serves it; a certificate that does not authorize the name makes it exit with the fix.
func TestConnect(t *testing.T) {
	ca, server, client := certsFor(t, "local")
	scfg, err := mtls.ServerConfig(server)
	if err != nil {
		t.Fatal(err)
	}
	ds := dialin.NewServer(dialin.Options{})
	gs, err := grpcbridge.NewGRPCServer(grpcbridge.Transport{TLS: scfg})
	if err != nil {
		t.Fatal(err)
	}
	ds.RegisterService(gs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(lis) }()
	defer func() { ds.Close(); gs.Stop() }()

	tls := []string{"--cert", client.Cert, "--key", client.Key, "--cacert", client.CA}
	background(t, append([]string{"connect", "--controller", lis.Addr().String(), "--provider", "local", "--state-dir", t.TempDir()}, tls...)...)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := ds.WaitFor(ctx, "local", 1); err != nil {
		t.Fatal(err)
	}
	d, _ := ds.Driver("local")
	class, err := parseClass([]byte(localClass), "class.yaml")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := d.ListMachines(ctx, &driver.ListMachinesRequest{MachineClass: class})
	if err != nil || resp.MachineList == nil {
		t.Fatalf("list through connect: %v %v", resp, err)
	}

	// A certificate for another provider: refused, and connect exits saying what to fix.
	wrong := ca.IssueFiles(t, mtlstest.Leaf{CommonName: "wrong", URIs: []string{"machinist://provider/azure"}}, nil)
	_, errText := run(t, "connect", "--controller", lis.Addr().String(), "--provider", "local", "--state-dir", t.TempDir(),
		"--cert", wrong.Cert, "--key", wrong.Key, "--cacert", wrong.CA)
	if !strings.Contains(errText, "does not authorize provider local") || !strings.Contains(errText, "machinist://provider/") {
		t.Fatalf("connect with a certificate for another provider: %q", errText)
	}
}

// TestSlimBinary builds the slim local binary (-tags slim,provider_local, as `make build`'s
// bin/machinist-local) and uses it as a driver server in its own process (dial-out), through
// --endpoint, and as a dial-in provider: one slim binary does all three, and has no controllers.
func TestSlimBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	bin := filepath.Join(t.TempDir(), "machinist-local")
	build := exec.Command("go", "build", "-tags", "slim,provider_local", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -tags slim,provider_local: %v\n%s", err, out)
	}
	for _, controllerOnly := range []string{"run", "autoscaler", "dev", "controlplane"} {
		out, err := exec.Command(bin, controllerOnly, "--help").CombinedOutput()
		if err == nil || !strings.Contains(string(out), "No help topic for '"+controllerOnly+"'") {
			t.Errorf("the slim binary knows %s (%v):\n%s", controllerOnly, err, out)
		}
	}
	sock := "unix://" + socketPath(t)
	srv := exec.Command(bin, "serve", "--listen", sock, "--insecure", "--state-dir", t.TempDir())
	var out syncbuf.Buffer
	srv.Stdout, srv.Stderr = &out, &out
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
	waitServing(t, &out, nil)
	if !strings.Contains(out.String(), "serving local on") {
		t.Fatalf("the slim binary serves more than local:\n%s", out.String())
	}
	class := writeFile(t, "class.yaml", localClass)
	got, err := exec.Command(bin, "driver", "create", "--class", class, "--machine", "slim-1", "--endpoint", sock, "--insecure", "-o", "json").CombinedOutput()
	if err != nil || !strings.Contains(string(got), "local:///") {
		t.Fatalf("slim driver --endpoint: %v\n%s", err, got)
	}

	// Dial-in with the same binary.
	ds := dialin.NewServer(dialin.Options{Insecure: true})
	gs, _ := grpcbridge.NewGRPCServer(grpcbridge.Transport{Insecure: true})
	ds.RegisterService(gs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(lis) }()
	defer func() { ds.Close(); gs.Stop() }()
	conn := exec.Command(bin, "connect", "--controller", lis.Addr().String(), "--insecure", "--state-dir", t.TempDir())
	conn.Stdout, conn.Stderr = &out, &out
	if err := conn.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Process.Kill(); _ = conn.Wait() }()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := ds.WaitFor(ctx, "local", 1); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if got := ds.Providers(); len(got) != 1 {
		t.Fatalf("slim connect registered %v", got)
	}
}
