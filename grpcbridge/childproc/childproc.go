// Package childproc runs a provider as a child process — a slim machinist binary (built with
// -tags provider_<name>) serving the driver interface on a private unix socket — and exposes it
// as that provider's driver.Driver. This is the first option of Cluster Autoscaler's gRPC
// provider proposal, a plugin binary the server launches as a subprocess (kubernetes/autoscaler
// cluster-autoscaler/proposals/plugable-provider-grpc.md at c11665bec83e; the final text kept
// only the separate server), done so that it holds in production:
//
//   - Start waits until the child answers its health check before returning.
//   - A child that dies is restarted with capped exponential backoff; calls in flight fail with
//     Unavailable at once (their connection closes) and later calls succeed once it is back.
//   - The child never outlives the parent: on Linux it gets SIGKILL when the parent dies
//     (PR_SET_PDEATHSIG), and it also watches its parent (serve --parent-pid) and exits when the
//     parent is gone, which covers other systems and a parent killed before the signal was set.
//
// The child command line is: PATH serve --listen unix://SOCKET --provider NAME --insecure
// --parent-pid PID [extra args]. Plain text is safe here: the socket lives in a directory only
// this user can open.
package childproc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/registry"
	"github.com/machinist-io/machinist/grpcbridge"
	"github.com/machinist-io/machinist/internal/graceful"
	"github.com/machinist-io/machinist/internal/livedir"
)

// Options tune Start. The zero value works.
type Options struct {
	// Args are added to the child's command line after the serve flags.
	Args []string
	// Env is the child's environment; nil inherits the parent's.
	Env []string
	// Log receives starts, exits and restarts; nil means slog.Default(). The child's own output
	// goes to Output.
	Log *slog.Logger
	// Output receives the child's stdout and stderr; nil means the parent's stderr.
	Output io.Writer
	// ReadyTimeout bounds each start until the child is healthy (default 30 s).
	ReadyTimeout time.Duration
	// RestartBackoff paces restarts; zero fields take DefaultRestartBackoff's. A child that ran
	// longer than its Cap before dying is restarted after the first delay again.
	RestartBackoff wait.Backoff
	// StopTimeout is how long Close waits after SIGTERM before SIGKILL (default 5 s).
	StopTimeout time.Duration
	// Timeouts bound driver calls whose caller set no deadline.
	Timeouts grpcbridge.Timeouts

	// noPdeathsig leaves the parent-death signal off, so tests can check the child's own watch.
	noPdeathsig bool
}

// DefaultRestartBackoff restarts a dying child after 0.5 s, 1 s, 2 s, ... up to 30 s.
var DefaultRestartBackoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Steps: math.MaxInt32, Cap: 30 * time.Second}

// restartBackoff fills the zero fields of b from DefaultRestartBackoff.
func restartBackoff(b wait.Backoff) wait.Backoff {
	if b.Duration <= 0 {
		b.Duration = DefaultRestartBackoff.Duration
	}
	if b.Factor < 1 {
		b.Factor = DefaultRestartBackoff.Factor
	}
	if b.Steps <= 0 {
		b.Steps = DefaultRestartBackoff.Steps
	}
	if b.Cap <= 0 {
		b.Cap = max(DefaultRestartBackoff.Cap, b.Duration)
	}
	return b
}

// Child is a supervised provider process.
type Child struct {
	name, path string
	opts       Options
	log        *slog.Logger
	dir        *livedir.Dir
	socket     string
	conn       *grpc.ClientConn
	drv        driver.Driver

	restarts atomic.Int64
	pid      atomic.Int64
	ready    chan struct{} // closed once the first start is healthy
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{} // closed when supervision ended
	startErr error
}

