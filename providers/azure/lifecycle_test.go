package azure

import (
	"context"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v8"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v9"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/azure/fakeazure"
)

func classTags() map[string]*string {
	out := map[string]*string{}
	for k, v := range baseSpec().Tags {
		out[k] = ptr.To(v)
	}
	return out
}

func TestDeleteRemovesLeftoversOfAVanishedVM(t *testing.T) {
	e := newTestEnv(t)
	e.cloud.PutNIC(testRG, &armnetwork.Interface{Name: ptr.To("m-1-nic"), Location: ptr.To(testLocation), Tags: classTags()})
	e.cloud.PutDisk(testRG, &armcompute.Disk{Name: ptr.To("m-1-os-disk"), Location: ptr.To(testLocation)}) // untagged, as Azure makes it
	e.cloud.PutDisk(testRG, &armcompute.Disk{Name: ptr.To("m-1-kubelet-0-data-disk"), Location: ptr.To(testLocation), Tags: classTags()})
	// Same name pattern, but another cluster's: never touched.
	e.cloud.PutNIC(testRG, &armnetwork.Interface{Name: ptr.To("m-2-nic"), Location: ptr.To(testLocation), Tags: map[string]*string{"kubernetes.io-cluster-other": ptr.To("1")}})
	if err := e.delete(t, e.class, "m-1"); err != nil {
		t.Fatal(err)
	}
	if left := e.resourcesOf("m-1"); len(left) != 0 {
		t.Errorf("leftovers not deleted: %+v", left)
	}
	if err := e.delete(t, e.class, "m-2"); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.cloud.NIC(testRG, "m-2-nic"); !ok {
		t.Error("another cluster's NIC was deleted")
	}
}

func TestDeleteSetsCascadeOnAnAdoptedVMAndKeepsForeignVolumes(t *testing.T) {
	e := newTestEnv(t)
	e.mustCreate(t, "m-1")
	// Make it look like a VM created without cascade delete (e.g. by an older provider), with a
	// CSI volume attached.
	vm, _ := e.cloud.VM(testRG, "m-1")
	vm.Properties.NetworkProfile.NetworkInterfaces[0].Properties.DeleteOption = ptr.To(armcompute.DeleteOptionsDetach)
	vm.Properties.StorageProfile.OSDisk.DeleteOption = ptr.To(armcompute.DiskDeleteOptionTypesDetach)
	vm.Properties.StorageProfile.DataDisks[0].DeleteOption = ptr.To(armcompute.DiskDeleteOptionTypesDetach)
	e.cloud.PutDisk(testRG, &armcompute.Disk{Name: ptr.To("pvc-1234"), Location: ptr.To(testLocation), ManagedBy: vm.ID})
	vm.Properties.StorageProfile.DataDisks = append(vm.Properties.StorageProfile.DataDisks, &armcompute.DataDisk{
		Name: ptr.To("pvc-1234"), Lun: ptr.To(int32(7)), CreateOption: ptr.To(armcompute.DiskCreateOptionTypesAttach),
		ManagedDisk: &armcompute.ManagedDiskParameters{ID: ptr.To("/subscriptions/" + fakeazure.DefaultSubscriptionID + "/resourceGroups/" + testRG + "/providers/Microsoft.Compute/disks/pvc-1234")},
	})
	e.cloud.PutVM(testRG, vm)
	e.cloud.Requests.Reset()
	if err := e.delete(t, e.class, "m-1"); err != nil {
		t.Fatal(err)
	}
	if len(e.cloud.Requests.For(fakeazure.OpUpdateVM)) == 0 {
		t.Error("no update set cascade delete before deleting the VM")
	}
	if left := e.resourcesOf("m-1"); len(left) != 0 {
		t.Errorf("leftovers: %+v", left)
	}
	pv, ok := e.cloud.Disk(testRG, "pvc-1234")
	if !ok || pv.ManagedBy != nil {
		t.Errorf("the CSI volume = %+v, want it kept and detached", pv)
	}
}

