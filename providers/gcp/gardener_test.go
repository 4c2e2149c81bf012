package gcp

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/machinist-io/machinist/providers/kit"

	compute "google.golang.org/api/compute/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/gcp/fakegcp"
)

// The behaviours of Gardener's provider-gcp that issue 33 aligned machinist's with
// (docs/compatibility/gcp.md).

// A zone that does not offer the class's machine type (or a name Compute Engine does not know)
// is ResourceExhausted, as Gardener classifies "does not exist in zone": capacity fallback and
// Cluster Autoscaler's backoff move on to another zone or class. Nothing is left behind.
func TestMachineTypeNotInZoneIsResourceExhausted(t *testing.T) {
	for name, tc := range map[string]struct {
		machineType string
		withdraw    bool
	}{
		"withdrawn in the zone": {"a2-highgpu-1g", true},
		"unknown name":          {"n2-standrad-4", false},
	} {
		t.Run(name, func(t *testing.T) {
			e := newTestEnv(t)
			if tc.withdraw {
				e.cloud.WithdrawMachineType(testZone, tc.machineType)
			}
			_, err := e.createIn(t.Context(), e.classWith("gpu", func(s *ProviderSpec) { s.MachineType = tc.machineType }), "m-1")
			msg := driver.MessageOf(err)
			if driver.CodeOf(err) != driver.ResourceExhausted || !containsAll(msg, "does not exist in zone", `providerSpec.machineType "`+tc.machineType+`"`) {
				t.Fatalf("err = %v, want ResourceExhausted naming the field and Compute Engine's answer", err)
			}
			if left := e.leftovers("m-1"); len(left) != 0 {
				t.Errorf("left %v", left)
			}
		})
	}
	// Another zone of the region offers it: the fallback class there creates the machine.
	e := newTestEnv(t)
	e.cloud.WithdrawMachineType(testZone, "a2-highgpu-1g")
	other := e.classWith("gpu-c", func(s *ProviderSpec) { s.MachineType, s.Zone = "a2-highgpu-1g", "europe-west1-c" })
	if _, err := e.createIn(t.Context(), other, "m-2"); err != nil {
		t.Fatalf("create in the zone that offers the type: %v", err)
	}
}

// A service account key without project_id uses the secret's projectID, as Gardener's
// ExtractProject does; with neither, the error names both.
func TestKeyWithoutProjectIDUsesProjectID(t *testing.T) {
	e := newTestEnv(t)
	var key map[string]any
	if err := json.Unmarshal(e.secret.Data[KeyServiceAccountJSON], &key); err != nil {
		t.Fatal(err)
	}
	delete(key, "project_id")
	stripped, _ := json.Marshal(key)
	e.secret.Data[KeyServiceAccountJSON] = stripped
	e.secret.Data[KeyProjectID] = []byte(fakegcp.DefaultProject)
	resp := e.mustCreate(t, "m-1")
	if resp.ProviderID != "gce:///"+fakegcp.DefaultProject+"/"+testZone+"/m-1" {
		t.Errorf("ProviderID %q", resp.ProviderID)
	}
	if got := e.list(t, e.class); len(got) != 1 {
		t.Errorf("listed %v", got)
	}

	delete(e.secret.Data, KeyProjectID)
	_, err := e.create(t, "m-2")
	msg := driver.MessageOf(err)
	if driver.CodeOf(err) != driver.InvalidArgument || !containsAll(msg, "secret.data[projectID]", "no project_id") || strings.Contains(msg, "PRIVATE KEY") {
		t.Fatalf("err = %v, want InvalidArgument naming project_id and projectID", err)
	}
	e.secret.Data[KeyProjectID] = []byte("Not A Project")
	if _, err := e.create(t, "m-2"); driver.CodeOf(err) != driver.InvalidArgument || !strings.Contains(driver.MessageOf(err), "secret.data[projectID]: Invalid value") {
		t.Fatalf("err = %v, want the malformed projectID named", err)
	}
}

