package fakekit

import (
	"net"
	"net/http"
)

// Servable is a fake cloud: it serves itself on a listener.
type Servable interface {
	Serve(l net.Listener, wrap func(http.Handler) http.Handler) (*Server, error)
}

// TB is the part of testing.TB that Start uses; the package does not import testing, because
// `machinist fakecloud` links it into the default binary.
type TB interface {
	Helper()
	Cleanup(func())
	Fatalf(format string, args ...any)
}

// Start serves c on a port of 127.0.0.1 (tests never reach another address) until the test
// ends.
func Start(t TB, c Servable) *Server {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("fakekit: listen on loopback: %v", err)
	}
	srv, err := c.Serve(l, nil)
	if err != nil {
		_ = l.Close()
		t.Fatalf("fakekit: serve: %v", err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return srv
}
