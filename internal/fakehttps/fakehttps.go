// Package fakehttps serves a fake cloud's API over HTTPS on a listener, as the clouds' SDKs
// insist on TLS for some of their endpoints (Azure's Entra ID, Google's token endpoints), with a
// throw-away CA from internal/pki that the fake's clients are given to trust.
package fakehttps

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/machinist-io/machinist/internal/pki"
)

// Server is one fake cloud served over HTTPS until Close.
type Server struct {
	// URL is the server's root, e.g. https://127.0.0.1:8443/.
	URL string
	// CACert is the PEM certificate of the CA that signed the server's certificate.
	CACert []byte

	srv  *http.Server
	done chan struct{}
}

// Serve serves h over HTTPS on l, a TCP listener, until Close. The certificate, issued to name,
// is valid for the listener's address, 127.0.0.1, ::1 and localhost.
func Serve(name string, l net.Listener, h http.Handler) (*Server, error) {
	addr, ok := l.Addr().(*net.TCPAddr)
	if !ok {
		return nil, fmt.Errorf("%s: serve: %s is not a TCP listener", name, l.Addr())
	}
	caPEM, cert, err := pki.LoopbackServer(name, addr.IP)
	if err != nil {
		return nil, err
	}
	s := &Server{URL: "https://" + net.JoinHostPort(addr.IP.String(), fmt.Sprint(addr.Port)) + "/", CACert: caPEM, done: make(chan struct{})}
	s.srv = &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig:         &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}},
	}
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(tls.NewListener(l, s.srv.TLSConfig))
	}()
	return s, nil
}

// Close stops the server: requests in flight get 5 s to finish (a fake holding a request, as an
// operation wait does, is cut off after that), then Close returns once the server has stopped.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if err != nil {
		_ = s.srv.Close()
	}
	<-s.done
	return err
}
