// Package compatibility has no code: docs/compatibility holds the upstream facts machinist
// follows, and this test keeps the repository's citations of them true (README.md, "Keeping
// citations true").
package compatibility

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"unicode"
)

// The forbidden citations are assembled at run time so that this file does not cite them itself.
var (
	// outsidePatterns are texts that cite files outside the repository: the notes the project
	// started from lived in a shared directory next to it.
	outsidePatterns = []string{
		".." + "/shared",
		"shared" + "/reference",
		"reference" + " \u00a7",
		"reference" + "/mcm-contract",
		"reference" + "/ca-externalgrpc",
		"reference" + "/seed-wire-protocol",
	}
	// designDoc matches a cited design document, which must exist in the repository.
	designDoc = regexp.MustCompile(`[A-Za-z0-9_./-]*` + "design" + `\.md`)
	// pageCitation matches a citation of a compatibility page by its repository path, as code
	// comments write it.
	pageCitation = regexp.MustCompile(`docs/compatibility/([A-Za-z0-9_.-]+\.md)(#[A-Za-z0-9_-]*)?`)
	// mdLink matches the target of an inline Markdown link.
	mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	// htmlAnchor matches an explicit anchor in Markdown.
	htmlAnchor = regexp.MustCompile(`<a (?:id|name)="([^"]+)"`)
)

const compatDir = "docs/compatibility"

// TestCitationsResolve walks every *.go and *.md file of the repository: none cites a file
// outside it, and every citation of a docs/compatibility page (a path in a comment or a
// Markdown link) names a page and heading that exist. Links from the compatibility pages to
// other files of the repository are checked the same way.
func TestCitationsResolve(t *testing.T) {
	root := "../.."
	if _, err := os.Stat(path.Join(root, "go.mod")); err != nil {
		t.Fatalf("repository root not found at %s: %v", root, err)
	}
	fsys := os.DirFS(root)
	problems, err := check(fsys)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
	// The walk must have seen the pages and the citations it exists for; an empty walk would
	// pass vacuously.
	pages, err := fs.Glob(fsys, compatDir+"/*.md")
	if err != nil || len(pages) < 5 {
		t.Fatalf("expected the compatibility pages under %s, found %v (%v)", compatDir, pages, err)
	}
	n, err := countCitations(fsys)
	if err != nil {
		t.Fatal(err)
	}
	if n < 20 {
		t.Fatalf("found only %d citations of %s in the repository; the walk missed files", n, compatDir)
	}
}

