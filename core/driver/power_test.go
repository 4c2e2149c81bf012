package driver_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/machinist-io/machinist/core/driver"
)

type plainDriver struct{ driver.UnimplementedDriver }

type powerDriver struct{ driver.UnimplementedDriver }

func (powerDriver) StopMachine(context.Context, *driver.StopMachineRequest) (*driver.StopMachineResponse, error) {
	return &driver.StopMachineResponse{}, nil
}

func (powerDriver) StartMachine(context.Context, *driver.StartMachineRequest) (*driver.StartMachineResponse, error) {
	return &driver.StartMachineResponse{}, nil
}

// forwarder stands for a bridge client: it has the methods, the far side decides.
type forwarder struct {
	powerDriver
	caps driver.Capabilities
	err  error
}

func (f forwarder) Capabilities(context.Context) (driver.Capabilities, error) { return f.caps, f.err }

func TestPowerOf(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		d    driver.Driver
		code driver.Code
	}{
		{"implements", powerDriver{}, driver.OK},
		{"lacks", plainDriver{}, driver.Unimplemented},
		{"forwards to one that has it", forwarder{caps: driver.Capabilities{Power: true}}, driver.OK},
		{"forwards to one built before", forwarder{}, driver.Unimplemented},
		{"cannot ask", forwarder{err: driver.Error(driver.Unavailable, "connection refused")}, driver.Unavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := driver.PowerOf(ctx, "example", tc.d)
			if got := driver.CodeOf(err); got != tc.code {
				t.Fatalf("code %v (%v), want %v", got, err, tc.code)
			}
			if (p != nil) != (tc.code == driver.OK) {
				t.Fatalf("driver %v with error %v", p, err)
			}
			if err != nil && !strings.Contains(driver.MessageOf(err), `provider "example"`) {
				t.Errorf("message %q does not name the provider", driver.MessageOf(err))
			}
			var st *driver.Status
			if err != nil && !errors.As(err, &st) {
				t.Errorf("%v is no *driver.Status", err)
			}
		})
	}
}

var _ driver.PowerDriver = powerDriver{}
