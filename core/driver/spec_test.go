package driver

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	sigsjson "sigs.k8s.io/json"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

type testSpec struct {
	Flavor string            `json:"flavorName"`
	Tags   map[string]string `json:"tags"`
	Nested testNested        `json:"nested"`
}

type testNested struct {
	Size int `json:"size"`
}

func classWith(raw string) *v1alpha1.MachineClass {
	c := &v1alpha1.MachineClass{Provider: "OpenStack", ProviderSpec: runtime.RawExtension{Raw: []byte(raw)}}
	c.Name = "small"
	return c
}

func TestDecodeProviderSpec(t *testing.T) {
	var s testSpec
	if err := DecodeProviderSpec(classWith(`{"flavorName":"m1","nested":{"size":3}}`), &s); err != nil {
		t.Fatal(err)
	}
	if s.Flavor != "m1" || s.Nested.Size != 3 {
		t.Fatalf("decoded %+v", s)
	}
	// Values of the wrong type, broken JSON and an empty spec are errors in both modes.
	cases := map[string]struct{ raw, mentions string }{
		"wrong type":        {`{"nested":{"size":"big"}}`, "size"},
		"wrong nested type": {`{"tags":{"a":1}}`, "tags"},
		"empty":             {``, "providerSpec is empty"},
		"not json":          {`{flavor`, "not valid JSON"},
		"trailing data":     {`{} {}`, "providerSpec"},
	}
	for name, tc := range cases {
		for _, mode := range []SpecMode{Lenient, Strict} {
			t.Run(name+"/"+mode.String(), func(t *testing.T) {
				var s testSpec
				_, err := DecodeSpec(classWith(tc.raw), &s, mode, FoldedNames)
				if CodeOf(err) != InvalidArgument {
					t.Fatalf("code = %v (%v), want InvalidArgument", CodeOf(err), err)
				}
				if !strings.Contains(MessageOf(err), tc.mentions) || !strings.Contains(MessageOf(err), `"small"`) {
					t.Fatalf("message %q does not name %q and the class", MessageOf(err), tc.mentions)
				}
			})
		}
	}
}

