package gcp

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/drivertest"
	"github.com/machinist-io/machinist/core/registry"
)

// published reads a file of testdata/gardener-published, checking it is the file as published.
func published(t testing.TB, name, sum string) []byte {
	t.Helper()
	path := "testdata/gardener-published/" + name
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprintf("%x", sha256.Sum256(raw)); got != sum {
		t.Fatalf("%s is not the published file (sha256 %s): restore it, see its README.md", path, got)
	}
	return raw
}

// TestGardenerPublishedSample reads Gardener's own sample MachineClass as Gardener's provider
// does: every field is read (the secretRef it nests in providerSpec is ignored, with a warning),
// it validates, and the instance built from it carries what the sample says.
func TestGardenerPublishedSample(t *testing.T) {
	raw := published(t, "machine-class.yaml", "cc52645ee1eee02931790ccffe1143bc3f9c08bfa0b167bb0ba53b52c0c87b10")
	var class v1alpha1.MachineClass
	if err := yaml.UnmarshalStrict(raw, &class); err != nil {
		t.Fatalf("machine-class.yaml: %v", err)
	}
	spec, warnings, err := specs.Decode(&class, driver.Lenient)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	want := []driver.SpecWarning{{Path: "providerSpec.secretRef", Problem: driver.UnknownField}}
	if !reflect.DeepEqual(warnings, want) {
		t.Errorf("warnings %+v, want %+v", warnings, want)
	}
	var gardener ProviderSpec // what encoding/json, Gardener's decoder, reads
	if err := json.Unmarshal(class.ProviderSpec.Raw, &gardener); err != nil || !reflect.DeepEqual(*spec, gardener) {
		t.Errorf("decoded %+v\nencoding/json decodes %+v (%v)", spec, gardener, err)
	}
	if _, _, err := specs.Decode(&class, driver.Strict); !strings.Contains(driver.MessageOf(err), "providerSpec.secretRef: unknown field") {
		t.Errorf("strict: %v", err)
	}
	in, _ := buildInstance(spec, "my-project", "test-mc-1", userDataKey, "#cloud-config\n")
	nic := in.NetworkInterfaces[0]
	checks := map[string][2]any{
		"machine type":   {in.MachineType, "zones/europe-west1-b/machineTypes/n1-standard-2"},
		"network":        {nic.Network, "projects/my-project/global/networks/network-name"},
		"subnetwork":     {nic.Subnetwork, "regions/europe-west1/subnetworks/sub-net-name"},
		"stack type":     {nic.StackType, "IPV4_IPV6"},
		"alias range":    {nic.AliasIpRanges[0].SubnetworkRangeName + nic.AliasIpRanges[0].IpCidrRange, "ipv4-cidr-range/24"},
		"external IP":    {len(nic.AccessConfigs), 1},
		"boot image":     {in.Disks[0].InitializeParams.SourceImage, "projects/coreos-cloud/global/images/coreos-stable-1688-5-3-v20180403"},
		"disk type":      {in.Disks[0].InitializeParams.DiskType, "zones/europe-west1-b/diskTypes/pd-standard"},
		"metadata":       {in.Metadata.Items[0].Key + "," + in.Metadata.Items[1].Key + "=" + *in.Metadata.Items[1].Value, "user-data,ash=my-value"},
		"tags":           {strings.Join(in.Tags.Items, ","), "kubernetes-io-cluster-test-mc,kubernetes-io-role-mcm,test-mc"},
		"service scopes": {in.ServiceAccounts[0].Scopes[0], "https://www.googleapis.com/auth/compute"},
		"can ip forward": {in.CanIpForward, true},
		"maintenance":    {in.Scheduling.OnHostMaintenance + fmt.Sprint(*in.Scheduling.AutomaticRestart), "MIGRATEtrue"},
	}
	for what, c := range checks {
		if !reflect.DeepEqual(c[0], c[1]) {
			t.Errorf("%s = %v, want %v", what, c[0], c[1])
		}
	}
	drivertest.CheckJSONFields(t, "testdata/gardener-published/fields.txt", reflect.TypeFor[ProviderSpec]())
}

