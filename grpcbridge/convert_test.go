package grpcbridge_test

import (
	"bytes"
	"encoding/json"
	"math/rand"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metafuzzer "k8s.io/apimachinery/pkg/apis/meta/fuzzer"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/diff"
	"sigs.k8s.io/randfill"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/grpcbridge"
	"github.com/machinist-io/machinist/grpcbridge/internal/fixture"
)

// wireMachine sends m through the bridge's encoding and returns what arrives.
func wireMachine(t testing.TB, m *v1alpha1.Machine) *v1alpha1.Machine {
	t.Helper()
	b, err := grpcbridge.EncodeMachine(m)
	if err != nil {
		t.Fatal(err)
	}
	out, err := grpcbridge.DecodeMachine(b)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// wireClass is wireMachine for classes.
func wireClass(t testing.TB, c *v1alpha1.MachineClass) *v1alpha1.MachineClass {
	t.Helper()
	b, err := grpcbridge.EncodeMachineClass(c)
	if err != nil {
		t.Fatal(err)
	}
	out, err := grpcbridge.DecodeMachineClass(b)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func wireSecret(t testing.TB, s *corev1.Secret) *corev1.Secret {
	t.Helper()
	b, err := grpcbridge.EncodeSecret(s)
	if err != nil {
		t.Fatal(err)
	}
	out, err := grpcbridge.DecodeSecret(b)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func mustEqual(t *testing.T, what string, want, got any) {
	t.Helper()
	if !equality.Semantic.DeepEqual(want, got) {
		t.Fatalf("%s changed on the wire:\n%s", what, diff.Diff(want, got))
	}
}

func TestRealisticObjectsRoundTrip(t *testing.T) {
	m, c, s := fixture.Machine("m-1"), fixture.Class("openstack"), fixture.Secret()
	mustEqual(t, "machine", m, wireMachine(t, m))
	mustEqual(t, "class", c, wireClass(t, c))
	mustEqual(t, "secret", s, wireSecret(t, s))

	// nil stays nil, and the zero object stays zero.
	for _, b := range [][]byte{must(grpcbridge.EncodeMachine(nil)), must(grpcbridge.EncodeMachineClass(nil)), must(grpcbridge.EncodeSecret(nil))} {
		if b != nil {
			t.Fatal("nil object encoded")
		}
	}
	if m, _ := grpcbridge.DecodeMachine(nil); m != nil {
		t.Fatal("empty bytes decoded to a machine")
	}
	mustEqual(t, "empty machine", &v1alpha1.Machine{}, wireMachine(t, &v1alpha1.Machine{}))
	mustEqual(t, "empty class", &v1alpha1.MachineClass{}, wireClass(t, &v1alpha1.MachineClass{}))
	mustEqual(t, "empty secret", &corev1.Secret{}, wireSecret(t, &corev1.Secret{}))

	// A providerSpec held only as a decoded object travels as its JSON.
	withObject := fixture.Class("mem")
	withObject.ProviderSpec = runtime.RawExtension{Object: &corev1.Secret{Type: "x"}}
	got := wireClass(t, withObject)
	want, _ := json.Marshal(withObject.ProviderSpec.Object)
	if string(got.ProviderSpec.Raw) != string(want) {
		t.Fatalf("providerSpec object travelled as %s", got.ProviderSpec.Raw)
	}
}

// TestRandomObjectsRoundTrip fills every field of the three objects with random values (the
// apimachinery fuzzer, as Kubernetes' own round-trip tests do) and requires them back unchanged.
// A field added to Machine or MachineClass without a place on the wire fails here; the one
// exception is MachineClass.Status, the controller's own record (ProviderSpecValid), which MCM's
// driver contract has no place for and drivers never read.
func TestRandomObjectsRoundTrip(t *testing.T) {
	f := objectFiller(t, 1)
	for range 300 {
		var m v1alpha1.Machine
		var c v1alpha1.MachineClass
		var s corev1.Secret
		f.Fill(&m)
		f.Fill(&c)
		f.Fill(&s)
		c.Status = v1alpha1.MachineClassStatus{}
		mustEqual(t, "machine", &m, wireMachine(t, &m))
		mustEqual(t, "class", &c, wireClass(t, &c))
		mustEqual(t, "secret", &s, wireSecret(t, &s))

		var pv corev1.PersistentVolumeSpec
		f.Fill(&pv)
		specs := []*corev1.PersistentVolumeSpec{&pv, nil}
		enc, err := grpcbridge.PVSpecsToProto(specs)
		if err != nil {
			t.Fatal(err)
		}
		dec, err := grpcbridge.PVSpecsFromProto(enc)
		if err != nil {
			t.Fatal(err)
		}
		if dec[1] != nil {
			t.Fatal("a nil volume spec came back non-nil")
		}
		mustEqual(t, "pv spec", &pv, dec[0])
	}
}

// TestReusedMachineTreeKeepsNothing encodes random machines one after another with one message
// tree, as EncodeMachine's pool reuses it, and requires the bytes of a fresh tree each time: a
// machine without conditions, addresses, configuration or times after one with them must not
// carry any of them.
func TestReusedMachineTreeKeepsNothing(t *testing.T) {
	f := objectFiller(t, 2)
	encode := grpcbridge.MachineEncoderReusingOneTree()
	machines := []*v1alpha1.Machine{fixture.Machine("m-full"), {}, fixture.Machine("m-full-again")}
	for range 300 {
		var m v1alpha1.Machine
		f.Fill(&m)
		machines = append(machines, &m)
	}
	for i, m := range machines {
		fresh, err := proto.MarshalOptions{Deterministic: true}.Marshal(must(grpcbridge.MachineToProto(m)))
		if err != nil {
			t.Fatal(err)
		}
		if got := must(encode(m)); !bytes.Equal(got, fresh) {
			t.Fatalf("machine %d encoded with a reused tree differs from a fresh tree's encoding", i)
		}
	}
}

var fillFuncs = sync.OnceValue(func() []any {
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		panic(err)
	}
	funcs := metafuzzer.Funcs(serializer.NewCodecFactory(scheme))
	// providerSpec is JSON; the generic filler would put an Object in it, which never arrives
	// from the API server.
	funcs = append(funcs, func(r *runtime.RawExtension, c randfill.Continue) {
		spec := map[string]any{}
		for range c.Intn(4) {
			spec[c.String(8)] = c.String(12)
		}
		r.Raw, _ = json.Marshal(spec)
	})
	return funcs
})

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestClassEncodingIsDeterministic: equal classes give equal bytes whatever the map order, which
// is what the server's class cache and dial-in digests rely on.
func TestClassEncodingIsDeterministic(t *testing.T) {
	c := fixture.Class("openstack")
	first := must(grpcbridge.EncodeMachineClass(c))
	for range 20 {
		if got := must(grpcbridge.EncodeMachineClass(c.DeepCopy())); !bytes.Equal(first, got) {
			t.Fatal("the same class encoded to different bytes")
		}
	}
}

// TestLongNestedMessages covers nested messages whose length needs a multi-byte varint.
func TestLongNestedMessages(t *testing.T) {
	m := fixture.Machine("m-long")
	m.Status.LastOperation.Description = strings.Repeat("d", 200)
	m.Status.Conditions[0].Message = strings.Repeat("m", 70000)
	m.Spec.Class.Name = strings.Repeat("c", 130)
	mustEqual(t, "machine", m, wireMachine(t, m))
}

func objectFiller(t testing.TB, seed int64) *randfill.Filler {
	return randfill.New().NilChance(.3).NumElements(0, 3).RandSource(rand.NewSource(seed)).Funcs(fillFuncs()...)
}