// Field names decode as Gardener's providers decode them (encoding/json): exact names first, then
// case-insensitive ones; unknown fields ignored; the last of repeated fields wins. Each is a
// warning naming the field as written; in strict mode the same is InvalidArgument.
func TestDecodeSpecLenientAndStrict(t *testing.T) {
	cases := map[string]struct {
		raw   string
		want  testSpec
		warns []SpecWarning
	}{
		"clean": {
			raw:  `{"flavorName":"m1","tags":{"Name":"x"}}`,
			want: testSpec{Flavor: "m1", Tags: map[string]string{"Name": "x"}},
		},
		"unknown top-level field": {
			raw:   `{"flavorName":"m1","flavour":"x"}`,
			want:  testSpec{Flavor: "m1"},
			warns: []SpecWarning{{Path: "providerSpec.flavour", Problem: UnknownField}},
		},
		"unknown nested field holding an object": {
			raw:   `{"nested":{"sise":{"a":[1,{"b":2}]},"size":2}}`,
			want:  testSpec{Nested: testNested{2}},
			warns: []SpecWarning{{Path: "providerSpec.nested.sise", Problem: UnknownField}},
		},
		"mis-cased names are read": {
			raw:  `{"FlavorName":"m1","NESTED":{"Size":3}}`,
			want: testSpec{Flavor: "m1", Nested: testNested{3}},
			warns: []SpecWarning{
				{Path: "providerSpec.FlavorName", Problem: CaseMismatch, Field: "flavorName"},
				{Path: "providerSpec.NESTED", Problem: CaseMismatch, Field: "nested"},
				{Path: "providerSpec.NESTED.Size", Problem: CaseMismatch, Field: "size"},
			},
		},
		"map keys are data": {
			raw:  `{"tags":{"FLAVORNAME":"a","unknown":"b"}}`,
			want: testSpec{Tags: map[string]string{"FLAVORNAME": "a", "unknown": "b"}},
		},
		"the last repeated field wins": {
			raw:   `{"flavorName":"a","FlavorName":"b"}`,
			want:  testSpec{Flavor: "b"},
			warns: []SpecWarning{{Path: "providerSpec.FlavorName", Problem: DuplicateField}},
		},
		"repeated map key": {
			raw:   `{"tags":{"k":"a","k":"b"}}`,
			want:  testSpec{Tags: map[string]string{"k": "b"}},
			warns: []SpecWarning{{Path: "providerSpec.tags[k]", Problem: DuplicateField}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var got testSpec
			warns, err := DecodeSpec(classWith(tc.raw), &got, Lenient, FoldedNames)
			if err != nil {
				t.Fatalf("lenient: %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("decoded %+v, want %+v", got, tc.want)
			}
			if !reflect.DeepEqual(warns, tc.warns) {
				t.Errorf("warnings %+v, want %+v", warns, tc.warns)
			}
			// encoding/json (what Gardener's providers use) reads the same values.
			var std testSpec
			if err := json.Unmarshal([]byte(tc.raw), &std); err != nil || !reflect.DeepEqual(std, got) {
				t.Errorf("encoding/json reads %+v (%v), lenient decoding %+v", std, err, got)
			}
			_, err = DecodeSpec(classWith(tc.raw), &testSpec{}, Strict, FoldedNames)
			if len(tc.warns) == 0 {
				if err != nil {
					t.Fatalf("strict: %v", err)
				}
				return
			}
			if CodeOf(err) != InvalidArgument {
				t.Fatalf("strict: code %v (%v), want InvalidArgument", CodeOf(err), err)
			}
			for _, w := range tc.warns {
				if !strings.Contains(MessageOf(err), w.Path) {
					t.Errorf("strict error %q does not name %s", MessageOf(err), w.Path)
				}
			}
		})
	}
}

// With ExactNames (Kubernetes' decoders, Gardener's OpenStack provider) a mis-cased key is an
// unknown field: ignored, and the warning names the field it nearly matches.
func TestDecodeSpecExactNames(t *testing.T) {
	raw := `{"FlavorName":"m1","nested":{"size":3,"Size":4},"extra":1}`
	var got testSpec
	warns, err := DecodeSpec(classWith(raw), &got, Lenient, ExactNames)
	if err != nil {
		t.Fatal(err)
	}
	if want := (testSpec{Nested: testNested{3}}); !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}
	want := []SpecWarning{
		{Path: "providerSpec.FlavorName", Problem: UnknownField, Field: "flavorName"},
		{Path: "providerSpec.nested.Size", Problem: UnknownField, Field: "size"},
		{Path: "providerSpec.extra", Problem: UnknownField},
	}
	if !reflect.DeepEqual(warns, want) {
		t.Fatalf("warnings %+v, want %+v", warns, want)
	}
	// apimachinery's JSON serializer (sigs.k8s.io/json, case-sensitive) reads the same.
	var kube testSpec
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts([]byte(raw), &kube); err != nil || !reflect.DeepEqual(kube, got) {
		t.Fatalf("sigs.k8s.io/json reads %+v (%v)", kube, err)
	}
	_, err = DecodeSpec(classWith(raw), &testSpec{}, Strict, ExactNames)
	if CodeOf(err) != InvalidArgument || !strings.Contains(MessageOf(err), "providerSpec.FlavorName: unknown field (did you mean flavorName? names are case-sensitive)") {
		t.Fatalf("strict: %v", err)
	}
}

