package gcp

import (
	"bytes"
	"os"
	"regexp"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/drivertest"
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
	if _, _, err := specs.Decode(&class, driver.Strict); err != nil {
		t.Fatalf("fakecloud class: %v", err)
	}
}

func checkSample(t *testing.T, docs [][]byte) {
	t.Helper()
	class, merged := drivertest.SampleObjects(t, docs)
	spec, _, err := specs.Decode(class, driver.Strict)
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
