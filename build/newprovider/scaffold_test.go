package main

import (
	"bytes"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// copied is what a scaffold-and-build needs from the repository: the module, the command and
// everything it imports, and the generators.
var copied = []string{
	"go.mod", "go.sum", "Makefile", "cmd", "core", "internal", "grpcbridge", "providers", "harness",
	"build/genproviders", "build/newprovider",
}

// TestScaffoldBuildsAndLists runs `make new-provider NAME=foo` in a copy of the repository, then
// builds the slim binary with -tags provider_foo, runs `machinist providers` from it, and runs
// the new provider's tests, which must fail with the checklist. It uses the module cache only
// (GOPROXY=off).
func TestScaffoldBuildsAndLists(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/machinist in a copy of the repository")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	repo := t.TempDir()
	for _, p := range copied {
		if err := copyTree(filepath.Join(root, p), filepath.Join(repo, p)); err != nil {
			t.Fatalf("copy %s: %v", p, err)
		}
	}
	// The builds have no time limit of their own: on a cold cache under load they take many
	// minutes, and go test's -timeout is what stops a hung one.
	run := func(wantOK bool, name string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), name, args...)
		cmd.Dir = repo
		cmd.Env = append(os.Environ(), "GOPROXY=off", "GOTOOLCHAIN=local", "GOWORK=off")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		if (err == nil) != wantOK {
			t.Fatalf("%s %s: err = %v, want ok = %v\n%s", name, strings.Join(args, " "), err, wantOK, out.String())
		}
		return out.String()
	}
	scaffold := func(wantOK bool, name string) string {
		if _, err := exec.LookPath("make"); err == nil {
			return run(wantOK, "make", "--no-print-directory", "new-provider", "NAME="+name)
		}
		t.Log("make is not installed: running the generator directly")
		return run(wantOK, "go", "run", "./build/newprovider", "-name", name)
	}

	out := scaffold(true, "foo")
	if !strings.Contains(out, "created providers/foo/") {
		t.Errorf("new-provider output:\n%s", out)
	}
	generated, err := os.ReadFile(filepath.Join(repo, "providers", "all", "foo.go"))
	if err != nil || !bytes.Contains(generated, []byte("//go:build provider_foo")) {
		t.Fatalf("providers/all/foo.go was not generated: %v\n%s", err, generated)
	}
	if out := scaffold(false, "foo"); !strings.Contains(out, "already exists") {
		t.Errorf("scaffolding foo twice:\n%s", out)
	}
	if out := scaffold(false, "Foo-Cloud"); !strings.Contains(out, "NAME=foocloud") {
		t.Errorf("scaffolding an invalid name:\n%s", out)
	}

	if out := run(true, "gofmt", "-l", "providers/foo", "providers/all"); strings.TrimSpace(out) != "" {
		t.Errorf("gofmt would change:\n%s", out)
	}
	run(true, "go", "vet", "-tags", "provider_foo", "./providers/foo/", "./providers/all/")

	bin := filepath.Join(t.TempDir(), "machinist")
	run(true, "go", "build", "-tags", "provider_foo", "-o", bin, "./cmd/machinist")
	listed := run(true, bin, "providers")
	if !strings.Contains(listed, "foo") {
		t.Errorf("machinist providers does not list foo:\n%s", listed)
	}
	for _, other := range []string{"local", "openstack"} {
		if strings.Contains(listed, other) {
			t.Errorf("the slim foo binary lists %s:\n%s", other, listed)
		}
	}

	// Until the driver is implemented its conformance test fails, listing what is missing; the
	// spec tests pass from the start.
	tested := run(false, "go", "test", "./providers/foo/")
	for _, want := range []string{"TestConformance", "Checklist:", "[ ] CreateMachine", "[ ] DeleteMachine", "CreateIsIdempotent"} {
		if !strings.Contains(tested, want) {
			t.Errorf("go test ./providers/foo/ output lacks %q:\n%s", want, tested)
		}
	}
	run(true, "go", "test", "-run", "TestClassSpec|TestMachineName", "./providers/foo/")
}

// copyTree copies a file or directory, skipping nothing: the sources are small.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		return copyFile(path, target)
	})
}

func copyFile(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
