package grpcbridge

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
)

// MaxMessageSize bounds every message both ways. A request carries one Machine, one class and
// one secret (userData is at most tens of KiB on every cloud), so 4 MiB is generous; anything
// larger is refused with ResourceExhausted instead of being buffered.
const MaxMessageSize = 4 << 20

// Transport says how a connection is secured: mutual TLS (see package mtls), or plain text when
// Insecure is set explicitly. The zero value is an error, so plain text is never an accident.
type Transport struct {
	TLS      *tls.Config
	Insecure bool
}

// ErrNoTransportSecurity is returned for a Transport with neither TLS nor Insecure.
var ErrNoTransportSecurity = errors.New("grpcbridge: no TLS configured: give --cert, --key and --cacert, or choose plain text explicitly with --insecure")

func (t Transport) credentials() (credentials.TransportCredentials, error) {
	switch {
	case t.TLS != nil && t.Insecure:
		return nil, errors.New("grpcbridge: both TLS and --insecure given: choose one")
	case t.TLS != nil:
		return credentials.NewTLS(t.TLS), nil
	case t.Insecure:
		return insecure.NewCredentials(), nil
	}
	return nil, ErrNoTransportSecurity
}

// Keepalive settings: a peer that vanishes without closing (a killed node, a cut network) is
// noticed within about 40 s on both sides instead of never.
var (
	clientKeepalive = keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second, PermitWithoutStream: true}
	serverKeepalive = keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}
	serverPolicy    = keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}
)

// NewGRPCServer returns a gRPC server secured by t with the bridge's message limits and keepalive.
func NewGRPCServer(t Transport, opts ...grpc.ServerOption) (*grpc.Server, error) {
	creds, err := t.credentials()
	if err != nil {
		return nil, err
	}
	base := []grpc.ServerOption{
		grpc.Creds(creds),
		grpc.MaxRecvMsgSize(MaxMessageSize),
		grpc.MaxSendMsgSize(MaxMessageSize),
		grpc.KeepaliveParams(serverKeepalive),
		grpc.KeepaliveEnforcementPolicy(serverPolicy),
		// Serve calls on long-lived workers: a fresh goroutine per call grows (copies) its stack
		// while decoding the nested objects, which showed as a few percent of a call's CPU.
		grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0))),
	}
	return grpc.NewServer(append(base, opts...)...), nil
}

// Dial returns a client connection to addr ("unix:///path.sock" or "host:port") secured by t. It
// does not wait for the server: the first call does, and fails Unavailable when nothing answers.
func Dial(addr string, t Transport, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	target, err := Target(addr)
	if err != nil {
		return nil, err
	}
	creds, err := t.credentials()
	if err != nil {
		return nil, err
	}
	base := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageSize), grpc.MaxCallSendMsgSize(MaxMessageSize)),
		grpc.WithKeepaliveParams(clientKeepalive),
	}
	conn, err := grpc.NewClient(target, append(base, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("grpcbridge: dial %s: %w", addr, err)
	}
	return conn, nil
}

// Target turns an address into a gRPC target: "unix:///abs/path.sock" and "unix:rel.sock" stay
// as they are; "host:port" resolves by DNS.
func Target(addr string) (string, error) {
	switch {
	case addr == "":
		return "", errors.New("grpcbridge: empty address: use unix:///path/to.sock or host:port")
	case strings.HasPrefix(addr, "unix://"), strings.HasPrefix(addr, "unix:"):
		if socketPath(addr) == "" {
			return "", fmt.Errorf("grpcbridge: address %q has no socket path: use unix:///path/to.sock", addr)
		}
		return addr, nil
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return "", fmt.Errorf("grpcbridge: address %q: %w: use unix:///path/to.sock or host:port", addr, err)
	}
	return "dns:///" + addr, nil
}

// Listen opens addr ("unix:///path.sock" or "host:port"). A unix socket left behind by a dead
// process is removed first; one that still answers is an error. The socket is readable and writable by owner and group only.
func Listen(addr string) (net.Listener, error) {
	if _, err := Target(addr); err != nil {
		return nil, err
	}
	path := socketPath(addr)
	if path == "" {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("grpcbridge: listen on %s: %w", addr, err)
		}
		return l, nil
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("grpcbridge: listen on %s: %s exists and is not a socket: remove it or choose another path", addr, path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("grpcbridge: listen on %s: another process serves that socket", addr)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("grpcbridge: remove stale socket %s: %w", path, err)
		}
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("grpcbridge: listen on %s: %w", addr, err)
	}
	if err := os.Chmod(path, 0o660); err != nil {
		l.Close()
		return nil, fmt.Errorf("grpcbridge: restrict socket %s: %w", path, err)
	}
	return l, nil
}

// socketPath returns the file path of a unix address, or "" for a TCP address.
func socketPath(addr string) string {
	switch {
	case strings.HasPrefix(addr, "unix://"):
		return strings.TrimPrefix(addr, "unix://")
	case strings.HasPrefix(addr, "unix:"):
		return strings.TrimPrefix(addr, "unix:")
	}
	return ""
}
