package main

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

func TestValidateNameRefusesWithAClearMessage(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "taken"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		want []string
	}{
		{"", []string{"invalid provider name", "lower-case letters"}},
		{"Foo", []string{"invalid provider name", "NAME=foo"}},
		{"my-cloud", []string{"invalid provider name", "NAME=mycloud"}},
		{"1cloud", []string{"starting with a letter"}},
		{"func", []string{"Go keyword"}},
		{"all", []string{"reserved", "providers/all"}},
		{"doc", []string{"reserved"}},
		{"main", []string{"reserved"}},
		{"mem", []string{"reserved", "memdriver"}},
		{"taken", []string{"already exists", "choose another name"}},
	} {
		err := ValidateName(dir, tc.name)
		if err == nil {
			t.Errorf("ValidateName(%q) = nil, want an error", tc.name)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("ValidateName(%q) = %q, want it to say %q", tc.name, err, w)
			}
		}
	}
	if err := ValidateName(dir, "hetzner2"); err != nil {
		t.Errorf("ValidateName(hetzner2) = %v", err)
	}
	if err := ValidateName(filepath.Join(dir, "nope"), "foo"); err == nil || !strings.Contains(err.Error(), "repository root") {
		t.Errorf("a missing providers directory: %v", err)
	}
}

// TestRenderedDriverMirrorsTheContract keeps the stubs' doc comments in step with core/driver:
// each generated method starts with the interface method's documentation.
func TestRenderedDriverMirrorsTheContract(t *testing.T) {
	files, err := Render("acme")
	if err != nil {
		t.Fatal(err)
	}
	contract := interfaceDocs(t, filepath.Join("..", "..", "core", "driver", "driver.go"))
	if len(contract) != 6 {
		t.Fatalf("core/driver.Driver has %d documented methods, want 6", len(contract))
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "driver.go", files["driver.go"], parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	stubs := map[string]string{}
	for _, decl := range f.Decls {
		if fn, ok := decl.(*ast.FuncDecl); ok && fn.Recv != nil {
			stubs[fn.Name.Name] = fn.Doc.Text()
		}
	}
	for method, doc := range contract {
		stub, ok := stubs[method]
		if !ok {
			t.Errorf("the scaffold's driver lacks %s", method)
			continue
		}
		if !strings.HasPrefix(normalize(stub), normalize(doc)) {
			t.Errorf("the doc of the scaffold's %s does not start with core/driver's:\n got: %s\nwant: %s", method, stub, doc)
		}
	}
}

func TestRenderedFilesAreOneValidPackage(t *testing.T) {
	files, err := Render("acme")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	want := "README.md checklist_test.go conformance_test.go driver.go register.go spec.go spec_test.go"
	if strings.Join(names, " ") != want {
		t.Fatalf("rendered %v, want %s", names, want)
	}
	inits := 0
	fset := token.NewFileSet()
	for _, n := range names {
		if !strings.HasSuffix(n, ".go") {
			continue
		}
		f, err := parser.ParseFile(fset, n, files[n], 0)
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		if f.Name.Name != "acme" {
			t.Errorf("%s: package %s, want acme", n, f.Name.Name)
		}
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Name.Name == "init" {
				inits++
				if n != "register.go" {
					t.Errorf("%s has an init(); only register.go may", n)
				}
			}
		}
		if strings.Contains(string(files[n]), "{{") {
			t.Errorf("%s holds unrendered template text", n)
		}
	}
	if inits != 1 {
		t.Errorf("%d init functions, want exactly one (register.go)", inits)
	}
	if !strings.Contains(string(files["README.md"]), "-tags provider_acme") {
		t.Error("README does not show the provider's build tag")
	}
}

func TestGenerateWritesTheDirectoryAtOnce(t *testing.T) {
	dir := t.TempDir()
	res, err := Generate(dir, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Files) != 7 || res.Lines < 300 {
		t.Errorf("generated %d files, %d lines", len(res.Files), res.Lines)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "acme" {
		t.Errorf("providers dir holds %v, want only acme (no temporary directory left)", entries)
	}
	if _, err := Generate(dir, "acme"); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("second Generate = %v, want already exists", err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "acme", "register.go"))
	if err != nil || !strings.Contains(string(b), "kit.Register(") {
		t.Errorf("register.go: %v\n%s", err, b)
	}
	if !strings.Contains(res.Summary(), "go build -tags provider_acme ./cmd/machinist") {
		t.Errorf("summary does not say how to build:\n%s", res.Summary())
	}
}

