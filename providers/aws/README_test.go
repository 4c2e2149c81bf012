package aws

import (
	"bytes"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/drivertest"
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
	class, merged := drivertest.SampleObjects(t, docs)
	spec, warnings, err := specs.Decode(class, driver.Strict)
	if err != nil || len(warnings) > 0 {
		t.Fatalf("sample MachineClass: %v %v", warnings, err)
	}
	if spec.AMI != ami || len(spec.scopeTags()) != 2 {
		t.Errorf("decoded spec = %+v", spec)
	}
	creds, secret, err := credentialsFrom(merged, false)
	if err != nil || creds.mode != staticKeys {
		t.Fatalf("sample Secret: %v (%v)", err, creds.mode)
	}
	if _, err := secret.UserData(); err != nil {
		t.Fatalf("sample Secret: %v", err)
	}
	return spec
}
