package dialin

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	corev1 "k8s.io/api/core/v1"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/grpcbridge"
	dialinv1 "github.com/machinist-io/machinist/grpcbridge/proto/machinist/dialin/v1"
)

// remoteDriver is the driver.Driver of one provider name served by dialled-in replicas.
type remoteDriver struct {
	s    *Server
	name string
}

// operation builds an Operation for the objects of a request and pins its class and secret for
// pulls until release is called. The class and secret come from the server's encoder, which
// encodes and hashes each version once.
func (d *remoteDriver) operation(ctx context.Context, method dialinv1.Method, m *v1alpha1.Machine, c *v1alpha1.MachineClass, sec *corev1.Secret) (op *dialinv1.Operation, release func(), err error) {
	op = &dialinv1.Operation{Provider: d.name, Method: method}
	var releases []func()
	release = func() {
		for _, r := range releases {
			r()
		}
	}
	if op.Machine, err = grpcbridge.EncodeMachine(m); err != nil {
		return nil, release, err
	}
	if c != nil {
		enc, err := d.s.enc.MachineClass(c)
		if err != nil {
			return nil, release, err
		}
		dg := enc.Digest()
		releases = append(releases, d.s.classes.put(enc.Bytes, dg, d.name))
		op.MachineClass = &dialinv1.ObjectRef{Namespace: c.Namespace, Name: c.Name, ResourceVersion: c.ResourceVersion, Uid: string(c.UID), Digest: dg[:]}
	}
	if sec != nil {
		enc, err := d.s.enc.Secret(sec)
		if err != nil {
			return nil, release, err
		}
		dg := enc.Digest()
		releases = append(releases, d.s.secrets.put(enc.Bytes, dg, d.name))
		op.Secret = &dialinv1.ObjectRef{Namespace: sec.Namespace, Name: sec.Name, ResourceVersion: sec.ResourceVersion, Uid: string(sec.UID), Digest: dg[:]}
	}
	if dl, ok := ctx.Deadline(); ok {
		op.Timeout = durationpb.New(time.Until(dl))
	}
	return op, release, nil
}

// do runs one operation and returns its result, or the driver error it carried.
func (d *remoteDriver) do(ctx context.Context, method dialinv1.Method, name string, m *v1alpha1.Machine, c *v1alpha1.MachineClass, sec *corev1.Secret, specs []*corev1.PersistentVolumeSpec) (*dialinv1.Result, error) {
	if err := ctx.Err(); err != nil {
		return nil, contextError(ctx, d.name, name) // do not send what nobody waits for
	}
	mutating := method != dialinv1.Method_METHOD_GET_MACHINE_STATUS && method != dialinv1.Method_METHOD_LIST_MACHINES && method != dialinv1.Method_METHOD_GET_VOLUME_IDS
	ctx, cancel := d.s.opts.Timeouts.Bound(ctx, mutating)
	defer cancel()
	op, release, err := d.operation(ctx, method, m, c, sec)
	defer release()
	if err != nil {
		return nil, err
	}
	if specs != nil {
		if op.PvSpecs, err = grpcbridge.PVSpecsToProto(specs); err != nil {
			return nil, err
		}
	}
	r, err := d.s.call(ctx, d.name, name, op)
	if err != nil {
		return nil, err
	}
	if e := r.GetError(); e != nil {
		code := driver.Code(e.Code)
		if !code.Valid() || code == driver.OK {
			code = driver.Unknown
		}
		return nil, driver.Error(code, e.Message)
	}
	return r, nil
}

func wrongAnswer(method string, r *dialinv1.Result) error {
	return driver.Errorf(driver.Internal, "dialin: the provider answered %s with %T", method, r.GetResponse())
}

func (d *remoteDriver) CreateMachine(ctx context.Context, req *driver.CreateMachineRequest) (*driver.CreateMachineResponse, error) {
	r, err := d.do(ctx, dialinv1.Method_METHOD_CREATE_MACHINE, "CreateMachine", req.Machine, req.MachineClass, req.Secret, nil)
	if err != nil {
		return nil, err
	}
	resp := r.GetCreateMachine()
	if resp == nil {
		return nil, wrongAnswer("CreateMachine", r)
	}
	return grpcbridge.CreateResponseFromProto(resp), nil
}