func TestSpecWarningText(t *testing.T) {
	for _, tc := range []struct {
		w    SpecWarning
		want string
	}{
		{SpecWarning{Path: "providerSpec.a", Problem: UnknownField}, "providerSpec.a: unknown field: ignored"},
		{SpecWarning{Path: "providerSpec.Kind", Problem: CaseMismatch, Field: "kind"}, "providerSpec.Kind: read as kind (field names match case-insensitively): write kind"},
		{SpecWarning{Path: "providerSpec.Kind", Problem: UnknownField, Field: "kind"}, "providerSpec.Kind: unknown field: ignored (field names are case-sensitive: write kind)"},
		{SpecWarning{Path: "providerSpec.a", Problem: DuplicateField}, "providerSpec.a: given more than once: the last value is used"},
	} {
		if got := tc.w.String(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.w, got, tc.want)
		}
	}
	if got := JoinSpecWarnings([]SpecWarning{{Path: "a", Problem: UnknownField}, {Path: "b", Problem: UnknownField}}); got != "a: unknown field: ignored; b: unknown field: ignored" {
		t.Errorf("JoinSpecWarnings = %q", got)
	}
}

// Promotion through embedded structs, json:"-", untagged fields, opaque types and pointers follow
// encoding/json.
func TestSpecWarningsFollowEncodingJSON(t *testing.T) {
	type Inner struct {
		Promoted string `json:"promoted"`
		Shadowed string `json:"name"`
	}
	type spec struct {
		Inner
		Name     string            `json:"name"`
		Skipped  string            `json:"-"`
		Untagged string            // matched by its Go name
		Quantity resource.Quantity `json:"quantity"`
		Ptr      *Inner            `json:"ptr"`
		List     []Inner           `json:"list"`
		Any      any               `json:"any"`
		internal string            //nolint:unused // unexported fields are not decoded
	}
	raw := `{"promoted":"p","name":"n","Skipped":"s","untagged":"u","quantity":"1Gi","ptr":{"Promoted":"x","zz":1},"list":[{},{"bad":1}],"any":{"free":1},"internal":"i"}`
	var std spec
	if err := json.Unmarshal([]byte(raw), &std); err != nil {
		t.Fatal(err)
	}
	warns, err := SpecWarnings([]byte(raw), &spec{}, FoldedNames, field.NewPath("providerSpec"))
	if err != nil {
		t.Fatal(err)
	}
	want := []SpecWarning{
		{Path: "providerSpec.Skipped", Problem: UnknownField},
		{Path: "providerSpec.untagged", Problem: CaseMismatch, Field: "Untagged"},
		{Path: "providerSpec.ptr.Promoted", Problem: CaseMismatch, Field: "promoted"},
		{Path: "providerSpec.ptr.zz", Problem: UnknownField},
		{Path: "providerSpec.list[1].bad", Problem: UnknownField},
		{Path: "providerSpec.internal", Problem: UnknownField},
	}
	if !reflect.DeepEqual(warns, want) {
		t.Fatalf("warnings\n%+v\nwant\n%+v", warns, want)
	}
	if std.Promoted != "p" || std.Name != "n" || std.Skipped != "" || std.Untagged != "u" || std.Ptr.Promoted != "x" {
		t.Fatalf("encoding/json decoded %+v: the expectations above are wrong", std)
	}
}

func TestCheckProvider(t *testing.T) {
	if err := CheckProvider(classWith(`{}`), "openstack"); err != nil {
		t.Fatalf("OpenStack must match openstack: %v", err)
	}
	err := CheckProvider(classWith(`{}`), "azure")
	if CodeOf(err) != InvalidArgument || !strings.Contains(MessageOf(err), "azure") {
		t.Fatalf("mismatch: %v", err)
	}
	if CodeOf(CheckProvider(nil, "azure")) != InvalidArgument {
		t.Fatal("a nil class must be InvalidArgument")
	}
}

