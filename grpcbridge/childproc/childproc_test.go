package childproc

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/drivertest/memdriver"
	"github.com/machinist-io/machinist/grpcbridge"
)

// The test binary plays the provider binary (role child: `serve` like machinist serve) and, for
// the SIGKILL test, the parent (role parent) that starts a child and prints its pid.
const roleEnv = "CHILDPROC_TEST_ROLE"

// arrivedEnv names a file the child creates when a CreateMachine of a "block-" machine arrives;
// that call then blocks until it is cancelled, so a test knows the call is inside the child.
const arrivedEnv = "CHILDPROC_TEST_ARRIVED"

type arrivalDriver struct {
	driver.Driver
	marker string
}

func (d arrivalDriver) CreateMachine(ctx context.Context, req *driver.CreateMachineRequest) (*driver.CreateMachineResponse, error) {
	if d.marker != "" && strings.HasPrefix(req.Machine.Name, "block-") {
		if err := os.WriteFile(d.marker, nil, 0o644); err != nil {
			return nil, err
		}
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return d.Driver.CreateMachine(ctx, req)
}

func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case "child":
		os.Exit(childMain(os.Args[1:]))
	case "parent", "parent-nopdeathsig":
		os.Exit(parentMain())
	}
	os.Exit(m.Run())
}

