// Package mtlstest issues throw-away certificates for tests: a CA and leaf certificates written
// as PEM files into a test's temporary directory, issued by internal/pki. Keys are generated at
// test time; none are checked in.
package mtlstest

import (
	"crypto"
	"crypto/x509"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/machinist-io/machinist/grpcbridge/mtls"
	"github.com/machinist-io/machinist/internal/pki"
)

// CA is a self-signed certificate authority (internal/pki) that fails its test on error.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
	// PEM is the CA certificate in PEM form.
	PEM []byte

	ca *pki.CA
}

// NewCA returns a fresh CA named name, valid from an hour ago for a day.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	ca, err := pki.NewCA(name, 24*time.Hour)
	if err != nil {
		t.Fatalf("mtlstest: %v", err)
	}
	return &CA{Cert: ca.Cert, Key: ca.Key, PEM: ca.CertPEM, ca: ca}
}

// Leaf describes a certificate to issue.
type Leaf struct {
	// CommonName of the subject.
	CommonName string
	// DNSNames and IPs are the host SANs; empty means localhost, 127.0.0.1 and ::1.
	DNSNames []string
	IPs      []net.IP
	// URIs are URI SANs, e.g. mtls.ProviderURI("openstack").String().
	URIs []string
	// NotBefore and NotAfter default to an hour ago and a day from now.
	NotBefore, NotAfter time.Time
}

// Issue signs a leaf certificate usable for both server and client authentication.
func (ca *CA) Issue(t testing.TB, l Leaf) (certPEM, keyPEM []byte) {
	t.Helper()
	if len(l.DNSNames) == 0 && len(l.IPs) == 0 {
		l.DNSNames = []string{"localhost"}
		l.IPs = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	}
	leaf := pki.Leaf{CommonName: l.CommonName, DNSNames: l.DNSNames, IPs: l.IPs, NotBefore: l.NotBefore, NotAfter: l.NotAfter}
	for _, s := range l.URIs {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatalf("mtlstest: URI SAN %q: %v", s, err)
		}
		leaf.URIs = append(leaf.URIs, u)
	}
	certPEM, keyPEM, err := ca.ca.Issue(leaf)
	if err != nil {
		t.Fatalf("mtlstest: %v", err)
	}
	return certPEM, keyPEM
}

// IssueFiles issues a leaf and writes it, its key and the CA bundle caPEM (the CA that verifies
// the other side; nil means this CA) into a new directory under t.TempDir().
func (ca *CA) IssueFiles(t testing.TB, l Leaf, caPEM []byte) mtls.Files {
	t.Helper()
	dir, err := os.MkdirTemp(t.TempDir(), "certs")
	if err != nil {
		t.Fatalf("mtlstest: %v", err)
	}
	f := mtls.Files{Cert: filepath.Join(dir, "tls.crt"), Key: filepath.Join(dir, "tls.key"), CA: filepath.Join(dir, "ca.crt")}
	ca.WriteFiles(t, f, l, caPEM)
	return f
}

// WriteFiles issues a leaf into existing paths, replacing the files the way a rotation does (write
// to a temporary name, then rename).
func (ca *CA) WriteFiles(t testing.TB, f mtls.Files, l Leaf, caPEM []byte) {
	t.Helper()
	if caPEM == nil {
		caPEM = ca.PEM
	}
	certPEM, keyPEM := ca.Issue(t, l)
	writeAtomic(t, f.Key, keyPEM)
	writeAtomic(t, f.Cert, certPEM)
	writeAtomic(t, f.CA, caPEM)
}

func writeAtomic(t testing.TB, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatalf("mtlstest: %v", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatalf("mtlstest: %v", err)
	}
}