func TestDeleteOfAFailedVMDeletesItAndItsLeftovers(t *testing.T) {
	e := newTestEnv(t)
	e.cloud.SetLROPollsFor(fakeazure.OpCreateVM, 0)
	e.mustCreate(t, "m-1")
	vm, _ := e.cloud.VM(testRG, "m-1")
	vm.Properties.ProvisioningState = ptr.To(fakeazure.StateFailed)
	vm.Properties.NetworkProfile.NetworkInterfaces[0].Properties.DeleteOption = ptr.To(armcompute.DeleteOptionsDetach)
	e.cloud.PutVM(testRG, vm)
	e.cloud.Requests.Reset()
	if err := e.delete(t, e.class, "m-1"); err != nil {
		t.Fatal(err)
	}
	if n := len(e.cloud.Requests.For(fakeazure.OpUpdateVM)); n != 0 {
		t.Errorf("a Failed VM was updated (%d requests); it cannot be", n)
	}
	if left := e.resourcesOf("m-1"); len(left) != 0 {
		t.Errorf("leftovers: %+v", left)
	}
}

func TestDeleteWhenTheResourceGroupIsGone(t *testing.T) {
	e := newTestEnv(t)
	e.mustCreate(t, "m-1")
	e.cloud.DeleteResourceGroup(testRG)
	if err := e.delete(t, e.class, "m-1"); err != nil {
		t.Fatalf("delete with the resource group gone: %v, want OK", err)
	}
	_, err := e.drv.GetMachineStatus(context.Background(), &driver.GetMachineStatusRequest{Machine: machine("m-1"), MachineClass: e.class, Secret: e.secret})
	if driver.CodeOf(err) != driver.NotFound {
		t.Errorf("status: err = %v, want NotFound", err)
	}
	list, err := e.drv.ListMachines(context.Background(), &driver.ListMachinesRequest{MachineClass: e.class, Secret: e.secret})
	if err != nil || len(list.MachineList) != 0 {
		t.Errorf("list = %v, %v; want empty", list, err)
	}
}

func TestDeleteRefusesAnotherClustersVM(t *testing.T) {
	e := newTestEnv(t)
	e.cloud.PutVM(testRG, &armcompute.VirtualMachine{Name: ptr.To("m-1"), Location: ptr.To(testLocation), Tags: map[string]*string{"kubernetes.io-cluster-other": ptr.To("1")}})
	err := e.delete(t, e.class, "m-1")
	if driver.CodeOf(err) != driver.FailedPrecondition {
		t.Fatalf("err = %v, want FailedPrecondition", err)
	}
	if _, ok := e.cloud.VM(testRG, "m-1"); !ok {
		t.Error("another cluster's VM was deleted")
	}
}

