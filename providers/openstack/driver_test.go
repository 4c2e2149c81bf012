package openstack

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/registry"
	"github.com/machinist-io/machinist/providers/openstack/fakeopenstack"
)

func TestCreateGetListDeleteThroughGophercloud(t *testing.T) {
	cloud := startCloud(t, fakeopenstack.Options{})
	d, _ := testDriver(t)
	ctx := ctxT(t)
	group := fakeopenstack.ServerGroupID
	yes := true
	class := testClass(t, func(s *MachineProviderConfigSpec) {
		s.ServerGroupID = &group
		s.UseConfigDrive = &yes
	})
	secret := passwordSecret(cloud)
	m := machine("worker-a-1")

	resp, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: m, MachineClass: class, Secret: secret})
	if err != nil {
		t.Fatalf("CreateMachine: %v", err)
	}
	srvs := cloud.Servers()
	if len(srvs) != 1 {
		t.Fatalf("cloud holds %d servers, want 1", len(srvs))
	}
	s := srvs[0]
	if want := "openstack:///" + fakeopenstack.DefaultRegion + "/" + s.ID; resp.ProviderID != want {
		t.Errorf("ProviderID = %q, want %q", resp.ProviderID, want)
	}
	if resp.NodeName != m.Name {
		t.Errorf("NodeName = %q, want the machine name", resp.NodeName)
	}
	if len(resp.Addresses) != 1 || resp.Addresses[0].Type != corev1.NodeInternalIP || !strings.HasPrefix(resp.Addresses[0].Address, "10.250.") {
		t.Errorf("Addresses = %v, want one internal IP of the node subnet", resp.Addresses)
	}
	switch {
	case s.Status != "ACTIVE":
		t.Errorf("server status %s, want ACTIVE", s.Status)
	case s.Name != m.Name:
		t.Errorf("server name %q, want the machine name", s.Name)
	case s.Metadata[clusterKey] != "1" || s.Metadata[roleKey] != "1" || s.Metadata["owner"] != "machinist-tests":
		t.Errorf("server metadata %v, want the class tags", s.Metadata)
	case string(s.UserData) != userData:
		t.Errorf("server user data %q, want the secret's userData", s.UserData)
	case s.KeyName != fakeopenstack.KeyName || s.AvailabilityZone != fakeopenstack.AvailabilityZone || s.FlavorID != fakeopenstack.FlavorSmallID():
		t.Errorf("server key %q zone %q flavor %q", s.KeyName, s.AvailabilityZone, s.FlavorID)
	case s.ImageID != fakeopenstack.ImageID:
		t.Errorf("server image %q, want %q (looked up by name)", s.ImageID, fakeopenstack.ImageID)
	case !s.ConfigDrive:
		t.Errorf("server has no config drive")
	case s.ServerGroup != group:
		t.Errorf("server group %q, want the scheduler hint %q", s.ServerGroup, group)
	case len(s.SecurityGroups) != 1 || s.SecurityGroups[0] != fakeopenstack.SecurityGroupName:
		t.Errorf("server security groups %v", s.SecurityGroups)
	}

	// Creating again adopts the server.
	again, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: m, MachineClass: class, Secret: secret})
	if err != nil || again.ProviderID != resp.ProviderID {
		t.Fatalf("second CreateMachine = %+v, %v; want the same ProviderID", again, err)
	}
	if n := len(cloud.Servers()); n != 1 {
		t.Fatalf("cloud holds %d servers after the second create, want 1", n)
	}

	st, err := d.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: m, MachineClass: class, Secret: secret})
	if err != nil || st.ProviderID != resp.ProviderID || st.NodeName != m.Name {
		t.Fatalf("GetMachineStatus = %+v, %v", st, err)
	}
	list, err := d.ListMachines(ctx, &driver.ListMachinesRequest{MachineClass: class, Secret: secret})
	if err != nil || len(list.MachineList) != 1 || list.MachineList[resp.ProviderID] != m.Name {
		t.Fatalf("ListMachines = %+v, %v", list, err)
	}

	if _, err := d.DeleteMachine(ctx, &driver.DeleteMachineRequest{Machine: withProviderID(m, resp.ProviderID), MachineClass: class, Secret: secret}); err != nil {
		t.Fatalf("DeleteMachine: %v", err)
	}
	if left := leftovers(cloud, m.Name); len(left) > 0 {
		t.Fatalf("after DeleteMachine the cloud still holds %v", left)
	}
	if _, ports, _ := allResources(cloud); ports != 0 {
		t.Errorf("the port Nova made for the server outlived it: %d ports", ports)
	}
	if _, err := d.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: m, MachineClass: class, Secret: secret}); !driver.IsCode(err, driver.NotFound) {
		t.Errorf("GetMachineStatus after delete = %v; want NotFound", err)
	}
	if _, err := d.DeleteMachine(ctx, &driver.DeleteMachineRequest{Machine: withProviderID(m, resp.ProviderID), MachineClass: class, Secret: secret}); err != nil {
		t.Errorf("second DeleteMachine = %v; want OK (absent is fine)", err)
	}
}

