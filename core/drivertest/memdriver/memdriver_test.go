package memdriver_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/drivertest/memdriver"
	"github.com/machinist-io/machinist/core/registry"
)

func class(name, spec string) *v1alpha1.MachineClass {
	return &v1alpha1.MachineClass{
		ObjectMeta:   metav1.ObjectMeta{Name: name, Namespace: "default"},
		Provider:     "mem",
		ProviderSpec: runtime.RawExtension{Raw: []byte(spec)},
	}
}

func machine(name string) *v1alpha1.Machine {
	return &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}
}

var (
	workers = class("workers", `{"cluster":"a","role":"worker","size":"small","tags":{"team":"x"}}`)
	masters = class("masters", `{"cluster":"a","role":"master"}`)
	otherB  = class("b-workers", `{"cluster":"b","role":"worker","size":"small"}`)
)

func create(t *testing.T, d driver.Driver, c *v1alpha1.MachineClass, name string) *driver.CreateMachineResponse {
	t.Helper()
	resp, err := d.CreateMachine(t.Context(), &driver.CreateMachineRequest{Machine: machine(name), MachineClass: c, Secret: &corev1.Secret{}})
	if err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
	return resp
}

func wantCode(t *testing.T, err error, code driver.Code) {
	t.Helper()
	if got := driver.CodeOf(err); got != code {
		t.Fatalf("got code %s (%v), want %s", got, err, code)
	}
	var st *driver.Status
	if !errors.As(err, &st) {
		t.Fatalf("error %v is not a *driver.Status", err)
	}
}

