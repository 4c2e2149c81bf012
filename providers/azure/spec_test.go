package azure

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/drivertest"
	"github.com/machinist-io/machinist/core/registry"
)

// TestGardenerProviderSpecsDecodeUnchanged decodes provider specs written for Gardener's Azure
// provider and checks that every field they set survives the decode (nothing dropped or renamed).
func TestGardenerProviderSpecsDecodeUnchanged(t *testing.T) {
	files, _ := filepath.Glob("testdata/gardener-*.json")
	if len(files) < 4 {
		t.Fatalf("found %d samples", len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			spec, warnings, err := specs.Decode(testClassRaw(raw), driver.Strict)
			if err != nil || len(warnings) > 0 {
				t.Fatalf("decode: %v %v", warnings, err)
			}
			back, _ := json.Marshal(spec)
			var in, out any
			_ = json.Unmarshal(raw, &in)
			_ = json.Unmarshal(back, &out)
			if path, ok := subset(in, out, ""); !ok {
				t.Errorf("field %s did not survive the decode", path)
			}
			// Building the VM from it must work too.
			lun := map[int32]string{}
			for _, d := range spec.Properties.StorageProfile.DataDisks {
				if d.ImageRef != nil {
					lun[*d.Lun] = "/subscriptions/x/resourceGroups/rg/providers/Microsoft.Compute/disks/d"
				}
			}
			vm := vmParams(spec, "m-1", "/nic", "Y2xvdWQtY29uZmln", nil, nil, lun)
			if ptr.Deref(vm.Properties.OSProfile.ComputerName, "") != "m-1" {
				t.Error("vmParams did not name the VM")
			}
		})
	}
}

// subset reports whether every leaf of a is in b with the same value.
func subset(a, b any, path string) (string, bool) {
	switch av := a.(type) {
	case map[string]any:
		bv, ok := b.(map[string]any)
		if !ok {
			return path, false
		}
		for k, v := range av {
			if p, ok := subset(v, bv[k], path+"."+k); !ok {
				return p, false
			}
		}
		return "", true
	case []any:
		bv, ok := b.([]any)
		if !ok || len(bv) != len(av) {
			return path, false
		}
		for i := range av {
			if p, ok := subset(av[i], bv[i], path+"[]"); !ok {
				return p, false
			}
		}
		return "", true
	default:
		// Zero values may be dropped by omitempty.
		if b == nil && (a == false || a == "" || a == float64(0)) {
			return "", true
		}
		return path, reflect.DeepEqual(a, b)
	}
}

func testClassRaw(raw []byte) *v1alpha1.MachineClass {
	c := testClass("sample", baseSpec())
	c.ProviderSpec.Raw = raw
	return c
}