func TestSubnetsPreCreateATaggedPortThatDeleteRemoves(t *testing.T) {
	cloud := startCloud(t, fakeopenstack.Options{})
	d, _ := testDriver(t)
	ctx := ctxT(t)
	class := testClass(t, func(s *MachineProviderConfigSpec) {
		s.SubnetIDs = []string{fakeopenstack.SubnetID}
		s.PodNetworkCIDRs = []string{"100.96.0.0/11"}
	})
	secret := passwordSecret(cloud)
	m := machine("worker-port-1")
	resp, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: m, MachineClass: class, Secret: secret})
	if err != nil {
		t.Fatalf("CreateMachine: %v", err)
	}
	ports := cloud.Ports()
	if len(ports) != 1 {
		t.Fatalf("cloud holds %d ports, want the one pre-created port", len(ports))
	}
	p := ports[0]
	srv := cloud.Servers()[0]
	switch {
	case p.Name != m.Name:
		t.Errorf("port name %q, want the machine name", p.Name)
	case !hasTags(p.Tags, []string{clusterKey, roleKey}):
		t.Errorf("port tags %v, want the cluster and role keys", p.Tags)
	case p.DeviceID != srv.ID:
		t.Errorf("port device %q, want server %s", p.DeviceID, srv.ID)
	case len(p.FixedIPs) != 1 || p.FixedIPs[0].SubnetID != fakeopenstack.SubnetID:
		t.Errorf("port fixed IPs %v, want one on the subnet", p.FixedIPs)
	case len(p.SecurityGroups) != 1 || p.SecurityGroups[0] != fakeopenstack.SecurityGroupID:
		t.Errorf("port security groups %v, want the ID of %s", p.SecurityGroups, fakeopenstack.SecurityGroupName)
	case len(p.AllowedAddressPairs) != 1 || p.AllowedAddressPairs[0].IPAddress != "100.96.0.0/11":
		t.Errorf("port allowed address pairs %v, want the pod CIDR", p.AllowedAddressPairs)
	case len(resp.Addresses) != 1 || resp.Addresses[0].Address != p.FixedIPs[0].IPAddress:
		t.Errorf("addresses %v, want the port's fixed IP", resp.Addresses)
	}
	if _, err := d.DeleteMachine(ctx, &driver.DeleteMachineRequest{Machine: withProviderID(m, resp.ProviderID), MachineClass: class, Secret: secret}); err != nil {
		t.Fatalf("DeleteMachine: %v", err)
	}
	if left := leftovers(cloud, m.Name); len(left) > 0 {
		t.Fatalf("after DeleteMachine the cloud still holds %v", left)
	}
}

