package tree

import (
	"fmt"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/machinist-io/machinist"

// TestTestenvOnlyInTests: core/testenv (and everything under it) wraps testing.TB and holds test
// fixtures, so only tests and test-helper packages (named …test, e.g. ctrltest, machinetest) may
// import it. Product code that needs a control plane uses internal/localcontrolplane, which
// `machinist dev` and `machinist controlplane` run.
func TestTestenvOnlyInTests(t *testing.T) {
	root := repoRoot(t)
	problems, seen := testenvImports(t, root)
	for _, p := range problems {
		t.Error(p)
	}
	if seen == 0 {
		t.Fatal("no test imports core/testenv: the walk missed the tree")
	}
}

// testenvImports returns the non-test files that import core/testenv and how many files import
// it at all.
func testenvImports(t *testing.T, root string) (problems []string, seen int) {
	t.Helper()
	fset := token.NewFileSet()
	for _, rel := range goFiles(t, root) {
		f, err := parser.ParseFile(fset, filepath.Join(root, rel), nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if path != module+"/core/testenv" && !strings.HasPrefix(path, module+"/core/testenv/") {
				continue
			}
			seen++
			if strings.HasSuffix(rel, "_test.go") || strings.HasSuffix(f.Name.Name, "test") {
				continue
			}
			problems = append(problems, fmt.Sprintf("%s (package %s) imports %s: only tests may; use internal/localcontrolplane", rel, f.Name.Name, path))
		}
	}
	return problems, seen
}

// TestTestenvCheckFindsAProductImport runs the check on a small tree.
func TestTestenvCheckFindsAProductImport(t *testing.T) {
	dir := t.TempDir()
	write := func(rel, src string) {
		t.Helper()
		writeFile(t, filepath.Join(dir, rel), src)
	}
	write("go.mod", "module "+module+"\n")
	imp := "import _ \"" + module + "/core/testenv\"\n"
	write("cmd/x/main.go", "package main\n\n"+imp)
	write("cmd/x/main_test.go", "package main\n\n"+imp)
	write("internal/helpertest/h.go", "package helpertest\n\n"+imp)
	write("internal/dev/dev.go", "package dev\n\nimport _ \""+module+"/core/testenv/mcmcrds\"\n")
	problems, seen := testenvImports(t, dir)
	if seen != 4 || len(problems) != 2 ||
		!strings.Contains(strings.Join(problems, "\n"), "cmd/x/main.go") || !strings.Contains(strings.Join(problems, "\n"), "internal/dev/dev.go") {
		t.Fatalf("seen %d, problems:\n%s\nwant the two product files", seen, strings.Join(problems, "\n"))
	}
}