func TestCreateIsIdempotentAndScoped(t *testing.T) {
	cloud := memdriver.NewCloud()
	d := memdriver.New(cloud)
	secret := &corev1.Secret{Data: map[string][]byte{"userData": []byte("#!/bin/sh\necho hi")}}

	first, err := d.CreateMachine(t.Context(), &driver.CreateMachineRequest{Machine: machine("m1"), MachineClass: workers, Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	second := create(t, d, workers, "m1")
	if first.ProviderID != second.ProviderID || first.NodeName != "m1" || second.NodeName != "m1" {
		t.Fatalf("second create = %+v, first = %+v", second, first)
	}
	if !strings.HasPrefix(first.ProviderID, "mem:///a/vm-") {
		t.Fatalf("providerID %q does not have the form mem:///<cluster>/<id>", first.ProviderID)
	}
	if n := cloud.Count("m1"); n != 1 {
		t.Fatalf("Count(m1) = %d after two creates, want 1", n)
	}
	vm := cloud.VMs()[0]
	if vm.Cluster != "a" || vm.Role != "worker" || vm.ClassName != "workers" || vm.Size != "small" ||
		vm.Tags["team"] != "x" || vm.UserData != "#!/bin/sh\necho hi" || !vm.Initialized || vm.IP == "" {
		t.Fatalf("stored VM = %+v", vm)
	}
	if len(first.Addresses) != 2 || first.Addresses[0].Address != vm.IP {
		t.Fatalf("addresses = %+v, want the VM's IP and hostname", first.Addresses)
	}

	// The same machine name in another role is another VM.
	if create(t, d, masters, "m1").ProviderID == first.ProviderID {
		t.Fatal("a class of another role returned the worker's VM")
	}
	if n := cloud.Count("m1"); n != 2 {
		t.Fatalf("Count(m1) = %d, want 2 (one per role)", n)
	}
}

func TestCreateOfAnotherSizeIsAlreadyExists(t *testing.T) {
	d := memdriver.New(nil)
	create(t, d, workers, "m1")
	bigger := class("workers", `{"cluster":"a","role":"worker","size":"large"}`)
	_, err := d.CreateMachine(t.Context(), &driver.CreateMachineRequest{Machine: machine("m1"), MachineClass: bigger})
	wantCode(t, err, driver.AlreadyExists)
	if !strings.Contains(err.Error(), `"small"`) || !strings.Contains(err.Error(), `"large"`) {
		t.Fatalf("message does not name both sizes: %v", err)
	}
}

func TestInvalidRequestsAreInvalidArgumentNamingTheField(t *testing.T) {
	cloud := memdriver.NewCloud()
	d := memdriver.New(cloud)
	cases := []struct {
		name  string
		req   *driver.CreateMachineRequest
		field string
	}{
		// Unknown fields are ignored (specs decode as Gardener's providers decode them), so a
		// misspelt required field is a missing one.
		{"misspelt field", &driver.CreateMachineRequest{Machine: machine("x"), MachineClass: class("c", `{"cluster":"a","rol":"w"}`)}, "providerSpec.role"},
		{"missing cluster", &driver.CreateMachineRequest{Machine: machine("x"), MachineClass: class("c", `{"role":"w"}`)}, "providerSpec.cluster"},
		{"missing role", &driver.CreateMachineRequest{Machine: machine("x"), MachineClass: class("c", `{"cluster":"a"}`)}, "providerSpec.role"},
		{"slash in cluster", &driver.CreateMachineRequest{Machine: machine("x"), MachineClass: class("c", `{"cluster":"a/b","role":"w"}`)}, "providerSpec.cluster"},
		{"wrong type", &driver.CreateMachineRequest{Machine: machine("x"), MachineClass: class("c", `{"cluster":1,"role":"w"}`)}, "cluster"},
		{"empty spec", &driver.CreateMachineRequest{Machine: machine("x"), MachineClass: class("c", ``)}, "providerSpec"},
		{"wrong provider", &driver.CreateMachineRequest{Machine: machine("x"), MachineClass: func() *v1alpha1.MachineClass {
			c := workers.DeepCopy()
			c.Provider = "openstack"
			return c
		}()}, "provider"},
		{"no machine", &driver.CreateMachineRequest{MachineClass: workers}, "machine"},
		{"no machine name", &driver.CreateMachineRequest{Machine: machine(""), MachineClass: workers}, "metadata.name"},
		{"no class", &driver.CreateMachineRequest{Machine: machine("x")}, "machineClass"},
		{"nil request", nil, "machine"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := d.CreateMachine(t.Context(), tc.req)
			wantCode(t, err, driver.InvalidArgument)
			if !strings.Contains(driver.MessageOf(err), tc.field) {
				t.Fatalf("message %q does not name %q", driver.MessageOf(err), tc.field)
			}
		})
	}
	if vms := cloud.VMs(); len(vms) != 0 {
		t.Fatalf("invalid requests created VMs: %+v", vms)
	}
	// Provider names match case-insensitively, as in Gardener manifests.
	c := workers.DeepCopy()
	c.Provider = "Mem"
	create(t, d, c, "ok")
}

func TestStatusDeleteAndList(t *testing.T) {
	cloud := memdriver.NewCloud()
	d := memdriver.New(cloud)
	ctx := t.Context()
	status := func(c *v1alpha1.MachineClass, name string) (*driver.GetMachineStatusResponse, error) {
		return d.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: machine(name), MachineClass: c})
	}
	list := func(c *v1alpha1.MachineClass) map[string]string {
		t.Helper()
		resp, err := d.ListMachines(ctx, &driver.ListMachinesRequest{MachineClass: c})
		if err != nil {
			t.Fatal(err)
		}
		return resp.MachineList
	}

	_, err := status(workers, "m1")
	wantCode(t, err, driver.NotFound)
	w1 := create(t, d, workers, "m1")
	w2 := create(t, d, workers, "m2")
	m1 := create(t, d, masters, "m1")
	b1 := create(t, d, otherB, "m1")

	got, err := status(workers, "m1")
	if err != nil || got.ProviderID != w1.ProviderID || got.NodeName != "m1" {
		t.Fatalf("status = %+v, %v; want %s", got, err, w1.ProviderID)
	}
	if l := list(workers); len(l) != 2 || l[w1.ProviderID] != "m1" || l[w2.ProviderID] != "m2" {
		t.Fatalf("list(workers) = %v, want only %s and %s", l, w1.ProviderID, w2.ProviderID)
	}
	if l := list(masters); len(l) != 1 || l[m1.ProviderID] != "m1" {
		t.Fatalf("list(masters) = %v", l)
	}

	// A second VM for one machine (e.g. a lost create response retried elsewhere) is OutOfRange.
	dup := cloud.Add(memdriver.VM{MachineName: "m2", Cluster: "a", Role: "worker", Size: "small"})
	_, err = status(workers, "m2")
	wantCode(t, err, driver.OutOfRange)
	if !strings.Contains(err.Error(), dup.ID) {
		t.Fatalf("OutOfRange message does not name the duplicate %s: %v", dup.ID, err)
	}
	if l := list(workers); l[dup.ProviderID()] != "m2" {
		t.Fatalf("list(workers) = %v misses the orphan %s", l, dup.ProviderID())
	}

	// Delete by providerID removes exactly that VM: the duplicate of the same name survives, as
	// the orphan collector needs when it deletes one of two VMs of a machine.
	del := machine("m2")
	del.Spec.ProviderID = w2.ProviderID
	if _, err := d.DeleteMachine(ctx, &driver.DeleteMachineRequest{Machine: del, MachineClass: workers}); err != nil {
		t.Fatal(err)
	}
	if _, left := cloud.VM(dup.ID); cloud.Count("m2") != 1 || !left {
		t.Fatalf("Count(m2) = %d after deleting %s by providerID, want the duplicate %s left", cloud.Count("m2"), w2.ProviderID, dup.ID)
	}
	// Without a providerID the name finds every VM of the machine in scope.
	if _, err := d.DeleteMachine(ctx, &driver.DeleteMachineRequest{Machine: machine("m2"), MachineClass: workers}); err != nil {
		t.Fatal(err)
	}
	if n := cloud.Count("m2"); n != 0 {
		t.Fatalf("Count(m2) = %d after delete by name, want 0", n)
	}
	_, err = status(workers, "m2")
	wantCode(t, err, driver.NotFound)
	// Deleting again, and deleting what never existed, is OK.
	for _, name := range []string{"m2", "never"} {
		if _, err := d.DeleteMachine(ctx, &driver.DeleteMachineRequest{Machine: machine(name), MachineClass: workers}); err != nil {
			t.Fatalf("delete %s: %v", name, err)
		}
	}
	if _, ok := cloud.VM(strings.TrimPrefix(m1.ProviderID, "mem:///a/")); !ok {
		t.Fatal("deleting workers' m2 removed the master m1")
	}
	if _, ok := cloud.VM(strings.TrimPrefix(b1.ProviderID, "mem:///b/")); !ok {
		t.Fatal("deleting in cluster a removed cluster b's VM")
	}
}