// TestRenderedProviderIsOnTheKit: a new provider starts on providers/kit, as every provider of
// the repository is, so that it is not a copy of another: the kit's options, secret, client
// cache, spec decoding, metrics and errors.
func TestRenderedProviderIsOnTheKit(t *testing.T) {
	files, err := Render("acme")
	if err != nil {
		t.Fatal(err)
	}
	for file, uses := range map[string][]string{
		"driver.go":   {"kit.Options", "opts.WithDefaults(", "kit.Clients[", "kit.ReadSecret(", "specs.DecodeFor(", "kit.APIMetrics(", "kit.Errors{", "kit.Purpose"},
		"spec.go":     {"kit.Spec[ProviderSpec]", "Scope: validateScope"},
		"register.go": {"kit.Register(ProviderName", "specs.Check"},
	} {
		for _, u := range uses {
			if !strings.Contains(string(files[file]), u) {
				t.Errorf("the scaffold's %s does not use %s", file, u)
			}
		}
	}
}

// interfaceDocs returns the doc comment of each method of the Driver interface in file.
func interfaceDocs(t *testing.T, file string) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok || ts.Name.Name != "Driver" {
			return true
		}
		for _, m := range ts.Type.(*ast.InterfaceType).Methods.List {
			docs[m.Names[0].Name] = m.Doc.Text()
		}
		return false
	})
	return docs
}

func normalize(s string) string { return strings.Join(strings.Fields(s), " ") }

// TestDocStatesWhatIsGenerated keeps docs/writing-a-provider.md's count of generated lines true.
func TestDocStatesWhatIsGenerated(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "writing-a-provider.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`generates \*\*(\d+) lines in (\d+) files\*\*`).FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/writing-a-provider.md no longer states how many lines make new-provider generates")
	}
	files, err := Render("foo")
	if err != nil {
		t.Fatal(err)
	}
	lines := 0
	for _, content := range files {
		lines += bytes.Count(content, []byte("\n"))
	}
	if got := fmt.Sprintf("%d lines in %d files", lines, len(files)); got != fmt.Sprintf("%s lines in %s files", m[1], m[2]) {
		t.Errorf("docs/writing-a-provider.md says make new-provider generates %s lines in %s files; it generates %s: update the page", m[1], m[2], got)
	}
}

// TestDocReferencesExist checks that the links and the repository paths docs/writing-a-provider.md
// names exist, so the page cannot point at code that moved.
func TestDocReferencesExist(t *testing.T) {
	root := filepath.Join("..", "..")
	doc, err := os.ReadFile(filepath.Join(root, "docs", "writing-a-provider.md"))
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, m := range regexp.MustCompile(`\]\(([^)#]+)(#[^)]*)?\)`).FindAllSubmatch(doc, -1) {
		link := string(m[1])
		if strings.Contains(link, "://") {
			continue
		}
		if _, err := os.Stat(filepath.Join(root, "docs", link)); err != nil {
			t.Errorf("docs/writing-a-provider.md links %s, which does not exist", link)
		}
		checked++
	}
	tops := `(?:core|providers|grpcbridge|build|cmd|docs|kubernetes)`
	for _, m := range regexp.MustCompile("`("+tops+`/[A-Za-z0-9_./-]+)`+"`").FindAllSubmatch(doc, -1) {
		path := strings.TrimSuffix(string(m[1]), "/")
		if strings.Contains(path, "foo") { // the scaffolded example provider
			continue
		}
		if _, err := os.Stat(filepath.Join(root, path)); err != nil {
			t.Errorf("docs/writing-a-provider.md names %s, which does not exist", path)
		}
		checked++
	}
	if checked < 10 {
		t.Errorf("only %d references checked: the patterns no longer match the page", checked)
	}
}
