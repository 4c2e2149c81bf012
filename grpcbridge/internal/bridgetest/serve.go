package bridgetest

import (
	"net"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/grpcbridge"
	"github.com/machinist-io/machinist/grpcbridge/mtls"
	"github.com/machinist-io/machinist/grpcbridge/mtls/mtlstest"
)

// SocketDir returns a short private directory for unix sockets (a socket path must stay under
// ~108 bytes, which t.TempDir() paths can exceed), removed when the test ends.
func SocketDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "gb")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// Served is a driver served over gRPC and a client of it.
type Served struct {
	// Addr is the listening address (unix:///... or 127.0.0.1:port).
	Addr string
	// GRPC is the server; Stop it to simulate a server that died.
	GRPC *grpc.Server
	// Conn is the client connection; Client calls through it.
	Conn   *grpc.ClientConn
	Client driver.Driver
}

// Certs are the files of both sides of a mutual-TLS connection signed by one CA.
type Certs struct {
	CA             *mtlstest.CA
	Server, Client mtls.Files
}

// NewCerts issues a server and a client certificate; the client is authorized for uris.
func NewCerts(t testing.TB, uris ...string) Certs {
	ca := mtlstest.NewCA(t, "bridge-test-ca")
	return Certs{
		CA:     ca,
		Server: ca.IssueFiles(t, mtlstest.Leaf{CommonName: "driver-server"}, nil),
		Client: ca.IssueFiles(t, mtlstest.Leaf{CommonName: "controller", URIs: uris}, nil),
	}
}

// Transports returns server and client transports for certs.
func (c Certs) Transports(t testing.TB) (server, client grpcbridge.Transport) {
	t.Helper()
	s, err := mtls.ServerConfig(c.Server)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := mtls.ClientConfig(c.Client, "localhost")
	if err != nil {
		t.Fatal(err)
	}
	return grpcbridge.Transport{TLS: s}, grpcbridge.Transport{TLS: cl}
}

// Insecure is the plain-text transport.
var Insecure = grpcbridge.Transport{Insecure: true}

// ServeUnix serves d on a fresh unix socket in plain text and dials it.
func ServeUnix(t testing.TB, d driver.Driver, opts ...grpcbridge.ServerOption) *Served {
	t.Helper()
	return Serve(t, "unix://"+filepath.Join(SocketDir(t), "driver.sock"), Insecure, Insecure, d, opts...)
}

// ServeTCPMTLS serves d on loopback TCP with mutual TLS and dials it.
func ServeTCPMTLS(t testing.TB, d driver.Driver, opts ...grpcbridge.ServerOption) *Served {
	t.Helper()
	st, ct := NewCerts(t).Transports(t)
	return Serve(t, "127.0.0.1:0", st, ct, d, opts...)
}

// Serve serves d on addr with the server transport and dials it with the client transport.
func Serve(t testing.TB, addr string, server, client grpcbridge.Transport, d driver.Driver, opts ...grpcbridge.ServerOption) *Served {
	t.Helper()
	lis, err := grpcbridge.Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := lis.Addr().(*net.TCPAddr); ok {
		addr = lis.Addr().String()
	}
	srv, err := grpcbridge.NewGRPCServer(server)
	if err != nil {
		t.Fatal(err)
	}
	grpcbridge.NewServer(d, opts...).Register(srv)
	go srv.Serve(lis)
	conn, err := grpcbridge.Dial(addr, client)
	if err != nil {
		srv.Stop()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
	})
	return &Served{Addr: addr, GRPC: srv, Conn: conn, Client: grpcbridge.NewClient(conn)}
}
