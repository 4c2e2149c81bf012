package localcontrolplane

import (
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/machinist-io/machinist/internal/pki"
)

// MTLSFiles are the PEM files of a small mutual-TLS setup for local use: a CA, a server
// certificate for localhost and 127.0.0.1, and a client certificate, all signed by the CA.
type MTLSFiles struct {
	CA         string
	ServerCert string
	ServerKey  string
	ClientCert string
	ClientKey  string
}

// LocalMTLS returns the mutual-TLS files in dir, creating them when missing: `machinist dev`
// makes them so a Cluster Autoscaler can talk to `machinist autoscaler` on the local cluster
// without a certificate tool. serverName and clientName become the certificates' common names.
func LocalMTLS(dir, serverName, clientName string) (MTLSFiles, error) {
	f := MTLSFiles{
		CA:         filepath.Join(dir, "ca.crt"),
		ServerCert: filepath.Join(dir, "server.crt"), ServerKey: filepath.Join(dir, "server.key"),
		ClientCert: filepath.Join(dir, "client.crt"), ClientKey: filepath.Join(dir, "client.key"),
	}
	complete := true
	for _, p := range []string{f.CA, f.ServerCert, f.ServerKey, f.ClientCert, f.ClientKey} {
		if _, err := os.Stat(p); err != nil {
			complete = false
		}
	}
	if complete {
		return f, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return f, fmt.Errorf("controlplane: %w", err)
	}
	ca, err := pki.NewCA("machinist-local-mtls-ca", certValidity)
	if err != nil {
		return f, fmt.Errorf("controlplane: %w", err)
	}
	serverCert, serverKey, err := ca.Issue(pki.Leaf{
		CommonName: serverName, Usage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	})
	if err != nil {
		return f, fmt.Errorf("controlplane: %w", err)
	}
	clientCert, clientKey, err := ca.Issue(pki.Leaf{CommonName: clientName, Usage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	if err != nil {
		return f, fmt.Errorf("controlplane: %w", err)
	}
	for path, data := range map[string][]byte{
		f.CA: ca.CertPEM, f.ServerCert: serverCert, f.ServerKey: serverKey,
		f.ClientCert: clientCert, f.ClientKey: clientKey,
	} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return f, fmt.Errorf("controlplane: write %s: %w", path, err)
		}
	}
	return f, nil
}
