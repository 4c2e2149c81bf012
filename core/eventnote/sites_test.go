package eventnote_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The package whose Recorder every recorder must be; only it may ask for a raw recorder.
const helperDir = "core/eventnote"

// site is one Eventf call of the product code: what its arguments say when they are literals.
type site struct {
	pos       string // file:line, relative to the module root
	eventtype string // "Normal" or "Warning" when given as a literal or corev1 constant, else ""
	reason    string // the literal reason, or "" when it is computed
	action    string // the literal action, or ""
	format    string // the literal note format, or "" when the note is computed
}

// rawRecorderCalls are the calls that make a recorder or a broadcaster of client-go or
// controller-runtime: outside the helper they would record events it never sees.
var rawRecorderCalls = map[string]bool{"GetEventRecorder": true, "GetEventRecorderFor": true}

// rawRecorderPackages are the packages whose broadcasters and recorders may only be made in the
// helper.
var rawRecorderPackages = map[string]bool{"k8s.io/client-go/tools/events": true, "k8s.io/client-go/tools/record": true}

var rawRecorderFuncs = map[string]bool{"NewBroadcaster": true, "NewEventBroadcasterAdapter": true, "NewEventBroadcasterAdapterWithContext": true, "NewRecorder": true}

// moduleRoot is the directory of the repository's go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// scanModule reads every non-test Go file of the module (nested modules, such as build/tools,
// excluded) and returns its Eventf call sites and the calls that bypass the helper.
func scanModule(t *testing.T) (sites []site, bypasses []string) {
	t.Helper()
	root := moduleRoot(t)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor" || name == "bin") {
				return filepath.SkipDir
			}
			if path != root {
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir // another module
				}
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		s, b, err := scanFile(filepath.ToSlash(rel), src)
		if err != nil {
			return err
		}
		sites = append(sites, s...)
		bypasses = append(bypasses, b...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return sites, bypasses
}

// scanFile parses one file: rel is its path from the module root.
func scanFile(rel string, src []byte) (sites []site, bypasses []string, err error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, rel, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, nil, err
	}
	inHelper := filepath.ToSlash(filepath.Dir(rel)) == helperDir
	imports := map[string]string{} // local name → path
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		name := filepath.Base(path)
		if imp.Name != nil {
			name = imp.Name.Name
		}
		imports[name] = path
	}
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		pos := fset.Position(call.Pos())
		where := rel + ":" + strconv.Itoa(pos.Line)
		if x, ok := sel.X.(*ast.Ident); ok && rawRecorderPackages[imports[x.Name]] && rawRecorderFuncs[sel.Sel.Name] && !inHelper {
			bypasses = append(bypasses, where+": "+x.Name+"."+sel.Sel.Name)
		}
		if rawRecorderCalls[sel.Sel.Name] && !inHelper {
			bypasses = append(bypasses, where+": "+sel.Sel.Name)
		}
		if sel.Sel.Name == "Eventf" && len(call.Args) >= 6 && !inHelper {
			sites = append(sites, site{
				pos:       where,
				eventtype: eventType(call.Args[2]),
				reason:    stringLit(call.Args[3]),
				action:    stringLit(call.Args[4]),
				format:    stringLit(call.Args[5]),
			})
		}
		return true
	})
	return sites, bypasses, nil
}

func stringLit(e ast.Expr) string {
	if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
		s, err := strconv.Unquote(lit.Value)
		if err == nil {
			return s
		}
	}
	return ""
}

func eventType(e ast.Expr) string {
	if s := stringLit(e); s != "" {
		return s
	}
	if sel, ok := e.(*ast.SelectorExpr); ok {
		switch sel.Sel.Name {
		case "EventTypeNormal":
			return "Normal"
		case "EventTypeWarning":
			return "Warning"
		}
	}
	return ""
}

// TestNoRecorderBypassesTheHelper: no product code outside the helper asks controller-runtime
// for a recorder or makes a client-go broadcaster or recorder, so every event goes through
// Recorder's limits. The scanner itself is shown to find such calls and the call sites.
func TestNoRecorderBypassesTheHelper(t *testing.T) {
	sites, bypasses := scanModule(t)
	for _, b := range bypasses {
		t.Errorf("%s: a recorder that bypasses eventnote.For (its events are not cut to the API server's limits): use eventnote.For(mgr, name)", b)
	}
	if len(sites) < 30 {
		t.Fatalf("found %d Eventf call sites; the controllers have more: is the scan broken?", len(sites))
	}

	src := `package x
import (
	"k8s.io/client-go/tools/record"
	ev "k8s.io/client-go/tools/events"
)
func f(mgr m) {
	r := mgr.GetEventRecorder("x")
	_ = record.NewBroadcaster()
	_ = ev.NewBroadcaster(nil)
	r.Eventf(nil, nil, "Normal", "Reason", "Action", "note %d", 1)
}`
	s, b, err := scanFile("core/controller/x/x.go", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != 3 || len(s) != 1 || s[0].reason != "Reason" || s[0].format != "note %d" || s[0].eventtype != "Normal" {
		t.Fatalf("the scanner missed something: bypasses %q, sites %+v", b, s)
	}
	if _, b, _ := scanFile(helperDir+"/eventnote.go", []byte(src)); len(b) != 0 {
		t.Fatalf("the helper itself may make recorders: %q", b)
	}
}
