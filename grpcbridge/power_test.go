package grpcbridge_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/drivertest"
	"github.com/machinist-io/machinist/core/drivertest/memdriver"
	"github.com/machinist-io/machinist/grpcbridge"
	"github.com/machinist-io/machinist/grpcbridge/internal/fixture"
	driverv1 "github.com/machinist-io/machinist/grpcbridge/proto/machinist/driver/v1"
)

// plainDriver is the reference driver without the power capability: the six operations only.
type plainDriver struct{ d *memdriver.Driver }

func (p plainDriver) CreateMachine(ctx context.Context, r *driver.CreateMachineRequest) (*driver.CreateMachineResponse, error) {
	return p.d.CreateMachine(ctx, r)
}
func (p plainDriver) InitializeMachine(ctx context.Context, r *driver.InitializeMachineRequest) (*driver.InitializeMachineResponse, error) {
	return p.d.InitializeMachine(ctx, r)
}
func (p plainDriver) DeleteMachine(ctx context.Context, r *driver.DeleteMachineRequest) (*driver.DeleteMachineResponse, error) {
	return p.d.DeleteMachine(ctx, r)
}
func (p plainDriver) GetMachineStatus(ctx context.Context, r *driver.GetMachineStatusRequest) (*driver.GetMachineStatusResponse, error) {
	return p.d.GetMachineStatus(ctx, r)
}
func (p plainDriver) ListMachines(ctx context.Context, r *driver.ListMachinesRequest) (*driver.ListMachinesResponse, error) {
	return p.d.ListMachines(ctx, r)
}
func (p plainDriver) GetVolumeIDs(ctx context.Context, r *driver.GetVolumeIDsRequest) (*driver.GetVolumeIDsResponse, error) {
	return p.d.GetVolumeIDs(ctx, r)
}

// serveBefore serves d the way a driver server built before the power capability does: its
// DriverService knows only the six operations, so gRPC itself answers the others Unimplemented.
func serveBefore(t *testing.T, d driver.Driver) driver.Driver {
	t.Helper()
	addr := "unix://" + filepath.Join(fixture.SocketDir(t), "old.sock")
	lis, err := grpcbridge.Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := grpcbridge.NewGRPCServer(fixture.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	desc := driverv1.DriverService_ServiceDesc
	desc.Methods = slices.DeleteFunc(slices.Clone(desc.Methods), func(m grpc.MethodDesc) bool {
		return m.MethodName == "StopMachine" || m.MethodName == "StartMachine" || m.MethodName == "GetCapabilities"
	})
	if len(desc.Methods) != 6 {
		t.Fatalf("the old service has %d methods, want the six operations", len(desc.Methods))
	}
	srv.RegisterService(&desc, grpcbridge.NewServer(d))
	go func() { _ = srv.Serve(lis) }()
	conn, err := grpcbridge.Dial(addr, fixture.Insecure)
	if err != nil {
		srv.Stop()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
	})
	return grpcbridge.NewClient(conn, grpcbridge.WithProvider(memdriver.ProviderName))
}

