package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// controllerProc is `machinist run`, started again after the benchmark kills it (a fault), as
// a kubelet restarts a crashed container: same flags, same environment, same log file.
type controllerProc struct {
	bin  string
	args []string
	env  []string
	log  io.Writer
	port int

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

func (p *controllerProc) start(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = p.log, p.log
	cmd.Env = p.env
	setParentDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.bin, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
	return waitHealthy(ctx, p.port, done)
}

// pid is the running controller's process id.
func (p *controllerProc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd.Process.Pid
}

// kill kills the controller at once (SIGKILL: no shutdown, as a crash or an OOM kill) and waits
// until it is gone.
func (p *controllerProc) kill() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	_ = cmd.Process.Kill()
	<-done
}

// stop asks the controller to stop (SIGINT) and kills it after 30 s.
func (p *controllerProc) stop() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(os.Interrupt)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// childOf returns a child process of ppid (the --driver-exec provider of the controller), or 0.
func childOf(ppid int) int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f := statFields(pid); len(f) > 1 && f[1] == strconv.Itoa(ppid) {
			return pid
		}
	}
	return 0
}

// statFields are the fields of /proc/PID/stat after the command name: state, ppid, … (nil when
// the process is gone).
func statFields(pid int) []string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	s := string(data)
	i := strings.LastIndex(s, ")")
	if i < 0 || i+2 > len(s) {
		return nil
	}
	return strings.Fields(s[i+2:])
}

// cpuTime returns a process's own user+system CPU time so far, without its children's (0 when
// unknown).
func cpuTime(pid int) time.Duration {
	f := statFields(pid)
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	const ticks = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / ticks
}

// vmHWM returns a process's peak resident set size in bytes (0 when unknown).
func vmHWM(pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			f := strings.Fields(line)
			if len(f) >= 2 {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}

// meter sums the CPU time of the processes of one role (the controller, the provider) across
// restarts: the last sample of every process it has seen. Sampling a process just before it is
// killed loses nothing; one that dies by itself loses what it used since its last sample (at
// most a second's worth: every process is sampled once a second).
type meter struct {
	mu   sync.Mutex
	last map[int]time.Duration
	peak int64 // highest VmHWM of any of its processes
}

func newMeter() *meter { return &meter{last: map[int]time.Duration{}} }

// sample reads the CPU time and peak RSS of pid (0: none).
func (m *meter) sample(pid int) {
	if pid <= 0 {
		return
	}
	cpu, rss := cpuTime(pid), vmHWM(pid)
	m.mu.Lock()
	defer m.mu.Unlock()
	if cpu > m.last[pid] {
		m.last[pid] = cpu
	}
	m.peak = max(m.peak, rss)
}

// total is the CPU time of every process seen, as last sampled.
func (m *meter) total() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	var t time.Duration
	for _, c := range m.last {
		t += c
	}
	return t
}

func (m *meter) peakRSS() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.peak
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitHealthy waits until the controller answers /readyz, or fails when it exits (exited
// closed) or does not answer within 2 minutes.
func waitHealthy(ctx context.Context, port int, exited <-chan struct{}) error {
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		select {
		case <-exited:
			return false, errors.New("machinist run exited before it became ready")
		default:
		}
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err != nil {
			return false, nil
		}
		defer conn.Close()
		fmt.Fprintf(conn, "GET /readyz HTTP/1.0\r\n\r\n")
		line, _ := bufio.NewReader(conn).ReadString('\n')
		return strings.Contains(line, " 200 "), nil
	})
	if wait.Interrupted(err) && ctx.Err() == nil {
		return errors.New("machinist run did not become ready within 2 minutes")
	}
	return err
}
