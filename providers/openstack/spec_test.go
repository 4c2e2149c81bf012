package openstack

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/drivertest"
)

func readClass(t testing.TB, path string) *v1alpha1.MachineClass {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var class v1alpha1.MachineClass
	if err := yaml.UnmarshalStrict(b, &class); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return &class
}

// TestGardenerProviderSpecsDecodeUnchanged decodes MachineClasses written for Gardener's OpenStack
// provider, field for field.
func TestGardenerProviderSpecsDecodeUnchanged(t *testing.T) {
	minimal, _, err := decodeSpec(readClass(t, "testdata/gardener-machineclass-minimal.yaml"), driver.Lenient)
	if err != nil {
		t.Fatalf("minimal: %v", err)
	}
	if minimal.ImageID != "0e7a6cdd-51c6-4bf4-9d3b-3a8e0f4c2a11" || minimal.FlavorName != "m1.xmedium" || minimal.Region != "eu-nl-1" ||
		minimal.AvailabilityZone != "eu-nl-1b" || minimal.KeyName != "shoot--dev--alpha-ssh-publickey" ||
		minimal.NetworkID != "4c2f9a1e-7d2b-4e0f-9a6c-2b5d8e1f3a70" || minimal.PodNetworkCidr != "100.96.0.0/11" ||
		len(minimal.SecurityGroups) != 1 || len(minimal.Tags) != 2 {
		t.Errorf("minimal decoded as %+v", minimal)
	}
	if got := minimal.podCIDRs(); len(got) != 1 || got[0] != "100.96.0.0/11" {
		t.Errorf("the deprecated podNetworkCidr is not used: %v", got)
	}

	ext, _, err := decodeSpec(readClass(t, "testdata/gardener-machineclass-extension.yaml"), driver.Lenient)
	if err != nil {
		t.Fatalf("extension: %v", err)
	}
	switch {
	case ext.ImageName != "gardenlinux-1592.4" || ext.RootDiskSize != 50 || ext.RootDiskType == nil || *ext.RootDiskType != "ssd-premium":
		t.Errorf("extension image/root disk decoded as %+v", ext)
	case ext.UseConfigDrive == nil || !*ext.UseConfigDrive || ext.ServerGroupID == nil || *ext.ServerGroupID != "6e5d4c3b-2a1f-4e0d-9c8b-7a6f5e4d3c2b":
		t.Errorf("extension config drive/server group decoded as %+v", ext)
	case len(ext.subnets()) != 1 || ext.subnets()[0] != "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d":
		t.Errorf("subnetID and subnetIDs should merge into one subnet: %v", ext.subnets())
	case len(ext.podCIDRs()) != 2 || len(ext.Tags) != 6:
		t.Errorf("extension pod CIDRs %v, tags %v", ext.podCIDRs(), ext.Tags)
	}
	if got := ext.scope(); len(got) != 2 || got[0] != "kubernetes.io-cluster-shoot--prod--payments" || got[1] != "kubernetes.io-role-node" {
		t.Errorf("scope keys %v", got)
	}

	nets, _, err := decodeSpec(readClass(t, "testdata/gardener-machineclass-networks.yaml"), driver.Lenient)
	if err != nil {
		t.Fatalf("networks: %v", err)
	}
	if len(nets.Networks) != 2 || nets.Networks[0].Id == "" || nets.Networks[1].Name != "lab-pods" || !nets.Networks[1].PodNetwork {
		t.Errorf("networks decoded as %+v", nets.Networks)
	}

	// A misspelt field is ignored, as Gardener's provider ignores it, so the required field is
	// missing: the error names both.
	for _, mode := range []driver.SpecMode{driver.Lenient, driver.Strict} {
		_, warnings, err := decodeSpec(readClass(t, "testdata/gardener-machineclass-typo.yaml"), mode)
		msg := driver.MessageOf(err)
		if !driver.IsCode(err, driver.InvalidArgument) || !strings.Contains(msg, "providerSpec.spec.flavourName") {
			t.Errorf("%v: a misspelt field = %v; want InvalidArgument naming flavourName", mode, err)
		}
		if mode == driver.Lenient && !strings.Contains(msg, "providerSpec.spec.flavorName: Required value") {
			t.Errorf("lenient: a misspelt field = %v; want the missing flavorName named", err)
		}
		if len(warnings) != 1 || warnings[0].Path != "providerSpec.spec.flavourName" || warnings[0].Problem != driver.UnknownField {
			t.Errorf("%v: warnings %+v", mode, warnings)
		}
	}
}