func TestInvalidNamesEveryField(t *testing.T) {
	if Invalid(classWith(`{}`), nil) != nil {
		t.Fatal("no errors must give nil")
	}
	errs := field.ErrorList{
		field.Required(ProviderSpecPath.Child("flavorName"), "set the flavor"),
		field.Invalid(ProviderSpecPath.Child("rootDiskSize"), -1, "must be positive"),
	}
	err := Invalid(classWith(`{}`), errs)
	msg := MessageOf(err)
	if CodeOf(err) != InvalidArgument || !strings.Contains(msg, "providerSpec.flavorName") || !strings.Contains(msg, "providerSpec.rootDiskSize") {
		t.Fatalf("Invalid = %v", err)
	}
}

func TestSecretValue(t *testing.T) {
	s := &corev1.Secret{Data: map[string][]byte{"userData": []byte("#cloud-config")}, StringData: map[string]string{"region": "eu"}}
	if SecretValue(s, "userData") != "#cloud-config" || SecretValue(s, "region") != "eu" || SecretValue(s, "none") != "" || SecretValue(nil, "x") != "" {
		t.Fatal("SecretValue")
	}
}

func TestNoteSpecWarnings(t *testing.T) {
	if NoteSpecWarnings(nil, []SpecWarning{{Path: "a"}}) != nil {
		t.Fatal("nil error must stay nil")
	}
	base := Error(InvalidArgument, "flavorName: Required value")
	if NoteSpecWarnings(base, nil) != base { //nolint:errorlint // the very error back, not one wrapping it
		t.Fatal("no warnings must keep the error")
	}
	err := NoteSpecWarnings(base, []SpecWarning{{Path: "providerSpec.spec.flavourName", Problem: UnknownField}})
	if CodeOf(err) != InvalidArgument || MessageOf(err) != "flavorName: Required value (decoding noted: providerSpec.spec.flavourName: unknown field: ignored)" {
		t.Fatalf("noted: %v", err)
	}
}

func TestNoteSpecWarningsSkipsNamedFields(t *testing.T) {
	ws := []SpecWarning{{Path: "providerSpec.a", Problem: UnknownField}}
	_, err := DecodeSpec(classWith(`{"a":1}`), &testSpec{}, Strict, FoldedNames)
	if got := NoteSpecWarnings(err, ws); MessageOf(got) != MessageOf(err) {
		t.Fatalf("a strict refusal noted its own fields again: %v", got)
	}
	if want := `machineClass "small": providerSpec.a: unknown field: fix the field names`; !strings.HasPrefix(MessageOf(err), want) {
		t.Fatalf("strict refusal %q, want it to start with %q", MessageOf(err), want)
	}
}

// TestDecodeValidSpec: another provider's class is refused before decoding; an invalid spec is
// InvalidArgument naming the field and noting the warnings (the misspelt field that explains
// the missing one); a valid one comes back decoded with its warnings.
func TestDecodeValidSpec(t *testing.T) {
	validate := func(s *testSpec) field.ErrorList {
		if s.Flavor == "" {
			return field.ErrorList{field.Required(ProviderSpecPath.Child("flavorName"), "set the flavor")}
		}
		return nil
	}
	if _, _, err := DecodeValidSpec(classWith(`{"flavorName":"m1"}`), "azure", Lenient, ExactNames, validate); CodeOf(err) != InvalidArgument || !strings.Contains(err.Error(), "azure") {
		t.Fatalf("another provider's class: %v", err)
	}
	_, warnings, err := DecodeValidSpec(classWith(`{"flavourName":"m1"}`), "openstack", Lenient, ExactNames, validate)
	if CodeOf(err) != InvalidArgument || !strings.Contains(err.Error(), "providerSpec.flavorName") || !strings.Contains(err.Error(), "flavourName") || len(warnings) != 1 {
		t.Fatalf("invalid spec: %v, warnings %v", err, warnings)
	}
	spec, warnings, err := DecodeValidSpec(classWith(`{"flavorName":"m1","extra":1}`), "openstack", Lenient, ExactNames, validate)
	if err != nil || spec.Flavor != "m1" || len(warnings) != 1 {
		t.Fatalf("valid spec: %+v, %v, warnings %v", spec, err, warnings)
	}
}
