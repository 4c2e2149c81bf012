package tree

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// maxMethods bounds the method set of every type of the module, promoted methods of embedded
// types of the same package included: a type that serves many jobs is split into one type per
// job over shared deps (as the Machine controller's reconcilers are), so no type grows back
// into one object that does everything.
const maxMethods = 30

// methodSetExceptions are types allowed above maxMethods, "dir.Type" → the reason. An entry
// whose type is back within the limit fails the test: remove it.
var methodSetExceptions = map[string]string{}

// TestNoTypeHasMoreThanMaxMethods checks every package of the module (generated code and tests
// aside).
func TestNoTypeHasMoreThanMaxMethods(t *testing.T) {
	root := repoRoot(t)
	sizes := methodSets(t, root)
	if len(sizes) < 200 {
		t.Fatalf("found methods on only %d types: the walk missed the tree", len(sizes))
	}
	for _, p := range methodSetProblems(sizes, methodSetExceptions) {
		t.Error(p)
	}
}

// methodSetProblems lists the types above maxMethods that are no exception, and the exceptions
// no longer needed.
func methodSetProblems(sizes map[string]int, exceptions map[string]string) []string {
	var problems []string
	for _, name := range sortedKeys(sizes) {
		n := sizes[name]
		_, excepted := exceptions[name]
		switch {
		case n > maxMethods && !excepted:
			problems = append(problems, fmt.Sprintf("type %s has %d methods (promoted ones included), more than %d: split it by concern into types over shared deps", name, n, maxMethods))
		case n <= maxMethods && excepted:
			problems = append(problems, fmt.Sprintf("type %s has %d methods, within %d: remove its entry from methodSetExceptions", name, n, maxMethods))
		}
	}
	for _, name := range sortedKeys(exceptions) {
		if _, ok := sizes[name]; !ok {
			problems = append(problems, fmt.Sprintf("methodSetExceptions names %s, which has no methods or does not exist: remove the entry", name))
		}
	}
	return problems
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// pkgTypes is what one package declares: each type's methods by name (a method declared in
// files of different build tags counts once) and what each struct or interface embeds.
type pkgTypes struct {
	methods map[string]map[string]bool
	embeds  map[string][]string
}

// methodSets returns the size of the method set of every type with methods, as "dir.Type",
// for the non-test, non-generated files under root.
func methodSets(t *testing.T, root string) map[string]int {
	t.Helper()
	fset := token.NewFileSet()
	pkgs := map[string]*pkgTypes{}
	for _, rel := range goFiles(t, root) {
		if strings.HasSuffix(rel, "_test.go") {
			continue
		}
		src, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		if generated(src) {
			continue
		}
		f, err := parser.ParseFile(fset, rel, src, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.ToSlash(filepath.Dir(rel))
		p := pkgs[dir]
		if p == nil {
			p = &pkgTypes{methods: map[string]map[string]bool{}, embeds: map[string][]string{}}
			pkgs[dir] = p
		}
		p.add(f)
	}
	sizes := map[string]int{}
	for dir, p := range pkgs {
		for name := range p.methods {
			sizes[dir+"."+name] = len(p.methodSet(name, map[string]bool{}))
		}
	}
	return sizes
}

// generated reports whether a file carries the standard "Code generated … DO NOT EDIT." line.
func generated(src []byte) bool {
	for line := range bytes.SplitSeq(src, []byte("\n")) {
		if bytes.HasPrefix(line, []byte("// Code generated ")) && bytes.HasSuffix(bytes.TrimSpace(line), []byte("DO NOT EDIT.")) {
			return true
		}
		if bytes.HasPrefix(line, []byte("package ")) {
			return false
		}
	}
	return false
}

func (p *pkgTypes) add(f *ast.File) {
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv != nil {
				p.method(receiverName(d.Recv.List[0].Type), d.Name.Name)
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				if ts, ok := s.(*ast.TypeSpec); ok {
					p.addType(ts)
				}
			}
		}
	}
}

func (p *pkgTypes) method(typ, name string) {
	if typ == "" {
		return
	}
	if p.methods[typ] == nil {
		p.methods[typ] = map[string]bool{}
	}
	p.methods[typ][name] = true
}