// TestGardenerPublishedSecretKeys: the keys of Gardener's sample secret are the keys machinist
// reads (its values are placeholders, not base64).
func TestGardenerPublishedSecretKeys(t *testing.T) {
	raw := published(t, "secret.yaml", "428c76cefba0c7b650e53961327a8791d80f8f9af74fcf902d98ed20abf3fe9c")
	var s struct {
		Data map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal(raw, &s); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Data[KeyUserData]; !ok {
		t.Errorf("the sample has no %s: %v", KeyUserData, s.Data)
	}
	if _, ok := s.Data[KeyServiceAccountJSON]; !ok {
		t.Errorf("the sample has no %s: %v", KeyServiceAccountJSON, s.Data)
	}
	if !strings.Contains(string(raw), "# "+KeyServiceAccountJSONAlternative+":") {
		t.Errorf("the sample's comment names no %s", KeyServiceAccountJSONAlternative)
	}
}

func TestInvalidSpecsNameTheField(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*ProviderSpec)
		field  string
	}{
		{"no machine type", func(s *ProviderSpec) { s.MachineType = "" }, "providerSpec.machineType: Required"},
		{"no zone", func(s *ProviderSpec) { s.Zone = "" }, "providerSpec.zone: Required"},
		{"zone of another region", func(s *ProviderSpec) { s.Zone = "us-central1-a" }, "providerSpec.zone: Invalid"},
		{"no region", func(s *ProviderSpec) { s.Region = "" }, "providerSpec.region: Required"},
		{"no disks", func(s *ProviderSpec) { s.Disks = nil }, "providerSpec.disks: Required"},
		{"no boot disk", func(s *ProviderSpec) { s.Disks[0].Boot = false }, "providerSpec.disks[0].boot"},
		{"boot disk without image", func(s *ProviderSpec) { s.Disks[0].Image = "" }, "providerSpec.disks[0].image: Required"},
		{"scratch interface", func(s *ProviderSpec) { s.Disks = append(s.Disks, &Disk{Type: "SCRATCH", Interface: "IDE"}) }, "providerSpec.disks[1].interface: Unsupported"},
		{"kms key", func(s *ProviderSpec) { s.Disks[0].Encryption = &DiskEncryption{KmsKeyName: " "} }, "providerSpec.disks[0].encryption.kmsKeyName: Required"},
		{"no network interface", func(s *ProviderSpec) { s.NetworkInterfaces = nil }, "providerSpec.networkInterfaces: Required"},
		{"interface without network", func(s *ProviderSpec) { s.NetworkInterfaces[0].Subnetwork = "" }, "providerSpec.networkInterfaces[0].subnetwork: Required"},
		{"stack type", func(s *ProviderSpec) { s.NetworkInterfaces[0].StackType = "IPV6_ONLY" }, "providerSpec.networkInterfaces[0].stackType: Unsupported"},
		{"alias range", func(s *ProviderSpec) { s.NetworkInterfaces[0].IpCidrRange = "24" }, "providerSpec.networkInterfaces[0].ipCidrRange: Invalid"},
		{"user-data in metadata", func(s *ProviderSpec) { s.Metadata = append(s.Metadata, &Metadata{Key: "user-data"}) }, "providerSpec.metadata[1].key: Forbidden"},
		{"gpu without type", func(s *ProviderSpec) { s.Gpu = &GPU{Count: 1}; s.Scheduling.OnHostMaintenance = "TERMINATE" }, "providerSpec.gpu.acceleratorType: Required"},
		{"gpu with live migration", func(s *ProviderSpec) { s.Gpu = &GPU{AcceleratorType: "nvidia-tesla-t4", Count: 1} }, "providerSpec.scheduling.onHostMaintenance: Forbidden"},
		{"maintenance", func(s *ProviderSpec) { s.Scheduling.OnHostMaintenance = "" }, "providerSpec.scheduling.onHostMaintenance: Unsupported"},
		{"spot restarting", func(s *ProviderSpec) {
			s.Scheduling = Scheduling{ProvisioningModel: "SPOT", AutomaticRestart: true, OnHostMaintenance: "TERMINATE"}
		}, "providerSpec.scheduling.automaticRestart: Invalid"},
		{"termination action without spot", func(s *ProviderSpec) { s.Scheduling.InstanceTerminationAction = "DELETE" }, "providerSpec.scheduling.instanceTerminationAction: Forbidden"},
		{"label key", func(s *ProviderSpec) { s.Labels["Name"] = "x" }, "providerSpec.labels[Name]: Invalid"},
		{"no cluster tag", func(s *ProviderSpec) { s.Tags = []string{roleTag} }, "kubernetes-io-cluster-"},
		{"no role tag", func(s *ProviderSpec) { s.Tags = []string{clusterTag} }, "kubernetes-io-role-"},
		{"bad tag", func(s *ProviderSpec) { s.Tags = append(s.Tags, "Not_A_Tag") }, "providerSpec.tags[3]: Invalid"},
		{"two service accounts", func(s *ProviderSpec) { s.ServiceAccounts = append(s.ServiceAccounts, s.ServiceAccounts[0]) }, "providerSpec.serviceAccounts: Too many"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := baseSpec()
			tc.mutate(s)
			_, _, err := specs.Decode(testClass("bad", s), driver.Lenient)
			if driver.CodeOf(err) != driver.InvalidArgument || !strings.Contains(driver.MessageOf(err), tc.field) {
				t.Fatalf("err = %v, want InvalidArgument naming %q", err, tc.field)
			}
		})
	}
	t.Run("wrong type", func(t *testing.T) {
		class := testClass("bad", baseSpec())
		class.ProviderSpec.Raw = []byte(`{"machineType": 4}`)
		_, _, err := specs.Decode(class, driver.Lenient)
		if driver.CodeOf(err) != driver.InvalidArgument || !strings.Contains(driver.MessageOf(err), "machineType") {
			t.Fatalf("err = %v", err)
		}
	})
}