func TestBootFromVolume(t *testing.T) {
	cloud := startCloud(t, fakeopenstack.Options{})
	d, _ := testDriver(t)
	ctx := ctxT(t)
	secret := passwordSecret(cloud)

	t.Run("typed root volume is pre-created and deleted with the machine", func(t *testing.T) {
		ssd := fakeopenstack.VolumeTypeSSD
		class := testClass(t, func(s *MachineProviderConfigSpec) { s.RootDiskSize = 50; s.RootDiskType = &ssd })
		m := machine("worker-bfv-typed")
		resp, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: m, MachineClass: class, Secret: secret})
		if err != nil {
			t.Fatalf("CreateMachine: %v", err)
		}
		vols := cloud.Volumes()
		if len(vols) != 1 {
			t.Fatalf("cloud holds %d volumes, want 1", len(vols))
		}
		v := vols[0]
		srv := cloud.Servers()[0]
		switch {
		case v.Name != m.Name || v.Size != 50 || v.VolumeType != ssd || v.ImageID != fakeopenstack.ImageID:
			t.Errorf("volume %+v, want %s, 50 GB, %s, from the image", v, m.Name, ssd)
		case v.Metadata[clusterKey] != "1" || v.Metadata[roleKey] != "1":
			t.Errorf("volume metadata %v, want the cluster and role tags", v.Metadata)
		case v.Status != "in-use" || len(srv.Volumes) != 1 || srv.Volumes[0].ID != v.ID || srv.Volumes[0].DeleteOnTermination:
			t.Errorf("volume %s status %s, server volumes %+v: want attached at boot, kept on termination", v.ID, v.Status, srv.Volumes)
		case srv.ImageID != "":
			t.Errorf("server image %q, want none (boot from volume)", srv.ImageID)
		}
		if _, err := d.DeleteMachine(ctx, &driver.DeleteMachineRequest{Machine: withProviderID(m, resp.ProviderID), MachineClass: class, Secret: secret}); err != nil {
			t.Fatalf("DeleteMachine: %v", err)
		}
		if left := leftovers(cloud, m.Name); len(left) > 0 {
			t.Fatalf("after DeleteMachine the cloud still holds %v", left)
		}
	})

	t.Run("untyped root volume is made by Nova and deleted on termination", func(t *testing.T) {
		class := testClass(t, func(s *MachineProviderConfigSpec) { s.RootDiskSize = 30 })
		m := machine("worker-bfv")
		resp, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: m, MachineClass: class, Secret: secret})
		if err != nil {
			t.Fatalf("CreateMachine: %v", err)
		}
		srv := cloud.Servers()[0]
		if len(srv.Volumes) != 1 || !srv.Volumes[0].DeleteOnTermination {
			t.Fatalf("server volumes %+v, want one deleted on termination", srv.Volumes)
		}
		if _, err := d.DeleteMachine(ctx, &driver.DeleteMachineRequest{Machine: withProviderID(m, resp.ProviderID), MachineClass: class, Secret: secret}); err != nil {
			t.Fatalf("DeleteMachine: %v", err)
		}
		if s, p, v := allResources(cloud); s+p+v != 0 {
			t.Fatalf("after DeleteMachine: %d servers, %d ports, %d volumes remain", s, p, v)
		}
	})
}

