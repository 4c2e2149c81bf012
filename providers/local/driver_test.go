package local

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/registry"
	"github.com/machinist-io/machinist/internal/eventually"
)

// In lenient mode (the default) unknown and mis-cased fields are ignored and reported as
// warnings, as Kubernetes' decoders treat them.
func TestSpecLenientWarnings(t *testing.T) {
	warnings, err := checkSpec(class(t, "c", map[string]any{"cluster": "dev", "cpus": 2, "Pods": 10}), driver.Lenient)
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) != 2 || warnings[0].Path != "providerSpec.Pods" || warnings[0].Field != "pods" || warnings[1].Path != "providerSpec.cpus" {
		t.Fatalf("warnings %+v", warnings)
	}
	_, ms, err := classSpec(class(t, "c", map[string]any{"cluster": "dev", "Pods": 10}), driver.Lenient)
	if err != nil || ms.Pods == 10 {
		t.Fatalf("a mis-cased field must be ignored: %+v %v", ms, err)
	}
}

func TestSpecValidationNamesTheField(t *testing.T) {
	cases := []struct {
		name string
		spec map[string]any
		want string
	}{
		{"cluster required", map[string]any{}, "providerSpec.cluster: Required"},
		{"cluster a DNS label", map[string]any{"cluster": "Dev_1"}, "providerSpec.cluster: Invalid"},
		{"unknown field (strict mode)", map[string]any{"cluster": "c", "cpus": 2}, "providerSpec.cpus: unknown field"},
		{"bad cpu", map[string]any{"cluster": "c", "cpu": "two"}, "providerSpec.cpu: Invalid"},
		{"negative memory", map[string]any{"cluster": "c", "memory": "-1Gi"}, "providerSpec.memory: Invalid"},
		{"pods range", map[string]any{"cluster": "c", "pods": 0}, "providerSpec.pods: Invalid"},
		{"label key", map[string]any{"cluster": "c", "labels": map[string]string{"bad key": "v"}}, "providerSpec.labels[bad key]"},
		{"bad duration", map[string]any{"cluster": "c", "bootDelay": "soon"}, "providerSpec.bootDelay: Invalid"},
		{"grace vs interval", map[string]any{"cluster": "c", "heartbeatInterval": "5s", "nodeMonitorGracePeriod": "5s"}, "providerSpec.nodeMonitorGracePeriod: Invalid"},
		{"injected code", map[string]any{"cluster": "c", "createError": map[string]any{"code": "Oops"}}, "providerSpec.createError.code: Invalid"},
		{"injected OK", map[string]any{"cluster": "c", "deleteError": map[string]any{"code": "OK"}}, "providerSpec.deleteError.code: Invalid"},
		{"wrong type", map[string]any{"cluster": "c", "pods": "many"}, "pods"},
		{"ready delay", map[string]any{"cluster": "c", "readyDelay": "-1s"}, "providerSpec.readyDelay: Invalid"},
		{"ready delay and never ready", map[string]any{"cluster": "c", "readyDelay": "5s", "neverReady": true}, "providerSpec.readyDelay: Invalid"},
		{"never ready type", map[string]any{"cluster": "c", "neverReady": "yes"}, "neverReady"},
		{"injected times", map[string]any{"cluster": "c", "createError": map[string]any{"code": "Unavailable", "times": -1}}, "providerSpec.createError.times: Invalid"},
		{"update delay", map[string]any{"cluster": "c", "updateDelay": "later"}, "providerSpec.updateDelay: Invalid"},
		{"update error reason", map[string]any{"cluster": "c", "updateError": map[string]any{"reason": strings.Repeat("x", 1025)}}, "providerSpec.updateError.reason: Too long"},
		{"update error type", map[string]any{"cluster": "c", "updateError": "yes"}, "updateError"},
	}
	d := open(t, registry.Env{SpecMode: driver.Strict})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := d.CreateMachine(context.Background(), &driver.CreateMachineRequest{
				Machine: machine("m"), MachineClass: class(t, "bad", c.spec), Secret: secret(nil),
			})
			if driver.CodeOf(err) != driver.InvalidArgument {
				t.Fatalf("code %v (%v), want InvalidArgument", driver.CodeOf(err), err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not name %q", err, c.want)
			}
			if recs, _ := d.store.list(); len(recs) != 0 {
				t.Fatalf("invalid input created %d machines", len(recs))
			}
		})
	}
}

