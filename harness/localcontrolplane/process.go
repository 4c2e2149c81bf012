package localcontrolplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/machinist-io/machinist/internal/graceful"
)

// process is one child process (etcd or kube-apiserver) whose output goes to a log file.
type process struct {
	name    string
	path    string
	args    []string
	logFile string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
	err    error         // exit error, valid once exited is closed
}

func (p *process) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("controlplane: %s is already running", p.name)
	}
	logf, err := os.OpenFile(p.logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("controlplane: open %s log: %w", p.name, err)
	}
	cmd := exec.Command(p.path, p.args...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("controlplane: start %s: %w", p.name, err)
	}
	p.cmd = cmd
	exited := make(chan struct{})
	p.exited = exited
	go func() {
		err := cmd.Wait()
		logf.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(exited)
	}()
	return nil
}

// done returns a channel closed when the process has exited (nil when not started).
func (p *process) done() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exited
}

// stop terminates the process: SIGTERM, then SIGKILL after grace, and waits until it has exited.
// Stopping a process that is not running is a no-op.
func (p *process) stop(grace time.Duration) {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	graceful.Process(cmd.Process, exited, grace)
	p.mu.Lock()
	p.cmd, p.exited = nil, nil
	p.mu.Unlock()
}

// exitError describes an unexpected exit, with the end of the log.
func (p *process) exitError() error {
	p.mu.Lock()
	err := p.err
	p.mu.Unlock()
	if err == nil {
		err = errors.New("exit status 0")
	}
	return fmt.Errorf("controlplane: %s exited early (%w); last lines of %s:\n%s", p.name, err, p.logFile, tail(p.logFile, 25))
}

// logMentions reports whether the log contains s (used to detect a port taken between picking
// and binding it).
func (p *process) logMentions(s string) bool {
	b, _ := os.ReadFile(p.logFile)
	return bytes.Contains(b, []byte(s))
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	b = bytes.TrimRight(b, "\n")
	lines := bytes.Split(b, []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// freePorts returns n distinct loopback TCP ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("controlplane: find a free port: %w", err)
		}
		defer l.Close() // held until all are chosen, so they differ
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// portFree reports whether a loopback port can be bound now.
func portFree(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// waitPortFree waits until port can be bound (a stopped server has released it).
func waitPortFree(port int, timeout time.Duration) error {
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		return portFree(port), nil
	})
	if err != nil {
		return fmt.Errorf("controlplane: port %d is still in use after %s", port, timeout)
	}
	return nil
}

var errAddrInUse = errors.New("address already in use")