func TestValidationNamesTheField(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*MachineProviderConfigSpec)
		raw    string
		want   []string
	}{
		{name: "no cluster and role tags", mutate: func(s *MachineProviderConfigSpec) { s.Tags = map[string]string{"team": "a"} },
			want: []string{"providerSpec.spec.tags", ClusterTagPrefix, RoleTagPrefix}},
		{name: "no role tag", mutate: func(s *MachineProviderConfigSpec) { delete(s.Tags, roleKey) }, want: []string{"providerSpec.spec.tags", RoleTagPrefix}},
		{name: "no image", mutate: func(s *MachineProviderConfigSpec) { s.ImageName = "" }, want: []string{"providerSpec.spec.imageName"}},
		{name: "required fields", mutate: func(s *MachineProviderConfigSpec) { s.Region, s.AvailabilityZone, s.FlavorName = "", "", "" },
			want: []string{"providerSpec.spec.region", "providerSpec.spec.availabilityZone", "providerSpec.spec.flavorName"}},
		{name: "network and networks", mutate: func(s *MachineProviderConfigSpec) { s.Networks = []OpenStackNetwork{{Name: "x"}} },
			want: []string{"providerSpec.spec.networks"}},
		{name: "no network", mutate: func(s *MachineProviderConfigSpec) { s.NetworkID = "" }, want: []string{"providerSpec.spec.networkID"}},
		{name: "network with id and name", mutate: func(s *MachineProviderConfigSpec) {
			s.NetworkID = ""
			s.Networks = []OpenStackNetwork{{Id: "a", Name: "b"}, {}}
		}, want: []string{"providerSpec.spec.networks[0]", "providerSpec.spec.networks[1]"}},
		{name: "subnets without network", mutate: func(s *MachineProviderConfigSpec) {
			s.NetworkID, s.SubnetIDs = "", []string{"x"}
			s.Networks = []OpenStackNetwork{{Name: "n"}}
		}, want: []string{"providerSpec.spec.subnetIDs"}},
		{name: "bad pod CIDR", mutate: func(s *MachineProviderConfigSpec) { s.PodNetworkCIDRs = []string{"100.96.0.0"} },
			want: []string{"providerSpec.spec.podNetworkCIDRs[0]"}},
		{name: "pod network without CIDRs", mutate: func(s *MachineProviderConfigSpec) {
			s.NetworkID = ""
			s.Networks = []OpenStackNetwork{{Name: "pods", PodNetwork: true}}
		}, want: []string{"providerSpec.spec.podNetworkCIDRs"}},
		{name: "negative root disk", mutate: func(s *MachineProviderConfigSpec) { s.RootDiskSize = -1 }, want: []string{"providerSpec.spec.rootDiskSize"}},
		{name: "root disk type without size", mutate: func(s *MachineProviderConfigSpec) { t := "ssd"; s.RootDiskType = &t },
			want: []string{"providerSpec.spec.rootDiskSize"}},
		{name: "server group not a UUID", mutate: func(s *MachineProviderConfigSpec) { g := "workers"; s.ServerGroupID = &g },
			want: []string{"providerSpec.spec.serverGroupID"}},
		{name: "wrong kind", raw: `{"apiVersion":"openstack.machine.gardener.cloud/v1alpha1","kind":"AWSMachineClass","spec":{}}`,
			want: []string{"providerSpec.kind"}},
		{name: "spec not wrapped", raw: `{"flavorName":"m1.small","region":"r"}`, want: []string{"flavorName", "providerSpec.spec"}},
		{name: "wrong type", raw: `{"spec":{"rootDiskSize":"50"}}`, want: []string{"rootDiskSize"}},
		{name: "duplicate field", raw: `{"spec":{"region":"a","region":"b"}}`, want: []string{"region"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			class := testClass(t)
			if tc.mutate != nil {
				class = testClass(t, tc.mutate)
			}
			if tc.raw != "" {
				class.ProviderSpec = runtime.RawExtension{Raw: []byte(tc.raw)}
			}
			_, _, err := decodeSpec(class, driver.Strict)
			if !driver.IsCode(err, driver.InvalidArgument) {
				t.Fatalf("decodeSpec = %v; want InvalidArgument", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(driver.MessageOf(err), w) {
					t.Errorf("message %q does not name %q", driver.MessageOf(err), w)
				}
			}
		})
	}
}