func TestSpecDefaults(t *testing.T) {
	_, ms, err := classSpec(class(t, "c", map[string]any{"cluster": "dev"}), driver.Strict)
	if err != nil {
		t.Fatal(err)
	}
	if ms.CPU.String() != "2" || ms.Memory.String() != "4Gi" || ms.Pods != 110 {
		t.Fatalf("defaults: cpu %s memory %s pods %d", ms.CPU.String(), ms.Memory.String(), ms.Pods)
	}
	if ms.HeartbeatInterval != 10*time.Second || ms.NodeMonitorGracePeriod != 40*time.Second {
		t.Fatalf("defaults: interval %s grace %s", ms.HeartbeatInterval, ms.NodeMonitorGracePeriod)
	}
	_, ms, err = classSpec(class(t, "c", map[string]any{"cluster": "dev", "cpu": 4, "memory": "512Mi", "pods": 20}), driver.Strict)
	if err != nil {
		t.Fatal(err)
	}
	if ms.CPU.String() != "4" || ms.Memory.String() != "512Mi" || ms.Pods != 20 {
		t.Fatalf("explicit: cpu %s memory %s pods %d", ms.CPU.String(), ms.Memory.String(), ms.Pods)
	}
}

func TestMachinesWithoutTarget(t *testing.T) {
	for _, withDir := range []bool{false, true} {
		t.Run(map[bool]string{false: "memory", true: "state dir"}[withDir], func(t *testing.T) {
			env := registry.Env{}
			if withDir {
				env.StateDir = t.TempDir()
			}
			d := open(t, env)
			ctx := context.Background()
			dev := class(t, "dev", map[string]any{"cluster": "dev"})
			prod := class(t, "prod", map[string]any{"cluster": "prod"})

			resp, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine("a"), MachineClass: dev})
			if err != nil {
				t.Fatal(err)
			}
			if resp.ProviderID != "local:///a" || resp.NodeName != "a" {
				t.Fatalf("create: %+v", resp)
			}
			again, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine("a"), MachineClass: dev})
			if err != nil || again.ProviderID != resp.ProviderID {
				t.Fatalf("second create: %+v, %v", again, err)
			}
			if _, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine("a"), MachineClass: prod}); driver.CodeOf(err) != driver.AlreadyExists {
				t.Fatalf("create in another cluster: %v, want AlreadyExists", err)
			}
			if _, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine("b"), MachineClass: prod}); err != nil {
				t.Fatal(err)
			}

			list, err := d.ListMachines(ctx, &driver.ListMachinesRequest{MachineClass: dev})
			if err != nil || len(list.MachineList) != 1 || list.MachineList["local:///a"] != "a" {
				t.Fatalf("list dev: %v, %v", list, err)
			}
			if _, err := d.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: machine("b"), MachineClass: dev}); driver.CodeOf(err) != driver.NotFound {
				t.Fatalf("status of another cluster's machine: %v, want NotFound", err)
			}
			// Delete through another cluster's class leaves the machine alone.
			if _, err := d.DeleteMachine(ctx, &driver.DeleteMachineRequest{Machine: machine("b"), MachineClass: dev}); err != nil {
				t.Fatal(err)
			}
			if _, err := d.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: machine("b"), MachineClass: prod}); err != nil {
				t.Fatalf("machine of another cluster was deleted: %v", err)
			}
			// Delete by providerID.
			byID := machine("renamed")
			byID.Spec.ProviderID = "local:///a"
			if _, err := d.DeleteMachine(ctx, &driver.DeleteMachineRequest{Machine: byID, MachineClass: dev}); err != nil {
				t.Fatal(err)
			}
			if _, err := d.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: machine("a"), MachineClass: dev}); driver.CodeOf(err) != driver.NotFound {
				t.Fatalf("status after delete: %v, want NotFound", err)
			}
			if _, err := d.DeleteMachine(ctx, &driver.DeleteMachineRequest{Machine: machine("a"), MachineClass: dev}); err != nil {
				t.Fatalf("delete of an absent machine: %v", err)
			}
			foreign := machine("x")
			foreign.Spec.ProviderID = "openstack:///region/uuid"
			if _, err := d.DeleteMachine(ctx, &driver.DeleteMachineRequest{Machine: foreign, MachineClass: dev}); driver.CodeOf(err) != driver.InvalidArgument {
				t.Fatalf("foreign providerID: %v, want InvalidArgument", err)
			}
		})
	}
}

func TestInjectedErrors(t *testing.T) {
	d := open(t, registry.Env{})
	ctx := context.Background()
	c := class(t, "flaky", map[string]any{
		"cluster":     "dev",
		"createError": map[string]any{"code": "ResourceExhausted", "message": "quota of cores exhausted", "times": 2},
		"deleteError": map[string]any{"code": "Unavailable"},
	})
	req := &driver.CreateMachineRequest{Machine: machine("m"), MachineClass: c}
	for i := range 2 {
		_, err := d.CreateMachine(ctx, req)
		if driver.CodeOf(err) != driver.ResourceExhausted || !strings.Contains(err.Error(), "quota of cores exhausted") {
			t.Fatalf("create %d: %v, want the injected ResourceExhausted", i+1, err)
		}
		if _, err := d.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: machine("m"), MachineClass: c}); driver.CodeOf(err) != driver.NotFound {
			t.Fatalf("a failed create left a machine: %v", err)
		}
	}
	if _, err := d.CreateMachine(ctx, req); err != nil {
		t.Fatalf("third create: %v", err)
	}
	for range 3 { // times 0: always
		if _, err := d.DeleteMachine(ctx, &driver.DeleteMachineRequest{Machine: machine("m"), MachineClass: c}); driver.CodeOf(err) != driver.Unavailable {
			t.Fatalf("delete: %v, want the injected Unavailable", err)
		}
	}
}

