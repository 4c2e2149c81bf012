package controlplane

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki is the certificate material of one control plane. It lives in <dir>/pki so a persistent
// control plane (make run) keeps the same CA and admin credentials across restarts, and the
// kubeconfig users already hold stays valid.
type pki struct {
	dir string
	// CA signs the serving certificate and the client certificates; kube-controller-manager
	// signs with it too (--cluster-signing-*).
	caCert []byte
	// Admin client certificate (CN machinist-admin, O system:masters) and key, PEM.
	adminCert, adminKey []byte
}

const pkiValidity = 5 * 365 * 24 * time.Hour

// Files of <dir>/pki.
func (p *pki) path(name string) string { return filepath.Join(p.dir, name) }
func (p *pki) caFile() string          { return p.path("ca.crt") }
func (p *pki) caKeyFile() string       { return p.path("ca.key") }
func (p *pki) servingCertFile() string {
	return p.path("apiserver.crt")
}
func (p *pki) servingKeyFile() string { return p.path("apiserver.key") }
func (p *pki) saPublicFile() string   { return p.path("sa.pub") }
func (p *pki) saKeyFile() string      { return p.path("sa.key") }

// loadOrCreatePKI reads the certificates in dir, or creates them when dir holds none.
func loadOrCreatePKI(dir string) (*pki, error) {
	p := &pki{dir: dir}
	if _, err := os.Stat(p.caFile()); err == nil {
		return p, p.load()
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return p, p.create()
}

func (p *pki) load() error {
	var err error
	read := func(name string) []byte {
		if err != nil {
			return nil
		}
		var b []byte
		b, err = os.ReadFile(p.path(name))
		return b
	}
	p.caCert = read("ca.crt")
	p.adminCert = read("admin.crt")
	p.adminKey = read("admin.key")
	for _, f := range []string{p.servingCertFile(), p.servingKeyFile(), p.saPublicFile(), p.saKeyFile()} {
		if err == nil {
			_, err = os.Stat(f)
		}
	}
	if err != nil {
		return fmt.Errorf("controlplane: read certificates in %s (delete the directory to start afresh): %w", p.dir, err)
	}
	return nil
}

func (p *pki) create() error {
	caKey, err := newKey()
	if err != nil {
		return err
	}
	now := time.Now().Add(-time.Hour) // tolerate small clock differences
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "machinist-testenv-ca"},
		NotBefore:             now,
		NotAfter:              now.Add(pkiValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caKeyDER, err := x509.MarshalECPrivateKey(caKey)
	if err != nil {
		return err
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return fmt.Errorf("controlplane: create CA: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	p.caCert = pemBlock("CERTIFICATE", caDER)

	servingCert, servingKey, err := signed(ca, caKey, &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now,
		NotAfter:     now.Add(pkiValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback, net.IPv4(10, 0, 0, 1)},
	})
	if err != nil {
		return err
	}
	p.adminCert, p.adminKey, err = signed(ca, caKey, &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "machinist-admin", Organization: []string{"system:masters"}},
		NotBefore:    now,
		NotAfter:     now.Add(pkiValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return err
	}
	saKey, err := newKey()
	if err != nil {
		return err
	}
	saPub, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return err
	}
	saPriv, err := x509.MarshalECPrivateKey(saKey)
	if err != nil {
		return err
	}
	files := map[string][]byte{
		"ca.crt":        p.caCert,
		"ca.key":        pemBlock("EC PRIVATE KEY", caKeyDER),
		"apiserver.crt": servingCert,
		"apiserver.key": servingKey,
		"admin.crt":     p.adminCert,
		"admin.key":     p.adminKey,
		"sa.pub":        pemBlock("PUBLIC KEY", saPub),
		"sa.key":        pemBlock("EC PRIVATE KEY", saPriv),
	}
	for name, data := range files {
		if err := os.WriteFile(p.path(name), data, 0o600); err != nil {
			return fmt.Errorf("controlplane: write %s: %w", name, err)
		}
	}
	return nil
}

func newKey() (*ecdsa.PrivateKey, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("controlplane: generate key: %w", err)
	}
	return k, nil
}

// signed returns a certificate made from tmpl and signed by the CA, and its new key, as PEM.
func signed(ca *x509.Certificate, caKey crypto.Signer, tmpl *x509.Certificate) (certPEM, keyPEM []byte, err error) {
	key, err := newKey()
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("controlplane: sign certificate %q: %w", tmpl.Subject.CommonName, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pemBlock("CERTIFICATE", der), pemBlock("EC PRIVATE KEY", keyDER), nil
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return n
}

// clientCert returns the files of a client certificate for a control-plane component (CN user,
// optional group), signed by the CA; it is made once and kept in the pki directory.
func (p *pki) clientCert(name, user string, groups ...string) (certFile, keyFile string, err error) {
	certFile, keyFile = p.path(name+".crt"), p.path(name+".key")
	if _, err := os.Stat(certFile); err == nil {
		if _, err := os.Stat(keyFile); err == nil {
			return certFile, keyFile, nil
		}
	}
	keyPEM, err := os.ReadFile(p.caKeyFile())
	if errors.Is(err, os.ErrNotExist) {
		return "", "", fmt.Errorf("controlplane: %s has no ca.key (made by an older machinist): delete the control plane directory %s to start afresh with kube-scheduler and kube-controller-manager", p.dir, filepath.Dir(p.dir))
	}
	if err != nil {
		return "", "", err
	}
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return "", "", fmt.Errorf("controlplane: %s is not a PEM key", p.caKeyFile())
	}
	caKey, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil {
		return "", "", fmt.Errorf("controlplane: %s: %w", p.caKeyFile(), err)
	}
	block, _ = pem.Decode(p.caCert)
	if block == nil {
		return "", "", fmt.Errorf("controlplane: %s is not a PEM certificate", p.caFile())
	}
	ca, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return "", "", err
	}
	now := time.Now().Add(-time.Hour)
	cert, key, err := signed(ca, caKey, &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: user, Organization: groups},
		NotBefore:    now,
		NotAfter:     now.Add(pkiValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return "", "", err
	}
	if err := os.WriteFile(keyFile, key, 0o600); err != nil {
		return "", "", fmt.Errorf("controlplane: write %s: %w", keyFile, err)
	}
	if err := os.WriteFile(certFile, cert, 0o600); err != nil {
		return "", "", fmt.Errorf("controlplane: write %s: %w", certFile, err)
	}
	return certFile, keyFile, nil
}