// A class machinist no longer accepts to create from (here: invalid in several ways, with an
// unknown field in Strict mode, and a secret without userData) still reaches the instances made
// from it: GetMachineStatus, ListMachines and DeleteMachine need only the zone and the cluster
// and role tags.
func TestClassThatNoLongerValidatesCanStillHaveItsVMsDeleted(t *testing.T) {
	e := newTestEnv(t)
	e.mustCreate(t, "m-1")
	var spec map[string]any
	if err := json.Unmarshal(e.class.ProviderSpec.Raw, &spec); err != nil {
		t.Fatal(err)
	}
	delete(spec, "machineType")
	spec["region"] = "Not A Region"
	spec["disks"] = "no longer a list"
	spec["networkInterfaces"] = []any{}
	spec["scheduling"] = map[string]any{"onHostMaintenance": "SOMETIMES"}
	spec["someFutureField"] = true
	raw, _ := json.Marshal(spec)
	broken := e.class.DeepCopy()
	broken.ProviderSpec = runtime.RawExtension{Raw: raw}
	secret := e.secret.DeepCopy()
	delete(secret.Data, KeyUserData)
	e.drv = e.newDriver(Options{Options: kit.Options{SpecMode: driver.Strict}})

	if _, err := e.drv.CreateMachine(t.Context(), &driver.CreateMachineRequest{Machine: machine("m-2"), MachineClass: broken, Secret: e.secret}); driver.CodeOf(err) != driver.InvalidArgument {
		t.Fatalf("create from the broken class: %v, want InvalidArgument", err)
	}
	st, err := e.drv.GetMachineStatus(t.Context(), &driver.GetMachineStatusRequest{Machine: machine("m-1"), MachineClass: broken, Secret: secret})
	if err != nil || st.ProviderID != "gce:///machinist-fake/europe-west1-b/m-1" {
		t.Fatalf("status: %+v, %v", st, err)
	}
	list, err := e.drv.ListMachines(t.Context(), &driver.ListMachinesRequest{MachineClass: broken, Secret: secret})
	if err != nil || list.MachineList["gce:///machinist-fake/europe-west1-b/m-1"] != "m-1" {
		t.Fatalf("list: %+v, %v", list, err)
	}
	if _, err := e.drv.DeleteMachine(t.Context(), &driver.DeleteMachineRequest{Machine: machine("m-1"), MachineClass: broken, Secret: secret}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if left := e.leftovers("m-1"); len(left) != 0 {
		t.Errorf("left %v", left)
	}

	// Without the zone or the scope tags the driver cannot tell which instances are the class's:
	// the answer names what is missing (Gardener's provider would answer NotFound and the
	// controller would forget a VM it cannot see).
	delete(spec, "zone")
	spec["tags"] = []string{"shoot--dev--alpha"}
	raw, _ = json.Marshal(spec)
	broken.ProviderSpec = runtime.RawExtension{Raw: raw}
	_, err = e.drv.DeleteMachine(t.Context(), &driver.DeleteMachineRequest{Machine: machine("m-1"), MachineClass: broken, Secret: secret})
	if driver.CodeOf(err) != driver.InvalidArgument || !containsAll(driver.MessageOf(err), "providerSpec.zone: Required", "providerSpec.tags: Required", ClusterTagFragment, RoleTagFragment) {
		t.Fatalf("delete without zone and tags: %v", err)
	}
}

// Validation accepts what Compute Engine accepts: regions and zones of other universes (S3NS's
// u-france-east1), and networks, subnetworks, disk and machine types given as full or partial
// URLs, which reach Compute Engine as given.
func TestSpecAcceptsWhatComputeAccepts(t *testing.T) {
	const api = "https://www.googleapis.com/compute/v1/"
	s := baseSpec()
	s.Region, s.Zone = "u-france-east1", "u-france-east1-a"
	s.MachineType = "zones/u-france-east1-a/machineTypes/n2-standard-4"
	s.NetworkInterfaces = []*NetworkInterface{
		{Network: api + "projects/host-project/global/networks/shared-vpc", Subnetwork: api + "projects/host-project/regions/u-france-east1/subnetworks/nodes"},
		{Network: "global/networks/default", Subnetwork: "regions/u-france-east1/subnetworks/second"},
		{Network: "projects/p/global/networks/n3", Subnetwork: "plain-name"},
	}
	s.Disks[0].Type = "projects/p/zones/u-france-east1-a/diskTypes/hyperdisk-balanced"
	s.Disks = append(s.Disks, &Disk{Type: "https://compute.s3nsapis.fr/compute/v1/projects/p/zones/u-france-east1-a/diskTypes/pd-ssd", SizeGb: 20})
	if errs := validateSpec(s); len(errs) != 0 {
		t.Fatalf("validate: %v", errs)
	}
	in, _ := buildInstance(s, "p", "m-1", userDataKey, "#cloud-config\n")
	got := []string{in.MachineType, in.Disks[0].InitializeParams.DiskType, in.Disks[1].InitializeParams.DiskType}
	for _, n := range in.NetworkInterfaces {
		got = append(got, n.Network, n.Subnetwork)
	}
	want := []string{s.MachineType, s.Disks[0].Type, s.Disks[1].Type,
		s.NetworkInterfaces[0].Network, s.NetworkInterfaces[0].Subnetwork,
		s.NetworkInterfaces[1].Network, s.NetworkInterfaces[1].Subnetwork,
		s.NetworkInterfaces[2].Network, "regions/u-france-east1/subnetworks/plain-name"}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("sent %q, want %q", got[i], want[i])
		}
	}

	for name, tc := range map[string]struct {
		mutate func(*ProviderSpec)
		field  string
	}{
		"subnetwork of another region": {func(s *ProviderSpec) { s.NetworkInterfaces[0].Subnetwork = "regions/europe-west1/subnetworks/n" }, "networkInterfaces[0].subnetwork"},
		"network URL of a subnetwork":  {func(s *ProviderSpec) { s.NetworkInterfaces[0].Network = "regions/u-france-east1/subnetworks/n" }, "networkInterfaces[0].network"},
		"disk type of another zone":    {func(s *ProviderSpec) { s.Disks[0].Type = "zones/u-france-east1-b/diskTypes/pd-ssd" }, "disks[0].type"},
		"disk type URL without name":   {func(s *ProviderSpec) { s.Disks[0].Type = "zones/u-france-east1-a/diskTypes/" }, "disks[0].type"},
		"bad project in URL":           {func(s *ProviderSpec) { s.NetworkInterfaces[0].Network = "projects/My Project/global/networks/n" }, "networkInterfaces[0].network"},
		"zone not a name":              {func(s *ProviderSpec) { s.Zone = "U-France-East1-A" }, "providerSpec.zone"},
		"machine type of another zone": {func(s *ProviderSpec) { s.MachineType = "zones/u-france-east1-b/machineTypes/n2-standard-4" }, "providerSpec.machineType"},
	} {
		s := baseSpec()
		s.Region, s.Zone = "u-france-east1", "u-france-east1-a"
		tc.mutate(s)
		errs := validateSpec(s)
		if len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), tc.field) {
			t.Errorf("%s: %v, want an error naming %s", name, errs, tc.field)
		}
	}
}

// GetMachineStatus answers NotFound for a same-named instance without the class's tags, as
// Gardener's getVMs finds none.
func TestStatusOfAnotherClassesInstanceIsNotFound(t *testing.T) {
	e := newTestEnv(t)
	e.cloud.PutInstance(testZone, &compute.Instance{Name: "m-1"})
	_, err := e.drv.GetMachineStatus(t.Context(), &driver.GetMachineStatusRequest{Machine: machine("m-1"), MachineClass: e.class, Secret: e.secret})
	if driver.CodeOf(err) != driver.NotFound {
		t.Fatalf("err = %v, want NotFound", err)
	}
}
