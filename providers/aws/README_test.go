package aws

import (
	"bytes"
	"os"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
)

var yamlBlock = regexp.MustCompile("(?s)```yaml\n(.*?)```")

// TestREADMESampleDecodes decodes the README's sample MachineClass and Secret with the driver's
// own decoding and validation, strictly.
func TestREADMESampleDecodes(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	var docs [][]byte
	for _, m := range yamlBlock.FindAllSubmatch(readme, -1) {
		docs = append(docs, m[1])
	}
	checkSample(t, docs, "ami-0a1b2c3d4e5f60718")
	if !strings.Contains(string(readme), gardenerCommit) {
		t.Errorf("README.md does not name the upstream commit %s it follows", gardenerCommit)
	}
}

// gardenerCommit is the commit of gardener/machine-controller-manager-provider-aws whose spec,
// validation, secret keys and samples the provider follows.
const gardenerCommit = "9dd2b7a853f552e3399b865c8c49b9c75beb03f4"

// TestGardenerSampleDecodesUnchanged decodes kubernetes/samples/aws, Gardener's published
// sample MachineClass and Secret, strictly and without warnings.
func TestGardenerSampleDecodesUnchanged(t *testing.T) {
	var docs [][]byte
	for _, f := range []string{"machineclass.yaml", "secret.yaml", "machinedeployment.yaml"} {
		raw, err := os.ReadFile("../../kubernetes/samples/aws/" + f)
		if err != nil {
			t.Fatal(err)
		}
		if f != "machinedeployment.yaml" && !bytes.Contains(raw, []byte(gardenerCommit)) {
			t.Errorf("%s does not name the upstream commit it copies", f)
		}
		docs = append(docs, bytes.Split(raw, []byte("\n---\n"))...)
	}
	spec := checkSample(t, docs, "ami-123456")
	if spec.MachineType != "t2.large" || spec.Region != "eu-east-1" || spec.SpotPrice == nil || *spec.SpotPrice != "" ||
		len(spec.BlockDevices) != 2 || spec.InstanceMetadataOptions.HTTPTokens != "optional" || spec.Tags["tag2"] != "tag2-value" {
		t.Errorf("decoded %+v", spec)
	}
}

func checkSample(t *testing.T, docs [][]byte, ami string) *ProviderSpec {
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
	spec, warnings, err := decodeSpec(class, driver.Strict)
	if err != nil || len(warnings) > 0 {
		t.Fatalf("sample MachineClass: %v %v", warnings, err)
	}
	if spec.AMI != ami || len(spec.scopeTags()) != 2 {
		t.Errorf("decoded spec = %+v", spec)
	}
	creds, err := credentialsFrom(merged)
	if err != nil || creds.mode != staticKeys {
		t.Fatalf("sample Secret: %v (%v)", err, creds.mode)
	}
	if _, err := userDataFrom(merged); err != nil {
		t.Fatalf("sample Secret: %v", err)
	}
	return spec
}