func TestNetworksByNameAllowPodCIDRsOnThePodNetwork(t *testing.T) {
	cloud := startCloud(t, fakeopenstack.Options{})
	d, _ := testDriver(t)
	ctx := ctxT(t)
	class := testClass(t, func(s *MachineProviderConfigSpec) {
		s.NetworkID = ""
		s.Networks = []OpenStackNetwork{{Name: fakeopenstack.NetworkName}, {Id: fakeopenstack.PodNetworkID, PodNetwork: true}}
		s.PodNetworkCidr = "100.64.0.0/12"
	})
	m := machine("worker-nets")
	if _, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: m, MachineClass: class, Secret: passwordSecret(cloud)}); err != nil {
		t.Fatalf("CreateMachine: %v", err)
	}
	var nodePairs, podPairs []fakeopenstack.AddressPair
	for _, p := range cloud.Ports() {
		switch p.NetworkID {
		case fakeopenstack.NetworkID:
			nodePairs = p.AllowedAddressPairs
		case fakeopenstack.PodNetworkID:
			podPairs = p.AllowedAddressPairs
		}
	}
	if len(podPairs) != 1 || podPairs[0].IPAddress != "100.64.0.0/12" {
		t.Errorf("pod-network port pairs %v, want the pod CIDR", podPairs)
	}
	if len(nodePairs) != 0 {
		t.Errorf("node-network port pairs %v, want none", nodePairs)
	}
}

func TestImageNameResolvesToTheNewestActiveImage(t *testing.T) {
	cloud := startCloud(t, fakeopenstack.Options{})
	newer := cloud.AddImage(fakeopenstack.ImageName, time.Now())
	d, _ := testDriver(t)
	ctx := ctxT(t)
	if _, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine("worker-img"), MachineClass: testClass(t), Secret: passwordSecret(cloud)}); err != nil {
		t.Fatalf("CreateMachine: %v", err)
	}
	if got := cloud.Servers()[0].ImageID; got != newer {
		t.Errorf("server image %s, want the newest image %s", got, newer)
	}

	missing := testClass(t, func(s *MachineProviderConfigSpec) { s.ImageName = "no-such-image" })
	_, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine("worker-img-2"), MachineClass: missing, Secret: passwordSecret(cloud)})
	if !driver.IsCode(err, driver.InvalidArgument) || !strings.Contains(driver.MessageOf(err), "imageName") {
		t.Errorf("CreateMachine with an unknown image = %v; want InvalidArgument naming imageName", err)
	}
}