func TestDeleteRefusesForeignProviderIDs(t *testing.T) {
	cloud := memdriver.NewCloud()
	d := memdriver.New(cloud)
	b1 := create(t, d, otherB, "m1")
	w2 := create(t, d, workers, "m2")
	cases := []struct {
		providerID string
		code       driver.Code
	}{
		{"openstack:///region/1234", driver.InvalidArgument},
		{"mem:///a", driver.InvalidArgument},
		{b1.ProviderID, driver.FailedPrecondition}, // another cluster
		{w2.ProviderID, driver.FailedPrecondition}, // another machine's VM
	}
	for _, tc := range cases {
		m := machine("m1")
		m.Spec.ProviderID = tc.providerID
		_, err := d.DeleteMachine(t.Context(), &driver.DeleteMachineRequest{Machine: m, MachineClass: workers})
		wantCode(t, err, tc.code)
	}
	if n := len(cloud.VMs()); n != 2 {
		t.Fatalf("refused deletes removed VMs: %d left, want 2", n)
	}
}

func TestInitialization(t *testing.T) {
	cloud := memdriver.NewCloud()
	cloud.SetRequireInitialization(true)
	d := memdriver.New(cloud)
	ctx := t.Context()
	_, err := d.InitializeMachine(ctx, &driver.InitializeMachineRequest{Machine: machine("m1"), MachineClass: workers})
	wantCode(t, err, driver.NotFound)

	created := create(t, d, workers, "m1")
	resp, err := d.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: machine("m1"), MachineClass: workers})
	wantCode(t, err, driver.Uninitialized)
	if resp == nil || resp.ProviderID != created.ProviderID || resp.NodeName != "m1" {
		t.Fatalf("Uninitialized status response = %+v, want the VM's identity", resp)
	}
	initResp, err := d.InitializeMachine(ctx, &driver.InitializeMachineRequest{Machine: machine("m1"), MachineClass: workers})
	if err != nil || initResp.ProviderID != created.ProviderID {
		t.Fatalf("initialize = %+v, %v", initResp, err)
	}
	if _, err := d.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: machine("m1"), MachineClass: workers}); err != nil {
		t.Fatalf("status after initialize: %v", err)
	}
}

