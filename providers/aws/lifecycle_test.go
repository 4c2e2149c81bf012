package aws

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/machinist-io/machinist/providers/kit"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/internal/syncbuf"
	"github.com/machinist-io/machinist/providers/aws/fakeaws"
)

// TestLifecycle drives one machine through the real SDK against the fake: the instance is
// launched as Gardener's provider launches it (tags, volumes, interfaces, IMDS options, user
// data), status and list find it, delete terminates it with its volumes and interfaces.
func TestLifecycle(t *testing.T) {
	e := newTestEnv(t)
	resp := e.mustCreate(t, "m-1")
	live := e.liveOf("m-1")
	if len(live) != 1 {
		t.Fatalf("live instances of m-1: %+v", live)
	}
	inst := live[0]
	if want := "aws:///" + testRegion + "/" + inst.ID; resp.ProviderID != want {
		t.Errorf("ProviderID = %q, want %q", resp.ProviderID, want)
	}
	if resp.NodeName != inst.PrivateDNSName || !strings.HasSuffix(resp.NodeName, ".eu-west-1.compute.internal") {
		t.Errorf("NodeName = %q, instance's private DNS name %q", resp.NodeName, inst.PrivateDNSName)
	}
	if inst.InstanceType != "m5.large" || inst.ImageID != testAMI || inst.KeyName != testKeyName || !strings.HasSuffix(inst.IAMProfileARN, ":instance-profile/"+testProfile) {
		t.Errorf("instance = %+v", inst)
	}
	if ud, _ := base64.StdEncoding.DecodeString(inst.UserData); string(ud) != testUserData {
		t.Errorf("user data %q", ud)
	}
	// Tags as Gardener sets them: the class's, with Name = the machine.
	for k, v := range map[string]string{"Name": "m-1", clusterTag: "1", roleTag: "1", "worker.gardener.cloud/pool": "worker-a"} {
		if inst.Tags[k] != v {
			t.Errorf("instance tag %s = %q, want %q (tags %v)", k, inst.Tags[k], v, inst.Tags)
		}
	}
	if inst.MetadataOptions["HttpTokens"] != "required" || inst.MetadataOptions["HttpPutResponseHopLimit"] != "2" {
		t.Errorf("metadata options %v", inst.MetadataOptions)
	}
	// The root volume sits on the AMI's root device, the data volume on /dev/sdb.
	if len(inst.Devices) != 2 || inst.Devices[0].Name != "/dev/xvda" || inst.Devices[1].Name != "/dev/sdb" {
		t.Fatalf("devices %+v", inst.Devices)
	}
	vols := map[string]fakeaws.Volume{}
	for _, v := range e.cloud.Volumes() {
		vols[v.Device] = v
	}
	if root := vols["/dev/xvda"]; root.Size != 50 || root.Type != "gp3" || !root.Encrypted || root.Tags["Name"] != "m-1" || root.Tags[clusterTag] != "1" {
		t.Errorf("root volume %+v", root)
	}
	if data := vols["/dev/sdb"]; data.Size != 100 || data.Throughput != 250 || data.Iops != 4000 || !data.DeleteOnTermination {
		t.Errorf("data volume %+v", data)
	}
	nics := e.cloud.NetworkInterfaces()
	if len(nics) != 1 || nics[0].SubnetID != testSubnetA || nics[0].SecurityGroups[0] != testSG || nics[0].Tags["Name"] != "m-1" || !nics[0].DeleteOnTermination {
		t.Errorf("network interfaces %+v", nics)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := e.drv.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: machine("m-1"), MachineClass: e.class, Secret: e.secret})
	if err != nil || st.ProviderID != resp.ProviderID || st.NodeName != resp.NodeName {
		t.Fatalf("GetMachineStatus = %+v, %v", st, err)
	}
	list, err := e.drv.ListMachines(ctx, &driver.ListMachinesRequest{MachineClass: e.class, Secret: e.secret})
	if err != nil || len(list.MachineList) != 1 || list.MachineList[resp.ProviderID] != "m-1" {
		t.Fatalf("ListMachines = %+v, %v", list, err)
	}

	m := machine("m-1")
	m.Spec.ProviderID = resp.ProviderID
	if err := e.delete(t, e.class, m); err != nil {
		t.Fatalf("DeleteMachine: %v", err)
	}
	if n := len(e.liveOf("m-1")); n != 0 {
		t.Fatalf("%d live instances after delete", n)
	}
	if v, n := e.cloud.Volumes(), e.cloud.NetworkInterfaces(); len(v) != 0 || len(n) != 0 {
		t.Errorf("left after delete: volumes %+v, interfaces %+v", v, n)
	}
	_, err = e.drv.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: m, MachineClass: e.class, Secret: e.secret})
	if driver.CodeOf(err) != driver.NotFound {
		t.Fatalf("GetMachineStatus after delete = %v, want NotFound", err)
	}
	if err := e.delete(t, e.class, m); err != nil {
		t.Fatalf("second DeleteMachine: %v", err)
	}
}