func TestListMachinesShowsTheClassAndOrphans(t *testing.T) {
	e := newTestEnv(t)
	e.mustCreate(t, "m-1")
	e.mustCreate(t, "m-2")
	// Leftovers of VMs that are gone.
	e.cloud.PutNIC(testRG, &armnetwork.Interface{Name: ptr.To("gone-a-nic"), Location: ptr.To(testLocation), Tags: classTags()})
	e.cloud.PutDisk(testRG, &armcompute.Disk{Name: ptr.To("gone-b-os-disk"), Location: ptr.To(testLocation), Tags: classTags()})
	e.cloud.PutDisk(testRG, &armcompute.Disk{Name: ptr.To("gone-c-kubelet-0-data-disk"), Location: ptr.To(testLocation), Tags: classTags()})
	// Not ours: another cluster, another role, an unrelated disk of the cluster.
	other := map[string]*string{"kubernetes.io-cluster-other": ptr.To("1"), "kubernetes.io-role-node": ptr.To("1")}
	e.cloud.PutVM(testRG, &armcompute.VirtualMachine{Name: ptr.To("foreign"), Location: ptr.To(testLocation), Tags: other})
	control := classTags()
	delete(control, "kubernetes.io-role-node")
	control["kubernetes.io-role-control-plane"] = ptr.To("1")
	e.cloud.PutVM(testRG, &armcompute.VirtualMachine{Name: ptr.To("control"), Location: ptr.To(testLocation), Tags: control})
	e.cloud.PutDisk(testRG, &armcompute.Disk{Name: ptr.To("etcd-backup"), Location: ptr.To(testLocation), Tags: classTags()})

	resp, err := e.drv.ListMachines(context.Background(), &driver.ListMachinesRequest{MachineClass: e.class, Secret: e.secret})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, n := range []string{"m-1", "m-2", "gone-a", "gone-b", "gone-c"} {
		want["azure:///westeurope/"+n] = n
	}
	if len(resp.MachineList) != len(want) {
		t.Errorf("list = %v, want %v", resp.MachineList, want)
	}
	for k, v := range want {
		if resp.MachineList[k] != v {
			t.Errorf("list[%s] = %q, want %q", k, resp.MachineList[k], v)
		}
	}
	// The listing is filtered by the cluster tag on Azure's side.
	for _, r := range e.cloud.Requests.For(fakeazure.OpListResources) {
		if r.Status != 200 {
			t.Errorf("list request answered %d", r.Status)
		}
	}
	// The orphan collector deletes the leftovers by machine name.
	for _, n := range []string{"gone-a", "gone-b", "gone-c"} {
		if err := e.delete(t, e.class, n); err != nil {
			t.Fatal(err)
		}
		if left := e.resourcesOf(n); len(left) != 0 {
			t.Errorf("orphan %s left %+v", n, left)
		}
	}
}

func TestGetVolumeIDs(t *testing.T) {
	e := newTestEnv(t)
	specs := []*corev1.PersistentVolumeSpec{
		{PersistentVolumeSource: corev1.PersistentVolumeSource{AzureDisk: &corev1.AzureDiskVolumeSource{DiskName: "pvc-intree", DataDiskURI: "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/disks/pvc-intree"}}},
		{PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "disk.csi.azure.com", VolumeHandle: "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/disks/pvc-csi"}}},
		{PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "file.csi.azure.com", VolumeHandle: "share"}}},
		{PersistentVolumeSource: corev1.PersistentVolumeSource{AzureFile: &corev1.AzureFilePersistentVolumeSource{ShareName: "share"}}},
		nil,
	}
	resp, err := e.drv.GetVolumeIDs(context.Background(), &driver.GetVolumeIDsRequest{PVSpecs: specs})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"pvc-intree", "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/disks/pvc-csi"}
	if len(resp.VolumeIDs) != 2 || resp.VolumeIDs[0] != want[0] || resp.VolumeIDs[1] != want[1] {
		t.Errorf("volume IDs = %q, want %q", resp.VolumeIDs, want)
	}
}

func TestStatusOfAVMOfAnotherRoleIsNotFound(t *testing.T) {
	e := newTestEnv(t)
	tags := classTags()
	tags["kubernetes.io-role-node"] = ptr.To("0")
	e.cloud.PutVM(testRG, &armcompute.VirtualMachine{Name: ptr.To("m-1"), Location: ptr.To(testLocation), Tags: tags})
	_, err := e.drv.GetMachineStatus(context.Background(), &driver.GetMachineStatusRequest{Machine: machine("m-1"), MachineClass: e.class, Secret: e.secret})
	if driver.CodeOf(err) != driver.NotFound {
		t.Errorf("err = %v, want NotFound", err)
	}
}

// A machine whose name cannot be a VM name never got a VM: deleting it must not get stuck.
func TestDeleteAndStatusOfAMachineNameAzureCannotHave(t *testing.T) {
	e := newTestEnv(t)
	if err := e.delete(t, e.class, "node.with.dots"); err != nil {
		t.Errorf("delete: %v, want OK", err)
	}
	_, err := e.drv.GetMachineStatus(context.Background(), &driver.GetMachineStatusRequest{Machine: machine("node.with.dots"), MachineClass: e.class, Secret: e.secret})
	if driver.CodeOf(err) != driver.NotFound {
		t.Errorf("status: %v, want NotFound", err)
	}
}
