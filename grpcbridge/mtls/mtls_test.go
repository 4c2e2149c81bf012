package mtls_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/machinist-io/machinist/grpcbridge/mtls"
	"github.com/machinist-io/machinist/grpcbridge/mtls/mtlstest"
)

// handshake runs one TLS handshake over loopback TCP and returns the certificates each side saw,
// or the first error. (TCP rather than net.Pipe: a TLS 1.3 server rejects the client certificate
// after the client finished, and its alert must not block on an unread pipe.)
func handshake(t testing.TB, server, client *tls.Config) (serverSaw, clientSaw *x509.Certificate, err error) {
	t.Helper()
	a, b := tcpPair(t)
	defer a.Close()
	defer b.Close()
	deadline := time.Now().Add(10 * time.Second)
	if err := errors.Join(a.SetDeadline(deadline), b.SetDeadline(deadline)); err != nil {
		t.Fatal(err)
	}
	srv := tls.Server(a, server)
	cli := tls.Client(b, client)
	errc := make(chan error, 1)
	go func() { errc <- srv.Handshake() }()
	cerr := cli.Handshake()
	if cerr != nil {
		b.Close()
	}
	serr := <-errc
	if cerr != nil {
		return nil, nil, cerr
	}
	if serr != nil {
		return nil, nil, serr
	}
	ss, cs := srv.ConnectionState(), cli.ConnectionState()
	return ss.PeerCertificates[0], cs.PeerCertificates[0], nil
}

var listener net.Listener

func tcpPair(t testing.TB) (server, client net.Conn) {
	t.Helper()
	if listener == nil {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		listener = l
	}
	c, err := net.Dial("tcp", listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := listener.Accept()
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}

type pair struct {
	ca             *mtlstest.CA
	server, client mtls.Files
}

func newPair(t testing.TB) pair {
	ca := mtlstest.NewCA(t, "test-ca")
	return pair{
		ca:     ca,
		server: ca.IssueFiles(t, mtlstest.Leaf{CommonName: "controller"}, nil),
		client: ca.IssueFiles(t, mtlstest.Leaf{CommonName: "provider", URIs: []string{"machinist://provider/local"}}, nil),
	}
}

func configs(t testing.TB, p pair, serverName string) (*tls.Config, *tls.Config) {
	t.Helper()
	s, err := mtls.ServerConfig(p.server)
	if err != nil {
		t.Fatal(err)
	}
	c, err := mtls.ClientConfig(p.client, serverName)
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}

func TestMutualHandshake(t *testing.T) {
	p := newPair(t)
	s, c := configs(t, p, "localhost")
	serverSaw, clientSaw, err := handshake(t, s, c)
	if err != nil {
		t.Fatalf("handshake: %v", err)
	}
	if serverSaw.Subject.CommonName != "provider" || clientSaw.Subject.CommonName != "controller" {
		t.Fatalf("server saw %q, client saw %q", serverSaw.Subject.CommonName, clientSaw.Subject.CommonName)
	}
	if !mtls.Authorizes(serverSaw, "local") || mtls.Authorizes(serverSaw, "openstack") {
		t.Fatalf("authorization of %v wrong", serverSaw.URIs)
	}
}

func TestClientFromOtherCARejected(t *testing.T) {
	p := newPair(t)
	other := mtlstest.NewCA(t, "other-ca")
	// The intruder trusts the real server CA but its own certificate is signed by another CA.
	p.client = other.IssueFiles(t, mtlstest.Leaf{CommonName: "intruder"}, p.ca.PEM)
	s, c := configs(t, p, "localhost")
	if _, _, err := handshake(t, s, c); err == nil {
		t.Fatal("a client certificate from an unknown CA was accepted")
	}
}

func TestClientWithoutCertificateRejected(t *testing.T) {
	p := newPair(t)
	s, _ := configs(t, p, "localhost")
	pool := x509.NewCertPool()
	pool.AddCert(p.ca.Cert)
	_, _, err := handshake(t, s, &tls.Config{RootCAs: pool, ServerName: "localhost"})
	if err == nil {
		t.Fatal("a client without certificate was accepted")
	}
}

func TestServerNameChecked(t *testing.T) {
	p := newPair(t)
	s, c := configs(t, p, "controller.example.com")
	_, _, err := handshake(t, s, c)
	if err == nil || !strings.Contains(err.Error(), "server certificate rejected") {
		t.Fatalf("want name mismatch, got %v", err)
	}
}

func TestServerFromOtherCARejected(t *testing.T) {
	p := newPair(t)
	other := mtlstest.NewCA(t, "other-ca")
	p.server = other.IssueFiles(t, mtlstest.Leaf{CommonName: "fake-controller"}, p.ca.PEM)
	s, c := configs(t, p, "localhost")
	if _, _, err := handshake(t, s, c); err == nil {
		t.Fatal("a server certificate from an unknown CA was accepted")
	}
}

func TestExpiredClientRejected(t *testing.T) {
	p := newPair(t)
	p.client = p.ca.IssueFiles(t, mtlstest.Leaf{CommonName: "old", NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)}, nil)
	s, c := configs(t, p, "localhost")
	if _, _, err := handshake(t, s, c); err == nil {
		t.Fatal("an expired client certificate was accepted")
	}
}

