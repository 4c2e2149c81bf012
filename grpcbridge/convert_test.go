package grpcbridge_test

import (
	"encoding/json"
	"math/rand"
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
	"github.com/machinist-io/machinist/grpcbridge/internal/bridgetest"
	driverv1 "github.com/machinist-io/machinist/grpcbridge/proto/machinist/driver/v1"
)

// wire converts, marshals, unmarshals and converts back, as a request does on its way.
func wireMachine(t *testing.T, m *v1alpha1.Machine) *v1alpha1.Machine {
	t.Helper()
	p, err := grpcbridge.MachineToProto(m)
	if err != nil {
		t.Fatal(err)
	}
	var back driverv1.Machine
	remarshal(t, p, &back)
	out, err := grpcbridge.MachineFromProto(&back)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func wireClass(t *testing.T, c *v1alpha1.MachineClass) *v1alpha1.MachineClass {
	t.Helper()
	p, err := grpcbridge.MachineClassToProto(c)
	if err != nil {
		t.Fatal(err)
	}
	var back driverv1.MachineClass
	remarshal(t, p, &back)
	out, err := grpcbridge.MachineClassFromProto(&back)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func wireSecret(t *testing.T, s *corev1.Secret) *corev1.Secret {
	t.Helper()
	p, err := grpcbridge.SecretToProto(s)
	if err != nil {
		t.Fatal(err)
	}
	var back driverv1.Secret
	remarshal(t, p, &back)
	out, err := grpcbridge.SecretFromProto(&back)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func remarshal(t *testing.T, in, out proto.Message) {
	t.Helper()
	b, err := proto.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if err := proto.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
}

func mustEqual(t *testing.T, what string, want, got any) {
	t.Helper()
	if !equality.Semantic.DeepEqual(want, got) {
		t.Fatalf("%s changed on the wire:\n%s", what, diff.Diff(want, got))
	}
}

func TestRealisticObjectsRoundTrip(t *testing.T) {
	m, c, s := bridgetest.Machine("m-1"), bridgetest.Class("openstack"), bridgetest.Secret()
	mustEqual(t, "machine", m, wireMachine(t, m))
	mustEqual(t, "class", c, wireClass(t, c))
	mustEqual(t, "secret", s, wireSecret(t, s))

	// nil stays nil, and the zero object stays zero.
	if p, _ := grpcbridge.MachineToProto(nil); p != nil {
		t.Fatal("nil machine encoded")
	}
	mustEqual(t, "empty machine", &v1alpha1.Machine{}, wireMachine(t, &v1alpha1.Machine{}))
	mustEqual(t, "empty class", &v1alpha1.MachineClass{}, wireClass(t, &v1alpha1.MachineClass{}))
	mustEqual(t, "empty secret", &corev1.Secret{}, wireSecret(t, &corev1.Secret{}))

	// A providerSpec held only as a decoded object travels as its JSON.
	withObject := bridgetest.Class("mem")
	withObject.ProviderSpec = runtime.RawExtension{Object: &corev1.Secret{Type: "x"}}
	got := wireClass(t, withObject)
	want, _ := json.Marshal(withObject.ProviderSpec.Object)
	if string(got.ProviderSpec.Raw) != string(want) {
		t.Fatalf("providerSpec object travelled as %s", got.ProviderSpec.Raw)
	}
}

// TestRandomObjectsRoundTrip fills every field of the three objects with random values (the
// apimachinery fuzzer, as Kubernetes' own round-trip tests do) and requires them back unchanged.
// A field added to Machine or MachineClass without a place on the wire fails here.
func TestRandomObjectsRoundTrip(t *testing.T) {
	f := objectFiller(t, 1)
	for i := 0; i < 300; i++ {
		var m v1alpha1.Machine
		var c v1alpha1.MachineClass
		var s corev1.Secret
		f.Fill(&m)
		f.Fill(&c)
		f.Fill(&s)
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
		for i := 0; i < c.Intn(4); i++ {
			spec[c.String(8)] = c.String(12)
		}
		r.Raw, _ = json.Marshal(spec)
	})
	return funcs
})

func objectFiller(t testing.TB, seed int64) *randfill.Filler {
	return randfill.New().NilChance(.3).NumElements(0, 3).RandSource(rand.NewSource(seed)).Funcs(fillFuncs()...)
}