func TestInvalidSpecsNameTheField(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(map[string]any)
		field  string
	}{
		{"misplaced field", func(m map[string]any) {
			m["vmSize"] = m["properties"].(map[string]any)["hardwareProfile"].(map[string]any)["vmSize"]
			prop(m, "hardwareProfile")["vmSize"] = ""
		},
			"providerSpec.vmSize: unknown field"},
		{"wrong type", func(m map[string]any) { m["location"] = 3 }, "location"},
		{"no location", func(m map[string]any) { delete(m, "location") }, "providerSpec.location"},
		{"no resource group", func(m map[string]any) { delete(m, "resourceGroup") }, "providerSpec.resourceGroup"},
		{"no vm size", func(m map[string]any) { prop(m, "hardwareProfile")["vmSize"] = "" }, "providerSpec.properties.hardwareProfile.vmSize"},
		{"no cluster tag", func(m map[string]any) { delete(m["tags"].(map[string]any), clusterTag) }, "kubernetes.io-cluster-"},
		{"no role tag", func(m map[string]any) { delete(m["tags"].(map[string]any), "kubernetes.io-role-node") }, "kubernetes.io-role-"},
		{"two images", func(m map[string]any) {
			img(m)["id"] = "/subscriptions/s/resourceGroups/r/providers/Microsoft.Compute/images/i"
		}, "providerSpec.properties.storageProfile.imageReference"},
		{"bad urn", func(m map[string]any) { img(m)["urn"] = "sap:gardenlinux" }, "imageReference.urn"},
		{"zone and availability set", func(m map[string]any) {
			prop(m)["availabilitySet"] = map[string]any{"id": "/subscriptions/s/resourceGroups/r/providers/Microsoft.Compute/availabilitySets/a"}
		}, "providerSpec.properties.zone"},
		{"zone 4", func(m map[string]any) { prop(m)["zone"] = 4 }, "providerSpec.properties.zone"},
		{"duplicate lun", func(m map[string]any) {
			sp := prop(m, "storageProfile")
			sp["dataDisks"] = append(sp["dataDisks"].([]any), map[string]any{"lun": 0, "diskSizeGB": 10, "storageAccountType": "Premium_LRS"})
		}, "providerSpec.properties.storageProfile.dataDisks[1].lun"},
		{"data disk without type", func(m map[string]any) {
			prop(m, "storageProfile")["dataDisks"].([]any)[0].(map[string]any)["storageAccountType"] = ""
		}, "dataDisks[0].storageAccountType"},
		{"os disk size", func(m map[string]any) { prop(m, "storageProfile", "osDisk")["diskSizeGB"] = 0 }, "osDisk.diskSizeGB"},
		{"caching", func(m map[string]any) { prop(m, "storageProfile", "osDisk")["caching"] = "Always" }, "osDisk.caching"},
		{"cloud", func(m map[string]any) { m["cloudConfiguration"] = map[string]any{"name": "AzureStack"} }, "cloudConfiguration.name"},
		{"identity", func(m map[string]any) { prop(m)["identityID"] = "my-identity" }, "properties.identityID"},
		{"security type", func(m map[string]any) { prop(m)["securityProfile"] = map[string]any{"securityType": "Fancy"} }, "securityProfile.securityType"},
		{"ssh key", func(m map[string]any) {
			prop(m, "osProfile", "linuxConfiguration", "ssh", "publicKeys")["keyData"] = "not a key"
		}, "publicKeys.keyData"},
		{"machine set kind", func(m map[string]any) {
			delete(prop(m), "zone")
			prop(m)["machineSet"] = map[string]any{"id": "/subscriptions/s/resourceGroups/r/providers/Microsoft.Compute/availabilitySets/a", "kind": "scaleset"}
		}, "machineSet.kind"},
		{"no subnet", func(m map[string]any) { delete(m["subnetInfo"].(map[string]any), "subnetName") }, "subnetInfo.subnetName"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var m map[string]any
			raw, _ := json.Marshal(baseSpec())
			_ = json.Unmarshal(raw, &m)
			tc.mutate(m)
			raw, _ = json.Marshal(m)
			_, _, err := specs.Decode(testClassRaw(raw), driver.Lenient)
			if driver.CodeOf(err) != driver.InvalidArgument || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("err = %v, want InvalidArgument naming %s", err, tc.field)
			}
		})
	}
	// A class of another provider is refused before decoding.
	c := testClass("x", baseSpec())
	c.Provider = "OpenStack"
	if _, _, err := specs.Decode(c, driver.Lenient); driver.CodeOf(err) != driver.InvalidArgument {
		t.Errorf("provider OpenStack: err = %v", err)
	}
}

func prop(m map[string]any, path ...string) map[string]any {
	cur := m["properties"].(map[string]any)
	for _, p := range path {
		next, ok := cur[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			cur[p] = next
		}
		cur = next
	}
	return cur
}

func img(m map[string]any) map[string]any { return prop(m, "storageProfile", "imageReference") }

// FuzzDecodeProviderSpec feeds arbitrary provider specs to the decoder: it must never panic,
// reject with InvalidArgument only, and hand a valid spec to vmParams without panicking.
func FuzzDecodeProviderSpec(f *testing.F) {
	files, _ := filepath.Glob("testdata/gardener-*.json")
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw)
	}
	f.Add(publishedSample(f).ProviderSpec.Raw)
	raw, _ := json.Marshal(baseSpec())
	f.Add(raw)
	f.Fuzz(func(t *testing.T, data []byte) {
		spec, warnings, err := specs.Decode(testClassRaw(data), driver.Lenient)
		_, _, strictErr := specs.Decode(testClassRaw(data), driver.Strict)
		if err != nil {
			if driver.CodeOf(err) != driver.InvalidArgument {
				t.Fatalf("err = %v, want InvalidArgument", err)
			}
			if strictErr == nil {
				t.Fatalf("strict mode accepts what lenient mode refuses (%v): %s", err, data)
			}
			return
		}
		// Strict mode refuses exactly the specs lenient mode warns about.
		if (strictErr != nil) != (len(warnings) > 0) {
			t.Fatalf("strict: %v, lenient warnings: %v", strictErr, warnings)
		}
		if spec.Location == "" || spec.ResourceGroup == "" || spec.clusterTag() == "" || spec.Properties.HardwareProfile.VMSize == "" {
			t.Fatalf("accepted a spec without location, resource group, cluster tag or size: %s", data)
		}
		images := map[int32]string{}
		for _, d := range spec.Properties.StorageProfile.DataDisks {
			if d.Lun == nil {
				t.Fatalf("accepted a data disk without lun: %s", data)
			}
			if d.ImageRef != nil {
				images[*d.Lun] = "/id"
			}
		}
		vm := vmParams(spec, "m-1", "/nic", "", nil, nil, images)
		if _, err := json.Marshal(vm); err != nil {
			t.Fatalf("VM of an accepted spec does not encode: %v", err)
		}
	})
}

