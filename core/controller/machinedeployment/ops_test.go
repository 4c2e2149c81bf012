package machinedeployment

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// TestEveryOperationIsExecuted: each operation core/controller/rollout can decide (a type with a
// Kind method) has a case in executor.run. A decided operation the executor does not know fails
// every reconcile of its deployment (it did: Prioritize and DeleteMachine were decided, never
// executed, so Manual approval and MCM #1078 stalled).
func TestEveryOperationIsExecuted(t *testing.T) {
	fset := token.NewFileSet()
	files, err := filepath.Glob("../rollout/*.go")
	if err != nil {
		t.Fatal(err)
	}
	var decided []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Name.Name != "Kind" || fn.Recv == nil || len(fn.Recv.List) != 1 {
				continue
			}
			if id, ok := fn.Recv.List[0].Type.(*ast.Ident); ok {
				decided = append(decided, id.Name)
			}
		}
	}
	if len(decided) < 10 {
		t.Fatalf("found only %d operations in core/controller/rollout (%v): the parse is broken", len(decided), decided)
	}
	file, err := parser.ParseFile(fset, "execute.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var executed []string
	ast.Inspect(file, func(n ast.Node) bool {
		if fn, ok := n.(*ast.FuncDecl); ok && fn.Name.Name != "run" {
			return false
		}
		if cc, ok := n.(*ast.CaseClause); ok {
			for _, e := range cc.List {
				if sel, ok := e.(*ast.SelectorExpr); ok {
					executed = append(executed, sel.Sel.Name)
				}
			}
		}
		return true
	})
	for _, op := range decided {
		if !slices.Contains(executed, op) {
			t.Errorf("rollout.%s is decided but executor.run has no case for it", op)
		}
	}
}

// TestSelectionChangedPassesOnlyTheApprovalLabel: a node wakes its deployment when its
// selected-for-update label comes, goes or changes; heartbeats and other labels do not.
func TestSelectionChangedPassesOnlyTheApprovalLabel(t *testing.T) {
	node := func(labels map[string]string, rv string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: labels, ResourceVersion: rv}}
	}
	sel := map[string]string{v1alpha1.LabelNodeSelectedForUpdate: "true"}
	p := selectionChanged()
	for _, tc := range []struct {
		name     string
		old, new *corev1.Node
		want     bool
	}{
		{"selected", node(nil, "1"), node(sel, "2"), true},
		{"unselected", node(sel, "1"), node(nil, "2"), true},
		{"value changed", node(sel, "1"), node(map[string]string{v1alpha1.LabelNodeSelectedForUpdate: "false"}, "2"), true},
		{"heartbeat", node(sel, "1"), node(sel, "2"), false},
		{"other label", node(nil, "1"), node(map[string]string{"x": "y"}, "2"), false},
	} {
		if got := p.Update(event.TypedUpdateEvent[*corev1.Node]{ObjectOld: tc.old, ObjectNew: tc.new}); got != tc.want {
			t.Errorf("%s: update passes %v, want %v", tc.name, got, tc.want)
		}
	}
	if !p.Create(event.TypedCreateEvent[*corev1.Node]{Object: node(sel, "1")}) || p.Create(event.TypedCreateEvent[*corev1.Node]{Object: node(nil, "1")}) {
		t.Error("create: want only a node created selected to pass")
	}
}