// TestProviderIDForms: machines get Gardener's provider ID, aws:///<region>/<instance-id>
// (pkg/aws/util.go encodeInstanceID); a machine that still records the zone form machinist
// wrote before (the cloud controller manager's form) is found, reported and deleted by it.
func TestProviderIDForms(t *testing.T) {
	e := newTestEnv(t)
	resp := e.mustCreate(t, "m-1")
	inst := e.liveOf("m-1")[0]
	if want := "aws:///eu-west-1/" + inst.ID; resp.ProviderID != want {
		t.Fatalf("ProviderID = %q, want Gardener's %q", resp.ProviderID, want)
	}
	old := machine("m-1")
	old.Spec.ProviderID = "aws:///" + inst.Zone + "/" + inst.ID
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := e.drv.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: old, MachineClass: e.class, Secret: e.secret})
	if err != nil || st.ProviderID != resp.ProviderID || !driver.SameProviderID(st.ProviderID, old.Spec.ProviderID) {
		t.Fatalf("GetMachineStatus of a zone-form machine = %+v, %v; want %s", st, err, resp.ProviderID)
	}
	// Renamed: only the provider ID leads to the instance.
	renamed := machine("m-renamed")
	renamed.Spec.ProviderID = old.Spec.ProviderID
	if st, err := e.drv.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: renamed, MachineClass: e.class, Secret: e.secret}); err != nil || st.ProviderID != resp.ProviderID {
		t.Fatalf("GetMachineStatus by a zone-form provider ID alone = %+v, %v", st, err)
	}
	if err := e.delete(t, e.class, renamed); err != nil {
		t.Fatalf("DeleteMachine by a zone-form provider ID: %v", err)
	}
	if n := len(e.liveOf("m-1")); n != 0 {
		t.Fatalf("%d live instances after a delete by the zone form", n)
	}
}

// TestInvalidClassReachesExistingVMs: a class that no longer validates (here: fields removed,
// an invalid value, a value of the wrong type, an unknown field under strict decoding) cannot
// launch, but its existing VMs are still statused, listed and deleted: those need only the
// region and the cluster and role tags. Without a role tag the class's VMs cannot be told from
// others', so that is refused for every operation.
func TestInvalidClassReachesExistingVMs(t *testing.T) {
	e := newTestEnv(t)
	resp := e.mustCreate(t, "m-1")
	e.drv = New(Options{Options: kit.Options{SpecMode: driver.Strict, PollInterval: time.Millisecond}, MaxRetryWait: time.Millisecond})
	var spec map[string]any
	if err := json.Unmarshal(e.class.ProviderSpec.Raw, &spec); err != nil {
		t.Fatal(err)
	}
	delete(spec, "ami")
	delete(spec, "networkInterfaces")
	spec["machineType"] = ""
	spec["iam"] = map[string]any{"name": "a", "arn": "b"}
	spec["blockDevices"] = "not a list"
	spec["placement"] = map[string]any{"tenancy": "shared"}
	spec["instanceMetadataOptions"] = map[string]any{"httpPutResponseHopLimit": 99}
	spec["futureField"] = true
	raw, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	broken := e.class.DeepCopy()
	broken.ProviderSpec.Raw = raw
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	_, err = e.drv.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine("m-2"), MachineClass: broken, Secret: e.secret})
	if driver.CodeOf(err) != driver.InvalidArgument {
		t.Fatalf("CreateMachine with the broken class = %v, want InvalidArgument", err)
	}
	st, err := e.drv.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: machine("m-1"), MachineClass: broken, Secret: e.secret})
	if err != nil || st.ProviderID != resp.ProviderID {
		t.Fatalf("GetMachineStatus with the broken class = %+v, %v", st, err)
	}
	list, err := e.drv.ListMachines(ctx, &driver.ListMachinesRequest{MachineClass: broken, Secret: e.secret})
	if err != nil || list.MachineList[resp.ProviderID] != "m-1" {
		t.Fatalf("ListMachines with the broken class = %+v, %v", list, err)
	}
	roleless := map[string]any{}
	for k, v := range spec {
		roleless[k] = v
	}
	roleless["tags"] = map[string]string{clusterTag: "1"}
	if raw, err = json.Marshal(roleless); err != nil {
		t.Fatal(err)
	}
	noRole := broken.DeepCopy()
	noRole.ProviderSpec.Raw = raw
	m := machine("m-1")
	m.Spec.ProviderID = resp.ProviderID
	err = e.delete(t, noRole, m)
	if driver.CodeOf(err) != driver.InvalidArgument || !strings.Contains(driver.MessageOf(err), "kubernetes.io/role/<role>") {
		t.Fatalf("DeleteMachine with a class without its role tag = %v, want InvalidArgument naming the tag", err)
	}
	if err := e.delete(t, broken, m); err != nil {
		t.Fatalf("DeleteMachine with the broken class: %v", err)
	}
	if n := len(e.liveOf("m-1")); n != 0 {
		t.Fatalf("%d live instances after the delete", n)
	}
}

// TestSovereignCloudRegion: a class in eusc-de-east-1 (the European Sovereign Cloud, which the
// bundled SDK lists) launches; machinist refused its name before.
func TestSovereignCloudRegion(t *testing.T) {
	c := fakeaws.New(fakeaws.Options{Region: "eusc-de-east-1"})
	c.Identity.AddAccessKey(testAccessKey, testSecretKey)
	c.Network.AddSubnet(testSubnetA, testVPC, "eusc-de-east-1a", "10.250.0.0/19")
	c.Network.AddSecurityGroup(testSG, testVPC, "nodes")
	c.AddImage(testAMI, "gardenlinux", "/dev/xvda")
	c.AddKeyPair(testKeyName)
	c.Identity.AddInstanceProfile(testProfile)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := c.Serve(l, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	e := &testEnv{cloud: c, srv: srv, logs: &syncbuf.Buffer{}}
	e.drv = e.newDriver()
	e.secret = testSecretObj(srv.URL)
	e.class = e.classWith("workers", func(s *ProviderSpec) { s.Region = "eusc-de-east-1" })
	resp := e.mustCreate(t, "m-1")
	if !strings.HasPrefix(resp.ProviderID, "aws:///eusc-de-east-1/i-") {
		t.Fatalf("ProviderID = %q", resp.ProviderID)
	}
}