// A server built before the capability, and a new server whose driver lacks it, both read as
// without it: the client reports no power and PowerOf names the provider, and the conformance
// kit skips the power rules after checking that both calls answer exactly Unimplemented. The
// six operations keep working.
func TestPowerAbsentAcrossTheBridge(t *testing.T) {
	for name, serve := range map[string]func(t *testing.T, d *memdriver.Driver) driver.Driver{
		"server built before": func(t *testing.T, d *memdriver.Driver) driver.Driver { return serveBefore(t, d) },
		"driver without it": func(t *testing.T, d *memdriver.Driver) driver.Driver {
			return fixture.ServeUnix(t, plainDriver{d}).Client
		},
	} {
		t.Run(name, func(t *testing.T) {
			d := serve(t, memdriver.New(nil))
			caps, err := driver.CapabilitiesOf(t.Context(), d)
			if err != nil || caps.Power {
				t.Fatalf("capabilities %+v, %v; want none, no error", caps, err)
			}
			_, err = driver.PowerOf(t.Context(), "mem", d)
			if !driver.IsCode(err, driver.Unimplemented) || !strings.Contains(driver.MessageOf(err), `provider "mem"`) {
				t.Fatalf("PowerOf = %v; want Unimplemented naming the provider", err)
			}
			outcome := map[string]drivertest.Outcome{}
			err = drivertest.Check(t.Context(), func(context.Context) (drivertest.Target, error) {
				target := fixture.MemTarget(t)
				target.Driver = serve(t, target.Driver.(*memdriver.Driver))
				return target, nil
			}, drivertest.WithReport(func(r drivertest.Result) { outcome[r.Rule] = r.Outcome }))
			if err != nil {
				t.Fatal(err)
			}
			for _, rule := range drivertest.RuleNames() {
				want := drivertest.Passed
				if strings.Contains(rule, "Stop") || strings.Contains(rule, "Power") {
					want = drivertest.Skipped
				}
				if outcome[rule] != want {
					t.Errorf("%s %s; want %s", rule, outcome[rule], want)
				}
			}
		})
	}
}

// The power capability crosses the dial-out bridge: the client reports it and stops and starts
// the VM on the far side, and a Router serving several providers reports it per provider.
func TestPowerAcrossTheBridge(t *testing.T) {
	cloud := memdriver.NewCloud()
	router := grpcbridge.NewRouter(map[string]driver.Driver{"mem": memdriver.New(cloud), "plain": plainDriver{memdriver.New(nil)}})
	served := fixture.ServeUnix(t, router)
	mem := grpcbridge.NewClient(served.Conn, grpcbridge.WithProvider("mem"))
	plain := grpcbridge.NewClient(served.Conn, grpcbridge.WithProvider("plain"))
	if caps, err := driver.CapabilitiesOf(t.Context(), mem); err != nil || !caps.Power {
		t.Fatalf("mem: capabilities %+v, %v; want power", caps, err)
	}
	if caps, err := driver.CapabilitiesOf(t.Context(), plain); err != nil || caps.Power {
		t.Fatalf("plain: capabilities %+v, %v; want none", caps, err)
	}
	p, err := driver.PowerOf(t.Context(), "mem", mem)
	if err != nil {
		t.Fatal(err)
	}
	class := fixture.MemClass("workers", `{"cluster":"c","role":"worker","size":"small"}`)
	m := fixture.Machine("m-1")
	m.Spec.ProviderID = ""
	created, err := mem.CreateMachine(t.Context(), &driver.CreateMachineRequest{Machine: m, MachineClass: class, Secret: fixture.MemSecret()})
	if err != nil {
		t.Fatal(err)
	}
	m.Spec.ProviderID = created.ProviderID
	if _, err := p.StopMachine(t.Context(), &driver.StopMachineRequest{Machine: m, MachineClass: class, Secret: fixture.MemSecret()}); err != nil {
		t.Fatal(err)
	}
	if vms := cloud.VMs(); len(vms) != 1 || !vms[0].Stopped {
		t.Fatalf("after StopMachine the cloud holds %+v; want the one VM, stopped", vms)
	}
	started, err := p.StartMachine(t.Context(), &driver.StartMachineRequest{Machine: m, MachineClass: class, Secret: fixture.MemSecret()})
	if err != nil || started.ProviderID != created.ProviderID {
		t.Fatalf("StartMachine = %+v, %v; want the created VM %s", started, err, created.ProviderID)
	}
	if vms := cloud.VMs(); len(vms) != 1 || vms[0].Stopped {
		t.Fatalf("after StartMachine the cloud holds %+v; want the one VM, running", vms)
	}
	if cloud.Calls(memdriver.MethodStop) != 1 || cloud.Calls(memdriver.MethodStart) != 1 {
		t.Fatalf("the cloud saw %d stops and %d starts; want 1 each", cloud.Calls(memdriver.MethodStop), cloud.Calls(memdriver.MethodStart))
	}
}