// addType records what a struct embeds, and an interface's methods and embedded interfaces.
func (p *pkgTypes) addType(ts *ast.TypeSpec) {
	var fields *ast.FieldList
	switch tt := ts.Type.(type) {
	case *ast.StructType:
		fields = tt.Fields
	case *ast.InterfaceType:
		fields = tt.Methods
	default:
		return
	}
	for _, f := range fields.List {
		switch {
		case len(f.Names) == 0:
			if e := receiverName(f.Type); e != "" {
				p.embeds[ts.Name.Name] = append(p.embeds[ts.Name.Name], e)
			}
		case isFunc(f.Type):
			for _, n := range f.Names {
				p.method(ts.Name.Name, n.Name)
			}
		}
	}
}

func isFunc(e ast.Expr) bool {
	_, ok := e.(*ast.FuncType)
	return ok
}

// methodSet is a type's methods with those its embedded types of the package promote.
func (p *pkgTypes) methodSet(name string, visiting map[string]bool) map[string]bool {
	out := map[string]bool{}
	if visiting[name] {
		return out
	}
	visiting[name] = true
	for m := range p.methods[name] {
		out[m] = true
	}
	for _, e := range p.embeds[name] {
		for m := range p.methodSet(e, visiting) {
			out[m] = true
		}
	}
	return out
}

// receiverName is the name of a (pointer to a, generic instance of a) type of the package; ""
// for a type of another package.
func receiverName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return receiverName(e.X)
	case *ast.Ident:
		return e.Name
	case *ast.IndexExpr:
		return receiverName(e.X)
	case *ast.IndexListExpr:
		return receiverName(e.X)
	}
	return ""
}

// TestMethodSetCheckOnASmallTree runs the check on a tree made for it.
func TestMethodSetCheckOnASmallTree(t *testing.T) {
	dir := t.TempDir()
	methods := func(typ string, n int, prefix string) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, "func (%s) %s%d() {}\n", typ, prefix, i)
		}
		return b.String()
	}
	write := func(rel, src string) { t.Helper(); writeFile(t, filepath.Join(dir, rel), src) }
	write("go.mod", "module "+module+"\n")
	// 31 of its own: too many.
	write("a/big.go", "package a\n\ntype Big struct{}\n\n"+methods("*Big", 31, "M"))
	// 30: the limit. Its build-tagged twin files declare the same methods: counted once.
	write("a/limit_unix.go", "//go:build unix\n\npackage a\n\ntype Limit struct{}\n\n"+methods("Limit", 30, "M"))
	write("a/limit_other.go", "//go:build !unix\n\npackage a\n\ntype Limit struct{}\n\n"+methods("Limit", 30, "M"))
	// 20 of its own and 11 promoted from an embedded deps of the package: too many.
	write("b/rooms.go", "package b\n\ntype deps struct{}\n\ntype room struct {\n\t*deps\n\tn int\n}\n\n"+methods("*deps", 11, "D")+methods("room", 20, "R"))
	// An interface of 31 methods: too many.
	iface := "package b\n\ntype Wide interface {\n"
	for i := range 31 {
		iface += fmt.Sprintf("\tW%d()\n", i)
	}
	write("b/wide.go", iface+"}\n")
	// Generated code and tests are not checked; an exception is allowed.
	write("c/zz_generated.go", "// Code generated by hand for a test. DO NOT EDIT.\n\npackage c\n\ntype Gen struct{}\n\n"+methods("Gen", 40, "G"))
	write("c/big_test.go", "package c\n\ntype TestOnly struct{}\n\n"+methods("TestOnly", 40, "T"))
	write("c/fake.go", "package c\n\ntype Fake struct{}\n\n"+methods("*Fake", 35, "F"))
	// An exception for a type within the limit, and one for a type that is not there.
	exceptions := map[string]string{"c.Fake": "test", "a.Limit": "stale", "c.Gone": "stale"}

	sizes := methodSets(t, dir)
	got := strings.Join(methodSetProblems(sizes, exceptions), "\n")
	for _, want := range []string{
		"type a.Big has 31 methods",
		"type b.room has 31 methods (promoted ones included)",
		"type b.Wide has 31 methods",
		"type a.Limit has 30 methods, within 30: remove its entry",
		"methodSetExceptions names c.Gone",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("problems do not say %q:\n%s", want, got)
		}
	}
	for _, never := range []string{"c.Gen", "c.TestOnly", "c.Fake has", "b.deps"} {
		if strings.Contains(got, never) {
			t.Errorf("problems name %s:\n%s", never, got)
		}
	}
	if n := strings.Count(got, "\n") + 1; n != 5 {
		t.Errorf("%d problems, want 5:\n%s", n, got)
	}
}