// Spot VMs (machinist's addition) reach the instance's scheduling.
func TestSpotScheduling(t *testing.T) {
	s := baseSpec()
	s.Scheduling = Scheduling{ProvisioningModel: "SPOT", InstanceTerminationAction: "DELETE", OnHostMaintenance: "TERMINATE"}
	spec, _, err := specs.Decode(testClass("spot", s), driver.Strict)
	if err != nil {
		t.Fatal(err)
	}
	in, _ := buildInstance(spec, "p", "m-1", userDataKey, "#cloud-config")
	if sc := in.Scheduling; sc.ProvisioningModel != "SPOT" || sc.InstanceTerminationAction != "DELETE" || *sc.AutomaticRestart || sc.OnHostMaintenance != "TERMINATE" {
		t.Errorf("scheduling = %+v", sc)
	}
}

// userData goes where Gardener's provider puts it: user-data for a cloud-config, startup-script
// otherwise; a metadata item of the same key is refused naming it.
func TestUserDataMetadata(t *testing.T) {
	for data, key := range map[string]string{"#cloud-config\nhostname: x\n": "user-data", "#!/bin/bash\necho hi\n": "startup-script"} {
		secret := &corev1.Secret{Data: map[string][]byte{KeyUserData: []byte(data)}}
		k, v, err := userDataItem(secret)
		if err != nil || k != key || v != data {
			t.Errorf("userDataItem(%q) = %s, %q, %v; want %s", data, k, v, err, key)
		}
	}
	if _, _, err := userDataItem(&corev1.Secret{}); driver.CodeOf(err) != driver.InvalidArgument || !strings.Contains(driver.MessageOf(err), "secret.data[userData]") {
		t.Errorf("no userData: %v", err)
	}
	e := newTestEnv(t)
	e.secret.Data[KeyUserData] = []byte("#!/bin/bash\necho hi\n")
	class := e.classWith("scripted", func(s *ProviderSpec) {
		s.Metadata = append(s.Metadata, &Metadata{Key: "startup-script"})
	})
	_, err := e.createIn(t.Context(), class, "m-1")
	if driver.CodeOf(err) != driver.InvalidArgument || !strings.Contains(driver.MessageOf(err), "providerSpec.metadata[1].key startup-script") {
		t.Fatalf("err = %v, want InvalidArgument naming the metadata item", err)
	}
	e.class = e.classWith("scripted", func(*ProviderSpec) {})
	e.mustCreate(t, "m-2")
	in, _ := e.cloud.Instance(testZone, "m-2")
	if got := in.Metadata.Items[0]; got.Key != "startup-script" || *got.Value != "#!/bin/bash\necho hi\n" {
		t.Errorf("metadata[0] = %s=%q", got.Key, *got.Value)
	}
}

