package oracle

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/gcp"
	"github.com/machinist-io/machinist/providers/kit"
)

// machinistTarget is machinist's GCP driver in this process; it reaches the fake through the
// secret's computeEndpoint and caCert.
type machinistTarget struct{ d *gcp.Driver }

// NewMachinist returns machinist's driver as a target, with short polls (the fake's operations
// take milliseconds) and its logs discarded.
func NewMachinist() Target {
	return machinistTarget{d: gcp.New(gcp.Options{
		Options: kit.Options{PollInterval: 5 * time.Millisecond, Log: slog.New(slog.DiscardHandler)},
		Retry:   wait.Backoff{Duration: 20 * time.Millisecond, Factor: 2, Steps: 3, Cap: time.Second},
	})}
}

func (t machinistTarget) Call(ctx context.Context, c Call) (Result, error) {
	var r Result
	var err error
	switch c.Op {
	case Create:
		var resp *driver.CreateMachineResponse
		if resp, err = t.d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: c.Machine, MachineClass: c.MachineClass, Secret: c.Secret}); resp != nil {
			r.ProviderID, r.NodeName = resp.ProviderID, resp.NodeName
		}
	case Status:
		var resp *driver.GetMachineStatusResponse
		if resp, err = t.d.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: c.Machine, MachineClass: c.MachineClass, Secret: c.Secret}); resp != nil {
			r.ProviderID, r.NodeName = resp.ProviderID, resp.NodeName
		}
	case List:
		var resp *driver.ListMachinesResponse
		if resp, err = t.d.ListMachines(ctx, &driver.ListMachinesRequest{MachineClass: c.MachineClass, Secret: c.Secret}); resp != nil {
			r.MachineList = resp.MachineList
		}
	case Delete:
		_, err = t.d.DeleteMachine(ctx, &driver.DeleteMachineRequest{Machine: c.Machine, MachineClass: c.MachineClass, Secret: c.Secret})
	default:
		return Result{}, fmt.Errorf("oracle: unknown op %q", c.Op)
	}
	r.Code = driver.CodeOf(err).String()
	if err != nil {
		r.Message = driver.MessageOf(err)
	}
	return r, nil
}

func (machinistTarget) Close() error { return nil }

// gardenerTarget is Gardener's driver process (the operator's executable, docs/compatibility/gcp.md
// "The oracle's driver process"): one JSON line per call on its stdin, one answer per line on
// its stdout. Its Compute client reaches the fake through a front (HTTPS_PROXY) and trusts the
// front's and the fake's CAs only (SSL_CERT_FILE); the key's token_uri is the fake's own
// loopback URL, which is never proxied.
type gardenerTarget struct {
	cmd    *exec.Cmd
	front  *front
	in     io.WriteCloser
	out    *bufio.Scanner
	stderr *tailBuffer
	dir    string
	mu     sync.Mutex
}

// NewGardener starts Gardener's driver process at path against w.
func NewGardener(path string, w *World) (Target, error) {
	fr, err := newFront(w.Cloud)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "gcp-oracle-")
	if err != nil {
		_ = fr.Close()
		return nil, err
	}
	bundle := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(bundle, append(append([]byte(nil), fr.CACert...), w.Server.CACert...), 0o600); err != nil {
		return nil, errors.Join(err, fr.Close(), os.RemoveAll(dir))
	}
	cmd := exec.Command(path)
	cmd.Env = []string{
		"HOME=" + dir,
		"PATH=" + os.Getenv("PATH"),
		"HTTPS_PROXY=" + fr.URL,
		"NO_PROXY=",
		"SSL_CERT_FILE=" + bundle,
		"SSL_CERT_DIR=" + dir, // no system CAs: only the front's and the fake's
	}
	t := &gardenerTarget{cmd: cmd, front: fr, stderr: &tailBuffer{max: 64 << 10}, dir: dir}
	cmd.Stderr = t.stderr
	if t.in, err = cmd.StdinPipe(); err != nil {
		return nil, errors.Join(err, t.cleanup())
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, errors.Join(err, t.cleanup())
	}
	t.out = bufio.NewScanner(stdout)
	t.out.Buffer(make([]byte, 1<<20), 16<<20)
	if err := cmd.Start(); err != nil {
		return nil, errors.Join(fmt.Errorf("oracle: start Gardener's driver %s: %w", path, err), t.cleanup())
	}
	return t, nil
}

func (t *gardenerTarget) Call(ctx context.Context, c Call) (Result, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	line, err := json.Marshal(c)
	if err != nil {
		return Result{}, err
	}
	if _, err := t.in.Write(append(line, '\n')); err != nil {
		return Result{}, fmt.Errorf("oracle: Gardener's driver: %w (stderr: %s)", err, t.stderr)
	}
	done := make(chan bool, 1)
	go func() { done <- t.out.Scan() }()
	select {
	case <-ctx.Done():
		_ = t.cmd.Process.Kill()
		<-done
		return Result{}, fmt.Errorf("oracle: Gardener's driver gave no answer: %w (stderr: %s)", ctx.Err(), t.stderr)
	case ok := <-done:
		if !ok {
			err := t.out.Err()
			if err == nil {
				err = io.EOF
			}
			return Result{}, fmt.Errorf("oracle: Gardener's driver ended: %w (stderr: %s)", err, t.stderr)
		}
	}
	var r Result
	if err := json.Unmarshal(t.out.Bytes(), &r); err != nil {
		return Result{}, fmt.Errorf("oracle: Gardener's driver answered %q: %w", t.out.Text(), err)
	}
	return r, nil
}

// Close ends the driver process (its stdin closed, it exits; killed after 10 seconds) and
// reports how it ended.
func (t *gardenerTarget) Close() error {
	_ = t.in.Close()
	done := make(chan error, 1)
	go func() { done <- t.cmd.Wait() }()
	var waitErr error
	select {
	case waitErr = <-done:
	case <-time.After(10 * time.Second):
		_ = t.cmd.Process.Kill()
		waitErr = <-done
	}
	if waitErr != nil {
		waitErr = fmt.Errorf("oracle: Gardener's driver: %w (stderr: %s)", waitErr, t.stderr)
	}
	return errors.Join(waitErr, t.cleanup())
}

func (t *gardenerTarget) cleanup() error {
	return errors.Join(t.front.Close(), os.RemoveAll(t.dir))
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.b = append(b.b, p...)
	if len(b.b) > b.max {
		b.b = b.b[len(b.b)-b.max:]
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.b)
}

var (
	_ Target = machinistTarget{}
	_ Target = (*gardenerTarget)(nil)
)
