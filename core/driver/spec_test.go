package driver

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

type testSpec struct {
	Flavor string            `json:"flavorName"`
	Tags   map[string]string `json:"tags"`
	Nested struct {
		Size int `json:"size"`
	} `json:"nested"`
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
	cases := map[string]struct{ raw, mentions string }{
		"unknown top-level field": {`{"flavorName":"m1","flavour":"x"}`, "flavour"},
		"unknown nested field":    {`{"nested":{"sise":1}}`, "nested.sise"},
		"wrong type":              {`{"nested":{"size":"big"}}`, "size"},
		"duplicate field":         {`{"flavorName":"a","flavorName":"b"}`, "flavorName"},
		"empty":                   {``, "providerSpec is empty"},
		"not json":                {`{flavor`, "providerSpec"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var s testSpec
			err := DecodeProviderSpec(classWith(tc.raw), &s)
			if CodeOf(err) != InvalidArgument {
				t.Fatalf("code = %v (%v), want InvalidArgument", CodeOf(err), err)
			}
			if !strings.Contains(MessageOf(err), tc.mentions) || !strings.Contains(MessageOf(err), `"small"`) {
				t.Fatalf("message %q does not name %q and the class", MessageOf(err), tc.mentions)
			}
		})
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
