// Package pki is the tree's one certificate issuer: a certificate authority that signs leaf
// certificates for servers and clients, as PEM. The local control plane (its CA, the API
// server's serving certificate and the components' client certificates), `machinist dev`'s
// certificates for Cluster Autoscaler, the fake clouds' HTTPS servers and the tests' throw-away
// certificates (grpcbridge/mtls/mtlstest) are all issued here. Keys are ECDSA P-256.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"time"
)

// Backdate is how far before now certificates start to be valid, so that small clock differences
// between machines (or processes in a container) do not make a fresh certificate "not yet valid".
const Backdate = time.Hour

// CA is a certificate authority: its certificate and the key that signs with it.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
	// CertPEM is Cert as PEM, the bundle that verifies what the CA issues.
	CertPEM []byte
}

// NewCA makes a self-signed CA named name, valid from Backdate ago for validity.
func NewCA(name string, validity time.Duration) (*CA, error) {
	key, err := NewKey()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-Backdate),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("pki: create CA %q: %w", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("pki: CA %q: %w", name, err)
	}
	return &CA{Cert: cert, Key: key, CertPEM: pemBlock("CERTIFICATE", der)}, nil
}

// LoadCA reads a CA from its certificate and key in PEM (a key in SEC 1 "EC PRIVATE KEY" or
// PKCS #8 "PRIVATE KEY" form).
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("pki: the CA certificate is not a PEM CERTIFICATE")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("pki: the CA certificate: %w", err)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("pki: the certificate of %q is not a CA", cert.Subject.CommonName)
	}
	key, err := ParseKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("pki: the CA key: %w", err)
	}
	return &CA{Cert: cert, Key: key, CertPEM: certPEM}, nil
}

// KeyPEM returns the CA's key in PEM, to keep the CA across restarts.
func (ca *CA) KeyPEM() ([]byte, error) { return KeyPEM(ca.Key) }

// Leaf describes a certificate to issue.
type Leaf struct {
	// CommonName and Organization of the subject (Kubernetes reads them as user and groups).
	CommonName   string
	Organization []string
	// DNSNames, IPs and URIs are the subject alternative names.
	DNSNames []string
	IPs      []net.IP
	URIs     []*url.URL
	// Usage is what the certificate may authenticate; empty means both server and client.
	Usage []x509.ExtKeyUsage
	// NotBefore and NotAfter default to Backdate ago and the CA's own end of validity.
	NotBefore, NotAfter time.Time
}

// Issue signs a leaf certificate with a new key and returns both in PEM.
func (ca *CA) Issue(l Leaf) (certPEM, keyPEM []byte, err error) {
	key, err := NewKey()
	if err != nil {
		return nil, nil, err
	}
	usage := l.Usage
	if len(usage) == 0 {
		usage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	}
	if l.NotBefore.IsZero() {
		l.NotBefore = time.Now().Add(-Backdate)
	}
	if l.NotAfter.IsZero() {
		l.NotAfter = ca.Cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: l.CommonName, Organization: l.Organization},
		NotBefore:    l.NotBefore,
		NotAfter:     l.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usage,
		DNSNames:     l.DNSNames,
		IPAddresses:  l.IPs,
		URIs:         l.URIs,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: issue %q: %w", l.CommonName, err)
	}
	keyPEM, err = KeyPEM(key)
	if err != nil {
		return nil, nil, err
	}
	return pemBlock("CERTIFICATE", der), keyPEM, nil
}

// NewKey generates an ECDSA P-256 key.
func NewKey() (*ecdsa.PrivateKey, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("pki: generate key: %w", err)
	}
	return k, nil
}

// KeyPEM encodes a private key as PKCS #8 PEM ("PRIVATE KEY").
func KeyPEM(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("pki: encode key: %w", err)
	}
	return pemBlock("PRIVATE KEY", der), nil
}

// ParseKey decodes a private key from PEM: PKCS #8 ("PRIVATE KEY") or SEC 1 ("EC PRIVATE KEY").
func ParseKey(keyPEM []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return nil, errors.New("not PEM")
	}
	switch block.Type {
	case "EC PRIVATE KEY":
		return x509.ParseECPrivateKey(block.Bytes)
	case "PRIVATE KEY":
		k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			return nil, err
		}
		signer, ok := k.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("a %T cannot sign", k)
		}
		return signer, nil
	}
	return nil, fmt.Errorf("a PEM %s is not a private key", block.Type)
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// serial returns a random 128-bit serial number, unique in practice across every issuer.
func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return n
}

// LoopbackServer makes a throw-away CA and a server certificate it signs for the loopback
// addresses, localhost and ip (when given and not unspecified): what a fake cloud serving HTTPS on
// loopback needs. It returns the CA's certificate in PEM (the bundle its clients trust) and the
// server's key pair; name is the subject of both.
func LoopbackServer(name string, ip net.IP) (caPEM []byte, cert tls.Certificate, err error) {
	ca, err := NewCA(name+" CA", 30*24*time.Hour)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	ips := []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	if ip != nil && !ip.IsUnspecified() {
		ips = append(ips, ip)
	}
	certPEM, keyPEM, err := ca.Issue(Leaf{
		CommonName: name, DNSNames: []string{"localhost"}, IPs: ips,
		Usage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	cert, err = tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, tls.Certificate{}, fmt.Errorf("%s: server certificate: %w", name, err)
	}
	return ca.CertPEM, cert, nil
}
