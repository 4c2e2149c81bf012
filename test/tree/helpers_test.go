package tree

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// homes says where each kind of helper lives; a copy elsewhere is reported with its home.
const (
	homeLRU      = "k8s.io/utils/lru (providers/kit.Clients for clients keyed by credentials)"
	homeBackoff  = "k8s.io/apimachinery's wait.Backoff"
	homeSleep    = "internal/waitctx.Sleep"
	homePoll     = "wait.PollUntilContextTimeout / PollUntilContextCancel (k8s.io/apimachinery)"
	homeContains = "slices.Contains"
	homePtr      = "k8s.io/utils/ptr (ptr.To, ptr.Deref)"
	homeCert     = "internal/pki"
	homeProto    = "the generated messages of grpcbridge/proto (protoc-gen-go)"
)

// allowed are the reviewed exceptions, keyed by file and what the check names, each with why the
// library does not fit. Keep it short: a new entry needs as good a reason.
var allowed = map[string]string{
	"core/controller/machine/retry.go: declares type backoff": "per-machine failure counts with a base and ceiling per error code (MCM's " +
		"ShortRetry/MediumRetry/LongRetry, docs/compatibility/mcm-controllers.md#retry-periods); wait.Backoff has one base and cap and no per-key state",
	"core/controller/machine/deps.go: field backoff is not a wait.Backoff": "the controllers' instance of the type above",
	"providers/aws/clients.go: func optional":                              "nil for an empty string (the SDK's unset endpoint); ptr.To has no such case",
}

// The one home of the sleep and of certificate issuance may do what everyone else may not.
var (
	sleepHome = filepath.Join("internal", "waitctx")
	certHome  = filepath.Join("internal", "pki")
)

// TestNoHandRolledHelpers keeps helpers that libraries already linked provide (or that have one
// home in the tree) from being copied again: no LRU on container/list, no backoff type of its
// own, no context-aware sleep, poll loop, contains or pointer helper of its own, no second
// certificate issuer, and no protobuf written by hand beside the generated code (the bridge had
// such a codec; grpcbridge/convert.go says why it went). It reads every Go file of the module (tests included; generated protobuf
// code, the pinned tools and the example modules, which have go.mod files of their own, are not
// this module's code).
func TestNoHandRolledHelpers(t *testing.T) {
	problems, files, seen := checkTreeAllowing(t, repoRoot(t))
	for _, p := range problems {
		t.Error(p)
	}
	for key := range allowed {
		if !seen[key] {
			t.Errorf("allowed exception %q matches nothing any more: remove it", key)
		}
	}
	if files < 300 {
		t.Fatalf("read only %d Go files; the walk missed the tree", files)
	}
}

// TestCheckFindsEveryKindOfCopy runs the checks on one file with one copy of each kind, so each
// check is seen to fire.
func TestCheckFindsEveryKindOfCopy(t *testing.T) {
	src := `package x

import (
	"container/list"
	"context"
	"crypto/x509"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

type retryBackoff struct{ d time.Duration }

type opts struct{ Backoff time.Duration }

func sleepCtx(ctx context.Context, d time.Duration) error { return nil }

func pause(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

func waitReady(ctx context.Context, ready func() bool) {
	for !ready() {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

func waitDone(done func() bool) {
	for !done() {
		time.Sleep(time.Second)
	}
}

func has(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func ptr[T any](v T) *T { return &v }

func yes() *bool { t := true; return &t }

func orDefault[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

func issue() { x509.CreateCertificate(nil, nil, nil, nil, nil) }

var _ = list.New

var _ = protowire.AppendVarint
`
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "x.go"), []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	problems, _ := checkTree(t, dir)
	for _, want := range []string{
		"imports container/list", "declares type retryBackoff", "field Backoff is not a wait.Backoff",
		"func sleepCtx", "func pause", "func waitReady: a poll loop", "func waitDone: a poll loop",
		"func has", "func ptr", "func yes", "func orDefault", "x509.CreateCertificate", "imports protowire",
	} {
		if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, want) }) {
			t.Errorf("no problem reported for %q; got:\n%s", want, strings.Join(problems, "\n"))
		}
	}
	if len(problems) != 13 {
		t.Errorf("%d problems, want 13:\n%s", len(problems), strings.Join(problems, "\n"))
	}
}

// repoRoot is the module root, two directories up.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no go.mod at %s: %v", root, err)
	}
	return root
}

