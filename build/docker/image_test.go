// Package docker holds `make image`'s script and Dockerfile. These tests check the script's
// choices with a fake engine and a fake Go toolchain (fast, no engine needed);
// container_test.go builds and runs a real image with podman.
package docker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

const repoRoot = "../.."

// providerDirs returns the provider directories: those under providers/ with a register.go.
func providerDirs(t *testing.T) []string {
	t.Helper()
	found, err := filepath.Glob(filepath.Join(repoRoot, "providers", "*", "register.go"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range found {
		names = append(names, filepath.Base(filepath.Dir(f)))
	}
	if len(names) == 0 {
		t.Fatal("no provider directories found under providers/")
	}
	return names
}

// runImage runs image.sh with PATH set to path and env added, and returns its output and exit
// code.
func runImage(t *testing.T, path string, env []string, args ...string) (string, int) {
	t.Helper()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash is not installed")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bash, append([]string{"image.sh"}, args...)...)
	cmd.Env = append([]string{"PATH=" + path, "HOME=" + t.TempDir(), "TMPDIR=" + t.TempDir()}, env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), code
}

// toolsPath is a PATH with the tools image.sh needs besides the engine and Go (git, mktemp,
// mkdir, cp, chmod, rm), and without docker or podman: the directories of those tools.
func toolsPath(t *testing.T, first string) string {
	t.Helper()
	dirs := []string{first}
	for _, tool := range []string{"git", "mktemp", "mkdir", "cp", "chmod", "rm"} {
		p, err := exec.LookPath(tool)
		if err != nil {
			t.Skipf("%s is not installed", tool)
		}
		dirs = append(dirs, filepath.Dir(p))
	}
	for _, d := range dirs[1:] {
		for _, engine := range []string{"docker", "podman"} {
			_, fake := os.Stat(filepath.Join(first, engine))
			if _, err := os.Stat(filepath.Join(d, engine)); err == nil && fake != nil {
				// Shadow the real engine with one that is never found working.
				writeScript(t, filepath.Join(first, engine), "#!/bin/sh\necho 'shadowed by the test' >&2\nexit 1\n")
			}
		}
	}
	return strings.Join(slices.Compact(dirs), ":")
}

func writeScript(t *testing.T, path, script string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
}

// fakeEngine writes an engine named name into dir that records its arguments in dir/<name>.calls,
// answers `info` as told and, on `build`, copies its build context (the last argument) to
// dir/<name>.context.
func fakeEngine(t *testing.T, dir, name string, infoOK bool) (calls, context string) {
	t.Helper()
	info := `echo "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?" >&2; exit 1`
	if infoOK {
		info = "exit 0"
	}
	calls = filepath.Join(dir, name+".calls")
	context = filepath.Join(dir, name+".context")
	writeScript(t, filepath.Join(dir, name), `#!/bin/sh
echo "$*" >> `+calls+`
if [ "$1" = info ]; then `+info+`; fi
if [ "$1" = build ]; then for last in "$@"; do :; done; cp -Rp "$last" `+context+`; fi
exit 0
`)
	return calls, context
}

// fakeGo writes a Go toolchain into dir that records its arguments and CGO_ENABLED in
// dir/go.calls and writes a placeholder binary to its -o argument.
func fakeGo(t *testing.T, dir string) string {
	t.Helper()
	calls := filepath.Join(dir, "go.calls")
	writeScript(t, filepath.Join(dir, "fakego"), `#!/bin/sh
echo "CGO_ENABLED=$CGO_ENABLED $*" >> `+calls+`
while [ $# -gt 0 ]; do if [ "$1" = -o ]; then echo binary > "$2"; fi; shift; done
`)
	return calls
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

func TestImageWithoutAnEngineSaysWhatToInstall(t *testing.T) {
	out, code := runImage(t, t.TempDir(), nil, "local", "v1")
	if code != 2 {
		t.Fatalf("image.sh without docker or podman exited %d, want 2:\n%s", code, out)
	}
	for _, want := range []string{"no container engine found", "docker", "podman", "apt-get install podman runc", "CGO_ENABLED=0 go build"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestImageWithAnEngineThatCannotRunSaysWhy(t *testing.T) {
	dir := t.TempDir()
	calls, _ := fakeEngine(t, dir, "docker", false)
	out, code := runImage(t, dir, nil, "local", "v1")
	if code != 2 {
		t.Fatalf("image.sh with a docker CLI but no daemon exited %d, want 2:\n%s", code, out)
	}
	for _, want := range []string{"no working container engine", "docker is installed but cannot build images", "Cannot connect to the Docker daemon", "install podman"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if got := readLines(t, calls); !slices.Equal(got, []string{"info"}) {
		t.Errorf("engine calls = %q, want only info", got)
	}

	out, code = runImage(t, dir, []string{"CONTAINER_ENGINE=docker"}, "local", "v1")
	if code != 2 || !strings.Contains(out, "docker cannot build images") || !strings.Contains(out, "unset CONTAINER_ENGINE") {
		t.Errorf("CONTAINER_ENGINE=docker without a daemon: exit %d:\n%s", code, out)
	}
}

// TestImageBuildsTheChosenImage checks, per choice, the Go build (static, stripped, the right
// tags and version), the build context (binary, CA certificates, users) and the engine's build
// command (tag, labels).
func TestImageBuildsTheChosenImage(t *testing.T) {
	provider := providerDirs(t)[0]
	for _, tc := range []struct {
		name      string
		engines   map[string]bool // fake engines and whether their info works
		args, env []string
		engine    string
		image     string
		tags      string
		version   string
		// binary is the built program's path in rootfs, link its other name there and target
		// what that symbolic link holds.
		binary, link, target string
	}{
		{"provider", map[string]bool{"docker": true}, []string{provider, "v1.2.3"}, nil,
			"docker", "machinist-" + provider + ":v1.2.3", "slim,machinecontroller,provider_" + provider + ",grpcnotrace,urfave_cli_no_docs", "v1.2.3",
			"machine-controller", "usr/local/bin/machinist", "../../../machine-controller"},
		{"all-in-one, podman when docker has no daemon", map[string]bool{"docker": false, "podman": true}, []string{"", "v2"}, []string{"IMAGE_REPO=ghcr.io/acme/machinist"},
			"podman", "ghcr.io/acme/machinist:v2", "grpcnotrace,urfave_cli_no_docs", "v2",
			"usr/local/bin/machinist", "machine-controller-manager", "usr/local/bin/machinist"},
		{"all is all-in-one, version defaults to dev", map[string]bool{"docker": true}, []string{"all"}, []string{"GO_TAGS="},
			"docker", "machinist:dev", "", "dev",
			"usr/local/bin/machinist", "machine-controller-manager", "usr/local/bin/machinist"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var calls, context string
			for name, ok := range tc.engines {
				c, ctx := fakeEngine(t, dir, name, ok)
				if name == tc.engine {
					calls, context = c, ctx
				}
			}
			goCalls := fakeGo(t, dir)
			tmp := t.TempDir()
			// A bundle of its own: the host's default path is Debian's, which other distributions lack.
			bundle := filepath.Join(dir, "ca-bundle.crt")
			write(t, bundle, "-----BEGIN CERTIFICATE-----\nstand-in\n-----END CERTIFICATE-----\n")
			env := append([]string{"GO=" + filepath.Join(dir, "fakego"), "REVISION=0123abc", "TMPDIR=" + tmp, "CA_BUNDLE=" + bundle}, tc.env...)
			out, code := runImage(t, toolsPath(t, dir), env, tc.args...)
			if code != 0 {
				t.Fatalf("image.sh failed (%d):\n%s", code, out)
			}

			goBuild := readLines(t, goCalls)
			if len(goBuild) != 1 {
				t.Fatalf("go calls = %q, want one build", goBuild)
			}
			wantGo := "CGO_ENABLED=0 build -trimpath -tags " + tc.tags + " -ldflags -s -w -X github.com/machinist-io/machinist/internal/version.Version=" + tc.version +
				" -X github.com/machinist-io/machinist/internal/version.Revision=0123abc"
			if !strings.HasPrefix(goBuild[0], wantGo+" ") || !strings.HasSuffix(goBuild[0], " ./cmd/machinist") {
				t.Errorf("go call:\n%q\nwant it to start with\n%q", goBuild[0], wantGo)
			}

			got := readLines(t, calls)
			if len(got) != 2 || got[0] != "info" || !strings.HasPrefix(got[1], "build -f ") {
				t.Fatalf("engine calls = %q, want info, then build", got)
			}
			for _, want := range []string{"--build-arg VERSION=" + tc.version, "--build-arg REVISION=0123abc",
				"--build-arg SOURCE=https://github.com/machinist-io/machinist", " -t " + tc.image + " "} {
				if !strings.Contains(got[1], want) {
					t.Errorf("engine build %q lacks %q", got[1], want)
				}
			}
			if strings.Contains(got[1], "--pull") || strings.Contains(got[1], "--network") {
				t.Errorf("engine build %q should need no pull options: the image is FROM scratch", got[1])
			}

			// The entrypoint is the binary's path; the rest is the Dockerfile.
			dockerfile := strings.Replace(string(mustRead(t, "Dockerfile")), `ENTRYPOINT ["/usr/local/bin/machinist"]`, `ENTRYPOINT ["/`+tc.binary+`"]`, 1)
			if target, err := os.Readlink(filepath.Join(context, "rootfs", tc.link)); err != nil || target != tc.target {
				t.Errorf("context rootfs/%s: link to %q (%v), want a symbolic link to %q", tc.link, target, err, tc.target)
			} else if got := filepath.Clean(filepath.Join("/", filepath.Dir(tc.link), target)); got != "/"+tc.binary {
				t.Errorf("rootfs/%s resolves to %s, want /%s", tc.link, got, tc.binary)
			}
			for path, want := range map[string]string{
				"Dockerfile":                               dockerfile,
				"rootfs/" + tc.binary:                      "binary\n",
				"rootfs/etc/passwd":                        "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n",
				"rootfs/etc/group":                         "root:x:0:\nnonroot:x:65532:\n",
				"rootfs/etc/ssl/certs/ca-certificates.crt": string(mustRead(t, bundle)),
			} {
				if got := string(mustRead(t, filepath.Join(context, path))); got != want {
					t.Errorf("context %s = %.200q, want %.200q", path, got, want)
				}
			}
			for path, mode := range map[string]os.FileMode{"rootfs/tmp": os.ModeDir | os.ModeSticky | 0o777, "home": os.ModeDir | 0o700} {
				if fi, err := os.Stat(filepath.Join(context, path)); err != nil || fi.Mode() != mode {
					t.Errorf("context %s: %v, mode %v, want %v", path, err, fi.Mode(), mode)
				}
			}
			if left, _ := os.ReadDir(tmp); len(left) > 0 {
				t.Errorf("the build context was left behind in TMPDIR: %v", left)
			}
		})
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Skipf("%v", err)
	}
	return b
}

func TestImageRefusesAnUnknownProvider(t *testing.T) {
	dir := t.TempDir()
	calls, _ := fakeEngine(t, dir, "docker", true)
	goCalls := fakeGo(t, dir)
	out, code := runImage(t, toolsPath(t, dir), []string{"GO=" + filepath.Join(dir, "fakego")}, "nosuchcloud")
	if code != 2 || !strings.Contains(out, `unknown provider "nosuchcloud"`) {
		t.Fatalf("image.sh nosuchcloud = %d:\n%s", code, out)
	}
	for _, p := range providerDirs(t) {
		if !strings.Contains(out, p) {
			t.Errorf("the error does not list provider %s:\n%s", p, out)
		}
	}
	if got := readLines(t, calls); !slices.Equal(got, []string{"info"}) {
		t.Errorf("the engine was asked to build: %q", got)
	}
	if got := readLines(t, goCalls); len(got) != 0 {
		t.Errorf("go was called: %q", got)
	}
}

// TestDockerfileIsOfflineAndNonRoot checks the Dockerfile: FROM scratch only (nothing to pull),
// no RUN (nothing to execute while building), user 65532, the OCI labels, and an ARG for every
// --build-arg image.sh passes; and that the Makefile's image target and tags match the script.
func TestDockerfileIsOfflineAndNonRoot(t *testing.T) {
	df := string(mustRead(t, "Dockerfile"))
	var froms, runs []string
	args := map[string]bool{}
	for _, line := range strings.Split(df, "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			if strings.HasPrefix(line, "# syntax=") {
				t.Error("a # syntax= directive makes BuildKit pull a frontend image")
			}
			continue
		}
		switch strings.ToUpper(fields[0]) {
		case "FROM":
			froms = append(froms, strings.Join(fields[1:], " "))
		case "RUN":
			runs = append(runs, line)
		case "ARG":
			args[strings.SplitN(fields[1], "=", 2)[0]] = true
		}
	}
	if !slices.Equal(froms, []string{"scratch"}) {
		t.Errorf("FROM %q, want only scratch", froms)
	}
	if len(runs) > 0 {
		t.Errorf("RUN instructions need a base image and a runtime: %q", runs)
	}
	for _, want := range []string{"USER 65532:65532", `ENTRYPOINT ["/usr/local/bin/machinist"]`, "COPY rootfs/ /",
		"org.opencontainers.image.source=", "org.opencontainers.image.revision=", "org.opencontainers.image.version="} {
		if !strings.Contains(df, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}

	script := string(mustRead(t, "image.sh"))
	if st, err := os.Stat("image.sh"); err != nil || st.Mode()&0o111 == 0 {
		t.Errorf("image.sh must be executable: %v", err)
	}
	passed := regexp.MustCompile(`--build-arg "(\w+)=`).FindAllStringSubmatch(script, -1)
	if len(passed) == 0 {
		t.Fatal("image.sh passes no --build-arg")
	}
	for _, m := range passed {
		if !args[m[1]] {
			t.Errorf("image.sh passes --build-arg %s, which the Dockerfile does not declare", m[1])
		}
	}

	makefile := string(mustRead(t, filepath.Join(repoRoot, "Makefile")))
	if !regexp.MustCompile(`(?m)^image:.*\n\t.*build/docker/image\.sh "\$\(PROVIDER\)" "\$\(VERSION\)"`).MatchString(makefile) {
		t.Error("the Makefile has no image target running build/docker/image.sh \"$(PROVIDER)\" \"$(VERSION)\"")
	}
	mk := regexp.MustCompile(`(?m)^BUILD_TAGS\s*:?=\s*(.*)$`).FindStringSubmatch(makefile)
	sh := regexp.MustCompile(`go_tags="\$\{GO_TAGS-([^}]*)\}"`).FindStringSubmatch(script)
	if mk == nil || sh == nil || strings.TrimSpace(mk[1]) != sh[1] {
		t.Errorf("the Makefile's BUILD_TAGS (%q) and image.sh's default GO_TAGS (%q) differ", mk, sh)
	}
}

// TestEveryProviderHasABuildableSlimVariant builds cmd/machinist with -tags slim,provider_<name>,
// as `make build` and the slim image do, for each provider directory and checks that the binary
// has that provider and no other, and the provider subcommands but not the controllers'. It
// builds with the environment's cgo setting to share the build cache with `make build`;
// container_test.go runs the static build of the image.
func TestEveryProviderHasABuildableSlimVariant(t *testing.T) {
	if testing.Short() {
		t.Skip("builds one binary per provider")
	}
	bin := t.TempDir()
	for _, p := range providerDirs(t) {
		t.Run(p, func(t *testing.T) {
			exe := filepath.Join(bin, "machinist-"+p)
			// A compile has no time limit of its own: on a cold cache under load it takes minutes
			// (over 5 on two shared cores), and go test's -timeout is what stops a hung one.
			build := exec.CommandContext(t.Context(), "go", "build", "-tags", "slim,provider_"+p, "-o", exe, "./cmd/machinist")
			build.Dir = repoRoot
			if out, err := build.CombinedOutput(); err != nil {
				t.Fatalf("go build -tags slim,provider_%s ./cmd/machinist: %v\n%s", p, err, out)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
			defer cancel()
			out, err := exec.CommandContext(ctx, exe, "providers", "-o", "json").Output()
			if err != nil {
				t.Fatalf("machinist-%s providers: %v", p, err)
			}
			var listed []struct{ Name string }
			if err := json.Unmarshal(out, &listed); err != nil {
				t.Fatalf("machinist-%s providers -o json: %v\n%s", p, err, out)
			}
			if len(listed) != 1 || listed[0].Name != p {
				t.Errorf("machinist-%s has providers %+v, want only %s (is providers/all/%s.go generated? run make generate)", p, listed, p, p)
			}
			help, err := exec.CommandContext(ctx, exe, "--help").Output()
			if err != nil {
				t.Fatalf("machinist-%s --help: %v", p, err)
			}
			if got := subcommands(string(help)); !slices.Equal(got, slimCommands) {
				t.Errorf("machinist-%s has subcommands %q, want %q", p, got, slimCommands)
			}
		})
	}
}

// slimCommands are the subcommands of a slim binary, sorted.
var slimCommands = []string{"connect", "driver", "help", "providers", "serve", "version"}

// providerHalfCommands are the subcommands of a provider image's binary (-tags
// slim,machinecontroller): the slim ones and the controllers', sorted.
var providerHalfCommands = []string{"connect", "driver", "help", "machine-controller", "machine-controller-manager", "providers", "run", "serve", "version"}

// subcommands returns the names in the COMMANDS section of a --help output, sorted.
func subcommands(help string) []string {
	_, rest, _ := strings.Cut(help, "COMMANDS:\n")
	section, _, _ := strings.Cut(rest, "\n\n")
	var names []string
	for _, line := range strings.Split(section, "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			names = append(names, strings.TrimSuffix(f[0], ","))
		}
	}
	slices.Sort(names)
	return names
}
