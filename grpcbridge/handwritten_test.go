package grpcbridge_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoHandWrittenCachesOrBackoffs keeps the bridge on the libraries it already links for LRU
// caches (k8s.io/utils/lru), shared pulls (x/sync/singleflight), backoff (wait.Backoff) and
// protobuf (the generated code): no non-test file under grpcbridge/ builds its own LRU on
// container/list, declares its own backoff type, or writes protobuf by hand with protowire (the
// bridge had such a codec beside the generated one; convert.go says why it went).
func TestNoHandWrittenCachesOrBackoffs(t *testing.T) {
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || strings.Contains(path, "proto/") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			switch imp.Path.Value {
			case `"container/list"`:
				t.Errorf("%s imports container/list: use k8s.io/utils/lru", path)
			case `"google.golang.org/protobuf/encoding/protowire"`:
				t.Errorf("%s imports protowire: convert to the generated messages of grpcbridge/proto instead", path)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.TypeSpec:
				if strings.Contains(strings.ToLower(n.Name.Name), "backoff") {
					t.Errorf("%s declares type %s: use k8s.io/apimachinery's wait.Backoff", path, n.Name.Name)
				}
			case *ast.Field:
				for _, name := range n.Names {
					if strings.Contains(strings.ToLower(name.Name), "backoff") && !isWaitBackoff(n.Type) {
						t.Errorf("%s: field %s is not a wait.Backoff", path, name.Name)
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func isWaitBackoff(e ast.Expr) bool {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	pkg, ok := sel.X.(*ast.Ident)
	return ok && pkg.Name == "wait" && sel.Sel.Name == "Backoff"
}
