package gcp

import (
	"bytes"
	"os"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
)

var yamlBlock = regexp.MustCompile("(?s)```yaml\n(.*?)```")

// TestREADMESampleDecodes decodes the README's sample MachineClass and Secret with the driver's
// own decoding and validation.
func TestREADMESampleDecodes(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	var docs [][]byte
	for _, m := range yamlBlock.FindAllSubmatch(readme, -1) {
		docs = append(docs, m[1])
	}
	checkSample(t, docs)
}

// TestKubernetesSamplesDecode does the same for kubernetes/samples/gcp and the fake cloud's class.
func TestKubernetesSamplesDecode(t *testing.T) {
	var docs [][]byte
	for _, f := range []string{"machineclass.yaml", "secret.yaml", "machinedeployment.yaml"} {
		raw, err := os.ReadFile("../../kubernetes/samples/gcp/" + f)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, bytes.Split(raw, []byte("\n---\n"))...)
	}
	checkSample(t, docs)

	raw, err := os.ReadFile("../../kubernetes/samples/fakecloud/gcp-machineclass.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var class v1alpha1.MachineClass
	if err := yaml.UnmarshalStrict(raw, &class); err != nil {
		t.Fatal(err)
	}
	if _, _, err := decodeSpec(&class, driver.Strict); err != nil {
		t.Fatalf("fakecloud class: %v", err)
	}
}

func checkSample(t *testing.T, docs [][]byte) {
	t.Helper()
	var class *v1alpha1.MachineClass
	merged := &corev1.Secret{Data: map[string][]byte{}}
	secrets := 0
	for _, doc := range docs {
		var meta struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			t.Fatalf("sample is not YAML: %v\n%s", err, doc)
		}
		switch meta.Kind {
		case "MachineClass":
			class = &v1alpha1.MachineClass{}
			if err := yaml.UnmarshalStrict(doc, class); err != nil {
				t.Fatalf("MachineClass: %v", err)
			}
		case "Secret":
			var s corev1.Secret
			if err := yaml.UnmarshalStrict(doc, &s); err != nil {
				t.Fatalf("Secret: %v", err)
			}
			secrets++
			for k, v := range s.StringData {
				merged.Data[k] = []byte(v)
			}
		case "MachineDeployment":
			var md v1alpha1.MachineDeployment
			if err := yaml.UnmarshalStrict(doc, &md); err != nil {
				t.Fatalf("MachineDeployment: %v", err)
			}
			if class != nil && md.Spec.Template.Spec.Class.Name != class.Name {
				t.Errorf("MachineDeployment uses class %q, the sample class is %q", md.Spec.Template.Spec.Class.Name, class.Name)
			}
		}
	}
	if class == nil || secrets == 0 {
		t.Fatalf("sample lacks a MachineClass or a Secret")
	}
	spec, _, err := decodeSpec(class, driver.Strict)
	if err != nil {
		t.Fatalf("sample MachineClass: %v", err)
	}
	if len(spec.scopeTags()) != 2 || spec.Disks[0].Image == "" {
		t.Errorf("decoded spec = %+v", spec)
	}
	// The samples' key is a placeholder: its private_key must be the only complaint.
	_, err = credentialsFrom(merged, DefaultWorkloadIdentityTokenFile)
	want := field.Invalid(field.NewPath("secret", "data").Key(KeyServiceAccountJSON), "private_key", "").Error()
	if driver.CodeOf(err) != driver.InvalidArgument || !strings.Contains(driver.MessageOf(err), strings.TrimSuffix(want, ": ")) || strings.Count(driver.MessageOf(err), "secret.data") != 1 {
		t.Fatalf("sample Secret: %v; want only the placeholder private_key refused", err)
	}
	if _, _, err := userDataItem(merged); err != nil {
		t.Fatalf("sample Secret: %v", err)
	}
}
