package aws

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/registry"
)

func classRaw(raw string) *v1alpha1.MachineClass {
	c := testClass("workers", baseSpec())
	c.ProviderSpec = runtime.RawExtension{Raw: []byte(raw)}
	return c
}

// TestGardenerProviderSpecsDecodeUnchanged decodes specs in the shape Gardener writes and checks
// that every field they set survives the decode, strictly and without warnings, and that the
// RunInstances request can be built from them.
func TestGardenerProviderSpecsDecodeUnchanged(t *testing.T) {
	files, _ := filepath.Glob("testdata/gardener-*.json")
	if len(files) < 2 {
		t.Fatalf("found %d samples", len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			spec, warnings, err := specs.Decode(classRaw(string(raw)), driver.Strict)
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
			input := runInput(spec, "m-1", []byte("#cloud-config"), "/dev/xvda", nil)
			if *input.BlockDeviceMappings[0].DeviceName != "/dev/xvda" || len(input.NetworkInterfaces) != len(spec.NetworkInterfaces) {
				t.Errorf("RunInstances input %+v", input)
			}
		})
	}
}

// subset reports whether every leaf of a is in b with the same value ("" and false, which the
// spec omits when empty, match an absent field).
func subset(a, b any, path string) (string, bool) {
	switch av := a.(type) {
	case map[string]any:
		bv, _ := b.(map[string]any)
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
	case string:
		if av == "" && b == nil {
			return "", true
		}
	case bool:
		if !av && b == nil {
			return "", true
		}
	}
	if !reflect.DeepEqual(a, b) {
		return path, false
	}
	return "", true
}

// gardenerFields are the JSON names of Gardener's AWSProviderSpec and its nested types
// (machine-controller-manager-provider-aws pkg/aws/apis/aws_provider_spec.go at the commit
// README.md names). The spec must have exactly these, so a class Gardener accepts decodes here
// without warnings and none of its fields is dropped.
var gardenerFields = []string{
	"apiVersion", "ami", "blockDevices", "blockDevices.deviceName", "blockDevices.ebs",
	"blockDevices.ebs.deleteOnTermination", "blockDevices.ebs.encrypted", "blockDevices.ebs.iops",
	"blockDevices.ebs.throughput", "blockDevices.ebs.kmsKeyID", "blockDevices.ebs.snapshotID",
	"blockDevices.ebs.volumeSize", "blockDevices.ebs.volumeType", "blockDevices.noDevice", "blockDevices.virtualName",
	"capacityReservation", "capacityReservation.capacityReservationPreference", "capacityReservation.capacityReservationId",
	"capacityReservation.capacityReservationResourceGroupArn", "ebsOptimized", "iam", "iam.arn", "iam.name",
	"machineType", "keyName", "monitoring", "networkInterfaces", "networkInterfaces.associatePublicIPAddress",
	"networkInterfaces.ipv6AddressCount", "networkInterfaces.ipv6PrefixCount", "networkInterfaces.deleteOnTermination",
	"networkInterfaces.description", "networkInterfaces.securityGroupIDs", "networkInterfaces.subnetID",
	"networkInterfaces.interfaceType", "networkInterfaces.networkCardIndex", "networkInterfaces.deviceIndex",
	"networkInterfaces.primaryIpv6", "region", "spotPrice", "srcAndDstChecksEnabled", "tags",
	"instanceMetadataOptions", "instanceMetadataOptions.httpEndpoint", "instanceMetadataOptions.httpPutResponseHopLimit",
	"instanceMetadataOptions.httpTokens", "instanceMetadataOptions.httpProtocolIpv6", "cpuOptions", "cpuOptions.coreCount",
	"cpuOptions.threadsPerCore", "cpuOptions.amdSevSnp", "placement", "placement.groupId", "placement.tenancy",
	"placement.hostId", "placement.partitionNumber", "placement.affinity", "instanceMarketOptions", "instanceMarketOptions.marketType",
}

func TestSpecFieldsAreGardeners(t *testing.T) {
	var got []string
	var walk func(typ reflect.Type, prefix string)
	walk = func(typ reflect.Type, prefix string) {
		for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice {
			typ = typ.Elem()
		}
		if typ.Kind() != reflect.Struct {
			return
		}
		for i := range typ.NumField() {
			name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			got = append(got, prefix+name)
			walk(typ.Field(i).Type, prefix+name+".")
		}
	}
	walk(reflect.TypeOf(ProviderSpec{}), "")
	want := append([]string(nil), gardenerFields...)
	sort.Strings(got)
	sort.Strings(want)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("spec fields differ from Gardener's:\n got %v\nwant %v", got, want)
	}
}