// TestSamplesAndREADME decodes the shipped samples, checks they are valid for the driver, and
// that the README shows them unchanged.
func TestSamplesAndREADME(t *testing.T) {
	dir := filepath.Join("..", "..", "kubernetes", "samples", "openstack")
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	class := readClass(t, filepath.Join(dir, "machineclass.yaml"))
	if err := driver.CheckProvider(class, ProviderName); err != nil {
		t.Fatal(err)
	}
	if _, warnings, err := decodeSpec(class, driver.Strict); err != nil || len(warnings) > 0 {
		t.Fatalf("sample class: %v %v", warnings, err)
	}

	raw, err := os.ReadFile(filepath.Join(dir, "secret.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	merged := &corev1.Secret{Data: map[string][]byte{}}
	for _, doc := range strings.Split(string(raw), "\n---\n") {
		var s corev1.Secret
		if err := yaml.UnmarshalStrict([]byte(doc), &s); err != nil {
			t.Fatalf("sample secret: %v", err)
		}
		for k, v := range s.StringData {
			merged.Data[k] = []byte(v)
		}
	}
	if _, err := credentialsFrom(merged); err != nil {
		t.Fatalf("sample secrets: %v", err)
	}
	if driver.SecretValue(merged, KeyUserData) == "" {
		t.Fatalf("sample secrets carry no userData")
	}

	b, err := os.ReadFile(filepath.Join(dir, "machinedeployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var md v1alpha1.MachineDeployment
	if err := yaml.UnmarshalStrict(b, &md); err != nil {
		t.Fatalf("sample MachineDeployment: %v", err)
	}
	if md.Spec.Template.Spec.Class.Name != class.Name {
		t.Errorf("the sample MachineDeployment uses class %q, want %q", md.Spec.Template.Spec.Class.Name, class.Name)
	}

	for _, name := range []string{"machineclass.yaml", "secret.yaml"} {
		content, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(readme), string(content)) {
			t.Errorf("README.md does not show kubernetes/samples/openstack/%s unchanged", name)
		}
	}
}

// FuzzDecodeProviderSpec feeds arbitrary bytes to the provider spec decoder: it must never panic,
// must reject with InvalidArgument only, and whatever it accepts must satisfy the invariants the
// driver relies on (cluster and role scope, a region, a network, a flavor, an image).
func FuzzDecodeProviderSpec(f *testing.F) {
	for _, p := range []string{"testdata/gardener-published/machine-class.yaml", "testdata/gardener-machineclass-minimal.yaml", "testdata/gardener-machineclass-extension.yaml", "testdata/gardener-machineclass-networks.yaml"} {
		class := readClass(f, p)
		f.Add(class.ProviderSpec.Raw)
	}
	base, err := json.Marshal(MachineProviderConfig{APIVersion: APIVersion, Kind: Kind, Spec: baseSpec()})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(base)
	f.Fuzz(func(t *testing.T, raw []byte) {
		class := &v1alpha1.MachineClass{Provider: "OpenStack", ProviderSpec: runtime.RawExtension{Raw: raw}}
		class.Name = "fuzz"
		spec, warnings, err := decodeSpec(class, driver.Lenient)
		_, _, strictErr := decodeSpec(class, driver.Strict)
		if err != nil {
			if !driver.IsCode(err, driver.InvalidArgument) || strings.TrimSpace(driver.MessageOf(err)) == "" {
				t.Fatalf("decodeSpec rejected with %v; want InvalidArgument with a message", err)
			}
			if strictErr == nil {
				t.Fatalf("strict mode accepts what lenient mode refuses (%v): %s", err, raw)
			}
			return
		}
		// Strict mode refuses exactly the specs lenient mode warns about.
		if (strictErr != nil) != (len(warnings) > 0) {
			t.Fatalf("strict: %v, lenient warnings: %v", strictErr, warnings)
		}
		for _, w := range warnings {
			if !strings.HasPrefix(w.Path, "providerSpec") {
				t.Fatalf("warning path %q is not relative to the class", w.Path)
			}
		}
		cluster, role := scopeKeys(spec.Tags)
		switch {
		case len(cluster) == 0 || len(role) == 0:
			t.Fatalf("accepted a spec without cluster and role tags: %s", raw)
		case spec.Region == "" || spec.FlavorName == "" || spec.AvailabilityZone == "":
			t.Fatalf("accepted a spec without region, flavor or zone: %s", raw)
		case spec.ImageID == "" && spec.ImageName == "":
			t.Fatalf("accepted a spec without an image: %s", raw)
		case (spec.NetworkID == "") == (len(spec.Networks) == 0):
			t.Fatalf("accepted a spec without exactly one of networkID and networks: %s", raw)
		case spec.RootDiskSize < 0:
			t.Fatalf("accepted a negative root disk: %s", raw)
		case len(spec.subnets()) > 0 && spec.NetworkID == "":
			t.Fatalf("accepted subnets without a network: %s", raw)
		}
		// Decoding is deterministic: the accepted spec re-encodes to a spec that decodes the same.
		again, err := json.Marshal(MachineProviderConfig{APIVersion: APIVersion, Kind: Kind, Spec: *spec})
		if err != nil {
			t.Fatal(err)
		}
		class.ProviderSpec.Raw = again
		if _, w, err := decodeSpec(class, driver.Strict); err != nil || len(w) > 0 {
			t.Fatalf("an accepted spec does not decode strictly after re-encoding: %v %v\n%s", w, err, again)
		}
	})
}

// TestGardenerPublishedSample decodes Gardener's own sample MachineClass, byte for byte as
// published, and checks machinist's spec type has every field of Gardener's.
func TestGardenerPublishedSample(t *testing.T) {
	const path = "testdata/gardener-published/machine-class.yaml"
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if sum := fmt.Sprintf("%x", sha256.Sum256(raw)); sum != "f80c498b91dab72ca7112291b7476e3e4e2436cd5d1deb8ce79dfd4e03bfd46e" {
		t.Fatalf("%s is not the published file (sha256 %s): restore it, see its README.md", path, sum)
	}
	class := readClass(t, path)
	for _, mode := range []driver.SpecMode{driver.Lenient, driver.Strict} {
		spec, warnings, err := decodeSpec(class, mode)
		if err != nil || len(warnings) > 0 {
			t.Fatalf("%v: %v %v", mode, warnings, err)
		}
		if spec.ImageID != "a40dff99-e78a-4c83-af12-26b97e13fc9f" || spec.FlavorName != "m1.xmedium" || spec.Region != "eu-nl-1" ||
			spec.AvailabilityZone != "eu-nl-1b" || spec.KeyName != "shoot--foobar--openstack" || spec.NetworkID != "378c4e98-dcf9-438a-bf7f-89d964d18793" ||
			spec.PodNetworkCidr != "100.96.0.0/11" || len(spec.SecurityGroups) != 1 || spec.SecurityGroups[0] != "shoot--foobar-openstack" ||
			spec.Tags["kubernetes.io-cluster-shoot--foobar--openstack"] != "1" || spec.Tags["kubernetes.io-role-node"] != "1" {
			t.Errorf("%v: decoded %+v", mode, spec)
		}
	}
	if err := driver.CheckProvider(class, ProviderName); err != nil {
		t.Fatal(err)
	}
	drivertest.CheckJSONFields(t, "testdata/gardener-published/fields.txt", reflect.TypeFor[MachineProviderConfig]())
}

// Mis-cased and unknown fields are ignored, as Gardener's provider (apimachinery's
// case-sensitive decoder) ignores them, and named in warnings; strict mode refuses them.
func TestSpecFieldNamesAsGardener(t *testing.T) {
	class := testClass(t)
	var m map[string]any
	if err := json.Unmarshal(class.ProviderSpec.Raw, &m); err != nil {
		t.Fatal(err)
	}
	spec := m["spec"].(map[string]any)
	spec["KeyName"] = "ignored-key"
	spec["futureField"] = map[string]any{"a": 1}
	class.ProviderSpec.Raw, _ = json.Marshal(m)

	got, warnings, err := decodeSpec(class, driver.Lenient)
	if err != nil {
		t.Fatal(err)
	}
	if got.KeyName == "ignored-key" {
		t.Errorf("KeyName was read: Gardener's case-sensitive decoder ignores it")
	}
	want := []driver.SpecWarning{
		{Path: "providerSpec.spec.KeyName", Problem: driver.UnknownField, Field: "keyName"},
		{Path: "providerSpec.spec.futureField", Problem: driver.UnknownField},
	}
	if !reflect.DeepEqual(warnings, want) {
		t.Errorf("warnings %+v, want %+v", warnings, want)
	}
	if _, _, err := decodeSpec(class, driver.Strict); !driver.IsCode(err, driver.InvalidArgument) ||
		!strings.Contains(driver.MessageOf(err), "providerSpec.spec.KeyName") || !strings.Contains(driver.MessageOf(err), "providerSpec.spec.futureField") {
		t.Errorf("strict: %v", err)
	}
	if w, err := specs.Check(class, driver.Lenient); err != nil || len(w) != 2 {
		t.Errorf("specs.Check: %v %v", w, err)
	}
}
