package controlplane

import (
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"
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
	caKey, err := newKey()
	if err != nil {
		return f, err
	}
	now := time.Now().Add(-time.Hour)
	caTmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "machinist-local-mtls-ca"},
		NotBefore: now, NotAfter: now.Add(pkiValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true, IsCA: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return f, fmt.Errorf("controlplane: create CA: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return f, err
	}
	leaf := func(cn string, usage x509.ExtKeyUsage, dns []string, ips []net.IP) ([]byte, []byte, error) {
		return signed(ca, caKey, &x509.Certificate{
			SerialNumber: serial(), Subject: pkix.Name{CommonName: cn},
			NotBefore: now, NotAfter: now.Add(pkiValidity),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			DNSNames: dns, IPAddresses: ips,
		})
	}
	serverCert, serverKey, err := leaf(serverName, x509.ExtKeyUsageServerAuth, []string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback})
	if err != nil {
		return f, err
	}
	clientCert, clientKey, err := leaf(clientName, x509.ExtKeyUsageClientAuth, nil, nil)
	if err != nil {
		return f, err
	}
	for path, data := range map[string][]byte{
		f.CA: pemBlock("CERTIFICATE", caDER), f.ServerCert: serverCert, f.ServerKey: serverKey,
		f.ClientCert: clientCert, f.ClientKey: clientKey,
	} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return f, fmt.Errorf("controlplane: write %s: %w", path, err)
		}
	}
	return f, nil
}
