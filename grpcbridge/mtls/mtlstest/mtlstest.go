// Package mtlstest issues throw-away certificates for tests: a CA and leaf certificates written
// as PEM files into a test's temporary directory. Keys are generated at test time; none are
// checked in.
package mtlstest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/machinist-io/machinist/grpcbridge/mtls"
)

// CA is a self-signed certificate authority.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
	// PEM is the CA certificate in PEM form.
	PEM []byte
}

var serial atomic.Int64

// NewCA returns a fresh CA named name, valid from an hour ago for a day.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial.Add(1)),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatalf("mtlstest: create CA: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("mtlstest: parse CA: %v", err)
	}
	return &CA{Cert: cert, Key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
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
	key := newKey(t)
	if len(l.DNSNames) == 0 && len(l.IPs) == 0 {
		l.DNSNames = []string{"localhost"}
		l.IPs = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	}
	if l.NotBefore.IsZero() {
		l.NotBefore = time.Now().Add(-time.Hour)
	}
	if l.NotAfter.IsZero() {
		l.NotAfter = time.Now().Add(24 * time.Hour)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)),
		Subject:      pkix.Name{CommonName: l.CommonName},
		NotBefore:    l.NotBefore,
		NotAfter:     l.NotAfter,
		DNSNames:     l.DNSNames,
		IPAddresses:  l.IPs,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, s := range l.URIs {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatalf("mtlstest: URI SAN %q: %v", s, err)
		}
		tmpl.URIs = append(tmpl.URIs, u)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		t.Fatalf("mtlstest: issue %q: %v", l.CommonName, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("mtlstest: marshal key: %v", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
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

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("mtlstest: generate key: %v", err)
	}
	return key
}
