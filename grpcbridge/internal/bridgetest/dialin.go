package bridgetest

import (
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/grpcbridge"
	"github.com/machinist-io/machinist/grpcbridge/dialin"
	"github.com/machinist-io/machinist/grpcbridge/mtls"
	"github.com/machinist-io/machinist/grpcbridge/mtls/mtlstest"
)

// Controller is a dial-in server listening on loopback.
type Controller struct {
	Server *dialin.Server
	GRPC   *grpc.Server
	Addr   string
	// Calls counts unary calls by full method name (pulls).
	Calls *CallCounter
}

// CallCounter counts unary calls by method.
type CallCounter struct {
	mu sync.Mutex
	n  map[string]int
}

// Get returns the count of a full method name.
func (c *CallCounter) Get(method string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[method]
}

func (c *CallCounter) interceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	c.mu.Lock()
	c.n[info.FullMethod]++
	c.mu.Unlock()
	return h(ctx, req)
}

// ServeController starts a dial-in server on 127.0.0.1 with the transport.
func ServeController(t testing.TB, o dialin.Options, tr grpcbridge.Transport) *Controller {
	t.Helper()
	lis, err := grpcbridge.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	calls := &CallCounter{n: map[string]int{}}
	srv, err := grpcbridge.NewGRPCServer(tr, grpc.ChainUnaryInterceptor(calls.interceptor))
	if err != nil {
		t.Fatal(err)
	}
	ds := dialin.NewServer(o)
	ds.RegisterService(srv)
	go srv.Serve(lis)
	t.Cleanup(func() {
		ds.Close()
		srv.Stop()
	})
	return &Controller{Server: ds, GRPC: srv, Addr: lis.Addr().String(), Calls: calls}
}

// Connected is a provider process dialled in.
type Connected struct {
	Provider *dialin.Provider
	// Stop ends the provider (as its process exiting would) and waits for Run to return.
	Stop func()
	// Err receives Run's result.
	Err chan error
}

// ConnectProvider starts a provider serving drivers to addr and returns once Run is going.
func ConnectProvider(t testing.TB, addr string, tr grpcbridge.Transport, drivers map[string]driver.Driver, opts ...func(*dialin.ProviderOptions)) *Connected {
	t.Helper()
	o := dialin.ProviderOptions{Controller: addr, Transport: tr, Drivers: drivers, Instance: t.Name(),
		Backoff: dialin.Backoff{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond}}
	for _, f := range opts {
		f(&o)
	}
	p, err := dialin.NewProvider(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		errc <- p.Run(ctx)
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			<-done
			p.Close()
		})
	}
	t.Cleanup(stop)
	return &Connected{Provider: p, Stop: stop, Err: errc}
}

// ProviderCerts issues a client certificate authorizing names (URI SANs) from certs' CA.
func ProviderCerts(t testing.TB, certs Certs, names ...string) grpcbridge.Transport {
	t.Helper()
	var uris []string
	for _, n := range names {
		uris = append(uris, mtls.ProviderURI(n).String())
	}
	f := certs.CA.IssueFiles(t, mtlstest.Leaf{CommonName: "provider", URIs: uris}, nil)
	cfg, err := mtls.ClientConfig(f, "localhost")
	if err != nil {
		t.Fatal(err)
	}
	return grpcbridge.Transport{TLS: cfg}
}

// ServerTransport returns the server side of certs.
func ServerTransport(t testing.TB, certs Certs) grpcbridge.Transport {
	t.Helper()
	cfg, err := mtls.ServerConfig(certs.Server)
	if err != nil {
		t.Fatal(err)
	}
	return grpcbridge.Transport{TLS: cfg}
}

// Proxy forwards TCP connections to target until Cut, which drops every connection at once (a
// network failure, not a clean close of the gRPC stream).
type Proxy struct {
	Addr   string
	lis    net.Listener
	mu     sync.Mutex
	conns  []net.Conn
	paused atomic.Bool
}

// NewProxy starts a proxy on 127.0.0.1 in front of target.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{Addr: lis.Addr().String(), lis: lis}
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			if p.paused.Load() {
				c.Close()
				continue
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { io.Copy(up, c); up.Close() }()
			go func() { io.Copy(c, up); c.Close() }()
		}
	}()
	t.Cleanup(func() {
		lis.Close()
		p.Cut()
	})
	return p
}

// Cut drops every open connection.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetLinger(0) // reset, like a dead link
		}
		c.Close()
	}
	p.conns = nil
}

// Pause refuses new connections until Resume.
func (p *Proxy) Pause() { p.paused.Store(true) }

// Resume accepts connections again.
func (p *Proxy) Resume() { p.paused.Store(false) }
