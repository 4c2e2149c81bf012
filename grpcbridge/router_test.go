package grpcbridge_test

import (
	"context"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/drivertest/memdriver"
	"github.com/machinist-io/machinist/grpcbridge"
	"github.com/machinist-io/machinist/grpcbridge/internal/fixture"
	driverv1 "github.com/machinist-io/machinist/grpcbridge/proto/machinist/driver/v1"
)

// volumeDriver answers GetMachineStatus with its name and maps CSI volumes of its name.
func volumeDriver(name string) driver.Driver {
	return &fixture.FuncDriver{Handle: func(_ context.Context, method string, req any) (any, error) {
		switch method {
		case "GetVolumeIDs":
			var ids []string
			for _, s := range req.(*driver.GetVolumeIDsRequest).PVSpecs {
				if s != nil && s.CSI != nil && s.CSI.Driver == name {
					ids = append(ids, s.CSI.VolumeHandle)
				}
			}
			return &driver.GetVolumeIDsResponse{VolumeIDs: ids}, nil
		case "GetMachineStatus":
			return &driver.GetMachineStatusResponse{NodeName: name}, nil
		}
		return nil, driver.Error(driver.Unimplemented, name)
	}}
}

// TestServerRoutesByProvider serves two providers from one server and routes by
// MachineClass.provider (case-insensitively), and GetVolumeIDs by the client's provider.
func TestServerRoutesByProvider(t *testing.T) {
	router := grpcbridge.NewRouter(map[string]driver.Driver{"OpenStack": volumeDriver("openstack"), "azure": volumeDriver("azure")})
	served := fixture.ServeUnix(t, router)
	ctx := t.Context()

	info, err := driverv1.NewIdentityServiceClient(served.Conn).GetInfo(ctx, &driverv1.GetInfoRequest{})
	mustOK(t, err)
	if !reflect.DeepEqual(info.Providers, []string{"azure", "openstack"}) {
		t.Fatalf("GetInfo providers = %v", info.Providers)
	}

	for provider, want := range map[string]string{"OpenStack": "openstack", "azure": "azure", "AZURE": "azure"} {
		class := fixture.Class(provider)
		class.UID = types.UID("uid-of-" + provider) // classes of different providers are different objects
		resp, err := served.Client.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: fixture.Machine("m"), MachineClass: class})
		mustOK(t, err)
		if resp.NodeName != want {
			t.Fatalf("class provider %q went to %q", provider, resp.NodeName)
		}
	}
	_, err = served.Client.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: fixture.Machine("m"), MachineClass: fixture.Class("gcp")})
	if !driver.IsCode(err, driver.InvalidArgument) || !strings.Contains(driver.MessageOf(err), `does not serve provider "gcp"`) {
		t.Fatalf("unknown provider: %v", err)
	}
	_, err = served.Client.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: fixture.Machine("m")})
	if !driver.IsCode(err, driver.InvalidArgument) || !strings.Contains(driver.MessageOf(err), "no machineClass") {
		t.Fatalf("no class: %v", err)
	}

	specs := []*corev1.PersistentVolumeSpec{fixture.CSIVolume("azure", "a1"), fixture.CSIVolume("nfs", "n1"), fixture.CSIVolume("openstack", "o1"), nil, fixture.CSIVolume("azure", "a2")}
	azure := grpcbridge.NewClient(served.Conn, grpcbridge.WithProvider("azure"))
	vr, err := azure.GetVolumeIDs(ctx, &driver.GetVolumeIDsRequest{PVSpecs: specs})
	mustOK(t, err)
	if !reflect.DeepEqual(vr.VolumeIDs, []string{"a1", "a2"}) {
		t.Fatalf("azure volumes = %v", vr.VolumeIDs)
	}
	// Without a provider every provider is asked per volume, in request order.
	vr, err = served.Client.GetVolumeIDs(ctx, &driver.GetVolumeIDsRequest{PVSpecs: specs})
	mustOK(t, err)
	if !reflect.DeepEqual(vr.VolumeIDs, []string{"a1", "o1", "a2"}) {
		t.Fatalf("all volumes = %v", vr.VolumeIDs)
	}
}

// TestRouterServesRealDriver: a real driver behind a Router next to another provider.
func TestRouterServesRealDriver(t *testing.T) {
	cloud := memdriver.NewCloud()
	router := grpcbridge.NewRouter(map[string]driver.Driver{"mem": memdriver.New(cloud), "other": volumeDriver("other")})
	cl := fixture.ServeUnix(t, router).Client
	class := fixture.MemClass("workers", `{"cluster":"c","role":"worker","size":"small"}`)
	m := fixture.Machine("m-routed")
	m.ObjectMeta = metav1.ObjectMeta{Name: "m-routed", Namespace: "default"}
	resp, err := cl.CreateMachine(t.Context(), &driver.CreateMachineRequest{Machine: m, MachineClass: class, Secret: fixture.MemSecret()})
	mustOK(t, err)
	if cloud.Count("m-routed") != 1 || !strings.HasPrefix(resp.ProviderID, "mem:///c/") {
		t.Fatalf("routed create: %+v, %d VMs", resp, cloud.Count("m-routed"))
	}
}