func TestCredentials(t *testing.T) {
	cloud := memdriver.NewCloud()
	cloud.SetCredentials(map[string]string{"token": "s3cr3t-value"})
	d := memdriver.New(cloud)
	for _, secret := range []*corev1.Secret{nil, {Data: map[string][]byte{"token": []byte("wrong-value")}}} {
		_, err := d.CreateMachine(t.Context(), &driver.CreateMachineRequest{Machine: machine("m1"), MachineClass: workers, Secret: secret})
		wantCode(t, err, driver.Unauthenticated)
		if strings.Contains(err.Error(), "s3cr3t") || strings.Contains(err.Error(), "wrong-value") {
			t.Fatalf("error leaks a secret: %v", err)
		}
		_, err = d.ListMachines(t.Context(), &driver.ListMachinesRequest{MachineClass: workers, Secret: secret})
		wantCode(t, err, driver.Unauthenticated)
	}
	ok := &corev1.Secret{StringData: map[string]string{"token": "s3cr3t-value"}}
	if _, err := d.CreateMachine(t.Context(), &driver.CreateMachineRequest{Machine: machine("m1"), MachineClass: workers, Secret: ok}); err != nil {
		t.Fatal(err)
	}
}

func TestFaults(t *testing.T) {
	cloud := memdriver.NewCloud()
	d := memdriver.New(cloud)
	ctx := t.Context()
	createReq := func(name string) *driver.CreateMachineRequest {
		return &driver.CreateMachineRequest{Machine: machine(name), MachineClass: workers}
	}

	t.Run("count and machine filter", func(t *testing.T) {
		cloud.Inject(memdriver.MethodCreate, memdriver.Fault{Code: driver.ResourceExhausted, Message: "quota of 0 cores", Times: 2, Machine: "q"})
		_, err := d.CreateMachine(ctx, createReq("other"))
		if err != nil {
			t.Fatalf("fault for machine q hit machine other: %v", err)
		}
		for range 2 {
			_, err := d.CreateMachine(ctx, createReq("q"))
			wantCode(t, err, driver.ResourceExhausted)
			if !strings.Contains(err.Error(), "quota of 0 cores") {
				t.Fatalf("message lost: %v", err)
			}
		}
		if n := cloud.Count("q"); n != 0 {
			t.Fatalf("failed creates left %d VMs", n)
		}
		if _, err := d.CreateMachine(ctx, createReq("q")); err != nil {
			t.Fatalf("third create after a 2-times fault: %v", err)
		}
	})

	t.Run("until cleared", func(t *testing.T) {
		cloud.Inject(memdriver.MethodList, memdriver.Fault{Code: driver.Unavailable})
		for range 3 {
			_, err := d.ListMachines(ctx, &driver.ListMachinesRequest{MachineClass: workers})
			wantCode(t, err, driver.Unavailable)
		}
		cloud.ClearFaults()
		if _, err := d.ListMachines(ctx, &driver.ListMachinesRequest{MachineClass: workers}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("after effect", func(t *testing.T) {
		cloud.Inject(memdriver.MethodCreate, memdriver.Fault{Code: driver.DeadlineExceeded, Times: 1, AfterEffect: true})
		_, err := d.CreateMachine(ctx, createReq("lost"))
		wantCode(t, err, driver.DeadlineExceeded)
		if n := cloud.Count("lost"); n != 1 {
			t.Fatalf("after-effect fault: Count = %d, want the VM to exist", n)
		}
	})

	t.Run("delay honours the context", func(t *testing.T) {
		cloud.Inject(memdriver.MethodDelete, memdriver.Fault{Delay: time.Hour, Times: 1})
		short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := d.DeleteMachine(short, &driver.DeleteMachineRequest{Machine: machine("lost"), MachineClass: workers})
		wantCode(t, err, driver.DeadlineExceeded)
		if time.Since(start) > 10*time.Second {
			t.Fatalf("delete waited %s despite its context", time.Since(start))
		}
		if n := cloud.Count("lost"); n != 1 {
			t.Fatal("a delete cut short by its context deleted the VM")
		}
	})

	t.Run("delay then success", func(t *testing.T) {
		cloud.Inject(memdriver.MethodStatus, memdriver.Fault{Delay: time.Millisecond, Times: 1})
		if _, err := d.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: machine("lost"), MachineClass: workers}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("cancelled context", func(t *testing.T) {
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		_, err := d.CreateMachine(cancelled, createReq("never"))
		wantCode(t, err, driver.Canceled)
		_, err = d.GetVolumeIDs(cancelled, &driver.GetVolumeIDsRequest{})
		wantCode(t, err, driver.Canceled)
		if cloud.Count("never") != 0 {
			t.Fatal("a cancelled create made a VM")
		}
	})

	t.Run("calls", func(t *testing.T) {
		cloud.ResetCalls()
		create(t, d, workers, "counted")
		_, _ = d.CreateMachine(ctx, nil)
		if got := cloud.Calls(memdriver.MethodCreate); got != 2 {
			t.Fatalf("Calls(create) = %d, want 2", got)
		}
		if got := cloud.Calls(memdriver.MethodDelete); got != 0 {
			t.Fatalf("Calls(delete) = %d after reset, want 0", got)
		}
	})
}

func TestVolumeIDs(t *testing.T) {
	d := memdriver.New(nil)
	specs := []*corev1.PersistentVolumeSpec{
		{PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: memdriver.CSIDriverName, VolumeHandle: "vol-1"}}},
		{PersistentVolumeSource: corev1.PersistentVolumeSource{NFS: &corev1.NFSVolumeSource{Server: "nfs", Path: "/x"}}},
		nil,
		{PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "disk.csi.azure.com", VolumeHandle: "az-1"}}},
		{PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/data"}}},
		{PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: memdriver.CSIDriverName, VolumeHandle: "vol-2"}}},
	}
	resp, err := d.GetVolumeIDs(t.Context(), &driver.GetVolumeIDsRequest{PVSpecs: specs})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(resp.VolumeIDs, ","); got != "vol-1,vol-2" {
		t.Fatalf("volume IDs = %s, want vol-1,vol-2", got)
	}
	empty := []*corev1.PersistentVolumeSpec{{PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: memdriver.CSIDriverName}}}}
	_, err = d.GetVolumeIDs(t.Context(), &driver.GetVolumeIDsRequest{PVSpecs: empty})
	wantCode(t, err, driver.InvalidArgument)
	if !strings.Contains(err.Error(), "pvSpecs[0].csi.volumeHandle") {
		t.Fatalf("message does not name the field: %v", err)
	}
}

