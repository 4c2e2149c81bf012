package restmemo

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// counting is a mapper that knows one kind and counts the RESTMapping calls it answers.
type counting struct {
	meta.RESTMapper
	calls int
}

var machine = schema.GroupVersionKind{Group: "machine.sapcloud.io", Version: "v1alpha1", Kind: "Machine"}

func (c *counting) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	c.calls++
	return c.RESTMapper.RESTMapping(gk, versions...)
}

func newCounting() *counting {
	d := meta.NewDefaultRESTMapper([]schema.GroupVersion{machine.GroupVersion()})
	d.Add(machine, meta.RESTScopeNamespace)
	return &counting{RESTMapper: d}
}

func TestRESTMappingIsRememberedPerKindAndVersion(t *testing.T) {
	c := newCounting()
	m := New(c)
	for range 3 {
		got, err := m.RESTMapping(machine.GroupKind(), machine.Version)
		if err != nil {
			t.Fatal(err)
		}
		if got.Scope.Name() != meta.RESTScopeNameNamespace || got.Resource.Resource != "machines" {
			t.Fatalf("mapping = %+v, want namespaced machines", got)
		}
		got.Resource.Resource = "changed by the caller" // must not reach the next caller
	}
	if c.calls != 1 {
		t.Errorf("wrapped mapper asked %d times for one kind and version, want 1", c.calls)
	}
}

func TestFailuresAndOtherCallsGoThrough(t *testing.T) {
	c := newCounting()
	m := New(c)
	absent := schema.GroupKind{Group: "machinist.io", Kind: "PoolPolicy"}
	for range 2 {
		if _, err := m.RESTMapping(absent, "v1alpha1"); !meta.IsNoMatchError(err) {
			t.Fatalf("absent kind: err = %v, want a no-match error", err)
		}
	}
	if _, err := m.RESTMapping(machine.GroupKind()); err != nil { // preferred version: may change
		t.Fatal(err)
	}
	if _, err := m.RESTMapping(machine.GroupKind()); err != nil {
		t.Fatal(err)
	}
	if c.calls != 4 {
		t.Errorf("wrapped mapper asked %d times, want 4 (no failure and no version-less answer kept)", c.calls)
	}
}
