// Package mtls builds the mutual-TLS configurations of machinist's gRPC listeners and clients
// from PEM files, and reloads them when the files change (cert-manager rotates certificates by
// rewriting the files of a mounted Secret).
//
// Reloading is stat-on-handshake: every handshake stats the three files (a few microseconds, next
// to a handshake's milliseconds) and re-reads them only when one changed. A half-written rotation
// (a new certificate next to the old key) fails to load; the previous pair stays in use and the
// next handshake tries again, so a rotation never interrupts service.
package mtls

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
)

// Files names the PEM files of one side of a connection.
type Files struct {
	// Cert is this side's certificate chain (leaf first).
	Cert string
	// Key is the private key of Cert.
	Key string
	// CA is the bundle of CA certificates that sign the other side's certificates.
	CA string
}

// Validate reports a missing file name, naming the flag-like field to set.
func (f Files) Validate() error {
	var missing []string
	if f.Cert == "" {
		missing = append(missing, "cert")
	}
	if f.Key == "" {
		missing = append(missing, "key")
	}
	if f.CA == "" {
		missing = append(missing, "CA bundle")
	}
	if len(missing) > 0 {
		return fmt.Errorf("mtls: no %s file given: set the certificate, key and CA bundle files (or choose plain text explicitly with --insecure)", joinAnd(missing))
	}
	return nil
}

// ServerConfig returns a TLS configuration for a listener that presents f.Cert and requires every
// client to present a certificate signed by a CA in f.CA. The files are re-read when they change.
func ServerConfig(f Files) (*tls.Config, error) {
	src, err := newSource(f)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			st, err := src.current()
			if err != nil {
				return nil, err
			}
			return st.server, nil
		},
	}, nil
}

// ClientConfig returns a TLS configuration for a client that presents f.Cert and accepts only a
// server whose certificate is signed by a CA in f.CA and is valid for serverName. An empty
// serverName verifies the name the connection was dialled with (gRPC sets it from the target's
// host). The files are re-read when they change.
func ClientConfig(f Files, serverName string) (*tls.Config, error) {
	src, err := newSource(f)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		ServerName: serverName,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			st, err := src.current()
			if err != nil {
				return nil, err
			}
			return st.cert, nil
		},
		// The standard verification reads a fixed RootCAs pool. To follow CA rotation the chain is
		// verified in VerifyConnection against the current pool instead; nothing is skipped.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			st, err := src.current()
			if err != nil {
				return err
			}
			return verifyServer(cs, st.pool, serverName)
		},
	}, nil
}

func verifyServer(cs tls.ConnectionState, roots *x509.CertPool, serverName string) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("mtls: server presented no certificate")
	}
	name := serverName
	if name == "" {
		name = cs.ServerName
	}
	opts := x509.VerifyOptions{
		Roots:         roots,
		DNSName:       name,
		Intermediates: x509.NewCertPool(),
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, c := range cs.PeerCertificates[1:] {
		opts.Intermediates.AddCert(c)
	}
	if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
		return fmt.Errorf("mtls: server certificate rejected: %w", err)
	}
	return nil
}

// state is one consistent load of the files.
type state struct {
	cert   *tls.Certificate
	pool   *x509.CertPool
	server *tls.Config
}

// stamp identifies one version of a file; os.Stat follows the symlinks of a mounted Secret, so a
// kubelet or cert-manager swap shows as a new modification time.
type stamp struct {
	mod  int64
	size int64
	ok   bool
}

type source struct {
	files Files

	mu     sync.Mutex
	stamps [3]stamp
	cur    *state
}

func newSource(f Files) (*source, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	s := &source{files: f}
	stamps := s.stat()
	st, err := s.load()
	if err != nil {
		return nil, err
	}
	s.stamps, s.cur = stamps, st
	return s, nil
}

func (s *source) stat() [3]stamp {
	var out [3]stamp
	for i, p := range [3]string{s.files.Cert, s.files.Key, s.files.CA} {
		if fi, err := os.Stat(p); err == nil {
			out[i] = stamp{mod: fi.ModTime().UnixNano(), size: fi.Size(), ok: true}
		}
	}
	return out
}

// current returns the newest loadable state. When the files changed but do not load (a rotation
// in progress, a file briefly missing), the previous state is kept and the load retried at the
// next handshake.
func (s *source) current() (*state, error) {
	stamps := s.stat()
	s.mu.Lock()
	defer s.mu.Unlock()
	if stamps == s.stamps {
		return s.cur, nil
	}
	st, err := s.load()
	if err != nil {
		return s.cur, nil
	}
	s.stamps, s.cur = stamps, st
	return st, nil
}

func (s *source) load() (*state, error) {
	certPEM, err := os.ReadFile(s.files.Cert)
	if err != nil {
		return nil, fmt.Errorf("mtls: read certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(s.files.Key)
	if err != nil {
		return nil, fmt.Errorf("mtls: read key: %w", err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("mtls: certificate %s and key %s do not form a pair: %w", s.files.Cert, s.files.Key, err)
	}
	caPEM, err := os.ReadFile(s.files.CA)
	if err != nil {
		return nil, fmt.Errorf("mtls: read CA bundle: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("mtls: CA bundle %s holds no PEM certificate", s.files.CA)
	}
	return &state{
		cert: &pair,
		pool: pool,
		server: &tls.Config{
			MinVersion:   tls.VersionTLS12,
			Certificates: []tls.Certificate{pair},
			ClientAuth:   tls.RequireAndVerifyClientCert,
			ClientCAs:    pool,
		},
	}, nil
}

func joinAnd(items []string) string {
	switch len(items) {
	case 0:
		return ""
	case 1:
		return items[0]
	}
	out := items[0]
	for _, it := range items[1 : len(items)-1] {
		out += ", " + it
	}
	return out + " and " + items[len(items)-1]
}
