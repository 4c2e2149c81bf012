package azure

import (
	"bytes"
	"os"
	"regexp"
	"strings"
	"testing"

	"k8s.io/utils/ptr"

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

// TestKubernetesSamplesDecode does the same for kubernetes/samples/azure.
func TestKubernetesSamplesDecode(t *testing.T) {
	var docs [][]byte
	for _, f := range []string{"machineclass.yaml", "secret.yaml", "machinedeployment.yaml"} {
		raw, err := os.ReadFile("../../kubernetes/samples/azure/" + f)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, bytes.Split(raw, []byte("\n---\n"))...)
	}
	checkSample(t, docs)
}

func checkSample(t *testing.T, docs [][]byte) {
	t.Helper()
	class, merged := drivertest.SampleObjects(t, docs)
	spec, _, err := specs.Decode(class, driver.Strict)
	if err != nil {
		t.Fatalf("sample MachineClass: %v", err)
	}
	if spec.clusterTag() == "" || !strings.HasPrefix(ptr.Deref(spec.Properties.StorageProfile.ImageReference.URN, ""), "sap:") {
		t.Errorf("decoded spec = %+v", spec)
	}
	if _, err := credentialsFrom(merged); err != nil {
		t.Fatalf("sample Secret: %v", err)
	}
	if s, err := readSecret(merged); err != nil {
		t.Fatalf("sample Secret: %v", err)
	} else if _, err := s.UserData(); err != nil {
		t.Fatalf("sample Secret: %v", err)
	}
}
