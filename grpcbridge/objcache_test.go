package grpcbridge

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

func TestObjectCache(t *testing.T) {
	c := newObjectCache(2, DecodeMachineClass, (*v1alpha1.MachineClass).DeepCopy)
	class := func(name string) []byte {
		b, err := EncodeMachineClass(&v1alpha1.MachineClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provider: "mem", ProviderSpec: runtime.RawExtension{Raw: []byte(`{"a":1}`)}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	a, b, d := class("a"), class("b"), class("d")

	first, err := c.get(a)
	if err != nil || first.Name != "a" {
		t.Fatalf("decode: %v %v", first, err)
	}
	// A driver that scribbles on its request does not change what the next call gets.
	first.Name = "changed"
	first.ProviderSpec.Raw[2] = 'X'
	second, _ := c.get(a)
	if second.Name != "a" || string(second.ProviderSpec.Raw) != `{"a":1}` {
		t.Fatalf("cached class was modified through a returned copy: %s %s", second.Name, second.ProviderSpec.Raw)
	}
	c.get(b)
	c.get(d) // evicts a, the least recently used
	if n := c.len(); n != 2 {
		t.Fatalf("cache holds %d classes, want 2", n)
	}
	if got, _ := c.get(a); got.Name != "a" {
		t.Fatal("evicted class not decoded again")
	}
	if _, err := c.get([]byte{0x1a, 0x05, 0xff}); err == nil {
		t.Fatal("garbage decoded")
	}
	if got, err := c.get(nil); got != nil || err != nil {
		t.Fatal("empty bytes are no class")
	}
}
