package livedir

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

const roleEnv = "LIVEDIR_TEST_ROLE"

// TestMain lets the test binary play an owner process: it makes a directory, prints its path
// and waits to be killed.
func TestMain(m *testing.M) {
	if os.Getenv(roleEnv) == "owner" {
		d, err := New("livedir-test-")
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println(d.Path())
		select {}
	}
	os.Exit(m.Run())
}

// owner starts a process that owns a new directory and returns it and the process.
func owner(t *testing.T) (string, *exec.Cmd) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(os.Environ(), roleEnv+"=owner")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.HasPrefix(line, "error") {
		t.Fatalf("owner: %q %v", line, err)
	}
	return strings.TrimSpace(line), cmd
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// TestStaleDirectoriesAreSwept: the directory of a SIGKILLed owner is removed by the next New
// of the same prefix; that of a live owner, one without a lock file and one of another prefix
// stay; Remove deletes a directory at once.
func TestStaleDirectoriesAreSwept(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	killed, cmd := owner(t)
	alive, _ := owner(t)
	if !exists(filepath.Join(killed, lockName)) {
		t.Fatalf("%s has no lock file", killed)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait() // "signal: killed"
	foreign := filepath.Join(os.TempDir(), "livedir-test-foreign")
	other := filepath.Join(os.TempDir(), "other-prefix")
	for _, d := range []string{foreign, other} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	otherLock, err := os.Create(filepath.Join(other, lockName))
	if err != nil {
		t.Fatal(err)
	}
	otherLock.Close()
	if !exists(killed) {
		t.Fatal("the killed owner's directory vanished by itself: the test proves nothing")
	}

	d, err := New("livedir-test-")
	if err != nil {
		t.Fatal(err)
	}
	if exists(killed) {
		t.Errorf("the SIGKILLed owner's directory %s is still there", killed)
	}
	for _, keep := range []string{alive, foreign, other, d.Path()} {
		if !exists(keep) {
			t.Errorf("%s was removed", keep)
		}
	}
	if err := d.Remove(); err != nil || exists(d.Path()) {
		t.Fatalf("Remove: %v, exists %v", err, exists(d.Path()))
	}
}

// TestNewRacesSweep: directories made while other goroutines sweep the same prefix all survive
// (the sweep never takes a directory whose owner is still making it).
func TestNewRacesSweep(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
					if _, err := Sweep("race-"); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	var dirs []*Dir
	for range 100 {
		d, err := New("race-")
		if err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, d)
	}
	close(stop)
	wg.Wait()
	for _, d := range dirs {
		if !exists(filepath.Join(d.Path(), lockName)) {
			t.Fatalf("%s was swept while its owner lives", d.Path())
		}
		if err := d.Remove(); err != nil {
			t.Error(err)
		}
	}
}