// TestLenientAndStrictDecoding: as Gardener's provider (encoding/json), unknown fields are
// ignored and mis-cased names read, each with a warning; strict mode refuses them.
func TestLenientAndStrictDecoding(t *testing.T) {
	spec := baseSpec()
	raw, _ := json.Marshal(spec)
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	m["MachineType"] = m["machineType"]
	delete(m, "machineType")
	m["spotprice"] = "0.1"
	m["subnet"] = "subnet-typo"
	raw, _ = json.Marshal(m)

	got, warnings, err := specs.Decode(classRaw(string(raw)), driver.Lenient)
	if err != nil {
		t.Fatal(err)
	}
	if got.MachineType != "m5.large" || got.SpotPrice == nil || *got.SpotPrice != "0.1" {
		t.Errorf("lenient decode = %+v", got)
	}
	paths := map[string]driver.SpecProblem{}
	for _, w := range warnings {
		paths[w.Path] = w.Problem
	}
	want := map[string]driver.SpecProblem{"providerSpec.MachineType": driver.CaseMismatch, "providerSpec.spotprice": driver.CaseMismatch, "providerSpec.subnet": driver.UnknownField}
	if !reflect.DeepEqual(paths, want) {
		t.Errorf("warnings %v, want %v", paths, want)
	}
	_, _, err = specs.Decode(classRaw(string(raw)), driver.Strict)
	if driver.CodeOf(err) != driver.InvalidArgument || !strings.Contains(driver.MessageOf(err), "providerSpec.subnet") {
		t.Fatalf("strict decode = %v", err)
	}
	// The registry's CheckSpec is the same decode.
	reg, ok := registry.Lookup(ProviderName)
	if !ok || reg.CheckSpec == nil {
		t.Fatal("the aws provider is not registered with a CheckSpec")
	}
	if w, err := reg.CheckSpec(classRaw(string(raw)), driver.Lenient); err != nil || len(w) != 3 {
		t.Errorf("CheckSpec = %v, %v", w, err)
	}
}