// TestCheckFindsBadCitations runs the checker on a small tree with one of each mistake (the
// cited names are assembled so that this file does not cite them itself).
func TestCheckFindsBadCitations(t *testing.T) {
	cp := compatDir + "/"
	design := "design" + ".md"
	page := "# Page\n\n## Health check\n\n```\n## not a heading\n```\n\n## Health check\n\n" +
		"<a id=\"custom\"></a>\n[up](../x.md#top) [down](../x.md#bottom) [gone](../nope.md)\n"
	fsys := fstest.MapFS{
		"go.mod":    {Data: []byte("module example\n")},
		"docs/x.md": {Data: []byte("# Top\n\n[ok](compatibility/a.md#health-check) [bad](compatibility/a.md#nope) [dup](compatibility/a.md#health-check-1)\n")},
		cp + "a.md": {Data: []byte(page)},
		"code.go": {Data: []byte("// see " + cp + "a.md#health-check and " + cp + "a.md#custom\n// " +
			cp + "a.md#not-a-heading\n// " + cp + "missing.md\n")},
		"old.go":                 {Data: []byte("// as " + outsidePatterns[2] + "4.1 says, and " + outsidePatterns[0] + "/x\n")},
		"design_ref.md":          {Data: []byte("in the order of " + design + "\n")},
		"docs/" + design:         {Data: []byte("# Design\n")},
		"docs/cites_existing.md": {Data: []byte("see " + design + "\n")},
		"bin/ignored.md":         {Data: []byte(outsidePatterns[0] + "\n")},
		cp + "b.txt":             {Data: []byte(outsidePatterns[0] + "\n")},
	}
	got, err := check(fsys)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"code.go:2: " + cp + "a.md#not-a-heading: no heading \"not-a-heading\" in " + cp + "a.md",
		"code.go:3: " + cp + "missing.md: no such page",
		"design_ref.md:1: cites " + design + ", which is not in the repository",
		cp + "a.md:12: ../nope.md: no such file docs/nope.md",
		cp + "a.md:12: ../x.md#bottom: no heading \"bottom\" in docs/x.md",
		"docs/x.md:3: compatibility/a.md#nope: no heading \"nope\" in " + cp + "a.md",
		"old.go:1: cites \"" + outsidePatterns[0] + "\", outside the repository",
		"old.go:1: cites \"" + outsidePatterns[2] + "\", outside the repository",
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestSlug(t *testing.T) {
	for heading, want := range map[string]string{
		"Health":            "health",
		"API-server freeze": "api-server-freeze",
		"The 2018 design's wire protocol (`infra.Infragrpc`)":        "the-2018-designs-wire-protocol-infrainfragrpc",
		"Cluster Autoscaler's deletion requests":                     "cluster-autoscalers-deletion-requests",
		"Provider specs: Gardener's decoding, warnings, strict mode": "provider-specs-gardeners-decoding-warnings-strict-mode",
		"MCM's metrics":               "mcms-metrics",
		"A [link](x.md) in a heading": "a-link-in-a-heading",
		"snake_case and  two spaces":  "snake_case-and--two-spaces",
	} {
		if got := slug(heading); got != want {
			t.Errorf("slug(%q) = %q, want %q", heading, got, want)
		}
	}
}

// check returns the problems of the *.go and *.md files of fsys, each as "file:line: what".
func check(fsys fs.FS) ([]string, error) {
	var problems []string
	anchors := map[string]map[string]bool{} // Markdown file → its anchors, read on demand
	anchorsOf := func(file string) (map[string]bool, error) {
		if a, ok := anchors[file]; ok {
			return a, nil
		}
		data, err := fs.ReadFile(fsys, file)
		if err != nil {
			return nil, err
		}
		a := headingAnchors(string(data))
		anchors[file] = a
		return a, nil
	}
	// resolve checks a cited file and anchor; target is a path from the repository root.
	resolve := func(target, anchor string) string {
		info, err := fs.Stat(fsys, target)
		if err != nil {
			return "no such file " + target
		}
		if anchor == "" || info.IsDir() || !strings.HasSuffix(target, ".md") {
			return ""
		}
		a, err := anchorsOf(target)
		if err != nil {
			return err.Error()
		}
		if !a[anchor] {
			return fmt.Sprintf("no heading %q in %s", anchor, target)
		}
		return ""
	}
	err := walkSources(fsys, func(file string, lines []string) {
		for i, line := range lines {
			at := fmt.Sprintf("%s:%d: ", file, i+1)
			for _, p := range outsidePatterns {
				if strings.Contains(line, p) {
					problems = append(problems, fmt.Sprintf("%scites %q, outside the repository", at, p))
				}
			}
			for _, m := range designDoc.FindAllString(line, -1) {
				if !existsFrom(fsys, path.Dir(file), m) {
					problems = append(problems, fmt.Sprintf("%scites %s, which is not in the repository", at, m))
				}
			}
			for _, m := range pageCitation.FindAllStringSubmatch(line, -1) {
				page := path.Join(compatDir, m[1])
				if _, err := fs.Stat(fsys, page); err != nil {
					problems = append(problems, fmt.Sprintf("%s%s: no such page", at, m[0]))
					continue
				}
				if p := resolve(page, strings.TrimPrefix(m[2], "#")); p != "" {
					problems = append(problems, fmt.Sprintf("%s%s: %s", at, m[0], p))
				}
			}
			if !strings.HasSuffix(file, ".md") {
				continue
			}
			for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
				link := m[1]
				if strings.Contains(link, "://") || strings.HasPrefix(link, "mailto:") {
					continue
				}
				target, anchor, _ := strings.Cut(link, "#")
				if target == "" {
					target = file
				} else {
					target = path.Join(path.Dir(file), target)
				}
				// Links into the compatibility pages, and every link out of them.
				if !inCompat(target) && !inCompat(file) {
					continue
				}
				if p := resolve(target, anchor); p != "" {
					problems = append(problems, fmt.Sprintf("%s%s: %s", at, link, p))
				}
			}
		}
	})
	return problems, err
}

// countCitations counts the citations of compatibility pages by path in *.go and *.md files.
func countCitations(fsys fs.FS) (int, error) {
	n := 0
	err := walkSources(fsys, func(_ string, lines []string) {
		for _, line := range lines {
			n += len(pageCitation.FindAllString(line, -1))
		}
	})
	return n, err
}

// walkSources calls fn with the lines of every *.go and *.md file of fsys, skipping hidden
// directories and bin/ (built tools).
func walkSources(fsys fs.FS, fn func(file string, lines []string)) error {
	return fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != "." && (strings.HasPrefix(d.Name(), ".") || p == "bin") {
				return fs.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, ".md") {
			return nil
		}
		data, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		fn(p, strings.Split(string(data), "\n"))
		return nil
	})
}

func inCompat(p string) bool { return strings.HasPrefix(p, compatDir+"/") }

// existsFrom reports whether name exists relative to dir or to the repository root.
func existsFrom(fsys fs.FS, dir, name string) bool {
	for _, p := range []string{path.Join(dir, name), path.Clean(name)} {
		if _, err := fs.Stat(fsys, strings.TrimPrefix(p, "/")); err == nil {
			return true
		}
	}
	return false
}

// headingAnchors returns the anchors GitHub gives the headings of a Markdown text (fenced code
// blocks skipped, repeated headings numbered -1, -2, …) plus explicit <a id> anchors.
func headingAnchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	fence := ""
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			out[m[1]] = true
		}
		level := len(line) - len(strings.TrimLeft(line, "#"))
		if level == 0 || level > 6 || !strings.HasPrefix(line[level:], " ") {
			continue
		}
		s := slug(strings.TrimRight(strings.TrimSpace(line[level:]), "#"))
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// markdownLinkText replaces [text](target) by text.
var markdownLinkText = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)

// slug is GitHub's anchor for a heading: link targets dropped, lower case, everything but
// letters, digits, spaces, hyphens and underscores removed, each space a hyphen.
func slug(heading string) string {
	heading = markdownLinkText.ReplaceAllString(strings.TrimSpace(heading), "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}
