package docker

import (
	"bufio"
	"context"
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// podman runs podman with its configuration in one directory of the test: image storage (vfs:
// no mounts to clean up), runtime state, and containers.conf. As on these machines, containers
// run with runc and no default ulimits (crun fails on setrlimit here, and the defaults cannot be
// set) and without a network.
type podman struct {
	t   *testing.T
	exe string
	env []string
}

// newPodman finds podman and runc and configures them in a directory of t. Where either is
// missing (`make deps` installs both, and `make test` runs it first) or the test cannot reach
// the container's socket (not root), it skips t and says which.
func newPodman(t *testing.T) *podman {
	t.Helper()
	exe, err := exec.LookPath("podman")
	if err != nil {
		t.Skip("no container engine: podman is not installed; run `make deps` (apt-get installs podman and runc) to run the image test")
	}
	if os.Geteuid() != 0 {
		t.Skip("the image test runs as root: rootless podman maps the container's uid 65532 to a subordinate uid, whose socket the host user cannot open")
	}
	if _, err := exec.LookPath("runc"); err != nil {
		t.Skip("runc is not installed (podman runs containers with runc here): run `make deps` to install it and run the image test")
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "containers.conf")
	storage := filepath.Join(dir, "storage.conf")
	write(t, conf, fmt.Sprintf("[containers]\ndefault_ulimits = []\n\n[engine]\nruntime = \"runc\"\ncgroup_manager = \"cgroupfs\"\nevents_logger = \"file\"\ntmp_dir = %q\n", filepath.Join(dir, "tmp")))
	write(t, storage, fmt.Sprintf("[storage]\ndriver = \"vfs\"\ngraphroot = %q\nrunroot = %q\n", filepath.Join(dir, "root"), filepath.Join(dir, "run")))
	p := &podman{t: t, exe: exe, env: append(os.Environ(), "CONTAINERS_CONF="+conf, "CONTAINERS_STORAGE_CONF="+storage)}
	if out, err := p.run(time.Minute, "info"); err != nil {
		t.Fatalf("podman info: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		// Containers first: their processes hold files in the storage directory.
		if out, err := p.run(time.Minute, "rm", "--all", "--force", "--time", "2"); err != nil {
			t.Logf("podman rm --all: %v\n%s", err, out)
		}
	})
	return p
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// run runs podman --runtime runc with args and returns its combined output.
func (p *podman) run(timeout time.Duration, args ...string) (string, error) {
	// Not the test's context: cleanups run after it is cancelled.
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, p.exe, append([]string{"--runtime", "runc"}, args...)...)
	cmd.Env = p.env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (p *podman) must(timeout time.Duration, args ...string) string {
	p.t.Helper()
	out, err := p.run(timeout, args...)
	if err != nil {
		p.t.Fatalf("podman %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// TestProviderImageRuns builds the local provider's image as `make image PROVIDER=local` does
// (offline, FROM scratch) and runs it. Its entrypoint is /machine-controller, MCM's provider
// half, as in MCM's provider images, in the working directory /; /usr/local/bin/machinist is
// the same binary under its own name: version and providers name only local, the subcommands
// are the slim ones plus the controllers', serve answers on a unix socket in a mounted
// directory to `machinist driver --endpoint` on the host, as uid and gid 65532; the binary is
// static and stripped, the labels name source, revision and version. Then the image runs with
// the arguments of Gardener's provider sidecar against a real API server
// (runGardenerSidecar).
func TestProviderImageRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a container image")
	}
	p := newPodman(t)
	const image = "machinist-local:e2e"
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal(err)
	}
	// The build (a static Go build, then the image) has no time limit of its own: on a cold cache
	// under load it takes many minutes, and go test's -timeout is what stops a hung one.
	build := exec.CommandContext(t.Context(), bash, "image.sh", "local", "e2e")
	build.Env = append(slices.Clone(p.env), "CONTAINER_ENGINE=podman", "TMPDIR="+t.TempDir())
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("image.sh local e2e: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	run := func(args ...string) string {
		return p.must(time.Minute, append([]string{"run", "--rm", "--network", "none", "--entrypoint", "/usr/local/bin/machinist", image}, args...)...)
	}
	var config struct {
		Entrypoint []string
		WorkingDir string
	}
	if err := json.Unmarshal([]byte(p.must(time.Minute, "image", "inspect", "--format", "{{json .Config}}", image)), &config); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(config.Entrypoint, []string{"/machine-controller"}) || config.WorkingDir != "/" {
		t.Errorf("image entrypoint %q in %q, want /machine-controller in / (as MCM's provider images)", config.Entrypoint, config.WorkingDir)
	}

	var version struct {
		Version, Revision string
		Providers         []string
	}
	if err := json.Unmarshal([]byte(run("version", "-o", "json")), &version); err != nil {
		t.Fatal(err)
	}
	if version.Version != "e2e" || !slices.Equal(version.Providers, []string{"local"}) || version.Revision == "" || version.Revision == "unknown" {
		t.Errorf("version in the image: %+v, want version e2e, a revision and only local", version)
	}
	var providers []struct{ Name string }
	if err := json.Unmarshal([]byte(run("providers", "-o", "json")), &providers); err != nil {
		t.Fatal(err)
	}
	if len(providers) != 1 || providers[0].Name != "local" {
		t.Errorf("providers in the image: %+v, want only local", providers)
	}
	if got := subcommands(run("--help")); !slices.Equal(got, providerHalfCommands) {
		t.Errorf("subcommands in the image: %q, want %q", got, providerHalfCommands)
	}

	labels := map[string]string{}
	if err := json.Unmarshal([]byte(p.must(time.Minute, "image", "inspect", "--format", "{{json .Labels}}", image)), &labels); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{
		"org.opencontainers.image.source":   "https://github.com/machinist-io/machinist",
		"org.opencontainers.image.version":  "e2e",
		"org.opencontainers.image.revision": version.Revision,
		"org.opencontainers.image.title":    "machinist-local",
	} {
		if labels[key] != want {
			t.Errorf("label %s = %q, want %q", key, labels[key], want)
		}
	}

	// serve in the container on a socket in a mounted directory, driven from the host.
	sockDir, err := os.MkdirTemp("", "machinist-sock")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	if err := os.Chmod(sockDir, 0o777); err != nil { // uid 65532 creates the socket here
		t.Fatal(err)
	}
	p.must(time.Minute, "run", "--detach", "--name", "serve", "--network", "none", "--volume", sockDir+":/run/machinist",
		"--entrypoint", "/usr/local/bin/machinist", image, "serve", "--listen", "unix:///run/machinist/driver.sock", "--insecure", "--state-dir", "/home/nonroot/state")
	sock := filepath.Join(sockDir, "driver.sock")
	deadline := time.Now().Add(time.Minute)
	for {
		// A dial, not a stat: the socket file exists from bind(2), but connections are refused
		// until listen(2).
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			logs, _ := p.run(time.Minute, "logs", "serve")
			t.Fatalf("no socket at %s after a minute; container logs:\n%s", sock, logs)
		}
		time.Sleep(100 * time.Millisecond)
	}

	var pid int
	if _, err := fmt.Sscan(p.must(time.Minute, "inspect", "--format", "{{.State.Pid}}", "serve"), &pid); err != nil || pid <= 0 {
		t.Fatalf("pid of the serve container: %v", err)
	}
	uid, gid := ids(t, pid)
	if !slices.Equal(uid, []string{"65532", "65532", "65532", "65532"}) || !slices.Equal(gid, []string{"65532", "65532", "65532", "65532"}) {
		t.Errorf("serve runs with uids %v and gids %v, want 65532 throughout", uid, gid)
	}

	// The host drives it with the image's own binary: static, so it runs here too.
	host := filepath.Join(t.TempDir(), "machinist")
	p.must(time.Minute, "cp", "serve:/machine-controller", host) // the file; /usr/local/bin/machinist links to it
	checkReleaseBinary(t, host)
	class := filepath.Join(t.TempDir(), "class.yaml")
	write(t, class, "apiVersion: machine.sapcloud.io/v1alpha1\nkind: MachineClass\nmetadata: {name: e2e, namespace: default}\nprovider: local\nproviderSpec: {cluster: e2e}\n")
	driver := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, host, append(append([]string{"driver"}, args...), "--endpoint", "unix://"+sock, "--insecure")...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("machinist driver %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	if out := driver("create", "--class", class, "--machine", "e2e-1", "-o", "json"); !strings.Contains(out, "local:///") {
		t.Errorf("driver create through the container: %s", out)
	}
	if out := driver("list", "--class", class); !strings.Contains(out, "e2e-1") {
		t.Errorf("driver list through the container lacks e2e-1:\n%s", out)
	}
	driver("delete", "--class", class, "--machine", "e2e-1")
	if out := driver("list", "--class", class); strings.Contains(out, "e2e-1") {
		t.Errorf("e2e-1 still listed after delete:\n%s", out)
	}

	p.must(time.Minute, "stop", "--time", "10", "serve")
	logs := p.must(time.Minute, "logs", "serve")
	for _, want := range []string{"serving drivers", "stopped serving"} {
		if !strings.Contains(logs, want) {
			t.Errorf("serve's log lacks %q:\n%s", want, logs)
		}
	}

	runGardenerSidecar(t, p, image)
}

// ids returns the real, effective, saved and file-system uids and gids of process pid.
func ids(t *testing.T, pid int) (uid, gid []string) {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "Uid:"); ok {
			uid = strings.Fields(rest)
		}
		if rest, ok := strings.CutPrefix(sc.Text(), "Gid:"); ok {
			gid = strings.Fields(rest)
		}
	}
	return uid, gid
}

// checkReleaseBinary checks that the binary at path is what image.sh promises: static (no
// program interpreter), stripped (no symbol table or DWARF), built with -trimpath, cgo off and
// the provider half's tags.
func checkReleaseBinary(t *testing.T, path string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			t.Error("the image's binary is dynamically linked (it has a program interpreter)")
		}
	}
	for _, section := range []string{".symtab", ".debug_info"} {
		if f.Section(section) != nil {
			t.Errorf("the image's binary is not stripped (-s -w): it has %s", section)
		}
	}
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	if settings["CGO_ENABLED"] != "0" || settings["-trimpath"] != "true" {
		t.Errorf("build settings %v, want CGO_ENABLED=0 and -trimpath", settings)
	}
	if tags := strings.Split(settings["-tags"], ","); !slices.Contains(tags, "slim") || !slices.Contains(tags, "machinecontroller") || !slices.Contains(tags, "provider_local") {
		t.Errorf("build tags %v, want slim, machinecontroller and provider_local", tags)
	}
}