// TestValidation names each bad field, as Gardener's validation does, and says what to do.
func TestValidation(t *testing.T) {
	cases := map[string]struct {
		mutate   func(*ProviderSpec)
		mentions []string
	}{
		"no ami":               {func(s *ProviderSpec) { s.AMI = "" }, []string{"providerSpec.ami"}},
		"no region":            {func(s *ProviderSpec) { s.Region = "" }, []string{"providerSpec.region"}},
		"bad region":           {func(s *ProviderSpec) { s.Region = "Frankfurt" }, []string{"providerSpec.region", "eu-west-1"}},
		"region not a label":   {func(s *ProviderSpec) { s.Region = "eu-west-1.example.com" }, []string{"providerSpec.region", "hyphens"}},
		"no machine type":      {func(s *ProviderSpec) { s.MachineType = "" }, []string{"providerSpec.machineType"}},
		"no iam":               {func(s *ProviderSpec) { s.IAM = IAMProfile{} }, []string{"providerSpec.iam"}},
		"both iam":             {func(s *ProviderSpec) { s.IAM = IAMProfile{Name: "a", ARN: "b"} }, []string{"providerSpec.iam", "exactly one"}},
		"no block devices":     {func(s *ProviderSpec) { s.BlockDevices = nil }, []string{"providerSpec.blockDevices", "/root"}},
		"two roots":            {func(s *ProviderSpec) { s.BlockDevices[1].DeviceName = "/root" }, []string{"providerSpec.blockDevices", "exactly one"}},
		"bad device name":      {func(s *ProviderSpec) { s.BlockDevices[1].DeviceName = "/dev/foo" }, []string{"providerSpec.blockDevices[1].deviceName"}},
		"bad volume type":      {func(s *ProviderSpec) { s.BlockDevices[0].Ebs.VolumeType = "ssd" }, []string{"providerSpec.blockDevices[0].ebs.volumeType", "gp3"}},
		"no volume size":       {func(s *ProviderSpec) { s.BlockDevices[0].Ebs.VolumeSize = 0 }, []string{"providerSpec.blockDevices[0].ebs.volumeSize"}},
		"io1 without iops":     {func(s *ProviderSpec) { s.BlockDevices[0].Ebs.VolumeType = "io1" }, []string{"providerSpec.blockDevices[0].ebs.iops"}},
		"no interfaces":        {func(s *ProviderSpec) { s.NetworkInterfaces = nil }, []string{"providerSpec.networkInterfaces"}},
		"no subnet":            {func(s *ProviderSpec) { s.NetworkInterfaces[0].SubnetID = "" }, []string{"providerSpec.networkInterfaces[0].subnetID"}},
		"no security group":    {func(s *ProviderSpec) { s.NetworkInterfaces[0].SecurityGroupIDs = nil }, []string{"providerSpec.networkInterfaces[0].securityGroupIDs"}},
		"blank security group": {func(s *ProviderSpec) { s.NetworkInterfaces[0].SecurityGroupIDs = []string{""} }, []string{"providerSpec.networkInterfaces[0].securityGroupIDs[0]"}},
		"bad interface type":   {func(s *ProviderSpec) { v := "fast"; s.NetworkInterfaces[0].InterfaceType = &v }, []string{"providerSpec.networkInterfaces[0].interfaceType"}},
		"no cluster tag":       {func(s *ProviderSpec) { delete(s.Tags, clusterTag) }, []string{"kubernetes.io/cluster/<cluster>"}},
		"no role tag":          {func(s *ProviderSpec) { delete(s.Tags, roleTag) }, []string{"kubernetes.io/role/<role>"}},
		"reserved tag":         {func(s *ProviderSpec) { s.Tags["aws:owner"] = "x" }, []string{"providerSpec.tags[aws:owner]", "reserved"}},
		"bad hop limit":        {func(s *ProviderSpec) { v := int32(65); s.InstanceMetadataOptions.HTTPPutResponseHopLimit = &v }, []string{"providerSpec.instanceMetadataOptions.httpPutResponseHopLimit"}},
		"bad http tokens":      {func(s *ProviderSpec) { s.InstanceMetadataOptions.HTTPTokens = "always" }, []string{"providerSpec.instanceMetadataOptions.httpTokens"}},
		"cores without threads": {func(s *ProviderSpec) { v := int32(2); s.CPUOptions = &CPUOptions{CoreCount: &v} },
			[]string{"providerSpec.cpuOptions.threadsPerCore"}},
		"bad threads": {func(s *ProviderSpec) {
			c, th := int32(2), int32(4)
			s.CPUOptions = &CPUOptions{CoreCount: &c, ThreadsPerCore: &th}
		},
			[]string{"providerSpec.cpuOptions.threadsPerCore"}},
		"host without tenancy": {func(s *ProviderSpec) { h := "h-1"; s.Placement = &Placement{HostID: &h} }, []string{"providerSpec.placement.hostId"}},
		"bad market":           {func(s *ProviderSpec) { s.InstanceMarketOptions = &InstanceMarketOptions{MarketType: "cheap"} }, []string{"providerSpec.instanceMarketOptions.marketType"}},
		"bad spot price":       {func(s *ProviderSpec) { v := "cheap"; s.SpotPrice = &v }, []string{"providerSpec.spotPrice"}},
		"reservation and preference": {func(s *ProviderSpec) {
			id := "cr-1"
			s.CapacityReservationTarget = &CapacityReservationTarget{CapacityReservationPreference: "open", CapacityReservationID: &id}
		}, []string{"providerSpec.capacityReservation.capacityReservationPreference"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := baseSpec()
			tc.mutate(s)
			_, _, err := specs.Decode(testClass("workers", s), driver.Lenient)
			if driver.CodeOf(err) != driver.InvalidArgument {
				t.Fatalf("decode = %v, want InvalidArgument", err)
			}
			for _, m := range tc.mentions {
				if !strings.Contains(driver.MessageOf(err), m) {
					t.Errorf("message %q does not mention %q", driver.MessageOf(err), m)
				}
			}
		})
	}
	// A wrong provider is refused before anything else.
	c := testClass("workers", baseSpec())
	c.Provider = "Azure"
	if _, _, err := specs.Decode(c, driver.Lenient); driver.CodeOf(err) != driver.InvalidArgument || !strings.Contains(driver.MessageOf(err), "aws") {
		t.Errorf("wrong provider = %v", err)
	}
}

// TestRegions: a region is checked as the bundled aws-sdk-go-v2 checks it (a DNS label), not
// against a list: the partitions' regions (eusc-de-east-1 of the European Sovereign Cloud among
// them) decode, and the SDK resolves each to its partition's endpoint.
func TestRegions(t *testing.T) {
	resolver := ec2.NewDefaultEndpointResolverV2()
	for region, host := range map[string]string{
		"eu-west-1": "ec2.eu-west-1.amazonaws.com", "eusc-de-east-1": "ec2.eusc-de-east-1.amazonaws.eu",
		"us-gov-west-1": "ec2.us-gov-west-1.amazonaws.com", "cn-north-1": "ec2.cn-north-1.amazonaws.com.cn",
		"us-isob-east-1": "ec2.us-isob-east-1.sc2s.sgov.gov", "il-central-1": "ec2.il-central-1.amazonaws.com",
		"mx-central-1": "ec2.mx-central-1.amazonaws.com",
	} {
		s := baseSpec()
		s.Region = region
		if _, _, err := specs.Decode(testClass("workers", s), driver.Strict); err != nil {
			t.Errorf("region %s: %v", region, err)
		}
		ep, err := resolver.ResolveEndpoint(context.Background(), ec2.EndpointParameters{Region: &region, UseFIPS: aws.Bool(false), UseDualStack: aws.Bool(false)})
		if err != nil || ep.URI.Host != host {
			t.Errorf("the SDK resolves region %s to %v (%v), want %s", region, ep.URI.Host, err, host)
		}
	}
}