func TestDuplicateServersAreOutOfRangeAndDeletedByProviderID(t *testing.T) {
	cloud := startCloud(t, fakeopenstack.Options{})
	d, _ := testDriver(t)
	ctx := ctxT(t)
	class, secret := testClass(t), passwordSecret(cloud)
	tags := map[string]string{clusterKey: "1", roleKey: "1"}
	first := cloud.CreateServer("worker-dup", tags)
	second := cloud.CreateServer("worker-dup", tags)
	foreign := cloud.CreateServer("worker-dup", map[string]string{"kubernetes.io-cluster-other": "1", roleKey: "1"})
	m := machine("worker-dup")

	_, err := d.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: m, MachineClass: class, Secret: secret})
	if !driver.IsCode(err, driver.OutOfRange) || !strings.Contains(driver.MessageOf(err), first) || !strings.Contains(driver.MessageOf(err), second) {
		t.Fatalf("GetMachineStatus with two servers = %v; want OutOfRange naming both", err)
	}
	if _, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: m, MachineClass: class, Secret: secret}); !driver.IsCode(err, driver.OutOfRange) {
		t.Fatalf("CreateMachine with two servers = %v; want OutOfRange", err)
	}
	list, err := d.ListMachines(ctx, &driver.ListMachinesRequest{MachineClass: class, Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	pid := func(id string) string { return "openstack:///" + fakeopenstack.DefaultRegion + "/" + id }
	if len(list.MachineList) != 2 || list.MachineList[pid(first)] != m.Name || list.MachineList[pid(second)] != m.Name {
		t.Fatalf("ListMachines = %v; want both servers of the class and not the foreign one", list.MachineList)
	}
	// The orphan collector deletes the duplicate by its provider ID: only that server goes.
	if _, err := d.DeleteMachine(ctx, &driver.DeleteMachineRequest{Machine: withProviderID(m, pid(second)), MachineClass: class, Secret: secret}); err != nil {
		t.Fatalf("DeleteMachine(second): %v", err)
	}
	var left []string
	for _, s := range cloud.Servers() {
		left = append(left, s.ID)
	}
	if len(left) != 2 || !slices.Contains(left, first) || !slices.Contains(left, foreign) {
		t.Fatalf("servers left %v; want %s and the foreign %s", left, first, foreign)
	}
	// A foreign server named by provider ID is not ours: OK without touching it.
	if _, err := d.DeleteMachine(ctx, &driver.DeleteMachineRequest{Machine: withProviderID(m, pid(foreign)), MachineClass: class, Secret: secret}); err != nil {
		t.Fatalf("DeleteMachine(foreign): %v", err)
	}
	// Deleting by name takes every server of the class with the name, never the foreign one.
	if _, err := d.DeleteMachine(ctx, &driver.DeleteMachineRequest{Machine: m, MachineClass: class, Secret: secret}); err != nil {
		t.Fatalf("DeleteMachine by name: %v", err)
	}
	srvs := cloud.Servers()
	if len(srvs) != 1 || srvs[0].ID != foreign {
		t.Fatalf("servers left %+v; want only the foreign one", srvs)
	}
}

func TestListMachinesReportsLeftoversThatDeleteRemoves(t *testing.T) {
	cloud := startCloud(t, fakeopenstack.Options{})
	d, _ := testDriver(t)
	ctx := ctxT(t)
	class, secret := testClass(t), passwordSecret(cloud)
	tags := map[string]string{clusterKey: "1", roleKey: "1"}
	// A live machine with a port of its own, and leftovers of a machine whose server is gone.
	live := machine("worker-live")
	liveResp, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: live, MachineClass: testClass(t, func(s *MachineProviderConfigSpec) { s.SubnetIDs = []string{fakeopenstack.SubnetID} }), Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	port := cloud.CreatePort("worker-gone", fakeopenstack.NetworkID, []string{clusterKey, roleKey})
	vol := cloud.CreateVolume("worker-gone", 20, tags)
	foreignPort := cloud.CreatePort("worker-foreign", fakeopenstack.NetworkID, []string{"kubernetes.io-cluster-other", roleKey})
	// A free port named like the live machine: a leftover of an earlier attempt.
	stale := cloud.CreatePort("worker-live", fakeopenstack.NetworkID, []string{clusterKey, roleKey})

	list, err := d.ListMachines(ctx, &driver.ListMachinesRequest{MachineClass: class, Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	pid := func(id string) string { return "openstack:///" + fakeopenstack.DefaultRegion + "/" + id }
	want := map[string]string{liveResp.ProviderID: "worker-live", pid(port): "worker-gone", pid(vol): "worker-gone", pid(stale): "worker-live"}
	if len(list.MachineList) != len(want) {
		t.Fatalf("ListMachines = %v; want %v", list.MachineList, want)
	}
	for k, v := range want {
		if list.MachineList[k] != v {
			t.Errorf("ListMachines[%s] = %q, want %q", k, list.MachineList[k], v)
		}
	}
	// What the orphan collector does with each leftover entry.
	for _, id := range []string{port, vol, stale} {
		name := list.MachineList[pid(id)]
		if _, err := d.DeleteMachine(ctx, &driver.DeleteMachineRequest{Machine: withProviderID(machine(name), pid(id)), MachineClass: class, Secret: secret}); err != nil {
			t.Fatalf("DeleteMachine(%s, %s): %v", name, id, err)
		}
	}
	if left := leftovers(cloud, "worker-gone"); len(left) > 0 {
		t.Errorf("leftovers of worker-gone remain: %v", left)
	}
	var portsLeft []string
	for _, p := range cloud.Ports() {
		portsLeft = append(portsLeft, p.ID)
	}
	if slices.Contains(portsLeft, stale) || !slices.Contains(portsLeft, foreignPort) || len(cloud.Servers()) != 1 {
		t.Errorf("ports left %v, servers %d: want the stale port gone, the foreign port and the live server kept", portsLeft, len(cloud.Servers()))
	}
	if _, err := d.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: live, MachineClass: class, Secret: secret}); err != nil {
		t.Errorf("the live machine was harmed: %v", err)
	}
}

func TestGetVolumeIDs(t *testing.T) {
	d, _ := testDriver(t)
	specs := []*corev1.PersistentVolumeSpec{
		{PersistentVolumeSource: corev1.PersistentVolumeSource{Cinder: &corev1.CinderPersistentVolumeSource{VolumeID: "in-tree-1"}}},
		{PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: CinderCSIDriver, VolumeHandle: "csi-1"}}},
		{PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "disk.csi.azure.com", VolumeHandle: "azure"}}},
		{PersistentVolumeSource: corev1.PersistentVolumeSource{NFS: &corev1.NFSVolumeSource{Server: "nfs", Path: "/x"}}},
		nil,
	}
	resp, err := d.GetVolumeIDs(ctxT(t), &driver.GetVolumeIDsRequest{PVSpecs: specs})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(resp.VolumeIDs, ",") != "in-tree-1,csi-1" {
		t.Errorf("VolumeIDs = %v, want [in-tree-1 csi-1]", resp.VolumeIDs)
	}
}

