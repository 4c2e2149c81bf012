package driver

import "context"

// UnimplementedDriver answers every method with Unimplemented. Embed it in a driver to state which
// optional methods the driver leaves out; the methods the driver defines take precedence.
type UnimplementedDriver struct{}

func (UnimplementedDriver) CreateMachine(context.Context, *CreateMachineRequest) (*CreateMachineResponse, error) {
	return nil, Error(Unimplemented, "CreateMachine is not implemented by this driver")
}

func (UnimplementedDriver) InitializeMachine(context.Context, *InitializeMachineRequest) (*InitializeMachineResponse, error) {
	return nil, Error(Unimplemented, "InitializeMachine is not implemented by this driver")
}

func (UnimplementedDriver) DeleteMachine(context.Context, *DeleteMachineRequest) (*DeleteMachineResponse, error) {
	return nil, Error(Unimplemented, "DeleteMachine is not implemented by this driver")
}

func (UnimplementedDriver) GetMachineStatus(context.Context, *GetMachineStatusRequest) (*GetMachineStatusResponse, error) {
	return nil, Error(Unimplemented, "GetMachineStatus is not implemented by this driver")
}

func (UnimplementedDriver) ListMachines(context.Context, *ListMachinesRequest) (*ListMachinesResponse, error) {
	return nil, Error(Unimplemented, "ListMachines is not implemented by this driver")
}

func (UnimplementedDriver) GetVolumeIDs(context.Context, *GetVolumeIDsRequest) (*GetVolumeIDsResponse, error) {
	return nil, Error(Unimplemented, "GetVolumeIDs is not implemented by this driver")
}

var _ Driver = UnimplementedDriver{}
