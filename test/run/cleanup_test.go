package run

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDevCleansUpAfterStdoutClosed reproduces `make run | tee run.log` followed by Ctrl-C: the
// terminal's interrupt ends tee, so stdout is a pipe nobody reads when machinist dev shuts
// down. The built binary must still stop the control plane and remove its working directory
// (no SIGPIPE death on the way).
func TestDevCleansUpAfterStdoutClosed(t *testing.T) {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		assets = repoPath(t, "bin")
	}
	tmp := t.TempDir()
	cmd := exec.Command(machinistBin, "dev", "--port", "-1", "--timeout", "5m", "--bin-dir", assets)
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	stdout, tee, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	// A file, not a pipe: Wait must not wait for the control plane's processes, which inherit it.
	errFile, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer errFile.Close()
	stderr := func() string { b, _ := os.ReadFile(errFile.Name()); return string(b) }
	cmd.Stdout, cmd.Stderr = tee, errFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tee.Close()
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
	})

	// Read like tee until the control plane is up.
	lines, stopped := make(chan string), make(chan struct{})
	defer close(stopped)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-stopped:
				return
			}
		}
	}()
	var seen bytes.Buffer
	deadline := time.After(4 * time.Minute)
	for ready := false; !ready; {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("machinist dev ended before the control plane was ready:\n%s\nstderr:\n%s", seen.String(), stderr())
			}
			seen.WriteString(l + "\n")
			ready = strings.Contains(strings.ToLower(l), "ready")
		case <-deadline:
			t.Fatalf("no control plane within 4 minutes:\n%s\nstderr:\n%s", seen.String(), stderr())
		}
	}
	dirs, _ := filepath.Glob(filepath.Join(tmp, "machinist-dev-*"))
	if len(dirs) != 1 {
		t.Fatalf("working directories in %s: %v", tmp, dirs)
	}

	stdout.Close() // tee is gone
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(2 * time.Minute):
		t.Fatalf("machinist dev did not stop within 2 minutes of the interrupt; stderr:\n%s", stderr())
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		t.Errorf("machinist dev died of %v instead of shutting down; stderr:\n%s", ws.Signal(), stderr())
	}
	if _, err := os.Stat(dirs[0]); !os.IsNotExist(err) {
		t.Errorf("%s left behind after the interrupt (stat: %v)", dirs[0], err)
	}
}
