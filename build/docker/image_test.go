package docker

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

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

// runImage runs image.sh with a PATH of only dir (plus nothing else: the script needs bash
// builtins and the engine only) and returns its output and exit code.
func runImage(t *testing.T, pathDir string, env []string, args ...string) (string, int) {
	t.Helper()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash is not installed")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bash, append([]string{"image.sh"}, args...)...)
	cmd.Env = append([]string{"PATH=" + pathDir, "HOME=" + t.TempDir()}, env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), code
}

// fakeEngine writes an engine named name into dir that records its arguments in dir/calls and
// answers `info` as told.
func fakeEngine(t *testing.T, dir, name string, infoOK bool) string {
	t.Helper()
	info := `echo "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?" >&2; exit 1`
	if infoOK {
		info = "exit 0"
	}
	calls := filepath.Join(dir, "calls")
	script := "#!/bin/sh\necho \"$*\" >> " + calls + "\nif [ \"$1\" = info ]; then " + info + "; fi\nexit 0\n"
	if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return calls
}

func readCalls(t *testing.T, path string) []string {
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
	if code == 0 {
		t.Fatalf("image.sh without docker or podman succeeded:\n%s", out)
	}
	for _, want := range []string{"no container engine found", "docker", "podman", "Install"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestImageWithAnEngineThatCannotRunSaysWhy(t *testing.T) {
	dir := t.TempDir()
	calls := fakeEngine(t, dir, "docker", false)
	out, code := runImage(t, dir, nil, "local", "v1")
	if code == 0 {
		t.Fatalf("image.sh with a docker CLI but no daemon succeeded:\n%s", out)
	}
	for _, want := range []string{"docker is installed but cannot build images", "Cannot connect to the Docker daemon", "CONTAINER_ENGINE=podman"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if got := readCalls(t, calls); !slices.Equal(got, []string{"info"}) {
		t.Errorf("engine calls = %q, want only info", got)
	}
}

func TestImageBuildsTheChosenImage(t *testing.T) {
	provider := providerDirs(t)[0]
	for _, tc := range []struct {
		name, engine string
		args, env    []string
		want         string
	}{
		{"slim with docker", "docker", []string{provider, "v1.2.3"}, nil,
			"build -f build/docker/provider.Dockerfile --target slim --build-arg PROVIDER=" + provider + " --build-arg VERSION=v1.2.3 -t machinist-" + provider + ":v1.2.3 ."},
		{"all-in-one with podman", "podman", []string{"", "v2"}, []string{"IMAGE_REPO=ghcr.io/acme/machinist"},
			"build -f build/docker/all-in-one.Dockerfile --target all-in-one --build-arg VERSION=v2 -t ghcr.io/acme/machinist:v2 ."},
		{"all is all-in-one", "docker", []string{"all"}, nil,
			"build -f build/docker/all-in-one.Dockerfile --target all-in-one --build-arg VERSION=dev -t machinist:dev ."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			calls := fakeEngine(t, dir, tc.engine, true)
			out, code := runImage(t, dir, tc.env, tc.args...)
			if code != 0 {
				t.Fatalf("image.sh failed (%d):\n%s", code, out)
			}
			got := readCalls(t, calls)
			if len(got) != 2 || got[0] != "info" || got[1] != tc.want {
				t.Errorf("engine calls:\n%q\nwant info, then\n%q", got, tc.want)
			}
		})
	}
}

func TestImageRefusesAnUnknownProvider(t *testing.T) {
	dir := t.TempDir()
	calls := fakeEngine(t, dir, "docker", true)
	out, code := runImage(t, dir, nil, "nosuchcloud")
	if code == 0 || !strings.Contains(out, `unknown provider "nosuchcloud"`) {
		t.Fatalf("image.sh nosuchcloud = %d:\n%s", code, out)
	}
	for _, p := range providerDirs(t) {
		if !strings.Contains(out, p) {
			t.Errorf("the error does not list provider %s:\n%s", p, out)
		}
	}
	if got := readCalls(t, calls); len(got) != 0 {
		t.Errorf("the engine was called: %q", got)
	}
}

// TestImageScriptMatchesDockerfiles checks that every Dockerfile, --target and --build-arg the
// script and the Makefile use exists.
func TestImageScriptMatchesDockerfiles(t *testing.T) {
	script, err := os.ReadFile("image.sh")
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat("image.sh"); err != nil || st.Mode()&0o111 == 0 {
		t.Errorf("image.sh must be executable: %v", err)
	}
	pairs := regexp.MustCompile(`dockerfile=(\S+)\n\s*target=(\S+)`).FindAllSubmatch(script, -1)
	if len(pairs) != len(dockerfiles) {
		t.Fatalf("image.sh selects %d Dockerfile/target pairs, want %d", len(pairs), len(dockerfiles))
	}
	for _, p := range pairs {
		file, target := strings.TrimPrefix(string(p[1]), "build/docker/"), string(p[2])
		df := parseDockerfile(t, file)
		if df.stage(target) == nil {
			t.Errorf("image.sh builds --target %s of %s, which has no such stage", target, file)
		}
		final := df.stages[len(df.stages)-1]
		for _, arg := range regexp.MustCompile(`--build-arg "(\w+)=`).FindAllSubmatch(script, -1) {
			name := string(arg[1])
			if name == "PROVIDER" && file != "provider.Dockerfile" {
				continue // only the slim branch passes it
			}
			if _, ok := final.args[name]; !ok {
				t.Errorf("image.sh passes --build-arg %s, which the final stage of %s does not declare", name, file)
			}
		}
	}
	makefile, err := os.ReadFile(filepath.Join(repoRoot, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^image:.*\n\t.*build/docker/image\.sh`).Match(makefile) {
		t.Error("the Makefile has no image target running build/docker/image.sh")
	}
}

// TestBuildContextHoldsWhatTheBinaryNeeds checks that every package (and embedded file) of this
// module that cmd/machinist links is inside a directory the Dockerfiles copy and that the
// .dockerignore keeps.
func TestBuildContextHoldsWhatTheBinaryNeeds(t *testing.T) {
	df := parseDockerfile(t, "all-in-one.Dockerfile")
	ignore := readIgnore(t, "all-in-one.Dockerfile.dockerignore")
	var copied []string
	for _, in := range df.stage("build").body {
		if in.keyword != "COPY" {
			continue
		}
		fields := strings.Fields(in.args)
		for _, src := range fields[:len(fields)-1] {
			copied = append(copied, strings.TrimSuffix(src, "/"))
		}
	}
	cmd := exec.CommandContext(t.Context(), "go", "list", "-deps", "-json=Dir,Module,GoFiles,EmbedFiles", "./cmd/machinist")
	cmd.Dir = repoRoot
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	checked := 0
	for dec.More() {
		var p struct {
			Dir        string
			Module     *struct{ Main bool }
			GoFiles    []string
			EmbedFiles []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		if p.Module == nil || !p.Module.Main {
			continue
		}
		rel, err := filepath.Rel(root, p.Dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range append(p.GoFiles, p.EmbedFiles...) {
			path := filepath.ToSlash(filepath.Join(rel, f))
			inside := slices.ContainsFunc(copied, func(c string) bool { return path == c || strings.HasPrefix(path, c+"/") })
			if !inside || excluded(ignore, path) {
				t.Errorf("cmd/machinist needs %s, which the image's build context leaves out: COPY its directory in the Dockerfiles and allow it in the .dockerignore files", path)
			}
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("go list found no file of this module")
	}
}

// TestEveryProviderHasABuildableSlimVariant builds cmd/machinist with -tags provider_<name>, as
// the slim image does, for each provider directory and checks that the binary has that provider
// and no other. It builds with the environment's cgo setting to share the build cache with `make
// build`; the Dockerfile test checks that the image build disables cgo.
func TestEveryProviderHasABuildableSlimVariant(t *testing.T) {
	if testing.Short() {
		t.Skip("builds one binary per provider")
	}
	bin := t.TempDir()
	for _, p := range providerDirs(t) {
		t.Run(p, func(t *testing.T) {
			exe := filepath.Join(bin, "machinist-"+p)
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
			defer cancel()
			build := exec.CommandContext(ctx, "go", "build", "-tags", "provider_"+p, "-o", exe, "./cmd/machinist")
			build.Dir = repoRoot
			if out, err := build.CombinedOutput(); err != nil {
				t.Fatalf("go build -tags provider_%s ./cmd/machinist: %v\n%s", p, err, out)
			}
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
		})
	}
}