func TestRegisteredUnderOpenStack(t *testing.T) {
	r, ok := registry.Lookup("OpenStack")
	if !ok || r.Name != ProviderName {
		t.Fatalf("registry.Lookup(OpenStack) = %+v, %v", r, ok)
	}
	d, err := registry.Open("openstack", registry.Env{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := d.(*Driver); !ok {
		t.Fatalf("registry.Open returned %T", d)
	}
	if _, err := d.InitializeMachine(ctxT(t), &driver.InitializeMachineRequest{}); !driver.IsCode(err, driver.Unimplemented) {
		t.Errorf("InitializeMachine = %v; want Unimplemented", err)
	}
}

func TestCreateAdoptsBuildingAndFailedServers(t *testing.T) {
	cloud := startCloud(t, fakeopenstack.Options{})
	d, _ := testDriver(t)
	ctx := ctxT(t)
	class, secret := testClass(t), passwordSecret(cloud)
	tags := map[string]string{clusterKey: "1", roleKey: "1"}

	failed := cloud.CreateServer("worker-broken", tags)
	cloud.FailServer(failed, "Build of instance aborted: Failed to allocate the network(s), not rescheduling.")
	_, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine("worker-broken"), MachineClass: class, Secret: secret})
	if !driver.IsCode(err, driver.Internal) || !strings.Contains(driver.MessageOf(err), "Failed to allocate the network(s)") {
		t.Fatalf("CreateMachine over a server in ERROR = %v; want Internal with Nova's fault", err)
	}
	if left := leftovers(cloud, "worker-broken"); len(left) > 0 {
		t.Fatalf("the failed server was not cleaned up: %v", left)
	}
	// The next attempt starts afresh.
	if _, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine("worker-broken"), MachineClass: class, Secret: secret}); err != nil {
		t.Fatalf("CreateMachine after the cleanup: %v", err)
	}

	// A server still building (e.g. the previous call ran out of time) is waited for, not doubled.
	cloud.SetBuildTime(150 * time.Millisecond)
	building := cloud.CreateServer("worker-slow", tags)
	resp, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine("worker-slow"), MachineClass: class, Secret: secret})
	if err != nil {
		t.Fatalf("CreateMachine over a building server: %v", err)
	}
	if !strings.HasSuffix(resp.ProviderID, "/"+building) {
		t.Fatalf("ProviderID %q, want the adopted server %s", resp.ProviderID, building)
	}
	if left := leftovers(cloud, "worker-slow"); len(left) != 1 || !strings.Contains(left[0], "ACTIVE") {
		t.Fatalf("servers of worker-slow: %v; want the one adopted server, ACTIVE", left)
	}

	// Running out of time on a server this call did not boot never deletes it.
	cloud.SetBuildTime(time.Hour)
	kept := cloud.CreateServer("worker-kept", tags)
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err = d.CreateMachine(short, &driver.CreateMachineRequest{Machine: machine("worker-kept"), MachineClass: class, Secret: secret})
	if !driver.IsCode(err, driver.DeadlineExceeded) || !strings.Contains(driver.MessageOf(err), "was kept") {
		t.Fatalf("CreateMachine timing out on an adopted server = %v; want DeadlineExceeded keeping it", err)
	}
	if left := leftovers(cloud, "worker-kept"); len(left) != 1 || !strings.Contains(left[0], kept) {
		t.Fatalf("resources of worker-kept: %v; want the adopted server untouched", left)
	}
}

