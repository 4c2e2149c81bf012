package dialin_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/drivertest/memdriver"
	"github.com/machinist-io/machinist/grpcbridge"
	"github.com/machinist-io/machinist/grpcbridge/dialin"
	"github.com/machinist-io/machinist/grpcbridge/internal/fixture"
	dialinv1 "github.com/machinist-io/machinist/grpcbridge/proto/machinist/dialin/v1"
)

// registerBefore connects a replica the way a provider built before the power capability does:
// its Hello names the provider and reports no capability. It counts the operations it receives
// and answers none of them.
func registerBefore(t *testing.T, addr string, tr grpcbridge.Transport, name string) *atomic.Int64 {
	t.Helper()
	conn, err := grpcbridge.Dial(addr, tr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() {
		cancel()
		conn.Close()
	})
	stream, err := dialinv1.NewControllerServiceClient(conn).Register(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&dialinv1.RegisterRequest{Message: &dialinv1.RegisterRequest_Hello{Hello: &dialinv1.Hello{Providers: []string{name}, Instance: "built-before"}}}); err != nil {
		t.Fatal(err)
	}
	if first, err := stream.Recv(); err != nil || first.GetWelcome() == nil {
		t.Fatalf("the controller answered the old Hello with %v, %v; want Welcome", first, err)
	}
	var ops atomic.Int64
	go func() {
		for {
			msg, err := stream.Recv()
			if err != nil {
				return
			}
			if msg.GetOperation() != nil {
				ops.Add(1)
			}
		}
	}()
	return &ops
}

// A replica built before the power capability keeps its providers served, without standby:
// alone it makes the provider report no power and stopping answer Unimplemented; beside a replica
// that serves the capability, stops and starts go only to that one.
func TestPowerOnlyToReplicasThatServeIt(t *testing.T) {
	certs := fixture.NewCerts(t)
	ctrl := fixture.ServeController(t, dialin.Options{}, fixture.ServerTransport(t, certs))
	oldOps := registerBefore(t, ctrl.Addr, fixture.ProviderCerts(t, certs, "mem"), "mem")
	waitFor(t, ctrl.Server, "mem", 1)
	remote, _ := ctrl.Server.Driver("mem")
	if caps, err := driver.CapabilitiesOf(t.Context(), remote); err != nil || caps.Power {
		t.Fatalf("with only the old replica: capabilities %+v, %v; want none", caps, err)
	}
	class := fixture.MemClass("workers", `{"cluster":"c","role":"worker","size":"small"}`)
	m := fixture.Machine("m-1")
	m.Spec.ProviderID = ""
	stop := func() error {
		_, err := remote.(driver.PowerDriver).StopMachine(t.Context(), &driver.StopMachineRequest{Machine: m, MachineClass: class, Secret: fixture.MemSecret()})
		return err
	}
	if err := stop(); !driver.IsCode(err, driver.Unimplemented) || !strings.Contains(driver.MessageOf(err), "no connected mem provider can stop and start machines") {
		t.Fatalf("StopMachine with only the old replica = %v; want Unimplemented saying why", err)
	}

	cloud := memdriver.NewCloud()
	fixture.ConnectProvider(t, ctrl.Addr, fixture.ProviderCerts(t, certs, "mem"), map[string]driver.Driver{"mem": memdriver.New(cloud)})
	waitFor(t, ctrl.Server, "mem", 2)
	if caps, err := driver.CapabilitiesOf(t.Context(), remote); err != nil || !caps.Power {
		t.Fatalf("with a replica that serves it: capabilities %+v, %v; want power", caps, err)
	}
	created, err := memdriver.New(cloud).CreateMachine(t.Context(), &driver.CreateMachineRequest{Machine: m, MachineClass: class, Secret: fixture.MemSecret()})
	if err != nil {
		t.Fatal(err)
	}
	m.Spec.ProviderID = created.ProviderID
	p, err := driver.PowerOf(t.Context(), "mem", remote)
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		started, err := p.StartMachine(t.Context(), &driver.StartMachineRequest{Machine: m, MachineClass: class, Secret: fixture.MemSecret()})
		if err != nil || started.ProviderID != created.ProviderID {
			t.Fatalf("StartMachine = %+v, %v; want the VM %s", started, err, created.ProviderID)
		}
	}
	if got := cloud.Calls(memdriver.MethodStop) + cloud.Calls(memdriver.MethodStart); got != 20 {
		t.Fatalf("the replica that serves power got %d stops and starts; want all 20", got)
	}
	if n := oldOps.Load(); n != 0 {
		t.Fatalf("the replica built before the capability received %d operations; want none", n)
	}
}
