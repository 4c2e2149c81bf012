package localcontrolplane

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/machinist-io/machinist/internal/pki"
)

// certDir is the certificate material of one control plane, issued by internal/pki. It lives in
// <dir>/pki so a persistent control plane (make run) keeps the same CA and admin credentials
// across restarts, and the kubeconfig users already hold stays valid.
type certDir struct {
	dir string
	// CA signs the serving certificate and the client certificates; kube-controller-manager
	// signs with it too (--cluster-signing-*).
	caCert []byte
	// Admin client certificate (CN machinist-admin, O system:masters) and key, PEM.
	adminCert, adminKey []byte
}

const certValidity = 5 * 365 * 24 * time.Hour

// Files of <dir>/pki.
func (p *certDir) path(name string) string { return filepath.Join(p.dir, name) }
func (p *certDir) caFile() string          { return p.path("ca.crt") }
func (p *certDir) caKeyFile() string       { return p.path("ca.key") }
func (p *certDir) servingCertFile() string {
	return p.path("apiserver.crt")
}
func (p *certDir) servingKeyFile() string { return p.path("apiserver.key") }
func (p *certDir) saPublicFile() string   { return p.path("sa.pub") }
func (p *certDir) saKeyFile() string      { return p.path("sa.key") }

// loadOrCreateCerts reads the certificates in dir, or creates them when dir holds none.
func loadOrCreateCerts(dir string) (*certDir, error) {
	p := &certDir{dir: dir}
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

func (p *certDir) load() error {
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

func (p *certDir) create() error {
	ca, err := pki.NewCA("machinist-local-control-plane-ca", certValidity)
	if err != nil {
		return fmt.Errorf("controlplane: %w", err)
	}
	caKey, err := ca.KeyPEM()
	if err != nil {
		return err
	}
	p.caCert = ca.CertPEM
	servingCert, servingKey, err := ca.Issue(pki.Leaf{
		CommonName: "kube-apiserver",
		Usage:      []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:   []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		IPs:        []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback, net.IPv4(10, 0, 0, 1)},
	})
	if err != nil {
		return fmt.Errorf("controlplane: %w", err)
	}
	p.adminCert, p.adminKey, err = ca.Issue(pki.Leaf{
		CommonName: "machinist-admin", Organization: []string{"system:masters"},
		Usage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return fmt.Errorf("controlplane: %w", err)
	}
	// The service-account signing key is a bare key pair, no certificate.
	saKey, err := pki.NewKey()
	if err != nil {
		return err
	}
	saPub, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return err
	}
	saPriv, err := pki.KeyPEM(saKey)
	if err != nil {
		return err
	}
	files := map[string][]byte{
		"ca.crt":        p.caCert,
		"ca.key":        caKey,
		"apiserver.crt": servingCert,
		"apiserver.key": servingKey,
		"admin.crt":     p.adminCert,
		"admin.key":     p.adminKey,
		"sa.pub":        pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPub}),
		"sa.key":        saPriv,
	}
	for name, data := range files {
		if err := os.WriteFile(p.path(name), data, 0o600); err != nil {
			return fmt.Errorf("controlplane: write %s: %w", name, err)
		}
	}
	return nil
}

// clientCert returns the files of a client certificate for a control-plane component (CN user,
// optional group), signed by the CA; it is made once and kept in the pki directory.
func (p *certDir) clientCert(name, user string, groups ...string) (certFile, keyFile string, err error) {
	certFile, keyFile = p.path(name+".crt"), p.path(name+".key")
	if _, err := os.Stat(certFile); err == nil {
		if _, err := os.Stat(keyFile); err == nil {
			return certFile, keyFile, nil
		}
	}
	caKey, err := os.ReadFile(p.caKeyFile())
	if errors.Is(err, os.ErrNotExist) {
		return "", "", fmt.Errorf("controlplane: %s has no ca.key (made by an older machinist): delete the control plane directory %s to start afresh with kube-scheduler and kube-controller-manager", p.dir, filepath.Dir(p.dir))
	}
	if err != nil {
		return "", "", err
	}
	ca, err := pki.LoadCA(p.caCert, caKey)
	if err != nil {
		return "", "", fmt.Errorf("controlplane: %s: %w", p.dir, err)
	}
	cert, key, err := ca.Issue(pki.Leaf{
		CommonName: user, Organization: groups,
		Usage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return "", "", fmt.Errorf("controlplane: %w", err)
	}
	if err := os.WriteFile(keyFile, key, 0o600); err != nil {
		return "", "", fmt.Errorf("controlplane: write %s: %w", keyFile, err)
	}
	if err := os.WriteFile(certFile, cert, 0o600); err != nil {
		return "", "", fmt.Errorf("controlplane: write %s: %w", certFile, err)
	}
	return certFile, keyFile, nil
}
