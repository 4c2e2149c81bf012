package azure

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
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
			spec, err := decodeSpec(testClassRaw(raw))
			if err != nil {
				t.Fatalf("decode: %v", err)
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
			if deref(vm.Properties.OSProfile.ComputerName) != "m-1" {
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
		{"unknown field", func(m map[string]any) { m["vmSize"] = "x" }, `unknown field "vmSize"`},
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
			_, err := decodeSpec(testClassRaw(raw))
			if driver.CodeOf(err) != driver.InvalidArgument || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("err = %v, want InvalidArgument naming %s", err, tc.field)
			}
		})
	}
	// A class of another provider is refused before decoding.
	c := testClass("x", baseSpec())
	c.Provider = "OpenStack"
	if _, err := decodeSpec(c); driver.CodeOf(err) != driver.InvalidArgument {
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
	raw, _ := json.Marshal(baseSpec())
	f.Add(raw)
	f.Fuzz(func(t *testing.T, data []byte) {
		spec, err := decodeSpec(testClassRaw(data))
		if err != nil {
			if driver.CodeOf(err) != driver.InvalidArgument {
				t.Fatalf("err = %v, want InvalidArgument", err)
			}
			return
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
