// Command newprovider scaffolds an in-tree provider: providers/<name>/ with register.go, a driver
// whose six methods answer Unimplemented (the contract in their doc comments), a strict
// providerSpec with validation, a README and tests that run the conformance kit. It then
// regenerates providers/all, so `go build -tags provider_<name> ./cmd/machinist` works at once.
//
//	go run ./build/newprovider -name foo      (or: make new-provider NAME=foo)
//
// Run it from the repository root.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

func main() {
	name := flag.String("name", "", "the provider's name: lower-case letters and digits, starting with a letter")
	dir := flag.String("dir", "providers", "the providers directory")
	goCmd := flag.String("go", "go", "the go command used to run build/genproviders")
	flag.Parse()
	if err := run(*name, *dir, *goCmd); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(name, dir, goCmd string) error {
	if name == "" {
		return fmt.Errorf("newprovider: no name given: run make new-provider NAME=<name> (lower-case letters and digits, e.g. NAME=hetzner)")
	}
	res, err := Generate(dir, name)
	if err != nil {
		return err
	}
	// genproviders owns providers/all; run it rather than duplicate what it writes.
	gen := exec.Command(goCmd, "run", "./build/genproviders", "-dir", dir)
	gen.Stdout, gen.Stderr = os.Stdout, os.Stderr
	if err := gen.Run(); err != nil {
		// Leave no half-added provider behind: without its directory providers/all is what it was.
		_ = os.RemoveAll(res.Dir)
		return fmt.Errorf("newprovider: regenerate %s/all with build/genproviders: %w; removed %s again, fix the error and rerun",
			dir, err, res.Dir)
	}
	fmt.Print(res.Summary())
	return nil
}

// Summary is what the command prints once the provider exists: what it made and what to do next.
func (r *Result) Summary() string {
	rel := filepath.ToSlash(r.Dir)
	return fmt.Sprintf(`created %s/ (%d files, %d lines) and regenerated providers/all

next steps:
  1. go test ./%s/                  fails with a checklist of what to implement
  2. implement driver.go against a stateful fake of the cloud (docs/writing-a-provider.md)
  3. go test -race ./%s/            the conformance kit passes
  4. go build -tags provider_%s ./cmd/machinist && ./machinist providers
`, rel, len(r.Files), r.Lines, rel, rel, r.Name)
}
