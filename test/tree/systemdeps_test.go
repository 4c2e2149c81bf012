package tree

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSystemDeps runs build/system-deps.sh as `make deps` does, on a PATH that holds
// only what the test chooses: without apt-get, missing podman is reported and the script goes on
// (make test continues; the image test skips), a missing compiler is an error naming the
// packages; with apt-get, everything missing is installed in one call.
func TestSystemDeps(t *testing.T) {
	root := repoRoot(t)
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	// bin holds stand-ins for the commands system-deps looks for, and the real tools it runs.
	setup := func(t *testing.T, commands ...string) (string, string) {
		bin := t.TempDir()
		for _, tool := range []string{"id", "paste"} {
			path, err := exec.LookPath(tool)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(path, filepath.Join(bin, tool)); err != nil {
				t.Fatal(err)
			}
		}
		calls := filepath.Join(t.TempDir(), "calls")
		for _, c := range commands {
			script := "#!/bin/sh\necho \"" + c + " $*\" >>" + calls + "\n"
			if c == "sudo" {
				script += "exec \"$@\"\n"
			}
			if err := os.WriteFile(filepath.Join(bin, c), []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		return bin, calls
	}
	run := func(t *testing.T, bin string, args ...string) (string, string, int) {
		cmd := exec.CommandContext(t.Context(), bash, append([]string{filepath.Join(root, "build", "system-deps.sh")}, args...)...)
		cmd.Env = []string{"PATH=" + bin}
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatal(err)
		}
		return stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()
	}
	makeDeps := []string{"build", "test", "--optional", "image"}

	t.Run("podman missing, no apt-get: reported, make test goes on", func(t *testing.T) {
		bin, _ := setup(t, "git", "make", "gcc")
		out, errOut, code := run(t, bin, makeDeps...)
		if code != 0 || !strings.Contains(out, "podman") || !strings.Contains(out, "the image test (build/docker) skips without them") {
			t.Errorf("exit %d, stdout %q, stderr %q: want 0 and podman reported as optional", code, out, errOut)
		}
	})
	t.Run("compiler missing, no apt-get: an error naming it", func(t *testing.T) {
		bin, _ := setup(t, "git", "make")
		out, errOut, code := run(t, bin, makeDeps...)
		if code != 1 || !strings.Contains(errOut, "missing gcc libc6-dev") || !strings.Contains(errOut, "go test -race needs them") {
			t.Errorf("exit %d, stdout %q, stderr %q: want 1 naming gcc and libc6-dev", code, out, errOut)
		}
	})
	t.Run("with apt-get: installs the required and the optional", func(t *testing.T) {
		bin, calls := setup(t, "git", "make", "apt-get", "sudo")
		out, errOut, code := run(t, bin, makeDeps...)
		b, _ := os.ReadFile(calls)
		if code != 0 || !strings.Contains(string(b), "apt-get install -y -qq --no-install-recommends gcc libc6-dev podman") {
			t.Errorf("exit %d, stdout %q, stderr %q, calls %q: want one apt-get install of gcc, libc6-dev and podman", code, out, errOut, b)
		}
	})
	t.Run("unknown group", func(t *testing.T) {
		bin, _ := setup(t)
		if _, errOut, code := run(t, bin, "build", "--optional", "docs"); code != 2 || !strings.Contains(errOut, "unknown group 'docs'") {
			t.Errorf("exit %d, stderr %q: want 2 naming the group", code, errOut)
		}
	})
}
