package drivertest

import (
	"context"
	"slices"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
)

// The rules of the optional power capability (driver.PowerDriver): a driver that reports it
// stops and starts machines keeping their identity; one that does not report it, but has the
// methods (a bridge to a provider built before them), answers them with exactly Unimplemented.

// powerOf returns the driver under test as a PowerDriver when it reports the capability. A driver
// that has the methods without reporting the capability must answer them Unimplemented, which
// the rule checks before it skips.
func (c *ruleCtx) powerOf() driver.PowerDriver {
	c.t.Helper()
	ctx, cancel := c.callCtx()
	defer cancel()
	caps, err := driver.CapabilitiesOf(ctx, c.target.Driver)
	if err != nil {
		c.t.Fatalf("asking the driver for its capabilities failed: %v", err)
	}
	p, has := c.target.Driver.(driver.PowerDriver)
	if caps.Power && !has {
		c.t.Fatalf("the driver reports the power capability but has no StopMachine/StartMachine (implement driver.PowerDriver)")
	}
	if !caps.Power {
		if has {
			m := c.newMachine()
			c.mustCreate(m)
			if _, err := p.StopMachine(ctx, &driver.StopMachineRequest{Machine: m, MachineClass: c.target.Class.DeepCopy(), Secret: c.secret()}); !driver.IsCode(err, driver.Unimplemented) {
				c.t.Errorf("StopMachine of a driver that does not report the power capability = %v; want exactly Unimplemented", show(err))
			}
			if _, err := p.StartMachine(ctx, &driver.StartMachineRequest{Machine: m, MachineClass: c.target.Class.DeepCopy(), Secret: c.secret()}); !driver.IsCode(err, driver.Unimplemented) {
				c.t.Errorf("StartMachine of a driver that does not report the power capability = %v; want exactly Unimplemented", show(err))
			}
		}
		c.t.Skipf("the driver does not serve the power capability (StopMachine, StartMachine)")
	}
	return p
}

func (c *ruleCtx) stopIn(ctx context.Context, p driver.PowerDriver, m *v1alpha1.Machine) error {
	_, err := p.StopMachine(ctx, &driver.StopMachineRequest{Machine: m.DeepCopy(), MachineClass: c.target.Class.DeepCopy(), Secret: c.secret()})
	return err
}

func (c *ruleCtx) startIn(ctx context.Context, p driver.PowerDriver, m *v1alpha1.Machine) (*driver.StartMachineResponse, error) {
	resp, err := p.StartMachine(ctx, &driver.StartMachineRequest{Machine: m.DeepCopy(), MachineClass: c.target.Class.DeepCopy(), Secret: c.secret()})
	if err == nil && resp == nil {
		c.t.Errorf("StartMachine(%s) returned neither a response nor an error", m.Name)
		resp = &driver.StartMachineResponse{}
	}
	return resp, err
}

func stopStartKeepsIdentity(c *ruleCtx) {
	p := c.powerOf()
	m := c.newMachine()
	created := c.mustCreate(m)
	withID := m.DeepCopy()
	withID.Spec.ProviderID = created.ProviderID
	ctx, cancel := c.callCtx()
	defer cancel()

	for i := range 2 {
		if err := c.stopIn(ctx, p, withID); err != nil {
			c.t.Fatalf("StopMachine(%s) #%d of a running VM = %v; want OK (stopping a stopped VM is OK too)", m.Name, i+1, show(err))
		}
	}
	c.expectCount(m, 1, "after StopMachine")
	if st, err := c.statusIn(ctx, withID); !slices.Contains([]driver.Code{driver.OK, driver.Uninitialized, driver.Unimplemented}, driver.CodeOf(err)) {
		c.t.Errorf("GetMachineStatus(%s) of a stopped VM = %v; want OK: a stopped VM still exists", m.Name, show(err))
	} else if st != nil && st.ProviderID != "" && st.ProviderID != created.ProviderID {
		c.t.Errorf("GetMachineStatus(%s) of the stopped VM returned ProviderID %q; CreateMachine returned %q", m.Name, st.ProviderID, created.ProviderID)
	}
	if list, err := c.listIn(ctx, c.target.Class); err == nil {
		if _, ok := list[created.ProviderID]; !ok {
			c.t.Errorf("ListMachines(%s) does not list the stopped VM %s: a stopped VM is no orphan, but the orphan collector would take it for one", c.target.Class.Name, created.ProviderID)
		}
	}
	for i := range 2 {
		started, err := c.startIn(ctx, p, withID)
		if err != nil {
			c.t.Fatalf("StartMachine(%s) #%d = %v; want OK (starting a running VM is OK too)", m.Name, i+1, show(err))
		}
		if started.ProviderID != created.ProviderID {
			c.t.Errorf("StartMachine(%s) #%d returned ProviderID %q; CreateMachine returned %q: a started VM keeps its identity", m.Name, i+1, started.ProviderID, created.ProviderID)
		}
		if started.NodeName != "" && created.NodeName != "" && started.NodeName != created.NodeName {
			c.t.Errorf("StartMachine(%s) #%d returned NodeName %q; CreateMachine returned %q", m.Name, i+1, started.NodeName, created.NodeName)
		}
	}
	c.expectCount(m, 1, "after StartMachine")
	if err := c.stopIn(ctx, p, withID); err != nil {
		c.t.Fatalf("StopMachine(%s) after a start = %v; want OK", m.Name, show(err))
	}
	// By name, as StatusTracksLifecycle deletes: DeleteByProviderID is a rule of its own.
	if err := c.deleteIn(ctx, m, c.target.Class); err != nil {
		c.t.Fatalf("DeleteMachine(%s) of a stopped VM = %v; want OK", m.Name, show(err))
	}
	c.expectCount(m, 0, "after DeleteMachine of the stopped VM")
}

func powerOfAbsentIsNotFound(c *ruleCtx) {
	p := c.powerOf()
	m := c.newMachine()
	ctx, cancel := c.callCtx()
	defer cancel()
	if err := c.stopIn(ctx, p, m); !driver.IsCode(err, driver.NotFound) {
		c.t.Errorf("StopMachine(%s) of a machine without a VM = %v; want NotFound", m.Name, show(err))
	}
	if _, err := c.startIn(ctx, p, m); !driver.IsCode(err, driver.NotFound) {
		c.t.Errorf("StartMachine(%s) of a machine without a VM = %v; want NotFound", m.Name, show(err))
	}
	c.expectCount(m, 0, "after StopMachine and StartMachine of a machine without a VM")
}
