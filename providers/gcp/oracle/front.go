package oracle

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/machinist-io/machinist/internal/pki"
)

// googleHosts are the host names the front answers for: Compute Engine's endpoints as
// google.golang.org/api/compute/v1 names them (its default and the older one of selfLinks).
var googleHosts = []string{"compute.googleapis.com", "www.googleapis.com"}

// front puts the fake behind Google's own host names for a process that cannot be given an
// endpoint: an HTTP proxy on loopback (the process's HTTPS_PROXY) that answers CONNECT to
// compute.googleapis.com:443 itself, with a TLS certificate of a throw-away CA (the process's
// SSL_CERT_FILE), and hands the requests inside to the fake's handler. Any other CONNECT is
// refused, so nothing leaves the machine.
type front struct {
	URL    string // http://127.0.0.1:PORT, for HTTPS_PROXY
	CACert []byte

	l     net.Listener
	srv   *http.Server // the proxy
	inner *http.Server // the fake, behind TLS
	conns *connQueue
	done  chan struct{}
}

func newFront(fake http.Handler) (*front, error) {
	ca, err := pki.NewCA("gcp-oracle-front", 24*time.Hour)
	if err != nil {
		return nil, err
	}
	certPEM, keyPEM, err := ca.Issue(pki.Leaf{CommonName: googleHosts[0], DNSNames: googleHosts, Usage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &front{URL: "http://" + l.Addr().String(), CACert: ca.CertPEM, l: l, conns: newConnQueue(l.Addr()), done: make(chan struct{})}
	f.inner = &http.Server{
		Handler:           fake,
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig:         &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}},
	}
	f.srv = &http.Server{Handler: http.HandlerFunc(f.connect), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = f.inner.Serve(tls.NewListener(f.conns, f.inner.TLSConfig)) }()
	go func() {
		defer close(f.done)
		_ = f.srv.Serve(l)
	}()
	return f, nil
}

// connect answers a CONNECT to one of googleHosts on 443 and queues the tunnel for the fake.
func (f *front) connect(w http.ResponseWriter, r *http.Request) {
	host, port, err := net.SplitHostPort(r.Host)
	if r.Method != http.MethodConnect || err != nil || port != "443" || !slices.Contains(googleHosts, host) {
		http.Error(w, fmt.Sprintf("gcp oracle front: only CONNECT to %v on 443 is served, not %s %s", googleHosts, r.Method, r.Host), http.StatusForbidden)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, "gcp oracle front: cannot hijack", http.StatusInternalServerError)
		return
	}
	conn, rw, err := hj.Hijack()
	if err != nil {
		return
	}
	if _, err := rw.WriteString("HTTP/1.1 200 Connection established\r\n\r\n"); err != nil || rw.Flush() != nil {
		_ = conn.Close()
		return
	}
	if !f.conns.put(&bufferedConn{Conn: conn, r: rw.Reader}) {
		_ = conn.Close()
	}
}

// Close stops the proxy and the fake's TLS side.
func (f *front) Close() error {
	err := f.srv.Close()
	<-f.done
	f.conns.close()
	return errors.Join(err, f.inner.Close())
}

// bufferedConn is a hijacked connection whose first bytes may sit in the proxy's reader.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// connQueue is a net.Listener of the tunnels the proxy hands over.
type connQueue struct {
	addr net.Addr
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func newConnQueue(addr net.Addr) *connQueue {
	return &connQueue{addr: addr, ch: make(chan net.Conn), done: make(chan struct{})}
}

// put hands a tunnel to Accept; false when the queue is closed.
func (q *connQueue) put(c net.Conn) bool {
	select {
	case q.ch <- c:
		return true
	case <-q.done:
		return false
	}
}

func (q *connQueue) Accept() (net.Conn, error) {
	select {
	case c := <-q.ch:
		return c, nil
	case <-q.done:
		return nil, net.ErrClosed
	}
}

func (q *connQueue) close() { q.once.Do(func() { close(q.done) }) }

func (q *connQueue) Close() error   { q.close(); return nil }
func (q *connQueue) Addr() net.Addr { return q.addr }

var _ net.Listener = (*connQueue)(nil)