// goFiles walks the module's own Go files under root (relative paths), skipping other modules,
// generated protobuf code and directories that hold no source.
func goFiles(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			switch {
			case rel == ".":
				return nil
			case strings.HasPrefix(d.Name(), ".") || d.Name() == "bin" || d.Name() == "testdata" ||
				rel == filepath.Join("grpcbridge", "proto"):
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // another module (build/tools, docs/examples/…)
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") {
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func checkTree(t *testing.T, root string) (problems []string, files int) {
	problems, files, _ = checkTreeAllowing(t, root)
	return problems, files
}

// checkTreeAllowing also returns which allowed exceptions were seen.
func checkTreeAllowing(t *testing.T, root string) (problems []string, files int, seen map[string]bool) {
	t.Helper()
	seen = map[string]bool{}
	fset := token.NewFileSet()
	paths := goFiles(t, root)
	for _, rel := range paths {
		f, err := parser.ParseFile(fset, filepath.Join(root, rel), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		report := func(n ast.Node, format string, args ...any) {
			what := fmt.Sprintf(format, args...)
			key := filepath.ToSlash(rel) + ": " + strings.SplitN(what, ":", 2)[0]
			if _, ok := allowed[key]; ok {
				seen[key] = true
				return
			}
			problems = append(problems, fmt.Sprintf("%s:%d: %s", rel, fset.Position(n.Pos()).Line, what))
		}
		checkFile(f, filepath.Dir(rel), strings.HasSuffix(rel, "_test.go"), report)
	}
	return problems, len(paths), seen
}

func checkFile(f *ast.File, dir string, isTest bool, report func(ast.Node, string, ...any)) {
	for _, imp := range f.Imports {
		switch imp.Path.Value {
		case `"container/list"`:
			report(imp, "imports container/list: use %s", homeLRU)
		case `"google.golang.org/protobuf/encoding/protowire"`:
			if !isTest {
				report(imp, "imports protowire, a hand-written protobuf codec: use %s", homeProto)
			}
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.TypeSpec:
			if strings.Contains(strings.ToLower(n.Name.Name), "backoff") {
				report(n, "declares type %s: use %s", n.Name.Name, homeBackoff)
			}
		case *ast.StructType:
			for _, field := range n.Fields.List {
				for _, name := range field.Names {
					if strings.Contains(strings.ToLower(name.Name), "backoff") && !isSelector(field.Type, "wait", "Backoff") {
						report(name, "field %s is not a wait.Backoff: use %s", name.Name, homeBackoff)
					}
				}
			}
		case *ast.SelectorExpr:
			if isSelector(n, "x509", "CreateCertificate") && dir != certHome {
				report(n, "x509.CreateCertificate: issue certificates with %s", homeCert)
			}
		case *ast.FuncDecl:
			checkFunc(n, dir, isTest, report)
		}
		return true
	})
}

func checkFunc(fn *ast.FuncDecl, dir string, isTest bool, report func(ast.Node, string, ...any)) {
	if fn.Body == nil {
		return
	}
	name := fn.Name.Name
	switch {
	case dir == sleepHome:
	case strings.Contains(strings.ToLower(name), "sleep") && !calls(fn.Body, "waitctx", "Sleep"):
		report(fn, "func %s sleeps on its own: use %s", name, homeSleep)
	case takesContextAndDuration(fn) && hasSelect(fn.Body):
		report(fn, "func %s waits a duration or for the context on its own: use %s", name, homeSleep)
	}
	if !isTest && hasPollLoop(fn.Body) {
		report(fn, "func %s: a poll loop that sleeps between looks: use %s", name, homePoll)
	}
	if isContains(fn) {
		report(fn, "func %s: use %s", name, homeContains)
	}
	if isPtrHelper(fn) {
		report(fn, "func %s: use %s", name, homePtr)
	}
}

// isSelector reports whether e is pkg.name.
func isSelector(e ast.Expr, pkg, name string) bool {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == pkg && sel.Sel.Name == name
}

func calls(body ast.Node, pkg, name string) bool {
	found := false
	ast.Inspect(body, func(n ast.Node) bool {
		if c, ok := n.(*ast.CallExpr); ok && isSelector(c.Fun, pkg, name) {
			found = true
		}
		return !found
	})
	return found
}

func hasSelect(body ast.Node) bool {
	found := false
	ast.Inspect(body, func(n ast.Node) bool {
		if _, ok := n.(*ast.SelectStmt); ok {
			found = true
		}
		return !found
	})
	return found
}

// takesContextAndDuration: func(context.Context, time.Duration) — the shape of a sleep.
func takesContextAndDuration(fn *ast.FuncDecl) bool {
	var types []ast.Expr
	for _, p := range fn.Type.Params.List {
		for range max(1, len(p.Names)) {
			types = append(types, p.Type)
		}
	}
	return len(types) == 2 && isSelector(types[0], "context", "Context") && isSelector(types[1], "time", "Duration")
}

// hasPollLoop finds a for loop that pauses on the clock between iterations: time.Sleep, or a
// select with a time.After case.
func hasPollLoop(body ast.Node) bool {
	found := false
	ast.Inspect(body, func(n ast.Node) bool {
		loop, ok := n.(*ast.ForStmt)
		if !ok {
			return !found
		}
		ast.Inspect(loop.Body, func(m ast.Node) bool {
			switch m := m.(type) {
			case *ast.FuncLit:
				return false // a goroutine's or callback's own code
			case *ast.CallExpr:
				if isSelector(m.Fun, "time", "Sleep") {
					found = true
				}
			case *ast.CommClause:
				if u, ok := m.Comm.(*ast.ExprStmt); ok {
					if r, ok := u.X.(*ast.UnaryExpr); ok && r.Op == token.ARROW {
						if c, ok := r.X.(*ast.CallExpr); ok && isSelector(c.Fun, "time", "After") {
							found = true
						}
					}
				}
			}
			return !found
		})
		return !found
	})
	return found
}

// isContains: func(list []E, v E) bool whose body ranges over list comparing with ==.
func isContains(fn *ast.FuncDecl) bool {
	params := fn.Type.Params.List
	var types []ast.Expr
	for _, p := range params {
		for range max(1, len(p.Names)) {
			types = append(types, p.Type)
		}
	}
	if len(types) != 2 || fn.Type.Results == nil || len(fn.Type.Results.List) != 1 {
		return false
	}
	slice, ok := types[0].(*ast.ArrayType)
	if !ok || slice.Len != nil || types2string(slice.Elt) != types2string(types[1]) {
		return false
	}
	if id, ok := fn.Type.Results.List[0].Type.(*ast.Ident); !ok || id.Name != "bool" {
		return false
	}
	ranges, compares := false, false
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.RangeStmt:
			ranges = true
		case *ast.BinaryExpr:
			compares = compares || n.Op == token.EQL
		}
		return true
	})
	return ranges && compares
}

