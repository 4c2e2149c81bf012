package tree

import (
	"bufio"
	"fmt"
	"go/build"
	"go/build/constraint"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// buildFilesHeader starts README.md's table of which files of cmd/machinist each build compiles.
const buildFilesHeader = "| files | `//go:build` |"

// buildFileRow is one row of that table: files, the build line they share, and per build
// (named as in the builds table above it) whether each is compiled in.
type buildFileRow struct {
	line       int
	files      []string
	constraint string // the code span of the //go:build column; "none", or "" for prose
	builds     map[string]string
}

// TestReadmeBuildFilesMatchBuildTags: README.md's table of cmd/machinist's files names every
// non-test file of the package once, the build line each starts with, and for each build of the
// builds table (its tags read from the table's `go build -tags …` command) whether Go compiles
// the file in. A file added, removed or retagged without the table fails here.
func TestReadmeBuildFilesMatchBuildTags(t *testing.T) {
	root := repoRoot(t)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	builds, rows, problems := buildTables(string(readme))
	for _, p := range problems {
		t.Error(p)
	}
	if len(builds) < 4 || len(rows) < 3 {
		t.Fatalf("README.md: found %d builds and %d file rows under ## Builds and images; want the builds table and the files table", len(builds), len(rows))
	}
	dir := filepath.Join(root, "cmd", "machinist")
	for _, p := range checkBuildFiles(dir, builds, rows) {
		t.Error(p)
	}
}

// checkBuildFiles compares the rows with the Go files of dir and what go/build decides for each
// build; it returns what disagrees.
func checkBuildFiles(dir string, builds map[string][]string, rows []buildFileRow) []string {
	var problems []string
	sources, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(sources) == 0 {
		return []string{fmt.Sprintf("no Go files in %s (%v)", dir, err)}
	}
	unlisted := map[string]bool{}
	for _, f := range sources {
		if name := filepath.Base(f); !strings.HasSuffix(name, "_test.go") {
			unlisted[name] = true
		}
	}
	for _, row := range rows {
		for _, name := range row.files {
			if !unlisted[name] {
				problems = append(problems, fmt.Sprintf("README.md:%d: %s: no such non-test file in cmd/machinist, or listed twice", row.line, name))
				continue
			}
			delete(unlisted, name)
			problems = append(problems, checkBuildFile(dir, name, builds, row)...)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(unlisted)) {
		problems = append(problems, fmt.Sprintf("cmd/machinist/%s is missing from README.md's table of which files each build compiles: add it to the row of its //go:build line", name))
	}
	return problems
}

func checkBuildFile(dir, name string, builds map[string][]string, row buildFileRow) []string {
	var problems []string
	line, err := buildLine(filepath.Join(dir, name))
	if err != nil {
		return []string{err.Error()}
	}
	switch {
	case row.constraint == "none" && line != "":
		problems = append(problems, fmt.Sprintf("README.md:%d: %s starts with //go:build %s, the table says none", row.line, name, line))
	case row.constraint != "" && row.constraint != "none":
		if want, err := constraint.Parse("//go:build " + row.constraint); err != nil {
			problems = append(problems, fmt.Sprintf("README.md:%d: %q: %v", row.line, row.constraint, err))
		} else if want.String() != line {
			problems = append(problems, fmt.Sprintf("README.md:%d: %s starts with //go:build %s, the table says %s", row.line, name, orNone(line), want))
		}
	}
	for buildName, cell := range row.builds {
		tags, ok := builds[buildName]
		if !ok {
			problems = append(problems, fmt.Sprintf("README.md:%d: column %q names no build of the builds table", row.line, buildName))
			continue
		}
		want, err := expectedIn(cell, name, tags)
		if err != nil {
			problems = append(problems, fmt.Sprintf("README.md:%d: %s, build %q: %v", row.line, name, buildName, err))
			continue
		}
		ctx := build.Default
		ctx.BuildTags = tags
		got, err := ctx.MatchFile(dir, name)
		if err != nil {
			problems = append(problems, fmt.Sprintf("cmd/machinist/%s: %v", name, err))
		} else if got != want {
			problems = append(problems, fmt.Sprintf("README.md:%d: %s in build %q (-tags %s): the table says %q, go build compiles it: %v", row.line, name, buildName, strings.Join(tags, ","), cell, got))
		}
	}
	return problems
}

// expectedIn reads a cell: yes, no, or "its provider's only" (compiled in when the build's
// provider_<name> tag names the provider in the file's name).
func expectedIn(cell, file string, tags []string) (bool, error) {
	switch cell {
	case "yes":
		return true, nil
	case "no":
		return false, nil
	case "its provider's only":
		for _, tag := range tags {
			if p, ok := strings.CutPrefix(tag, "provider_"); ok {
				return strings.Contains(strings.TrimSuffix(file, ".go"), "_"+p), nil
			}
		}
		return false, fmt.Errorf("%q: the build has no provider_<name> tag", cell)
	}
	return false, fmt.Errorf("cell %q: want yes, no or \"its provider's only\"", cell)
}

// buildLine returns the normalised expression of a file's //go:build line, "" without one.
func buildLine(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "package ") {
			break
		}
		if constraint.IsGoBuild(line) {
			expr, err := constraint.Parse(line)
			if err != nil {
				return "", fmt.Errorf("%s: %w", path, err)
			}
			return expr.String(), nil
		}
	}
	return "", nil
}