func TestConcurrentUseSharedCloud(t *testing.T) {
	cloud := memdriver.NewCloud()
	drivers := []*memdriver.Driver{memdriver.New(cloud), memdriver.New(cloud)}
	const n = 16
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			d := drivers[i%2]
			name := fmt.Sprintf("m%d", i/2) // two drivers race on each name
			resp, err := d.CreateMachine(t.Context(), &driver.CreateMachineRequest{Machine: machine(name), MachineClass: workers})
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = resp.ProviderID
		})
	}
	wg.Wait()
	for i := 0; i < n; i += 2 {
		if ids[i] != ids[i+1] {
			t.Fatalf("two drivers creating m%d got %s and %s", i/2, ids[i], ids[i+1])
		}
	}
	if got := len(cloud.VMs()); got != n/2 {
		t.Fatalf("%d VMs for %d machines", got, n/2)
	}
}

func TestRegistration(t *testing.T) {
	reg := memdriver.Registration()
	if reg.Name != memdriver.ProviderName || !registry.ValidName(reg.Name) || reg.Description == "" {
		t.Fatalf("registration = %+v", reg)
	}
	a, err := reg.New(registry.Env{})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := reg.New(registry.Env{})
	if a.(*memdriver.Driver).Cloud() == b.(*memdriver.Driver).Cloud() {
		t.Fatal("Registration().New shares a cloud between drivers")
	}

	cloud := memdriver.NewCloud()
	d, err := cloud.Registration().New(registry.Env{})
	if err != nil {
		t.Fatal(err)
	}
	create(t, d, workers, "m1")
	if cloud.Count("m1") != 1 {
		t.Fatal("cloud.Registration's driver does not use the cloud")
	}
}
