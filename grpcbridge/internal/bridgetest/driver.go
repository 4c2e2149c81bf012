package bridgetest

import (
	"context"

	"github.com/machinist-io/machinist/core/driver"
)

// FuncDriver is a driver whose every method calls Handle with the method name and request, and
// answers with Handle's response (a *driver.XResponse of the method, or nil) and error.
type FuncDriver struct {
	Handle func(ctx context.Context, method string, req any) (any, error)
}

func call[R any](d *FuncDriver, ctx context.Context, method string, req any) (*R, error) {
	resp, err := d.Handle(ctx, method, req)
	if err != nil {
		return nil, err
	}
	r, _ := resp.(*R)
	return r, nil
}

func (d *FuncDriver) CreateMachine(ctx context.Context, req *driver.CreateMachineRequest) (*driver.CreateMachineResponse, error) {
	return call[driver.CreateMachineResponse](d, ctx, "CreateMachine", req)
}

func (d *FuncDriver) InitializeMachine(ctx context.Context, req *driver.InitializeMachineRequest) (*driver.InitializeMachineResponse, error) {
	return call[driver.InitializeMachineResponse](d, ctx, "InitializeMachine", req)
}

func (d *FuncDriver) DeleteMachine(ctx context.Context, req *driver.DeleteMachineRequest) (*driver.DeleteMachineResponse, error) {
	return call[driver.DeleteMachineResponse](d, ctx, "DeleteMachine", req)
}

func (d *FuncDriver) GetMachineStatus(ctx context.Context, req *driver.GetMachineStatusRequest) (*driver.GetMachineStatusResponse, error) {
	return call[driver.GetMachineStatusResponse](d, ctx, "GetMachineStatus", req)
}

func (d *FuncDriver) ListMachines(ctx context.Context, req *driver.ListMachinesRequest) (*driver.ListMachinesResponse, error) {
	return call[driver.ListMachinesResponse](d, ctx, "ListMachines", req)
}

func (d *FuncDriver) GetVolumeIDs(ctx context.Context, req *driver.GetVolumeIDsRequest) (*driver.GetVolumeIDsResponse, error) {
	return call[driver.GetVolumeIDsResponse](d, ctx, "GetVolumeIDs", req)
}

// Methods lists the six driver methods.
var Methods = []string{"CreateMachine", "InitializeMachine", "DeleteMachine", "GetMachineStatus", "ListMachines", "GetVolumeIDs"}

// CallMethod calls one method of d by name with a request built from the given objects, and
// returns the error (responses are dropped).
func CallMethod(ctx context.Context, d driver.Driver, method string) error {
	m, c, s := Machine("m-1"), Class("mem"), Secret()
	var err error
	switch method {
	case "CreateMachine":
		_, err = d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: m, MachineClass: c, Secret: s})
	case "InitializeMachine":
		_, err = d.InitializeMachine(ctx, &driver.InitializeMachineRequest{Machine: m, MachineClass: c, Secret: s})
	case "DeleteMachine":
		_, err = d.DeleteMachine(ctx, &driver.DeleteMachineRequest{Machine: m, MachineClass: c, Secret: s})
	case "GetMachineStatus":
		_, err = d.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: m, MachineClass: c, Secret: s})
	case "ListMachines":
		_, err = d.ListMachines(ctx, &driver.ListMachinesRequest{MachineClass: c, Secret: s})
	case "GetVolumeIDs":
		_, err = d.GetVolumeIDs(ctx, &driver.GetVolumeIDsRequest{})
	default:
		panic("bridgetest: unknown method " + method)
	}
	return err
}

var _ driver.Driver = (*FuncDriver)(nil)
