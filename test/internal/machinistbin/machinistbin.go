// Package machinistbin builds bin/machinist for the end-to-end tests under test/, which run it
// as a user does: a separate process with its own flags, output and signals. Built with -race
// when the tests are, so the product's races still surface while the flows run.
package machinistbin

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/machinist-io/machinist/harness/localcontrolplane"
)

// Build compiles ./cmd/machinist (every subcommand and provider) into dir and returns the
// binary's path.
func Build(dir string, tags ...string) (string, error) {
	root, err := localcontrolplane.RepoRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "machinist")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	build := exec.Command("go", append(args, "./cmd/machinist")...)
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build machinist: %w\n%s", err, out)
	}
	return bin, nil
}

// Main is the TestMain of an end-to-end package called name: with -short it skips the package;
// otherwise it builds bin/machinist into a temporary directory, points *bin at it, runs the
// tests and removes the directory.
func Main(m *testing.M, name string, bin *string) {
	flag.Parse()
	if testing.Short() {
		fmt.Println(name + ": skipped with -short")
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "machinist-"+name+"-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := func() int {
		defer os.RemoveAll(dir)
		if *bin, err = Build(dir); err != nil {
			fmt.Fprintln(os.Stderr, name+":", err)
			return 1
		}
		return m.Run()
	}()
	os.Exit(code)
}
