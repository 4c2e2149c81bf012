package machine

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"sort"
	"strings"
	"testing"
)

// maxMethods bounds the method set of every type of the package, promoted methods of embedded
// fields included: each controller has a reconciler of its own over the shared deps, so no type
// grows back into one object that serves them all.
const maxMethods = 30

func TestNoTypeHasMoreThanMaxMethods(t *testing.T) {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	declared := map[string]int{}    // type → methods declared on it
	embeds := map[string][]string{} // struct type → types it embeds
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, e.Name(), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv != nil {
					declared[typeName(d.Recv.List[0].Type)]++
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					ts, ok := s.(*ast.TypeSpec)
					if !ok {
						continue
					}
					st, ok := ts.Type.(*ast.StructType)
					if !ok {
						continue
					}
					for _, f := range st.Fields.List {
						if len(f.Names) == 0 {
							embeds[ts.Name.Name] = append(embeds[ts.Name.Name], typeName(f.Type))
						}
					}
				}
			}
		}
	}
	var total func(string) int
	total = func(name string) int {
		n := declared[name]
		for _, e := range embeds[name] {
			n += total(e)
		}
		return n
	}
	var names []string
	for name := range declared {
		names = append(names, name)
	}
	sort.Strings(names)
	if len(names) < 5 {
		t.Fatalf("found methods on only %v: the parse is broken", names)
	}
	for _, name := range names {
		n := total(name)
		t.Logf("%s: %d methods", name, n)
		if n > maxMethods {
			t.Errorf("type %s has %d methods (promoted ones included), more than %d: split it by concern", name, n, maxMethods)
		}
	}
}

// typeName is the name of a (pointer to a) named type of the package; "" for others.
func typeName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return typeName(e.X)
	case *ast.Ident:
		return e.Name
	}
	return ""
}