// The registry's Env.SpecMode reaches the driver: a strict driver refuses a class with an
// unknown field before any cloud call; the lenient one creates the server and ignores the field.
func TestSpecModeFromTheRegistry(t *testing.T) {
	cloud := startCloud(t, fakeopenstack.Options{})
	class := testClass(t)
	var m map[string]any
	if err := json.Unmarshal(class.ProviderSpec.Raw, &m); err != nil {
		t.Fatal(err)
	}
	m["spec"].(map[string]any)["bootMode"] = "uefi" // a field some newer Gardener might add
	class.ProviderSpec.Raw, _ = json.Marshal(m)
	req := &driver.CreateMachineRequest{Machine: machine("worker-a-1"), MachineClass: class, Secret: passwordSecret(cloud)}

	strict, err := registry.Open("openstack", registry.Env{SpecMode: driver.Strict})
	if err != nil {
		t.Fatal(err)
	}
	_, err = strict.CreateMachine(ctxT(t), req)
	if !driver.IsCode(err, driver.InvalidArgument) || !strings.Contains(driver.MessageOf(err), "providerSpec.spec.bootMode") {
		t.Fatalf("strict CreateMachine = %v; want InvalidArgument naming bootMode", err)
	}
	if n := cloud.Requests.Len(); n != 0 {
		t.Fatalf("a refused class made %d cloud requests", n)
	}
	lenient, err := registry.Open("openstack", registry.Env{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lenient.CreateMachine(ctxT(t), req); err != nil {
		t.Fatalf("lenient CreateMachine = %v", err)
	}
	if len(cloud.Servers()) != 1 {
		t.Fatalf("servers: %+v", cloud.Servers())
	}
}

// The MachineClass the README uses with `machinist fakecloud openstack` works against the fake
// with the secret the command prints: create, list, delete, and nothing left in the fake.
func TestFakecloudSampleClass(t *testing.T) {
	cloud := startCloud(t, fakeopenstack.Options{})
	class := readClass(t, "../../kubernetes/samples/fakecloud/openstack-machineclass.yaml")
	d, _ := testDriver(t)
	secret := passwordSecret(cloud)
	ctx := ctxT(t)
	resp, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine("demo-1"), MachineClass: class, Secret: secret})
	if err != nil {
		t.Fatalf("CreateMachine: %v", err)
	}
	list, err := d.ListMachines(ctx, &driver.ListMachinesRequest{MachineClass: class, Secret: secret})
	if err != nil || list.MachineList[resp.ProviderID] != "demo-1" {
		t.Fatalf("ListMachines = %v, %v", list, err)
	}
	if _, err := d.DeleteMachine(ctx, &driver.DeleteMachineRequest{Machine: machine("demo-1"), MachineClass: class, Secret: secret}); err != nil {
		t.Fatalf("DeleteMachine: %v", err)
	}
	if s := cloud.State(); len(s.Servers) != 0 || len(s.Ports) != 0 || len(s.Volumes) != 0 {
		t.Fatalf("left in the fake: %+v", s)
	}
}
