package run

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/machinist-io/machinist/internal/syncbuf"
	"github.com/machinist-io/machinist/test/internal/machinistbin"
)

// machinistBin is bin/machinist built once for the package by TestMain.
var machinistBin string

func TestMain(m *testing.M) { machinistbin.Main(m, "run", &machinistBin) }

// startMachinist runs `machinist <args>` with its output (stdout and stderr) in out, and returns
// stop: an interrupt (Ctrl-C), then the wait for it to finish (a kill after a minute). A process
// that failed for another reason than the interrupt fails the test. stop may be called again.
func startMachinist(t *testing.T, out *syncbuf.Buffer, args ...string) (stop func()) {
	t.Helper()
	// Through a pipe of our own: Wait must not wait for processes machinist started, which
	// inherit the write end (exec's own pipe would make it wait for them).
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(machinistBin, args...)
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	copied := make(chan struct{})
	go func() { defer close(copied); _, _ = io.Copy(out, r) }()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var result error
	done := false
	stop = func() {
		t.Helper()
		if done {
			return
		}
		done = true
		_ = cmd.Process.Signal(syscall.SIGINT)
		select {
		case result = <-exited:
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			t.Errorf("machinist %s did not stop within a minute of the interrupt (killed: %v)", args[0], <-exited)
			return
		}
		select { // the output so far, unless a process machinist started still holds the pipe
		case <-copied:
		case <-time.After(5 * time.Second):
		}
		var exit *exec.ExitError
		if errors.As(result, &exit) && !exit.Exited() {
			t.Errorf("machinist %s died of %v instead of shutting down", args[0], exit.ProcessState)
		} else if result != nil && !strings.Contains(out.String(), "context canceled") {
			t.Errorf("machinist %s: %v", args[0], result)
		}
	}
	return stop
}
