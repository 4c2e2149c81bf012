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

// TestTestenvOnlyInTests: harness/testenv (and everything under it) wraps testing.TB and holds test
// fixtures, so only tests and test-helper packages (named …test, e.g. ctrltest, machinetest) may
// import it. Product code that needs a control plane uses harness/localcontrolplane, which
// `machinist dev` and `machinist controlplane` run.
func TestTestenvOnlyInTests(t *testing.T) {
	root := repoRoot(t)
	problems, seen := testenvImports(t, root)
	for _, p := range problems {
		t.Error(p)
	}
	if seen == 0 {
		t.Fatal("no test imports harness/testenv: the walk missed the tree")
	}
}

// testenvImports returns the non-test files that import harness/testenv and how many files import
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
			if path != module+"/harness/testenv" && !strings.HasPrefix(path, module+"/harness/testenv/") {
				continue
			}
			seen++
			if strings.HasSuffix(rel, "_test.go") || strings.HasSuffix(f.Name.Name, "test") {
				continue
			}
			problems = append(problems, fmt.Sprintf("%s (package %s) imports %s: only tests may; use harness/localcontrolplane", rel, f.Name.Name, path))
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
	imp := "import _ \"" + module + "/harness/testenv\"\n"
	write("cmd/x/main.go", "package main\n\n"+imp)
	write("cmd/x/main_test.go", "package main\n\n"+imp)
	write("internal/helpertest/h.go", "package helpertest\n\n"+imp)
	write("internal/dev/dev.go", "package dev\n\nimport _ \""+module+"/harness/testenv/mcmcrds\"\n")
	problems, seen := testenvImports(t, dir)
	if seen != 4 || len(problems) != 2 ||
		!strings.Contains(strings.Join(problems, "\n"), "cmd/x/main.go") || !strings.Contains(strings.Join(problems, "\n"), "internal/dev/dev.go") {
		t.Fatalf("seen %d, problems:\n%s\nwant the two product files", seen, strings.Join(problems, "\n"))
	}
}

// floors orders the tree's top directories: a non-test file may import the project's packages of
// its own top directory or of a lower floor, never of a higher one or of a sibling on its floor.
// internal/ holds ground helpers that import nothing of the project but each other.
var floors = map[string]int{
	"internal":   0,
	"core":       1,
	"providers":  2,
	"grpcbridge": 2,
	"harness":    3,
	"cmd":        4,
	"test":       4,
	"build":      4,
	"kubernetes": 4,
	"docs":       4,
}

// floorExceptions are imports that break the floors on purpose, with the reason.
var floorExceptions = map[string]string{
	"grpcbridge/internal/fixture -> providers/local": "the bridge's benchmarks carry a real driver's requests; the fixture is test support only",
}

// TestImportsFollowTheFloors checks every non-test import of the module against floors.
func TestImportsFollowTheFloors(t *testing.T) {
	root := repoRoot(t)
	problems, seen := floorViolations(t, root, floors)
	for _, p := range problems {
		t.Error(p)
	}
	if seen < 200 {
		t.Fatalf("%d project imports checked; expected the whole module", seen)
	}
}

// floorViolations returns the non-test imports under root that break the floors, and how many
// project imports it checked.
func floorViolations(t *testing.T, root string, floors map[string]int) (problems []string, seen int) {
	t.Helper()
	fset := token.NewFileSet()
	for _, rel := range goFiles(t, root) {
		if strings.HasSuffix(rel, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(root, rel), nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		from := filepath.ToSlash(filepath.Dir(rel))
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			to, ok := strings.CutPrefix(path, module+"/")
			if !ok {
				continue
			}
			seen++
			fromTop, toTop := topDir(from), topDir(to)
			if fromTop == toTop {
				continue
			}
			if _, ok := floorExceptions[from+" -> "+to]; ok {
				continue
			}
			fromFloor, known := floors[fromTop]
			if !known {
				problems = append(problems, fmt.Sprintf("%s: top directory %s/ has no floor in test/tree's floors: add it", rel, fromTop))
				continue
			}
			if toFloor := floors[toTop]; toFloor >= fromFloor {
				problems = append(problems, fmt.Sprintf("%s imports %s: %s/ (floor %d) may import only lower floors, and %s/ is floor %d (README.md, \"Layout\")",
					rel, to, fromTop, fromFloor, toTop, toFloor))
			}
		}
	}
	return problems, seen
}

func topDir(rel string) string {
	top, _, _ := strings.Cut(rel, "/")
	return top
}

// TestFloorViolationsFindsUpwardAndSidewaysImports runs the check on a small tree.
func TestFloorViolationsFindsUpwardAndSidewaysImports(t *testing.T) {
	dir := t.TempDir()
	write := func(rel, imp string) {
		t.Helper()
		writeFile(t, filepath.Join(dir, rel), "package x\n\nimport _ \""+module+"/"+imp+"\"\n")
	}
	writeFile(t, filepath.Join(dir, "go.mod"), "module "+module+"\n")
	write("internal/pki/a.go", "internal/waitctx")      // same floor, same top: fine
	write("internal/waitctx/a.go", "core/driver")       // ground imports core: wrong
	write("core/driver/a.go", "harness/testenv")        // core imports harness: wrong
	write("core/driver/a_test.go", "harness/testenv")   // tests may
	write("providers/aws/a.go", "grpcbridge/dialin")    // sideways: wrong
	write("cmd/machinist/a.go", "providers/aws")        // down: fine
	write("harness/ctrltest/a.go", "core/controller/x") // down: fine
	write("newtop/a.go", "core/driver")                 // unknown top: reported
	problems, seen := floorViolations(t, dir, floors)
	joined := strings.Join(problems, "\n")
	if seen != 7 || len(problems) != 4 || !strings.Contains(joined, "internal/waitctx/a.go imports core/driver") ||
		!strings.Contains(joined, "core/driver/a.go imports harness/testenv") ||
		!strings.Contains(joined, "providers/aws/a.go imports grpcbridge/dialin") || !strings.Contains(joined, "newtop/") {
		t.Fatalf("seen %d, problems:\n%s", seen, joined)
	}
}