// childMain is a minimal provider binary: serve --listen ADDR --provider NAME --insecure
// --parent-pid PID, serving the mem driver until SIGTERM or the parent is gone.
func childMain(args []string) int {
	if len(args) == 0 || args[0] != "serve" {
		fmt.Fprintln(os.Stderr, "child: want serve")
		return 2
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	listen := fs.String("listen", "", "")
	provider := fs.String("provider", "", "")
	fs.Bool("insecure", false, "")
	parent := fs.Int("parent-pid", 0, "")
	fail := fs.Bool("fail", false, "exit at once (a broken binary)")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if *fail {
		fmt.Fprintln(os.Stderr, "child: configuration is broken: missing credentials file")
		return 3
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go func() {
		ch := make(chan os.Signal, 1)
		signalNotify(ch)
		<-ch
		stop()
	}()
	if *parent != 0 {
		var cancel context.CancelFunc
		ctx, cancel = WatchParent(ctx, *parent, 50*time.Millisecond)
		defer cancel()
	}
	err := grpcbridge.Serve(ctx, grpcbridge.ServeOptions{
		Listen: *listen, Transport: grpcbridge.Transport{Insecure: true},
		Drivers: map[string]driver.Driver{*provider: arrivalDriver{memdriver.New(memdriver.NewCloud()), os.Getenv(arrivedEnv)}},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// parentMain starts a child and prints its pid, then waits to be killed.
func parentMain() int {
	self, _ := os.Executable()
	o := Options{Env: append(os.Environ(), roleEnv+"=child"), Output: io.Discard, noPdeathsig: os.Getenv(roleEnv) == "parent-nopdeathsig"}
	c, err := Start(context.Background(), "mem", self, o)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("child", c.Pid(), c.dir.Path())
	select {}
}

func testOptions(t *testing.T) Options {
	return Options{Env: append(os.Environ(), roleEnv+"=child"), Output: io.Discard,
		ReadyTimeout: 20 * time.Second}
}

func self(t *testing.T) string {
	p, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func memRequest(name string) *driver.CreateMachineRequest {
	return &driver.CreateMachineRequest{
		Machine: &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}},
		MachineClass: &v1alpha1.MachineClass{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "default"}, Provider: "mem",
			ProviderSpec: runtime.RawExtension{Raw: []byte(`{"cluster":"a","role":"w","size":"small"}`)}},
		Secret: &corev1.Secret{},
	}
}

func TestStartServesAndRestarts(t *testing.T) {
	c, err := Start(t.Context(), "mem", self(t), testOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	resp, err := c.Driver().CreateMachine(t.Context(), memRequest("m1"))
	if err != nil || !strings.HasPrefix(resp.ProviderID, "mem:///a/") {
		t.Fatalf("create through the child: %v %v", resp, err)
	}

	// The child dies: calls fail with Unavailable, and it comes back by itself.
	pid := c.Pid()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	_, err = c.Driver().CreateMachine(ctx, memRequest("m2"))
	cancel()
	if !driver.IsCode(err, driver.Unavailable) && err != nil {
		t.Fatalf("call while the child is down: %v, want Unavailable (or success after the restart)", err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := c.Driver().CreateMachine(t.Context(), memRequest("m3"))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("child not back after a crash: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if c.Restarts() != 1 || c.Pid() == pid || c.Pid() == 0 {
		t.Fatalf("restarts %d, pid %d (was %d)", c.Restarts(), c.Pid(), pid)
	}

	// Close stops it and leaves nothing.
	newPid := c.Pid()
	c.Close()
	if alive(newPid) {
		t.Fatalf("child %d still running after Close", newPid)
	}
	if _, err := os.Stat(filepath.Dir(c.socket)); !os.IsNotExist(err) {
		t.Fatalf("socket directory left behind: %v", err)
	}
}

// TestInFlightCallFailsWhenChildDies: a call inside the child when it is killed returns
// Unavailable at once.
func TestInFlightCallFailsWhenChildDies(t *testing.T) {
	arrived := filepath.Join(t.TempDir(), "arrived")
	opts := testOptions(t)
	opts.Env = append(opts.Env, arrivedEnv+"="+arrived)
	c, err := Start(t.Context(), "mem", self(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pid := c.Pid()
	errc := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := c.Driver().CreateMachine(ctx, memRequest("block-m1"))
		errc <- err
	}()
	// Kill only once the call is inside the child: a call that never left this process may
	// rightly be served by the restarted child instead.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(arrived); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the call never reached the child")
		}
	}
	start := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !driver.IsCode(err, driver.Unavailable) {
			t.Fatalf("in-flight call when the child died: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("in-flight call hangs after the child died")
	}
	t.Logf("in-flight call failed %v after the kill", time.Since(start))
}

func TestStartReportsABrokenBinary(t *testing.T) {
	o := testOptions(t)
	o.Args = []string{"--fail"}
	_, err := Start(t.Context(), "mem", self(t), o)
	if err == nil || !strings.Contains(err.Error(), "exited before it was ready") || !strings.Contains(err.Error(), "missing credentials file") {
		t.Fatalf("broken child: %v", err)
	}
	if _, err := Start(t.Context(), "mem", "/nonexistent/machinist-mem", o); err == nil || !strings.Contains(err.Error(), "-tags provider_mem") {
		t.Fatalf("missing binary: %v", err)
	}
}

// TestNoChildOutlivesAKilledParent kills the parent with SIGKILL and finds no child left, both
// with the parent-death signal and with only the child's own watch of its parent.
func TestNoChildOutlivesAKilledParent(t *testing.T) {
	for _, role := range []string{"parent", "parent-nopdeathsig"} {
		t.Run(role, func(t *testing.T) {
			cmd := exec.Command(self(t), "-test.run=^$")
			cmd.Env = append(os.Environ(), roleEnv+"="+role)
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = cmd.Process.Kill() }()
			line, err := bufio.NewReader(out).ReadString('\n')
			if err != nil {
				t.Fatalf("parent said nothing: %v", err)
			}
			f := strings.Fields(line)
			if len(f) != 3 || f[0] != "child" {
				t.Fatalf("parent: %s", line)
			}
			child, _ := strconv.Atoi(f[1])
			if !alive(child) {
				t.Fatalf("child %d not running", child)
			}
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait() // "signal: killed"
			deadline := time.Now().Add(10 * time.Second)
			for alive(child) {
				if time.Now().After(deadline) {
					_ = syscall.Kill(child, syscall.SIGKILL)
					t.Fatalf("child %d still running 10s after its parent was killed", child)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// alive reports whether pid is a running (not zombie) process.
func alive(pid int) bool {
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// The state follows the parenthesised command name.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// TestKilledParentsSocketDirIsRemovedAtNextStart: a parent killed with SIGKILL cannot remove its
// child's socket directory (the child exits with it); the next Start of that provider removes
// it, and leaves the directory of a parent that still runs.
func TestKilledParentsSocketDirIsRemovedAtNextStart(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	start := func() (*exec.Cmd, int, string) {
		cmd := exec.Command(self(t), "-test.run=^$")
		cmd.Env = append(os.Environ(), roleEnv+"=parent")
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		line, err := bufio.NewReader(out).ReadString('\n')
		f := strings.Fields(line)
		if err != nil || len(f) != 3 || f[0] != "child" {
			t.Fatalf("parent: %q %v", line, err)
		}
		pid, _ := strconv.Atoi(f[1])
		return cmd, pid, f[2]
	}
	killed, child, stale := start()
	_, _, live := start()
	if err := killed.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = killed.Wait() // "signal: killed"
	deadline := time.Now().Add(10 * time.Second)
	for alive(child) {
		if time.Now().After(deadline) {
			t.Fatalf("child %d outlived its parent", child)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := os.Stat(stale); err != nil {
		t.Fatalf("the killed parent's socket directory is already gone (%v): the test proves nothing", err)
	}

	c, err := Start(context.Background(), "mem", self(t), testOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the killed parent's socket directory %s is still there (stat: %v)", stale, err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("the running parent's socket directory %s was removed: %v", live, err)
	}
	if filepath.Dir(c.dir.Path()) != os.TempDir() {
		t.Errorf("socket directory %s not in the temp dir %s", c.dir.Path(), os.TempDir())
	}
}