const publishedPath = "testdata/gardener-published/machine-class.yaml"

// publishedSample is Gardener's kubernetes/machine-class.yaml, byte for byte as published.
func publishedSample(t testing.TB) *v1alpha1.MachineClass {
	t.Helper()
	raw, err := os.ReadFile(publishedPath)
	if err != nil {
		t.Fatal(err)
	}
	if sum := fmt.Sprintf("%x", sha256.Sum256(raw)); sum != "9859cb7998b677cd18c9d1acb6ebe2371a482fd67c4ba1e8f5beb11850ecb1be" {
		t.Fatalf("%s is not the published file (sha256 %s): restore it, see its README.md", publishedPath, sum)
	}
	var class v1alpha1.MachineClass
	if err := yaml.UnmarshalStrict(raw, &class); err != nil {
		t.Fatalf("%s: %v", publishedPath, err)
	}
	return &class
}

// TestGardenerPublishedSample reads Gardener's own sample MachineClass as Gardener's provider
// does: every field is read (machineSet.Kind as kind, with a warning, instead of the
// InvalidArgument machinist answered before), and the only error is the one Gardener's
// json.Unmarshal answers too, for a placeholder that is not a bool.
func TestGardenerPublishedSample(t *testing.T) {
	class := publishedSample(t)
	if err := driver.CheckProvider(class, ProviderName); err != nil {
		t.Fatal(err)
	}
	raw := class.ProviderSpec.Raw

	var spec ProviderSpec
	warnings, err := driver.DecodeSpec(class, &spec, driver.Lenient, driver.FoldedNames)
	want := []driver.SpecWarning{{Path: "providerSpec.properties.machineSet.Kind", Problem: driver.CaseMismatch, Field: "kind"}}
	if !reflect.DeepEqual(warnings, want) {
		t.Errorf("warnings %+v, want %+v", warnings, want)
	}
	var gardener ProviderSpec // what encoding/json, Gardener's decoder, answers
	stdErr := json.Unmarshal(raw, &gardener)
	if stdErr == nil || driver.CodeOf(err) != driver.InvalidArgument ||
		!strings.Contains(driver.MessageOf(err), strings.TrimPrefix(stdErr.Error(), "json: ")) ||
		!strings.Contains(driver.MessageOf(err), "acceleratedNetworking") || strings.Contains(driver.MessageOf(err), "machineSet") {
		t.Errorf("decode error %v; want only json.Unmarshal's %v", err, stdErr)
	}
	if spec.Properties.MachineSet == nil || spec.Properties.MachineSet.Kind != "<string>" || ptr.Deref(spec.Properties.Zone, 0) != 2 ||
		spec.Location != "westeurope" || spec.Properties.HardwareProfile.VMSize != "Standard_DS2_v2" ||
		ptr.Deref(spec.Properties.StorageProfile.ImageReference.URN, "") != "sap:gardenlinux:greatest:184.0.0" || !reflect.DeepEqual(spec, gardener) {
		t.Errorf("decoded %+v\nencoding/json decodes %+v", spec, gardener)
	}
	_, err = driver.DecodeSpec(class, &ProviderSpec{}, driver.Strict, driver.FoldedNames)
	if !strings.Contains(driver.MessageOf(err), "providerSpec.properties.machineSet.Kind: field name differs in case from kind") {
		t.Errorf("strict: %v", err)
	}

	// With the placeholders filled (in memory: the file stays as published) and one placement
	// kept (Gardener refuses zone, availabilitySet and machineSet together), the class is valid
	// and machineSet puts the VM in the availability set, as in Gardener.
	filled := fillPlaceholders(t, raw)
	props := filled["properties"].(map[string]any)
	delete(props, "zone")
	delete(props, "availabilitySet")
	class.ProviderSpec.Raw, _ = json.Marshal(filled)
	got, warnings, err := specs.Decode(class, driver.Lenient)
	if err != nil || !reflect.DeepEqual(warnings, want) {
		t.Fatalf("filled sample: %v %v", warnings, err)
	}
	vm := vmParams(got, "m-1", "/nic", "", nil, nil, nil)
	if vm.Properties.AvailabilitySet == nil || ptr.Deref(vm.Properties.AvailabilitySet.ID, "") != placeholderValues["properties.machineSet.id"] {
		t.Errorf("machineSet did not place the VM in the availability set: %+v", vm.Properties.AvailabilitySet)
	}
	if _, _, err := specs.Decode(class, driver.Strict); !strings.Contains(driver.MessageOf(err), "machineSet.Kind") {
		t.Errorf("strict, filled: %v", err)
	}

	drivertest.CheckJSONFields(t, "testdata/gardener-published/fields.txt", reflect.TypeFor[ProviderSpec]())
}

