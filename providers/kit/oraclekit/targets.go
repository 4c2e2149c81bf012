package oraclekit

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"time"

	"github.com/machinist-io/machinist/core/driver"
)

// CallDriver makes a call on machinist's driver d and renders its answer as a Result.
func CallDriver(ctx context.Context, d driver.Driver, c Call) (Result, error) {
	var r Result
	var err error
	switch c.Op {
	case Create:
		var resp *driver.CreateMachineResponse
		if resp, err = d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: c.Machine, MachineClass: c.MachineClass, Secret: c.Secret}); resp != nil {
			r.ProviderID, r.NodeName = resp.ProviderID, resp.NodeName
		}
	case Initialize:
		var resp *driver.InitializeMachineResponse
		if resp, err = d.InitializeMachine(ctx, &driver.InitializeMachineRequest{Machine: c.Machine, MachineClass: c.MachineClass, Secret: c.Secret}); resp != nil {
			r.ProviderID, r.NodeName = resp.ProviderID, resp.NodeName
		}
	case Status:
		var resp *driver.GetMachineStatusResponse
		if resp, err = d.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: c.Machine, MachineClass: c.MachineClass, Secret: c.Secret}); resp != nil {
			r.ProviderID, r.NodeName = resp.ProviderID, resp.NodeName
		}
	case List:
		var resp *driver.ListMachinesResponse
		if resp, err = d.ListMachines(ctx, &driver.ListMachinesRequest{MachineClass: c.MachineClass, Secret: c.Secret}); resp != nil && len(resp.MachineList) > 0 {
			r.MachineList = resp.MachineList
		}
	case Delete:
		_, err = d.DeleteMachine(ctx, &driver.DeleteMachineRequest{Machine: c.Machine, MachineClass: c.MachineClass, Secret: c.Secret})
	default:
		return r, fmt.Errorf("oracle: unknown operation %q", c.Op)
	}
	r.Code = "OK"
	if err != nil {
		r.Code, r.Message = driver.CodeOf(err).String(), driver.MessageOf(err)
	}
	return r, nil
}

// Process is Gardener's driver as a Target: an executable the operator supplies that serves the
// oracle's protocol (one Call per line of JSON on stdin, one Result per line on stdout), in a
// home directory of its own.
type Process struct {
	cmd     *exec.Cmd
	in      io.WriteCloser
	out     *bufio.Scanner
	stderr  *tail
	home    string
	cleanup func() error
	mu      sync.Mutex // one call at a time

	waitOnce sync.Once
	waitErr  error
}

// wait waits for the process to end, once: exec copies its stderr into p.stderr until then, so
// only after it does p.stderr hold what the process wrote last.
func (p *Process) wait() error {
	p.waitOnce.Do(func() { p.waitErr = p.cmd.Wait() })
	return p.waitErr
}

// waitBounded waits for the process to end for at most d, and reports whether it did and how.
func (p *Process) waitBounded(d time.Duration) (bool, error) {
	done := make(chan error, 1)
	go func() { done <- p.wait() }()
	select {
	case err := <-done:
		return true, err
	case <-time.After(d):
		return false, nil
	}
}

// StartProcess starts the driver process at path in a fresh home directory (its HOME and
// working directory), with PATH and what env returns for the home (env may put files there);
// logs, when set, receives its stderr too. cleanup, when set, runs when the process has ended.
func StartProcess(path string, env func(home string) ([]string, error), logs io.Writer, cleanup func() error) (*Process, error) {
	home, err := os.MkdirTemp("", "machinist-oracle-home-")
	if err != nil {
		return nil, err
	}
	p := &Process{stderr: &tail{max: 64 << 10}, home: home, cleanup: cleanup}
	vars, err := env(home)
	if err != nil {
		return nil, errors.Join(err, p.clean())
	}
	p.cmd = exec.Command(path)
	p.cmd.Env = append([]string{"HOME=" + home, "PATH=" + os.Getenv("PATH")}, vars...)
	p.cmd.Dir = home
	p.cmd.Stderr = p.stderr
	if logs != nil {
		p.cmd.Stderr = io.MultiWriter(p.stderr, logs)
	}
	if p.in, err = p.cmd.StdinPipe(); err != nil {
		return nil, errors.Join(err, p.clean())
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, errors.Join(err, p.clean())
	}
	p.out = bufio.NewScanner(stdout)
	p.out.Buffer(make([]byte, 1<<20), 16<<20)
	if err := p.cmd.Start(); err != nil {
		return nil, errors.Join(fmt.Errorf("oracle: start Gardener's driver %s: %w", path, err), p.clean())
	}
	return p, nil
}

// Call sends the call and reads the answer; when ctx ends first, the process is killed.
func (p *Process) Call(ctx context.Context, c Call) (Result, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	line, err := json.Marshal(c)
	if err != nil {
		return Result{}, err
	}
	if _, err := p.in.Write(append(line, '\n')); err != nil {
		return Result{}, fmt.Errorf("oracle: Gardener's driver: %w (stderr: %s)", err, p.stderr)
	}
	done := make(chan bool, 1)
	go func() { done <- p.out.Scan() }()
	select {
	case <-ctx.Done():
		_ = p.cmd.Process.Kill()
		<-done
		return Result{}, fmt.Errorf("oracle: Gardener's driver gave no answer: %w (stderr: %s)", ctx.Err(), p.stderr)
	case ok := <-done:
		if !ok {
			err := p.out.Err()
			if err == nil {
				err = io.EOF
			}
			// Its output ended: let it end too, so that its last words are in p.stderr.
			_, _ = p.waitBounded(5 * time.Second) // its exit status is for Close to report
			return Result{}, fmt.Errorf("oracle: Gardener's driver ended: %w (stderr: %s)", err, p.stderr)
		}
	}
	var r Result
	if err := json.Unmarshal(p.out.Bytes(), &r); err != nil {
		return Result{}, fmt.Errorf("oracle: Gardener's driver answered %q: %w", p.out.Text(), err)
	}
	return r, nil
}

// Close ends the process (its stdin closed, it exits; killed after 10 seconds) and reports how
// it ended.
func (p *Process) Close() error {
	_ = p.in.Close()
	ended, waitErr := p.waitBounded(10 * time.Second)
	if !ended {
		_ = p.cmd.Process.Kill()
		waitErr = p.wait()
	}
	if waitErr != nil {
		waitErr = fmt.Errorf("oracle: Gardener's driver: %w (stderr: %s)", waitErr, p.stderr)
	}
	return errors.Join(waitErr, p.clean())
}

func (p *Process) clean() error {
	var err error
	if p.cleanup != nil {
		err = p.cleanup()
	}
	return errors.Join(err, os.RemoveAll(p.home))
}

// tail keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = t.b[len(t.b)-t.max:]
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

var _ Target = (*Process)(nil)
