package graceful

import (
	"os/exec"
	"testing"
	"time"
)

func TestStopReturnsWhenGentleReturns(t *testing.T) {
	forced := Stop(func() {}, func() { t.Error("force called although gentle returned") }, time.Hour)
	if forced {
		t.Fatal("forced = true; want false")
	}
}

func TestStopForcesAfterGrace(t *testing.T) {
	release := make(chan struct{})
	forced := Stop(func() { <-release }, func() { close(release) }, time.Millisecond)
	if !forced {
		t.Fatal("forced = false; want true: gentle blocks until force")
	}
}

// start runs script in a shell and returns it with a channel closed once it has exited.
func start(t *testing.T, script string) (*exec.Cmd, <-chan struct{}) {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	if err := cmd.Start(); err != nil {
		t.Skipf("no shell: %v", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	return cmd, exited
}

func TestProcessStopsOnSIGTERM(t *testing.T) {
	cmd, exited := start(t, "sleep 60")
	if killed := Process(cmd.Process, exited, time.Minute); killed {
		t.Fatal("killed = true; want false: sleep stops on SIGTERM")
	}
}

func TestProcessKillsWhatIgnoresSIGTERM(t *testing.T) {
	// The shell waits for the trap to be set before it reports ready on stdout.
	cmd := exec.Command("sh", "-c", `trap "" TERM; echo ready; while :; do sleep 1; done`)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Skipf("no shell: %v", err)
	}
	buf := make([]byte, 6)
	if _, err := out.Read(buf); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	if killed := Process(cmd.Process, exited, 50*time.Millisecond); !killed {
		t.Fatal("killed = false; want true: the shell ignores SIGTERM")
	}
}