// TestRotation rewrites the files of both sides, as cert-manager does, and checks that the same
// tls.Configs present and accept the new certificates without being rebuilt — including a switch
// to a new CA, and an expired certificate replaced by a valid one.
func TestRotation(t *testing.T) {
	p := newPair(t)
	s, c := configs(t, p, "localhost")
	_, before, err := handshake(t, s, c)
	if err != nil {
		t.Fatal(err)
	}

	// New leaf certificates from the same CA.
	p.ca.WriteFiles(t, p.server, mtlstest.Leaf{CommonName: "controller-2"}, nil)
	_, after, err := handshake(t, s, c)
	if err != nil {
		t.Fatal(err)
	}
	if after.Subject.CommonName != "controller-2" || after.SerialNumber.Cmp(before.SerialNumber) == 0 {
		t.Fatalf("server still presents %q after rotation", after.Subject.CommonName)
	}

	// A new CA for everything: both sides reload their bundle and their certificate.
	ca2 := mtlstest.NewCA(t, "ca-2")
	ca2.WriteFiles(t, p.server, mtlstest.Leaf{CommonName: "controller-3"}, nil)
	if _, _, err := handshake(t, s, c); err == nil {
		t.Fatal("client accepted a server of a CA it does not trust yet")
	}
	ca2.WriteFiles(t, p.client, mtlstest.Leaf{CommonName: "provider-3"}, nil)
	serverSaw, clientSaw, err := handshake(t, s, c)
	if err != nil {
		t.Fatalf("after CA rotation: %v", err)
	}
	if serverSaw.Subject.CommonName != "provider-3" || clientSaw.Subject.CommonName != "controller-3" {
		t.Fatalf("saw %q / %q after CA rotation", serverSaw.Subject.CommonName, clientSaw.Subject.CommonName)
	}

	// An expired certificate is refused until the rotation replaces it.
	ca2.WriteFiles(t, p.client, mtlstest.Leaf{CommonName: "expired", NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Minute)}, nil)
	if _, _, err := handshake(t, s, c); err == nil {
		t.Fatal("expired client certificate accepted")
	}
	ca2.WriteFiles(t, p.client, mtlstest.Leaf{CommonName: "renewed"}, nil)
	if serverSaw, _, err = handshake(t, s, c); err != nil || serverSaw.Subject.CommonName != "renewed" {
		t.Fatalf("after renewal: %v", err)
	}
}

// TestHalfWrittenRotationKeepsServing writes a new certificate but leaves the old key (the window
// between two file writes): the previous pair stays in use until the key arrives.
func TestHalfWrittenRotationKeepsServing(t *testing.T) {
	p := newPair(t)
	s, c := configs(t, p, "localhost")
	certPEM, keyPEM := p.ca.Issue(t, mtlstest.Leaf{CommonName: "controller-new"})
	if err := os.WriteFile(p.server.Cert, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	_, saw, err := handshake(t, s, c)
	if err != nil {
		t.Fatalf("half-written rotation broke the listener: %v", err)
	}
	if saw.Subject.CommonName != "controller" {
		t.Fatalf("server presents %q with a mismatched key", saw.Subject.CommonName)
	}
	if err := os.WriteFile(p.server.Key, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, saw, err = handshake(t, s, c); err != nil || saw.Subject.CommonName != "controller-new" {
		t.Fatalf("after the key arrived: %v, %v", saw.Subject.CommonName, err)
	}
}

func TestConfigErrorsNameTheProblem(t *testing.T) {
	p := newPair(t)
	if _, err := mtls.ServerConfig(mtls.Files{Cert: p.server.Cert}); err == nil || !strings.Contains(err.Error(), "key and CA bundle") || !strings.Contains(err.Error(), "--insecure") {
		t.Fatalf("missing files: %v", err)
	}
	f := p.server
	f.CA = f.Cert + ".missing"
	if _, err := mtls.ClientConfig(f, ""); err == nil || !strings.Contains(err.Error(), "CA bundle") {
		t.Fatalf("missing CA file: %v", err)
	}
	f = p.server
	f.Key = p.client.Key
	if _, err := mtls.ServerConfig(f); err == nil || !strings.Contains(err.Error(), "do not form a pair") {
		t.Fatalf("mismatched key: %v", err)
	}
	f = p.server
	f.CA = f.Key
	if _, err := mtls.ServerConfig(f); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Fatalf("bad CA bundle: %v", err)
	}
}

// BenchmarkHandshake compares a full mutual handshake with fixed certificates to one with the
// reloading configuration: the difference is the cost of stat-on-handshake.
func BenchmarkHandshake(b *testing.B) {
	p := newPair(b)
	load := func(f mtls.Files) (tls.Certificate, *x509.CertPool) {
		pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			b.Fatal(err)
		}
		pem, _ := os.ReadFile(f.CA)
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		return pair, pool
	}
	sc, sp := load(p.server)
	cc, cp := load(p.client)
	static := [2]*tls.Config{
		{Certificates: []tls.Certificate{sc}, ClientCAs: sp, ClientAuth: tls.RequireAndVerifyClientCert},
		{Certificates: []tls.Certificate{cc}, RootCAs: cp, ServerName: "localhost"},
	}
	s, c := configs(b, p, "localhost")
	reloading := [2]*tls.Config{s, c}
	for _, bc := range []struct {
		name string
		cfg  [2]*tls.Config
	}{{"static", static}, {"reloading", reloading}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := handshake(b, bc.cfg[0], bc.cfg[1]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
