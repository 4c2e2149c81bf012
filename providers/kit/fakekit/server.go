package fakekit

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/machinist-io/machinist/internal/pki"
)

// Server is one fake cloud served on a listener until Close.
type Server struct {
	// URL is the server's root without a trailing slash, e.g. https://127.0.0.1:8443.
	URL string
	// CACert is the PEM certificate of the CA that signed the server's certificate; nil when the
	// server speaks plain HTTP.
	CACert []byte

	srv     *http.Server
	done    chan struct{}
	onClose func()
}

// Serve serves h over plain HTTP on l until Close, for clouds whose SDK accepts an http://
// endpoint on loopback (EC2's query protocol, OpenStack).
func Serve(l net.Listener, h http.Handler) *Server {
	s := &Server{URL: "http://" + l.Addr().String()}
	s.start(l, h, nil)
	return s
}

// ServeTLS serves h over HTTPS on l, a TCP listener, until Close, as the clouds' SDKs insist on
// TLS for some of their endpoints (Azure's Entra ID, Google's token endpoints). The certificate,
// issued to name by a throw-away CA (CACert) that the fake's clients are given to trust, is valid
// for the listener's address, 127.0.0.1, ::1 and localhost.
func ServeTLS(name string, l net.Listener, h http.Handler) (*Server, error) {
	addr, ok := l.Addr().(*net.TCPAddr)
	if !ok {
		return nil, fmt.Errorf("%s: serve: %s is not a TCP listener", name, l.Addr())
	}
	caPEM, cert, err := pki.LoopbackServer(name, addr.IP)
	if err != nil {
		return nil, err
	}
	s := &Server{URL: "https://" + net.JoinHostPort(addr.IP.String(), fmt.Sprint(addr.Port)), CACert: caPEM}
	s.start(l, h, &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}})
	return s, nil
}

func (s *Server) start(l net.Listener, h http.Handler, cfg *tls.Config) {
	s.done = make(chan struct{})
	s.srv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, TLSConfig: cfg}
	if cfg != nil {
		l = tls.NewListener(l, cfg)
	}
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(l)
	}()
}

// OnClose makes Close call f first (a fake releases the requests it holds).
func (s *Server) OnClose(f func()) { s.onClose = f }

// Close stops the server: requests in flight get 5 s to finish (a fake holding a request, as an
// operation wait does, is cut off after that), then Close returns once the server has stopped.
func (s *Server) Close() error {
	if s.onClose != nil {
		s.onClose()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if err != nil {
		_ = s.srv.Close()
	}
	<-s.done
	return err
}