// Start launches the provider binary at path as the driver of provider name, waits until it is
// healthy and keeps it running until Close (or ctx ends). It fails when the first start does
// not become healthy within ReadyTimeout, reporting the child's last output.
func Start(ctx context.Context, name, path string, o Options) (*Child, error) {
	name = registry.Normalize(name)
	if !registry.ValidName(name) {
		return nil, fmt.Errorf("childproc: %q is not a provider name", name)
	}
	abs, err := exec.LookPath(path)
	if err != nil {
		return nil, fmt.Errorf("childproc: provider binary for %s: %w: give the path of a machinist binary built with -tags provider_%s", name, err, name)
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Output == nil {
		o.Output = os.Stderr
	}
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = 30 * time.Second
	}
	o.RestartBackoff = restartBackoff(o.RestartBackoff)
	if o.StopTimeout <= 0 {
		o.StopTimeout = 5 * time.Second
	}
	// A short private directory (0700): socket paths are limited to ~108 bytes. Directories of
	// earlier parents that were killed before they could remove theirs are removed here.
	dir, err := livedir.New("machinist-" + name + "-")
	if err != nil {
		return nil, fmt.Errorf("childproc: socket directory: %w", err)
	}
	socket := filepath.Join(dir.Path(), "driver.sock")
	conn, err := grpcbridge.Dial("unix://"+socket, grpcbridge.Transport{Insecure: true},
		grpc.WithConnectParams(grpc.ConnectParams{
			// Reconnect soon after a restart instead of gRPC's default minutes-long backoff.
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: time.Second,
		}))
	if err != nil {
		return nil, errors.Join(err, dir.Remove())
	}
	c := &Child{
		name: name, path: abs, opts: o, log: o.Log.With("provider", name, "binary", abs),
		dir: dir, socket: socket, conn: conn,
		drv:   grpcbridge.NewClient(conn, grpcbridge.WithProvider(name), grpcbridge.WithTimeouts(o.Timeouts)),
		ready: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{}),
	}
	go c.supervise()
	select {
	case <-c.ready:
	case <-c.done:
		return nil, errors.Join(c.startErr, c.cleanup())
	case <-ctx.Done():
		c.Close()
		return nil, fmt.Errorf("childproc: start %s: %w", name, ctx.Err())
	}
	go func() {
		select {
		case <-ctx.Done():
			c.Close()
		case <-c.done:
		}
	}()
	return c, nil
}

// Driver returns the child's driver. While the child restarts, calls fail with Unavailable.
func (c *Child) Driver() driver.Driver { return c.drv }

// Name returns the provider name.
func (c *Child) Name() string { return c.name }

// Pid returns the process id of the running child, or 0 between restarts.
func (c *Child) Pid() int { return int(c.pid.Load()) }

// Restarts returns how many times the child was restarted after dying.
func (c *Child) Restarts() int { return int(c.restarts.Load()) }

// Close stops the child (SIGTERM, then SIGKILL after StopTimeout) and releases the socket.
func (c *Child) Close() error {
	c.stopOnce.Do(func() { close(c.stop) })
	<-c.done
	return c.cleanup()
}

func (c *Child) cleanup() error {
	c.conn.Close()
	return c.dir.Remove()
}

// supervise runs the child, restarting it until stop. The goroutine keeps its OS thread locked
// while a child runs: the parent-death signal fires when the thread that started the child
// exits, so that thread must live as long as the child.
func (c *Child) supervise() {
	defer close(c.done)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	backoff := c.opts.RestartBackoff
	for {
		started := time.Now()
		first := !c.isReady()
		err := c.runOnce(first)
		if first && !c.isReady() && !c.stopping() {
			c.startErr = err // the first start never became ready: Start reports it
			return
		}
		if c.stopping() {
			return
		}
		c.restarts.Add(1)
		if time.Since(started) > c.opts.RestartBackoff.Cap {
			backoff = c.opts.RestartBackoff // it ran well for a while: start over
		}
		delay := backoff.Step()
		c.log.Warn("childproc: provider process exited; restarting", "err", err, "in", delay)
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-c.stop:
			t.Stop()
			return
		}
	}
}

func (c *Child) isReady() bool {
	select {
	case <-c.ready:
		return true
	default:
		return false
	}
}

func (c *Child) stopping() bool {
	select {
	case <-c.stop:
		return true
	default:
		return false
	}
}

