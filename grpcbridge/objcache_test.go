package grpcbridge

import (
	"bytes"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

func TestObjectCache(t *testing.T) {
	c := newObjectCache(2, DecodeMachineClass)
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
	// The same bytes again, in another buffer: the same object, not decoded again.
	if second, _ := c.get(bytes.Clone(a)); second != first {
		t.Fatal("a class that arrived again was decoded again")
	}
	if _, err := c.get(b); err != nil {
		t.Fatal(err)
	}
	if _, err := c.get(d); err != nil { // evicts a, the least recently used
		t.Fatal(err)
	}
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

// BenchmarkObjectCacheHit is the server's per-call cost of a class already decoded: hash and
// compare. Parallel, as the server's workers call it.
func BenchmarkObjectCacheHit(b *testing.B) {
	c := newObjectCache(64, DecodeMachineClass)
	raw, err := EncodeMachineClass(&v1alpha1.MachineClass{
		ObjectMeta:   metav1.ObjectMeta{Name: "worker-a", Namespace: "shoot--dev--cluster", UID: "c1a55000-0000-4000-8000-000000000001", ResourceVersion: "1700001"},
		ProviderSpec: runtime.RawExtension{Raw: []byte(`{"imageName":"gardenlinux-1592.3","flavorName":"m1.xlarge","keyName":"shoot--dev--cluster-ssh","networkID":"5d9a0d4e-2a44-4bd6-b7a3-f1e9bd5e4a11","region":"RegionOne","rootDiskSize":50,"tags":{"kubernetes.io-cluster-shoot--dev--cluster":"1","kubernetes.io-role-node":"1"}}`)},
		Provider:     "openstack",
		SecretRef:    &corev1.SecretReference{Name: "shoot--dev--cluster-worker-a", Namespace: "shoot--dev--cluster"},
	})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := c.get(raw); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := c.get(raw); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// TestDecoderMachines: a machine version that arrives again is served from the cache (the same
// object: drivers only read it); another version, or the same version changed in memory, is
// decoded.
func TestDecoderMachines(t *testing.T) {
	d := NewDecoder()
	m := &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "m-1", ResourceVersion: "7"}, Spec: v1alpha1.MachineSpec{ProviderID: "mem:///m-1"}}
	raw, err := EncodeMachine(m)
	if err != nil {
		t.Fatal(err)
	}
	first, err := d.Machine(raw)
	if err != nil || first.Spec.ProviderID != "mem:///m-1" {
		t.Fatalf("decode: %v %v", first, err)
	}
	second, err := d.Machine(bytes.Clone(raw))
	if err != nil || second != first {
		t.Fatalf("second decode: %v %v, want the cached machine", second, err)
	}
	if n := d.machines.len(); n != 1 {
		t.Fatalf("cache holds %d machines, want 1", n)
	}
	probe := m.DeepCopy()
	probe.Spec.ProviderID = "mem:///other" // same version, changed in memory: other bytes
	raw2, err := EncodeMachine(probe)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := d.Machine(raw2); got.Spec.ProviderID != "mem:///other" {
		t.Fatalf("a machine with other content was served from the cache: %s", got.Spec.ProviderID)
	}
}