// buildTables reads the two tables under "## Builds and images": the builds (name → tags of its
// `go build` command) and the rows of the files table.
func buildTables(readme string) (map[string][]string, []buildFileRow, []string) {
	builds := map[string][]string{}
	var rows []buildFileRow
	var problems []string
	var columns []string // the build columns of the files table, once its header is read
	section, inFiles := false, false
	sc := bufio.NewScanner(strings.NewReader(readme))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "## "):
			section = line == "## Builds and images"
		case !section:
		case strings.HasPrefix(line, buildFilesHeader):
			inFiles = true
			columns = tableCells(line)[2:]
		case !strings.HasPrefix(line, "|"):
			inFiles = false
		case strings.HasPrefix(line, "|---"), strings.HasPrefix(line, "| build |"):
		case inFiles:
			row, err := fileRow(n, tableCells(line), columns)
			if err != nil {
				problems = append(problems, err.Error())
				continue
			}
			rows = append(rows, row)
		default:
			if cells := tableCells(line); len(cells) >= 2 {
				builds[cells[0]] = commandTags(cells[1])
			}
		}
	}
	return builds, rows, problems
}

func fileRow(n int, cells, columns []string) (buildFileRow, error) {
	if len(cells) != len(columns)+2 {
		return buildFileRow{}, fmt.Errorf("README.md:%d: %d cells, want %d", n, len(cells), len(columns)+2)
	}
	row := buildFileRow{line: n, builds: map[string]string{}}
	for _, f := range strings.Split(cells[0], ",") {
		row.files = append(row.files, strings.Trim(strings.TrimSpace(f), "`"))
	}
	switch c := cells[1]; {
	case c == "none":
		row.constraint = c
	case strings.HasPrefix(c, "`") && strings.HasSuffix(c, "`") && !strings.Contains(c[1:len(c)-1], "`"):
		row.constraint = c[1 : len(c)-1]
	}
	for i, col := range columns {
		row.builds[col] = cells[i+2]
	}
	return row, nil
}

// tableCells splits a Markdown table line into its trimmed cells; `\|` is a | inside a cell.
func tableCells(line string) []string {
	line = strings.ReplaceAll(strings.Trim(strings.TrimSpace(line), "|"), `\|`, "\x00")
	cells := strings.Split(line, "|")
	for i, c := range cells {
		cells[i] = strings.ReplaceAll(strings.TrimSpace(c), "\x00", "|")
	}
	return cells
}

// commandTags returns the tags of "`go build -tags a,b ./cmd/machinist`", none for "`go build ./cmd/machinist`".
func commandTags(cell string) []string {
	fields := strings.Fields(strings.Trim(cell, "`"))
	if i := slices.Index(fields, "-tags"); i >= 0 && i+1 < len(fields) {
		return strings.Split(fields[i+1], ",")
	}
	return []string{}
}

func orNone(line string) string {
	if line == "" {
		return "none"
	}
	return line
}

// TestBuildFilesCheckFails shows the check failing on a small README and package: a file the
// table does not list, a retagged file, a file listed that does not exist, and wrong cells.
func TestBuildFilesCheckFails(t *testing.T) {
	readme := "## Builds and images\n\n| build | command | has |\n|---|---|---|\n" +
		"| all | `go build ./cmd/x` | all |\n| one | `go build -tags provider_b ./cmd/x` | b |\n| slim | `go build -tags slim,provider_b ./cmd/x` | less |\n\n" +
		"| files | `//go:build` | all | one | slim |\n|---|---|---|---|---|\n" +
		"| `main.go` | none | yes | yes | yes |\n" +
		"| `run.go`, `gone.go` | `!slim \\|\\| machinecontroller` | yes | yes | no |\n" +
		"| `fake_a.go`, `fake_b.go` | `!slim` and the file's provider | yes | its provider's only | no |\n" +
		"| `dev.go` | `!slim` | yes | yes | yes |\n\n## Next\n\n| `other.go` | none | yes | yes | yes |\n"
	builds, rows, problems := buildTables(readme)
	if len(problems) != 0 || len(rows) != 4 || len(builds) != 3 || !slices.Equal(builds["slim"], []string{"slim", "provider_b"}) || len(builds["all"]) != 0 {
		t.Fatalf("builds %v, rows %+v, problems %q", builds, rows, problems)
	}
	if rows[1].constraint != "!slim || machinecontroller" || rows[2].constraint != "" || !slices.Equal(rows[1].files, []string{"run.go", "gone.go"}) || rows[3].builds["slim"] != "yes" {
		t.Fatalf("row %+v", rows[1])
	}
	dir := t.TempDir()
	for name, src := range map[string]string{
		"main.go":      "package main\n",
		"run.go":       "//go:build !slim\n\npackage main\n", // retagged: the table says !slim || machinecontroller
		"fake_a.go":    "//go:build !slim && (provider_a || (!provider_a && !provider_b))\n\npackage main\n",
		"fake_b.go":    "//go:build !slim && (provider_a || (!provider_a && !provider_b))\n\npackage main\n", // a's line
		"dev.go":       "//go:build !slim\n\npackage main\n",
		"added.go":     "package main\n",
		"main_test.go": "package main\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got := strings.Join(checkBuildFiles(dir, builds, rows), "\n")
	for _, want := range []string{
		"run.go starts with //go:build !slim, the table says !slim || machinecontroller",
		"gone.go: no such non-test file",
		`fake_b.go in build "one" (-tags provider_b): the table says "its provider's only", go build compiles it: false`,
		`dev.go in build "slim" (-tags slim,provider_b): the table says "yes", go build compiles it: false`,
		"cmd/machinist/added.go is missing from README.md's table",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("problems do not say %q:\n%s", want, got)
		}
	}
	if n := strings.Count(got, "\n") + 1; n != 5 {
		t.Errorf("%d problems, want the 5 above:\n%s", n, got)
	}
}