// runOnce starts the child, waits until it is healthy (the first time: signals ready) and until
// it exits or is stopped.
func (c *Child) runOnce(first bool) error {
	tail := &tailBuffer{max: 4096}
	out := io.MultiWriter(c.opts.Output, tail)
	args := append([]string{"serve", "--listen", "unix://" + c.socket, "--provider", c.name, "--insecure",
		"--parent-pid", fmt.Sprint(os.Getpid())}, c.opts.Args...)
	cmd := exec.Command(c.path, args...)
	cmd.Env = c.opts.Env
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = sysProcAttr(!c.opts.noPdeathsig)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("childproc: start %s: %w", c.path, err)
	}
	c.pid.Store(int64(cmd.Process.Pid))
	defer c.pid.Store(0)
	c.log.Info("childproc: provider process started", "pid", cmd.Process.Pid)
	var exitErr error // cmd.Wait's, set before exited is closed
	exited := make(chan struct{})
	go func() { exitErr = cmd.Wait(); close(exited) }()

	healthy := make(chan error, 1)
	hctx, cancelHealth := context.WithTimeout(context.Background(), c.opts.ReadyTimeout)
	defer cancelHealth()
	go func() { healthy <- c.waitHealthy(hctx) }()
	for {
		select {
		case err := <-healthy:
			if err != nil {
				c.kill(cmd, exited)
				return fmt.Errorf("childproc: %s did not become ready within %s: %w; its output ended with:\n%s", c.name, c.opts.ReadyTimeout, err, tail)
			}
			c.log.Info("childproc: provider process ready", "pid", cmd.Process.Pid)
			if first {
				close(c.ready)
			}
			healthy = nil
		case <-exited:
			if exitErr == nil {
				exitErr = errors.New("exit status 0")
			}
			if healthy != nil {
				cancelHealth()
				return fmt.Errorf("childproc: %s exited before it was ready (%w); its output ended with:\n%s", c.name, exitErr, tail)
			}
			return fmt.Errorf("childproc: %s exited: %w", c.name, exitErr)
		case <-c.stop:
			c.terminate(cmd, exited)
			return nil
		}
	}
}

func (c *Child) waitHealthy(ctx context.Context) error {
	h := healthpb.NewHealthClient(c.conn)
	var last error // why the latest check was not SERVING: what the caller hears when ctx ends
	err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		resp, err := h.Check(cctx, &healthpb.HealthCheckRequest{})
		cancel()
		switch {
		case err != nil:
			last = err
		case resp.Status != healthpb.HealthCheckResponse_SERVING:
			last = fmt.Errorf("health %s", resp.Status)
		default:
			return true, nil
		}
		return false, nil
	})
	if err != nil && last != nil {
		return last
	}
	return err
}

// terminate asks the child to stop, then kills it.
func (c *Child) terminate(cmd *exec.Cmd, exited <-chan struct{}) {
	if graceful.Process(cmd.Process, exited, c.opts.StopTimeout) {
		c.log.Warn("childproc: provider process ignored SIGTERM; killed it", "pid", cmd.Process.Pid)
	}
}

func (c *Child) kill(cmd *exec.Cmd, exited <-chan struct{}) {
	_ = cmd.Process.Kill()
	<-exited
}

// tailBuffer keeps the last max bytes written, for error messages.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   bytes.Buffer
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b.Write(p)
	if extra := t.b.Len() - t.max; extra > 0 {
		t.b.Next(extra)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.b.String()
}

// WatchParent returns a context that ends when the process whose id is parentPID is no longer
// this process's parent (it died and this process was re-parented). serve --parent-pid uses it.
func WatchParent(ctx context.Context, parentPID int, every time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			if os.Getppid() != parentPID {
				cancel(ErrParentGone)
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return ctx, func() { cancel(context.Canceled) }
}

// ErrParentGone is the cause of a WatchParent context that ended because the parent died.
var ErrParentGone = errors.New("childproc: the parent process is gone")