// The registry's Env.SpecMode reaches the driver: a strict driver refuses a mis-cased field
// before any call to Google; CheckSpec reports it as a warning in lenient mode.
func TestSpecModeFromTheRegistry(t *testing.T) {
	var m map[string]any
	raw, _ := json.Marshal(baseSpec())
	_ = json.Unmarshal(raw, &m)
	m["MachineType"] = m["machineType"]
	delete(m, "machineType")
	raw, _ = json.Marshal(m)
	class := testClass("mis-cased", baseSpec())
	class.ProviderSpec.Raw = raw

	strict, err := registry.Open("GCP", registry.Env{SpecMode: driver.Strict})
	if err != nil {
		t.Fatal(err)
	}
	_, err = strict.CreateMachine(t.Context(), &driver.CreateMachineRequest{Machine: machine("m-1"), MachineClass: class, Secret: &corev1.Secret{}})
	if driver.CodeOf(err) != driver.InvalidArgument || !strings.Contains(driver.MessageOf(err), "providerSpec.MachineType: field name differs in case from machineType") {
		t.Fatalf("strict CreateMachine = %v", err)
	}
	reg, _ := registry.Lookup("gcp")
	warnings, err := reg.CheckSpec(class, driver.Lenient)
	if err != nil || len(warnings) != 1 || warnings[0].Field != "machineType" {
		t.Fatalf("CheckSpec: %v %v", warnings, err)
	}
}

func TestSecretProblemsNameTheKey(t *testing.T) {
	e := newTestEnv(t)
	key := e.secret.Data[KeyServiceAccountJSON]
	var sa map[string]any
	_ = json.Unmarshal(key, &sa)
	with := func(change func(map[string]any)) []byte {
		m := map[string]any{}
		for k, v := range sa {
			m[k] = v
		}
		change(m)
		b, _ := json.Marshal(m)
		return b
	}
	cases := map[string]struct {
		data map[string][]byte
		want string
	}{
		"no credentials":  {map[string][]byte{KeyUserData: []byte("x")}, "secret.data[serviceAccountJSON]: Required"},
		"not JSON":        {map[string][]byte{KeyServiceAccountJSON: []byte("drivertest-wrong")}, "not valid JSON"},
		"unknown type":    {map[string][]byte{KeyServiceAccountJSON: with(func(m map[string]any) { m["type"] = "authorized_user" })}, "secret.data[serviceAccountJSON].type: Unsupported value"},
		"forbidden field": {map[string][]byte{KeyServiceAccountJSON: with(func(m map[string]any) { m["quota_project_id"] = "x" })}, "fields quota_project_id are not allowed"},
		"no project":      {map[string][]byte{KeyServiceAccountJSON: with(func(m map[string]any) { delete(m, "project_id") })}, "no project_id"},
		"broken private key": {map[string][]byte{KeyServiceAccountJSON: with(func(m map[string]any) {
			m["private_key"] = "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"
		})}, "not a PEM RSA private key"},
		"plain http endpoint": {map[string][]byte{KeyServiceAccountJSON: key, KeyComputeEndpoint: []byte("http://127.0.0.1:1/compute/v1/")},
			"secret.data[computeEndpoint]: Invalid value"},
		"token_uri elsewhere than the endpoint": {map[string][]byte{KeyServiceAccountJSON: key, KeyComputeEndpoint: []byte("https://compute.example.com/compute/v1/")},
			"token_uri must be an https URL on the same host"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := credentialsFrom(&corev1.Secret{Data: tc.data}, DefaultWorkloadIdentityTokenFile)
			if driver.CodeOf(err) != driver.InvalidArgument || !strings.Contains(driver.MessageOf(err), tc.want) {
				t.Fatalf("err = %v, want InvalidArgument with %q", err, tc.want)
			}
			if pk := privateKeyOf(t, key); strings.Contains(err.Error(), pk[40:80]) {
				t.Error("the error shows the private key")
			}
		})
	}
}