// placeholderValues fill the published sample's <...> placeholders, by JSON path.
var placeholderValues = map[string]any{
	"properties.networkProfile.acceleratedNetworking":                 true,
	"properties.osProfile.customData":                                 "I2Nsb3VkLWNvbmZpZw==",
	"properties.osProfile.computerName":                               "ignored",
	"properties.osProfile.linuxConfiguration.ssh.publicKeys.keyData":  "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFilledInForTheTest",
	"properties.osProfile.linuxConfiguration.ssh.publicKeys.path":     "/home/core/.ssh/authorized_keys",
	"properties.storageProfile.osDisk.managedDisk.storageAccountType": "Standard_LRS",
	"properties.identityID":                                           "/subscriptions/00000000-0000-4000-8000-0000000000a1/resourceGroups/shoot--foo--bar/providers/Microsoft.ManagedIdentity/userAssignedIdentities/workers",
	"properties.availabilitySet.id":                                   "/subscriptions/00000000-0000-4000-8000-0000000000a1/resourceGroups/shoot--foo--bar/providers/Microsoft.Compute/availabilitySets/workers",
	"properties.machineSet.id":                                        "/subscriptions/00000000-0000-4000-8000-0000000000a1/resourceGroups/shoot--foo--bar/providers/Microsoft.Compute/availabilitySets/workers",
	"properties.machineSet.Kind":                                      "availabilityset",
	"resourceGroup":                                                   "shoot--foo--bar",
	"subnetInfo.subnetName":                                           "shoot--foo--bar-nodes",
	"subnetInfo.vnetName":                                             "shoot--foo--bar",
	"tags.Name":                                                       "shoot--foo--bar",
	"tags.worker.garden.sapcloud.io_group":                            "cpu-worker",
	"tags.worker.gardener.cloud_pool":                                 "cpu-worker",
	"tags key kubernetes.io-cluster-<name>":                           "kubernetes.io-cluster-shoot--foo--bar",
}

// fillPlaceholders replaces every <...> value (and tag key) of a spec by placeholderValues and
// fails on a placeholder it has no value for.
func fillPlaceholders(t *testing.T, raw []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	isPlaceholder := func(s string) bool { return strings.HasPrefix(s, "<") && strings.HasSuffix(s, ">") }
	var walk func(v map[string]any, path string)
	walk = func(v map[string]any, path string) {
		for k, val := range v {
			p := strings.TrimPrefix(path+"."+k, ".")
			if strings.Contains(k, "<") {
				nk, ok := placeholderValues["tags key "+k].(string)
				if !ok {
					t.Fatalf("no value for the key placeholder %s", p)
				}
				delete(v, k)
				v[nk] = val
				k, p = nk, strings.TrimPrefix(path+"."+nk, ".")
			}
			switch x := val.(type) {
			case map[string]any:
				walk(x, p)
			case string:
				if isPlaceholder(x) {
					nv, ok := placeholderValues[p]
					if !ok {
						t.Fatalf("no value for the placeholder %s = %s", p, x)
					}
					v[k] = nv
				}
			}
		}
	}
	walk(m, "")
	return m
}

// The registry's Env.SpecMode reaches the driver: a strict driver refuses a mis-cased field
// before any call to Azure; CheckSpec reports it as a warning in lenient mode.
func TestSpecModeFromTheRegistry(t *testing.T) {
	var m map[string]any
	raw, _ := json.Marshal(baseSpec())
	_ = json.Unmarshal(raw, &m)
	m["ResourceGroup"] = m["resourceGroup"]
	delete(m, "resourceGroup")
	raw, _ = json.Marshal(m)
	class := testClassRaw(raw)

	strict, err := registry.Open("Azure", registry.Env{SpecMode: driver.Strict})
	if err != nil {
		t.Fatal(err)
	}
	_, err = strict.CreateMachine(t.Context(), &driver.CreateMachineRequest{Machine: machine("m-1"), MachineClass: class, Secret: testSecretObj()})
	if driver.CodeOf(err) != driver.InvalidArgument || !strings.Contains(driver.MessageOf(err), "providerSpec.ResourceGroup: field name differs in case from resourceGroup") {
		t.Fatalf("strict CreateMachine = %v", err)
	}
	reg, _ := registry.Lookup("azure")
	warnings, err := reg.CheckSpec(class, driver.Lenient)
	if err != nil || len(warnings) != 1 || warnings[0].Field != "resourceGroup" {
		t.Fatalf("CheckSpec: %v %v", warnings, err)
	}
	spec, _, err := specs.Decode(class, driver.Lenient)
	if err != nil || spec.ResourceGroup != testRG {
		t.Fatalf("lenient: %+v %v", spec, err)
	}
}
