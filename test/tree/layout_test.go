package tree

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadmeLayoutNamesEveryPackage: README.md's layout section lists every package of the module
// (as `go list ./...` sees them) with a one-line description, each once; every other line names
// a directory that exists (generated CRDs, samples, the tools' and examples' own modules).
func TestReadmeLayoutNamesEveryPackage(t *testing.T) {
	root := repoRoot(t)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	listed, problems := layoutEntries(string(readme))
	for _, p := range problems {
		t.Error(p)
	}
	cmd := exec.Command("go", "list", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list ./...: %v", err)
	}
	packages := 0
	for _, pkg := range strings.Fields(string(out)) {
		rel := strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/")
		if rel == "" {
			continue
		}
		packages++
		if _, ok := listed[rel+"/"]; !ok {
			t.Errorf("README.md's layout does not list package %s/: add a line with what it is", rel)
		}
		delete(listed, rel+"/")
	}
	if packages < 50 {
		t.Fatalf("go list found %d packages; expected the whole module", packages)
	}
	for dir := range listed {
		if fi, err := os.Stat(filepath.Join(root, dir)); err != nil || !fi.IsDir() {
			t.Errorf("README.md's layout lists %s, which is no directory of the repository", dir)
		}
	}
}

// layoutEntries returns the paths of the first code block after "## Layout" with their
// descriptions, and what is wrong with its lines.
func layoutEntries(readme string) (map[string]string, []string) {
	entries := map[string]string{}
	var problems []string
	section, inBlock, done := false, false, false
	sc := bufio.NewScanner(strings.NewReader(readme))
	for n := 1; sc.Scan() && !done; n++ {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "## "):
			section = line == "## Layout"
		case !section:
		case strings.HasPrefix(line, "```"):
			done = inBlock
			inBlock = !inBlock
		case inBlock:
			path, desc, _ := strings.Cut(line, " ")
			desc = strings.TrimSpace(desc)
			switch {
			case !strings.HasSuffix(path, "/") || desc == "":
				problems = append(problems, fmt.Sprintf("README.md:%d: %q: want a directory path ending in / and what it is", n, line))
			case entries[path] != "":
				problems = append(problems, fmt.Sprintf("README.md:%d: %s is listed twice", n, path))
			default:
				entries[path] = desc
			}
		}
	}
	if len(entries) == 0 {
		problems = append(problems, "README.md has no code block under ## Layout")
	}
	return entries, problems
}

// TestLayoutEntriesReadsOnlyTheLayoutBlock checks the parser on a small README.
func TestLayoutEntriesReadsOnlyTheLayoutBlock(t *testing.T) {
	readme := "# x\n\n```\nnot/ layout\n```\n\n## Layout\n\ntext\n\n```\na/b/   one\nc/ two words\nbad line\na/b/ again\nd/\n```\n\n```\ne/ later block\n```\n"
	got, problems := layoutEntries(readme)
	if len(got) != 2 || got["a/b/"] != "one" || got["c/"] != "two words" {
		t.Errorf("entries %v", got)
	}
	if len(problems) != 3 {
		t.Errorf("problems %q, want the bad line, the repeated a/b/ and d/ without a description", problems)
	}
}