// isPtrHelper: a function whose whole job is &v of a value (ptr.To) or *p-or-default
// (ptr.Deref).
func isPtrHelper(fn *ast.FuncDecl) bool {
	res := fn.Type.Results
	if res == nil || len(res.List) != 1 || len(fn.Body.List) == 0 || len(fn.Body.List) > 2 {
		return false
	}
	ret, ok := fn.Body.List[len(fn.Body.List)-1].(*ast.ReturnStmt)
	if !ok || len(ret.Results) != 1 {
		return false
	}
	if _, isPtr := res.List[0].Type.(*ast.StarExpr); isPtr {
		u, ok := ret.Results[0].(*ast.UnaryExpr)
		if !ok || u.Op != token.AND {
			return false
		}
		_, ok = u.X.(*ast.Ident)
		return ok
	}
	// Deref: if p == nil { return def }; return *p
	if len(fn.Body.List) != 2 {
		return false
	}
	ifs, ok := fn.Body.List[0].(*ast.IfStmt)
	if !ok {
		return false
	}
	cond, ok := ifs.Cond.(*ast.BinaryExpr)
	if !ok || cond.Op != token.EQL || types2string(cond.Y) != "nil" {
		return false
	}
	star, ok := ret.Results[0].(*ast.StarExpr)
	return ok && types2string(star.X) == types2string(cond.X)
}

// types2string prints a simple expression (identifiers, selectors, stars, slices) for
// comparison.
func types2string(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return types2string(e.X) + "." + e.Sel.Name
	case *ast.StarExpr:
		return "*" + types2string(e.X)
	case *ast.ArrayType:
		return "[]" + types2string(e.Elt)
	}
	return fmt.Sprintf("%T", e)
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
