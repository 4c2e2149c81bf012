package aws

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/machinist-io/machinist/core/driver"
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
	if want := "aws:///" + testZoneA + "/" + inst.ID; resp.ProviderID != want {
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