func (d *remoteDriver) InitializeMachine(ctx context.Context, req *driver.InitializeMachineRequest) (*driver.InitializeMachineResponse, error) {
	r, err := d.do(ctx, dialinv1.Method_METHOD_INITIALIZE_MACHINE, "InitializeMachine", req.Machine, req.MachineClass, req.Secret, nil)
	if err != nil {
		return nil, err
	}
	resp := r.GetInitializeMachine()
	if resp == nil {
		return nil, wrongAnswer("InitializeMachine", r)
	}
	return grpcbridge.InitializeResponseFromProto(resp), nil
}

func (d *remoteDriver) DeleteMachine(ctx context.Context, req *driver.DeleteMachineRequest) (*driver.DeleteMachineResponse, error) {
	r, err := d.do(ctx, dialinv1.Method_METHOD_DELETE_MACHINE, "DeleteMachine", req.Machine, req.MachineClass, req.Secret, nil)
	if err != nil {
		return nil, err
	}
	resp := r.GetDeleteMachine()
	if resp == nil {
		return nil, wrongAnswer("DeleteMachine", r)
	}
	return grpcbridge.DeleteResponseFromProto(resp), nil
}

func (d *remoteDriver) GetMachineStatus(ctx context.Context, req *driver.GetMachineStatusRequest) (*driver.GetMachineStatusResponse, error) {
	r, err := d.do(ctx, dialinv1.Method_METHOD_GET_MACHINE_STATUS, "GetMachineStatus", req.Machine, req.MachineClass, req.Secret, nil)
	if err != nil {
		return nil, err
	}
	resp := r.GetGetMachineStatus()
	if resp == nil {
		return nil, wrongAnswer("GetMachineStatus", r)
	}
	return grpcbridge.StatusResponseFromProto(resp), nil
}

func (d *remoteDriver) ListMachines(ctx context.Context, req *driver.ListMachinesRequest) (*driver.ListMachinesResponse, error) {
	r, err := d.do(ctx, dialinv1.Method_METHOD_LIST_MACHINES, "ListMachines", nil, req.MachineClass, req.Secret, nil)
	if err != nil {
		return nil, err
	}
	resp := r.GetListMachines()
	if resp == nil {
		return nil, wrongAnswer("ListMachines", r)
	}
	return grpcbridge.ListResponseFromProto(resp), nil
}

func (d *remoteDriver) GetVolumeIDs(ctx context.Context, req *driver.GetVolumeIDsRequest) (*driver.GetVolumeIDsResponse, error) {
	specs := req.PVSpecs
	if specs == nil {
		specs = []*corev1.PersistentVolumeSpec{}
	}
	r, err := d.do(ctx, dialinv1.Method_METHOD_GET_VOLUME_IDS, "GetVolumeIDs", nil, nil, nil, specs)
	if err != nil {
		return nil, err
	}
	resp := r.GetGetVolumeIds()
	if resp == nil {
		return nil, wrongAnswer("GetVolumeIDs", r)
	}
	return grpcbridge.VolumeIDsResponseFromProto(resp), nil
}

// StopMachine stops the VM on a replica that reported the power capability.
func (d *remoteDriver) StopMachine(ctx context.Context, req *driver.StopMachineRequest) (*driver.StopMachineResponse, error) {
	r, err := d.do(ctx, dialinv1.Method_METHOD_STOP_MACHINE, "StopMachine", req.Machine, req.MachineClass, req.Secret, nil)
	if err != nil {
		return nil, err
	}
	resp := r.GetStopMachine()
	if resp == nil {
		return nil, wrongAnswer("StopMachine", r)
	}
	return grpcbridge.StopResponseFromProto(resp), nil
}

// StartMachine starts the VM on a replica that reported the power capability.
func (d *remoteDriver) StartMachine(ctx context.Context, req *driver.StartMachineRequest) (*driver.StartMachineResponse, error) {
	r, err := d.do(ctx, dialinv1.Method_METHOD_START_MACHINE, "StartMachine", req.Machine, req.MachineClass, req.Secret, nil)
	if err != nil {
		return nil, err
	}
	resp := r.GetStartMachine()
	if resp == nil {
		return nil, wrongAnswer("StartMachine", r)
	}
	return grpcbridge.StartResponseFromProto(resp), nil
}

// Capabilities reports what the provider's connected replicas said they serve in their Hello.
func (d *remoteDriver) Capabilities(context.Context) (driver.Capabilities, error) {
	return d.s.capabilities(d.name), nil
}

func (d *remoteDriver) String() string { return fmt.Sprintf("dial-in provider %s", d.name) }

var (
	_ driver.Driver             = (*remoteDriver)(nil)
	_ driver.PowerDriver        = (*remoteDriver)(nil)
	_ driver.CapabilityReporter = (*remoteDriver)(nil)
)
