package driver

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
	sigsjson "sigs.k8s.io/json"
)

type fuzzSpec struct {
	Name   string            `json:"name"`
	Count  *int              `json:"count,omitempty"`
	Tags   map[string]string `json:"tags,omitempty"`
	Items  []fuzzItem        `json:"items,omitempty"`
	Nested *fuzzItem         `json:"nested,omitempty"`
	Free   json.RawMessage   `json:"free,omitempty"`
}

type fuzzItem struct {
	ID   string            `json:"id"`
	Kind string            `json:"kind"`
	Sub  map[string]fuzzIt `json:"sub,omitempty"`
}

type fuzzIt struct {
	On bool `json:"on"`
}

// FuzzSpecWarnings checks the warnings against an independent implementation: a document that
// draws no warning is one sigs.k8s.io/json decodes strictly (case-sensitive, no unknown and no
// repeated fields) to the same value, and one that draws warnings is one it refuses. It never
// panics, and lenient decoding reads what the reference decoder of the names reads
// (encoding/json for FoldedNames, Kubernetes' case-sensitive decoder for ExactNames).
func FuzzSpecWarnings(f *testing.F) {
	for _, s := range []string{
		`{"name":"a","count":1,"tags":{"k":"v"},"items":[{"id":"x","kind":"y"}]}`,
		`{"Name":"a"}`,
		`{"name":"a","name":"b"}`,
		`{"tags":{"k":"a","k":"b"}}`,
		`{"nested":{"ID":"x","sub":{"a":{"ON":true}}}}`,
		`{"free":{"anything":[1,2,{"x":1}]},"unknown":[{"a":1}]}`,
		`{"items":[{},{"kind":"a","Kind":"b"}]}`,
		`null`,
		`[]`,
		`{"count":"x"}`,
		`{"nested":null,"items":null}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, names := range []FieldNames{FoldedNames, ExactNames} {
			checkAgainstSigsJSON(t, data, names)
		}
	})
}

func checkAgainstSigsJSON(t *testing.T, data []byte, names FieldNames) {
	var lenient fuzzSpec
	warns, err := DecodeJSON(data, &lenient, Lenient, names, "fuzz", field.NewPath("spec"))
	if err != nil {
		return
	}
	var std fuzzSpec
	if names == FoldedNames {
		err = json.Unmarshal(data, &std)
	} else {
		err = sigsjson.UnmarshalCaseSensitivePreserveInts(data, &std)
	}
	if err != nil || !reflect.DeepEqual(std, lenient) {
		t.Fatalf("%v: the reference decoder reads %+v (%v), lenient %+v", names, std, err, lenient)
	}
	var strict fuzzSpec
	strictErrs, err := sigsjson.UnmarshalStrict(data, &strict, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	if err != nil {
		t.Fatalf("sigs.k8s.io/json refuses what encoding/json reads: %v", err)
	}
	if (len(warns) == 0) != (len(strictErrs) == 0) {
		t.Fatalf("warnings %v but strict decoding reports %v", warns, strictErrs)
	}
	if len(warns) == 0 && !reflect.DeepEqual(strict, lenient) {
		t.Fatalf("no warnings, but strict decoding reads %+v and lenient %+v", strict, lenient)
	}
	_, serr := DecodeJSON(data, &fuzzSpec{}, Strict, names, "fuzz", field.NewPath("spec"))
	if (serr != nil) != (len(warns) > 0) {
		t.Fatalf("strict mode: %v, warnings %v", serr, warns)
	}
}

// benchSpec is shaped like a Gardener Azure providerSpec: nested objects, a list, tags.
var benchSpec = []byte(`{"location":"westeurope","resourceGroup":"shoot--dev--alpha","tags":{"Name":"shoot--dev--alpha","kubernetes.io-cluster-shoot--dev--alpha":"1","kubernetes.io-role-node":"1","worker.gardener.cloud_pool":"cpu-worker"},
"subnetInfo":{"vnetName":"shoot--dev--alpha","subnetName":"shoot--dev--alpha-nodes"},
"items":[{"id":"a","kind":"availabilityset","sub":{"x":{"on":true}}},{"id":"b","kind":"vmo"}],
"nested":{"id":"/subscriptions/00000000-0000-4000-8000-0000000000a1/resourceGroups/rg/providers/Microsoft.Compute/availabilitySets/a","kind":"availabilityset"},
"name":"m","count":3,"free":{"anything":[1,2,3]}}`)

// BenchmarkDecodeSpec compares what each driver call pays to decode a spec: machinist's earlier
// strict decoding (sigs.k8s.io/json), plain encoding/json (what Gardener's Azure provider runs),
// and lenient decoding with the warnings walk, with folded and exact names.
func BenchmarkDecodeSpec(b *testing.B) {
	b.Run("strict-sigs.k8s.io-json", func(b *testing.B) {
		for b.Loop() {
			var s fuzzSpec
			if err := DecodeStrict(benchSpec, &s, "bench"); err == nil {
				b.Fatal("the bench spec has unknown fields; strict decoding must refuse it")
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			var s fuzzSpec
			if err := json.Unmarshal(benchSpec, &s); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, names := range []FieldNames{FoldedNames, ExactNames} {
		b.Run("lenient-with-warnings/"+strings.ReplaceAll(names.String(), " ", "-"), func(b *testing.B) {
			for b.Loop() {
				var s fuzzSpec
				if _, err := DecodeJSON(benchSpec, &s, Lenient, names, "bench", field.NewPath("spec")); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
