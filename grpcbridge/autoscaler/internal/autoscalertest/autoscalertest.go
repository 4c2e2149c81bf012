// Package autoscalertest serves a node-group source over real gRPC with mutual TLS on loopback and
// connects a Cluster Autoscaler-like client to it, for the tests of both node-group modes.
package autoscalertest

import (
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/machinist-io/machinist/grpcbridge/autoscaler"
	"github.com/machinist-io/machinist/grpcbridge/autoscaler/clusterautoscaler"
	"github.com/machinist-io/machinist/grpcbridge/mtls"
	"github.com/machinist-io/machinist/grpcbridge/mtls/mtlstest"
)

// Certs are the PEM files of a test's server and client, both issued by one CA.
type Certs struct {
	Server, Client mtls.Files
}

// NewCerts issues a server certificate for 127.0.0.1/localhost and a client certificate.
func NewCerts(t testing.TB) Certs {
	ca := mtlstest.NewCA(t, "autoscaler-test-ca")
	return Certs{
		Server: ca.IssueFiles(t, mtlstest.Leaf{CommonName: "machinist-autoscaler"}, nil),
		Client: ca.IssueFiles(t, mtlstest.Leaf{CommonName: "cluster-autoscaler"}, nil),
	}
}

// Serve serves p with mTLS on 127.0.0.1 until the test ends and returns its address.
func Serve(t testing.TB, p autoscaler.NodeGroupSource, certs Certs) string {
	t.Helper()
	tlsConfig, err := mtls.ServerConfig(certs.Server)
	if err != nil {
		t.Fatalf("autoscalertest: server TLS: %v", err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("autoscalertest: listen: %v", err)
	}
	srv := autoscaler.NewServer(autoscaler.Config{Source: p, GPULabel: "machinist.io/gpu", Log: slog.New(slog.DiscardHandler)})
	g := autoscaler.NewGRPCServer(srv, grpc.Creds(credentials.NewTLS(tlsConfig)))
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

// Connect dials addr like Cluster Autoscaler with the client certificate, writing the cloud-config
// file Cluster Autoscaler would read and parsing it back, so the config format is exercised too.
func Connect(t testing.TB, addr string, certs Certs, release clusterautoscaler.Release) *clusterautoscaler.Client {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cloud-config")
	config := "address: " + addr + "\ncert: " + certs.Client.Cert + "\nkey: " + certs.Client.Key +
		"\ncacert: " + certs.Client.CA + "\ngrpc_timeout: 10s\n"
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatalf("autoscalertest: %v", err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("autoscalertest: %v", err)
	}
	cfg, err := clusterautoscaler.ParseCloudConfig(data)
	if err != nil {
		t.Fatalf("autoscalertest: %v", err)
	}
	c, err := clusterautoscaler.Dial(cfg, release)
	if err != nil {
		t.Fatalf("autoscalertest: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}
