//go:build !slim

package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/machinist-io/machinist/grpcbridge/autoscaler/clusterautoscaler"
	"github.com/machinist-io/machinist/grpcbridge/mtls"
	"github.com/machinist-io/machinist/grpcbridge/mtls/mtlstest"
	"github.com/machinist-io/machinist/harness/testenv"
	"github.com/machinist-io/machinist/internal/syncbuf"
)

func TestAutoscalerInsecureOnlyOnLoopback(t *testing.T) {
	config := writeFile(t, "groups.yaml", "groups: [{name: w, maxSize: 1, machineClass: {provider: local, providerSpec: {cluster: c}}}]")
	for _, addr := range []string{":8086", "0.0.0.0:8086", "10.1.2.3:8086"} {
		_, errText := run(t, "autoscaler", "--insecure", "--listen", addr, "--config", config)
		if !strings.Contains(errText, "only allowed on loopback") {
			t.Errorf("--insecure --listen %s: %q", addr, errText)
		}
	}
	_, errText := run(t, "autoscaler", "--listen", "127.0.0.1:0", "--config", config)
	if !strings.Contains(errText, "--insecure") || !strings.Contains(errText, "cert") {
		t.Errorf("no certificates and no --insecure: %q", errText)
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
}

// TestAutoscalerCommand runs `machinist -v 5 autoscaler` with mTLS in static mode over the local
// provider and talks to it like CA: accepted with the right client certificate, refused
// without one or with one from another CA; calls logged, /metrics and /healthz served.
func TestAutoscalerCommand(t *testing.T) {
	env := testenv.Start(t)
	ca := mtlstest.NewCA(t, "autoscaler-ca")
	server := ca.IssueFiles(t, mtlstest.Leaf{CommonName: "machinist-autoscaler"}, nil)
	client := ca.IssueFiles(t, mtlstest.Leaf{CommonName: "cluster-autoscaler"}, nil)
	config := writeFile(t, "groups.yaml", `groups:
- name: workers
  minSize: 0
  maxSize: 3
  machineClass:
    provider: local
    providerSpec: {cluster: autoscaler-cmd}
    nodeTemplate: {capacity: {cpu: "2", memory: 4Gi, gpu: "0"}, instanceType: local, region: local, zone: local-1}
`)
	grpcPort, httpPort := freePort(t), freePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	var logs syncbuf.Buffer
	done := make(chan error, 1)
	go func() {
		done <- newApp(io.Discard, &logs).RunContext(ctx, []string{"machinist", "-v", "5", "autoscaler",
			"--listen", "127.0.0.1:" + grpcPort, "--http-address", "127.0.0.1:" + httpPort,
			"--cert", server.Cert, "--key", server.Key, "--cacert", server.CA,
			"--config", config, "--target-kubeconfig", env.KubeconfigPath, "--state-dir", t.TempDir()})
	}()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("autoscaler exited with %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Error("autoscaler did not stop within 30s")
			}
		}
	}
	t.Cleanup(stop)

	dial := func(files mtls.Files) *clusterautoscaler.Client {
		c, err := clusterautoscaler.Dial(clusterautoscaler.CloudConfig{Address: "localhost:" + grpcPort, Cert: files.Cert, Key: files.Key, CACert: files.CA}, clusterautoscaler.Current)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	good := dial(client)
	deadline := time.Now().Add(60 * time.Second)
	for err := good.Refresh(); err != nil; err = good.Refresh() {
		if time.Now().After(deadline) {
			t.Fatalf("server not answering after 60s: %v\nlogs:\n%s", err, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}

	t.Run("Cluster Autoscaler's client is accepted", func(t *testing.T) {
		groups, err := good.NodeGroups()
		if err != nil || len(groups) != 1 || groups[0].GetId() != "workers" {
			t.Fatalf("groups %v, %v", groups, err)
		}
		if err := good.IncreaseSize("workers", 1); err != nil {
			t.Fatal(err)
		}
		if n, err := good.TargetSize("workers"); err != nil || n != 1 {
			t.Fatalf("target %d, %v", n, err)
		}
	})

	t.Run("a client certificate of another CA is refused", func(t *testing.T) {
		other := mtlstest.NewCA(t, "other-ca")
		files := other.IssueFiles(t, mtlstest.Leaf{CommonName: "intruder"}, ca.PEM)
		if err := dial(files).Refresh(); err == nil {
			t.Fatal("a client certificate signed by another CA was accepted")
		}
	})

	t.Run("a client without certificate is refused", func(t *testing.T) {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(ca.PEM)
		conn, err := tls.Dial("tcp", "127.0.0.1:"+grpcPort, &tls.Config{ServerName: "localhost", RootCAs: pool, NextProtos: []string{"h2"}})
		if err == nil {
			// TLS 1.3 reports the missing certificate on the first read.
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			_, err = conn.Read(make([]byte, 1))
			conn.Close()
		}
		if err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Fatalf("a client without certificate got: %v", err)
		}
	})

	t.Run("metrics, health and call logs", func(t *testing.T) {
		get := func(path string) (int, string) {
			resp, err := http.Get("http://127.0.0.1:" + httpPort + path)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		for _, path := range []string{"/healthz", "/readyz"} {
			if code, body := get(path); code != http.StatusOK {
				t.Errorf("%s: %d %s", path, code, body)
			}
		}
		_, _ = good.TargetSize("nope")
		_, body := get("/metrics")
		for _, want := range []string{
			`machinist_autoscaler_calls_total{rpc="Refresh"}`,
			`machinist_autoscaler_calls_total{rpc="NodeGroupIncreaseSize"} 1`,
			`machinist_autoscaler_call_errors_total{code="NotFound",rpc="NodeGroupTargetSize"} 1`,
			`machinist_autoscaler_call_duration_seconds_count{rpc="NodeGroups"} 1`,
		} {
			if !strings.Contains(body, want) {
				t.Errorf("/metrics lacks %s", want)
			}
		}
		for _, want := range []string{`msg="autoscaler call" rpc=NodeGroupIncreaseSize`, `rpc=NodeGroupTargetSize`, `code=NotFound`} {
			if !strings.Contains(logs.String(), want) {
				t.Errorf("-v 5 logs lack %s", want)
			}
		}
	})

	stop()
	if strings.Contains(logs.String(), "BEGIN") {
		t.Error("logs contain PEM material")
	}
}