func TestCancelledContext(t *testing.T) {
	d := open(t, registry.Env{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine("m"), MachineClass: class(t, "c", map[string]any{"cluster": "dev"})})
	if driver.CodeOf(err) != driver.Canceled {
		t.Fatalf("%v, want Canceled", err)
	}
}

func TestGetVolumeIDs(t *testing.T) {
	d := open(t, registry.Env{})
	specs := []*corev1.PersistentVolumeSpec{
		{PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: CSIDriverName, VolumeHandle: "vol-1"}}},
		{PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "other.csi.io", VolumeHandle: "x"}}},
		{PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/data"}}},
		{PersistentVolumeSource: corev1.PersistentVolumeSource{NFS: &corev1.NFSVolumeSource{Server: "nfs", Path: "/"}}},
		nil,
		{PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: CSIDriverName, VolumeHandle: "vol-2"}}},
	}
	resp, err := d.GetVolumeIDs(context.Background(), &driver.GetVolumeIDsRequest{PVSpecs: specs})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(resp.VolumeIDs, ",") != "vol-1,vol-2" {
		t.Fatalf("volume IDs %v, want [vol-1 vol-2]", resp.VolumeIDs)
	}
}

func TestStateDirPersistsAndIsShared(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	c := class(t, "c", map[string]any{"cluster": "dev"})
	first := open(t, registry.Env{StateDir: dir})
	if !first.IsHost() {
		t.Fatal("the first driver of a state dir is not its host")
	}
	second := open(t, registry.Env{StateDir: dir})
	if second.IsHost() {
		t.Fatal("two drivers host one state dir")
	}
	// A machine created by one process is seen by the other.
	if _, err := second.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine("m1"), MachineClass: c}); err != nil {
		t.Fatal(err)
	}
	if _, err := first.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: machine("m1"), MachineClass: c}); err != nil {
		t.Fatalf("host does not see the guest's machine: %v", err)
	}
	eventually.Explained(t, 5*time.Second, "host adopts the guest's machine", func() (bool, string) {
		first.fleet.mu.Lock()
		defer first.fleet.mu.Unlock()
		_, ok := first.fleet.agents["m1"]
		return ok, "no agent"
	})
	// The record is a readable file.
	if _, err := os.Stat(filepath.Join(dir, "local", "machines", "m1.json")); err != nil {
		t.Fatal(err)
	}
	// Closing the host hands hosting over.
	first.Close()
	eventually.Explained(t, 5*time.Second, "the second driver becomes host", func() (bool, string) { return second.IsHost(), "not host" })
	// A new process sees the machine after a restart.
	second.Close()
	third := open(t, registry.Env{StateDir: dir})
	if _, err := third.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: machine("m1"), MachineClass: c}); err != nil {
		t.Fatalf("machine lost across restart: %v", err)
	}
	// The heartbeat switch works without a driver and refuses unknown machines.
	if err := SetHeartbeat(dir, "m1", false); err != nil {
		t.Fatal(err)
	}
	if running, err := third.HeartbeatRunning(ctx, "m1"); err != nil || running {
		t.Fatalf("heartbeat running=%v err=%v after stop", running, err)
	}
	if err := SetHeartbeat(dir, "nope", false); driver.CodeOf(err) != driver.NotFound {
		t.Fatalf("switch of an unknown machine: %v, want NotFound", err)
	}
	if _, err := third.DeleteMachine(ctx, &driver.DeleteMachineRequest{Machine: machine("m1"), MachineClass: c}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "local", "heartbeat", "m1")); !os.IsNotExist(err) {
		t.Fatalf("delete left the heartbeat switch behind: %v", err)
	}
}

func TestConcurrentCreatesOfOneMachineMakeOne(t *testing.T) {
	dir := t.TempDir()
	c := class(t, "c", map[string]any{"cluster": "dev"})
	drivers := []*Driver{open(t, registry.Env{StateDir: dir}), open(t, registry.Env{StateDir: dir})}
	var wg sync.WaitGroup
	ids := make([]string, 16)
	for i := range ids {
		wg.Go(func() {
			resp, err := drivers[i%2].CreateMachine(context.Background(), &driver.CreateMachineRequest{Machine: machine("same"), MachineClass: c})
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = resp.ProviderID
		})
	}
	wg.Wait()
	for _, id := range ids {
		if id != "local:///same" {
			t.Fatalf("providerIDs %v", ids)
		}
	}
	names, _ := drivers[0].store.names()
	if len(names) != 1 {
		t.Fatalf("%d records for one machine", len(names))
	}
}
