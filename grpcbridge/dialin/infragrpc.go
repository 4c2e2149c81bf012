package dialin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/registry"
	"github.com/machinist-io/machinist/grpcbridge"
	"github.com/machinist-io/machinist/grpcbridge/proto/infra"
	dialinv1 "github.com/machinist-io/machinist/grpcbridge/proto/machinist/dialin/v1"
)

// The 2018 "grpc-driver" design's protocol (infra.Infragrpc), served beside
// machinist.dialin.v1 on the same listener, with the same mutual TLS and authorization. A 2018-protocol
// session is an ordinary session of the Server: operations are routed, balanced and failed on
// disconnection exactly as for machinist's own protocol; only the messages on the stream are
// translated (infragrpcWire), and the class and secret of an operation are answered from the same
// pinned versions (the stores) in the JSON the 2018 design's known client decodes.
//
// The upstream facts of the protocol, with their files and commits, are in
// docs/compatibility/grpc-driver-2018.md. The mapping (docs/grpc-bridge.md has it for users):
//   - Registration: the controller sends {operationID 1, "register"}; the provider answers with
//     registerResp {name, group, kind, version}. group/version must be machine.sapcloud.io/
//     v1alpha1; the kind names the provider (ProviderForKind: AWSMachineClass → aws), which the
//     client certificate must authorize like any dial-in registration.
//   - CreateMachine → "create" {machineID: the machine's provider ID, machineName}; the answer's
//     providerID and nodename are the response.
//   - DeleteMachine → "delete" {machineID: the provider ID}; a machine without a provider ID has
//     nothing the 2018 design could delete (its delete takes only the VM id) and is answered OK here:
//     a VM made but never recorded is found by the orphan collection through "list".
//   - ListMachines → "list" {machineID ""} (every VM of the class); machineID → machineName.
//   - InitializeMachine, GetMachineStatus, GetVolumeIDs: Unimplemented, which the controllers
//     handle as the driver contract says for optional methods.
//   - Errors travel as text: MCM's "machine codes error: code = [X] message = [Y]" keeps code X,
//     any other text is Unknown.
//   - machineClassMetaData {name: the class's API path, revision: a number for the operation's
//     class and secret}; credentials is always empty (the provider reads the secret).
//   - GetMachineClass answers with the class as JSON of the registered kind: metadata of the
//     MachineClass, spec = its providerSpec plus secretRef {namespace, name} naming the
//     operation's secret (what MCM's migration did the other way round); GetSecret answers with
//     that secret as JSON of a core/v1 Secret. Both serve only operations in flight, and only to
//     peers authorized for the class's provider. Failures are in the error field as MCM's code
//     text.

// infragrpcProtocol names the 2018 protocol in logs.
const infragrpcProtocol = "infra.Infragrpc"

// infragrpcRegisterID is the operation id of the registration exchange (as in MCM's server).
const infragrpcRegisterID = 1

// Operation types of the 2018 protocol.
const (
	infragrpcRegister   = "register"
	infragrpcCreate     = "create"
	infragrpcDelete     = "delete"
	infragrpcList       = "list"
	infragrpcUnregister = "unregister"
)

// ProviderForKind returns the provider name a 2018-protocol provider serves by the machine-class
// kind it registers: the kind without the MachineClass suffix, lower-cased (AWSMachineClass →
// aws, OpenStackMachineClass → openstack).
func ProviderForKind(kind string) (string, error) {
	base, ok := strings.CutSuffix(kind, "MachineClass")
	name := registry.Normalize(base)
	if !ok || !registry.ValidName(name) {
		return "", fmt.Errorf("dialin: kind %q does not name a provider: register the kind of your machine class, <Provider>MachineClass (e.g. AWSMachineClass for provider aws)", kind)
	}
	return name, nil
}

func infragrpcProvider(r *infra.DriverSideRegisterationResp) (string, error) {
	if r.Group != v1alpha1.GroupName || r.Version != v1alpha1.SchemeGroupVersion.Version {
		return "", fmt.Errorf("dialin: kind %s of %s/%s is not served: this controller serves machine classes of %s", r.Kind, r.Group, r.Version, v1alpha1.SchemeGroupVersion)
	}
	return ProviderForKind(r.Kind)
}

// infragrpcService is the Server's infra.Infragrpc.
type infragrpcService struct {
	infra.UnimplementedInfragrpcServer
	s *Server
}

var errUnregistered = errors.New("the provider unregistered")

// Register serves one 2018-protocol provider's stream for its lifetime.
func (x *infragrpcService) Register(stream grpc.BidiStreamingServer[infra.DriverSide, infra.MCMside]) error {
	s := x.s
	ctx := stream.Context()
	if err := stream.Send(&infra.MCMside{OperationID: infragrpcRegisterID, OperationType: infragrpcRegister}); err != nil {
		return err
	}
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	reg := first.GetRegisterResp()
	if first.OperationType != infragrpcRegister || reg == nil {
		return status.Errorf(codes.InvalidArgument, "dialin: %s: the answer to %q must carry registerResp; got operationType %q", infragrpcProtocol, infragrpcRegister, first.OperationType)
	}
	provider, err := infragrpcProvider(reg)
	if err != nil {
		s.log.Warn("dialin: registration refused", "protocol", infragrpcProtocol, "instance", reg.Name, "err", err)
		return status.Error(codes.InvalidArgument, err.Error())
	}
	names, err := s.authorizeNames(ctx, reg.Name, []string{provider})
	if err != nil {
		return err
	}
	ss := s.newSession(ctx, infragrpcProtocol, reg.Name, names)
	ss.kind = reg.Kind
	ss.nextID.Store(infragrpcRegisterID) // operation ids continue after the registration's
	log := s.log.With("session", ss.id, "protocol", infragrpcProtocol, "instance", ss.instance, "peer", ss.peer, "providers", names, "kind", reg.Kind)
	if err := s.connect(ss, log); err != nil {
		return err
	}

	w := &infragrpcWire{s: s, ss: ss, log: log, stream: stream, pins: map[uint64]func(){}}
	defer w.releaseAll()
	recvErr := make(chan error, 1)
	go func() {
		for {
			msg, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			if msg.OperationType == infragrpcUnregister {
				recvErr <- errUnregistered
				return
			}
			w.receive(msg)
		}
	}()
	return s.serve(ctx, ss, w.send, recvErr, log)
}

// infragrpcWire translates one 2018-protocol session's messages.
type infragrpcWire struct {
	s      *Server
	ss     *session
	log    *slog.Logger
	stream grpc.BidiStreamingServer[infra.DriverSide, infra.MCMside]

	mu   sync.Mutex
	pins map[uint64]func() // operation id → release of its 2018-protocol reference
}

// send puts an operation on the stream, or answers it here when the 2018 design has no such operation.
// The 2018 design has no cancellation: a cancelled operation's reference is released and its late
// answer dropped.
func (w *infragrpcWire) send(msg *dialinv1.RegisterResponse) error {
	switch m := msg.Message.(type) {
	case *dialinv1.RegisterResponse_Operation:
		op := m.Operation
		if op.Id > math.MaxInt32 {
			return errors.New("2018-protocol operation ids exhausted (int32); the provider reconnects and they start over")
		}
		out, local := w.request(op)
		if local != nil {
			local.Id = op.Id
			w.s.deliver(w.ss, local)
			return nil
		}
		return w.stream.Send(out)
	case *dialinv1.RegisterResponse_Cancel:
		w.release(m.Cancel.Id)
	}
	return nil
}

// request translates an operation, or returns the result to answer it with at once.
func (w *infragrpcWire) request(op *dialinv1.Operation) (*infra.MCMside, *dialinv1.Result) {
	var opType string
	switch op.Method {
	case dialinv1.Method_METHOD_CREATE_MACHINE:
		opType = infragrpcCreate
	case dialinv1.Method_METHOD_DELETE_MACHINE:
		opType = infragrpcDelete
	case dialinv1.Method_METHOD_LIST_MACHINES:
		opType = infragrpcList
	default:
		return nil, errorResult(driver.Errorf(driver.Unimplemented, "dialin: provider %s speaks the 2018 protocol (%s), which has no %s", op.Provider, infragrpcProtocol, methodName(op.Method)))
	}
	params := &infra.MCMsideOperationParams{}
	if opType != infragrpcList {
		m, err := grpcbridge.DecodeMachine(op.Machine)
		if err != nil {
			return nil, errorResult(err)
		}
		if m == nil {
			return nil, errorResult(driver.Errorf(driver.InvalidArgument, "dialin: %s needs a machine", methodName(op.Method)))
		}
		params.MachineID, params.MachineName = m.Spec.ProviderID, m.Name
		if opType == infragrpcDelete && m.Spec.ProviderID == "" {
			return nil, &dialinv1.Result{Response: &dialinv1.Result_DeleteMachine{DeleteMachine: grpcbridge.DeleteResponseToProto(&driver.DeleteMachineResponse{})}}
		}
	}
	if c := op.MachineClass; c != nil {
		num, release := w.s.infragrpc.pin(c, op.Secret)
		w.mu.Lock()
		w.pins[op.Id] = release
		w.mu.Unlock()
		params.MachineClassMetaData = &infra.MachineClassMeta{Name: classPath(c.Namespace, c.Name), Revision: num}
	}
	return &infra.MCMside{OperationID: int32(op.Id), OperationType: opType, Operationparams: params}, nil
}

// receive delivers a provider's answer to the operation waiting for it.
func (w *infragrpcWire) receive(msg *infra.DriverSide) {
	if msg.OperationID <= infragrpcRegisterID {
		w.log.Warn("dialin: unexpected message from provider ignored", "operationType", msg.OperationType, "operationID", msg.OperationID)
		return
	}
	id := uint64(msg.OperationID)
	var r *dialinv1.Result
	switch x := msg.Response.(type) {
	case *infra.DriverSide_Createresponse:
		if e := x.Createresponse.GetError(); e != "" {
			r = infragrpcErrorResult(e)
		} else {
			r = &dialinv1.Result{Response: &dialinv1.Result_CreateMachine{CreateMachine: grpcbridge.CreateResponseToProto(&driver.CreateMachineResponse{
				ProviderID: x.Createresponse.ProviderID, NodeName: x.Createresponse.Nodename,
			})}}
		}
	case *infra.DriverSide_Deleteresponse:
		if e := x.Deleteresponse.GetError(); e != "" {
			r = infragrpcErrorResult(e)
		} else {
			r = &dialinv1.Result{Response: &dialinv1.Result_DeleteMachine{DeleteMachine: grpcbridge.DeleteResponseToProto(&driver.DeleteMachineResponse{})}}
		}
	case *infra.DriverSide_Listresponse:
		if e := x.Listresponse.GetError(); e != "" {
			r = infragrpcErrorResult(e)
		} else {
			list := make(map[string]string, len(x.Listresponse.List))
			for _, m := range x.Listresponse.List {
				list[m.MachineID] = m.MachineName
			}
			r = &dialinv1.Result{Response: &dialinv1.Result_ListMachines{ListMachines: grpcbridge.ListResponseToProto(&driver.ListMachinesResponse{MachineList: list})}}
		}
	default:
		r = errorResult(driver.Errorf(driver.Internal, "dialin: the provider answered operation %d (%q) without a create, delete or list response", id, msg.OperationType))
	}
	w.release(id)
	r.Id = id
	w.s.deliver(w.ss, r)
}

func (w *infragrpcWire) release(id uint64) {
	w.mu.Lock()
	release, ok := w.pins[id]
	delete(w.pins, id)
	w.mu.Unlock()
	if ok {
		release()
	}
}

func (w *infragrpcWire) releaseAll() {
	w.mu.Lock()
	pins := w.pins
	w.pins = map[uint64]func(){}
	w.mu.Unlock()
	for _, release := range pins {
		release()
	}
}

// infragrpcErrorResult reads an error the 2018 design sent as text: MCM's code text keeps its code, anything
// else is Unknown.
func infragrpcErrorResult(text string) *dialinv1.Result {
	if st, ok := driver.ParseStatusText(text); ok {
		return errorResult(st)
	}
	return errorResult(driver.Error(driver.Unknown, text))
}

func methodName(m dialinv1.Method) string {
	switch m {
	case dialinv1.Method_METHOD_CREATE_MACHINE:
		return "CreateMachine"
	case dialinv1.Method_METHOD_INITIALIZE_MACHINE:
		return "InitializeMachine"
	case dialinv1.Method_METHOD_DELETE_MACHINE:
		return "DeleteMachine"
	case dialinv1.Method_METHOD_GET_MACHINE_STATUS:
		return "GetMachineStatus"
	case dialinv1.Method_METHOD_LIST_MACHINES:
		return "ListMachines"
	case dialinv1.Method_METHOD_GET_VOLUME_IDS:
		return "GetVolumeIDs"
	}
	return m.String()
}

// classPath is the API path MCM's 2018 server put in machineClassMetaData.name.
func classPath(namespace, name string) string {
	return "/apis/" + v1alpha1.SchemeGroupVersion.String() + "/namespaces/" + namespace + "/machineclasses/" + name
}

// infragrpcSecretName names the secret of 2018-protocol reference num in the class a provider pulls: the
// name of the class's secret with the number appended, so that a provider reading
// spec.secretRef asks GetSecret for exactly the operation's secret.
func infragrpcSecretName(class *v1alpha1.MachineClass, num int32) string {
	base := class.Name + "-secret"
	if class.SecretRef != nil && class.SecretRef.Name != "" {
		base = class.SecretRef.Name
	} else if class.CredentialsSecretRef != nil && class.CredentialsSecretRef.Name != "" {
		base = class.CredentialsSecretRef.Name
	}
	return base + "." + strconv.Itoa(int(num))
}

func parseInfragrpcSecretName(name string) (int32, bool) {
	i := strings.LastIndexByte(name, '.')
	if i < 0 {
		return 0, false
	}
	n, err := strconv.ParseInt(name[i+1:], 10, 32)
	return int32(n), err == nil && n > 0
}

// GetMachineClass answers a 2018-protocol provider's pull of the class of an operation in flight.
func (x *infragrpcService) GetMachineClass(ctx context.Context, meta *infra.MachineClassMeta) (*infra.MachineClass, error) {
	s := x.s
	ref, ok := s.infragrpc.get(meta.Revision)
	if !ok || meta.Name != classPath(ref.namespace, ref.name) {
		return &infra.MachineClass{Error: infragrpcNotFound("machine class %s (revision %d)", meta.Name, meta.Revision)}, nil
	}
	raw, providers, ok := s.classes.get(ref.class[:])
	if !ok {
		return &infra.MachineClass{Error: infragrpcNotFound("machine class %s (revision %d)", meta.Name, meta.Revision)}, nil
	}
	if !s.authorizedForAny(ctx, providers) {
		return &infra.MachineClass{Error: infragrpcDenied(s.pullDenied(ctx, "machineClass", &dialinv1.ObjectRef{Namespace: ref.namespace, Name: ref.name}, providers))}, nil
	}
	class, err := grpcbridge.DecodeMachineClass(raw)
	if err != nil {
		return &infra.MachineClass{Error: driver.StatusOf(err).Error()}, nil
	}
	data, err := infragrpcClassJSON(class, s.infragrpcKind(registry.Normalize(class.Provider)), ref)
	if err != nil {
		return &infra.MachineClass{Error: driver.StatusOf(err).Error()}, nil
	}
	return &infra.MachineClass{Data: string(data)}, nil
}

// GetSecret answers a 2018-protocol provider's pull of the secret its operation's class names.
func (x *infragrpcService) GetSecret(ctx context.Context, meta *infra.SecretMeta) (*infra.Secret, error) {
	s := x.s
	num, ok := parseInfragrpcSecretName(meta.SecretName)
	var ref infragrpcRef
	if ok {
		ref, ok = s.infragrpc.get(num)
	}
	if !ok || !ref.hasSecret || meta.NameSpace != ref.namespace {
		return &infra.Secret{Error: infragrpcNotFound("secret %s/%s: ask for the secretRef of the class of the operation being handled", meta.NameSpace, meta.SecretName)}, nil
	}
	raw, providers, ok := s.secrets.get(ref.secret[:])
	if !ok {
		return &infra.Secret{Error: infragrpcNotFound("secret %s/%s", meta.NameSpace, meta.SecretName)}, nil
	}
	if !s.authorizedForAny(ctx, providers) {
		return &infra.Secret{Error: infragrpcDenied(s.pullDenied(ctx, "secret", &dialinv1.ObjectRef{Namespace: meta.NameSpace, Name: meta.SecretName}, providers))}, nil
	}
	sec, err := grpcbridge.DecodeSecret(raw)
	if err != nil {
		return &infra.Secret{Error: driver.StatusOf(err).Error()}, nil
	}
	out := &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Namespace: meta.NameSpace, Name: meta.SecretName},
		Data:       sec.Data,
		Type:       sec.Type,
	}
	data, err := json.Marshal(out)
	if err != nil {
		return &infra.Secret{Error: driver.Errorf(driver.Internal, "dialin: encode secret: %v", err).Error()}, nil
	}
	return &infra.Secret{Data: string(data)}, nil
}

func infragrpcNotFound(format string, args ...any) string {
	return driver.Errorf(driver.NotFound, "dialin: no operation in flight references "+format+"; the 2018 protocol serves the class and secret of the operation being handled", args...).Error()
}

func infragrpcDenied(err error) string {
	return driver.Error(driver.PermissionDenied, status.Convert(err).Message()).Error()
}

// infragrpcClass is the JSON a 2018-protocol provider decodes as its <Provider>MachineClass.
type infragrpcClass struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta          `json:"metadata"`
	Spec            map[string]json.RawMessage `json:"spec"`
}

// infragrpcClassJSON renders a MachineClass as the kind a 2018-protocol provider registered: the metadata of
// the class and a spec made of its providerSpec with secretRef naming the operation's secret.
func infragrpcClassJSON(class *v1alpha1.MachineClass, kind string, ref infragrpcRef) ([]byte, error) {
	spec := map[string]json.RawMessage{}
	if raw := class.ProviderSpec.Raw; len(raw) > 0 {
		if err := json.Unmarshal(raw, &spec); err != nil {
			return nil, driver.Errorf(driver.InvalidArgument, "dialin: machineClass %s/%s: providerSpec is not a JSON object: %v", class.Namespace, class.Name, err)
		}
	}
	delete(spec, "secretRef")
	if ref.hasSecret {
		secretRef, err := json.Marshal(corev1.SecretReference{Namespace: class.Namespace, Name: infragrpcSecretName(class, ref.num)})
		if err != nil {
			return nil, err
		}
		spec["secretRef"] = secretRef
	}
	meta := *class.ObjectMeta.DeepCopy()
	meta.ManagedFields = nil
	return json.Marshal(infragrpcClass{
		TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: kind},
		Metadata: meta,
		Spec:     spec,
	})
}

// infragrpcKind returns the kind a connected 2018-protocol provider registered for provider, or MachineClass.
func (s *Server) infragrpcKind(provider string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ss := range s.sessions[provider] {
		if ss.kind != "" {
			return ss.kind
		}
	}
	return "MachineClass"
}

// infragrpcRefs numbers the (class, secret) pairs of 2018-protocol operations in flight. The 2018 design's pulls carry
// no operation id, only the class's name and revision and the secret's name; the number travels
// as the class's revision and in the secret's name, so each pull finds the versions of its
// operation. Equal pairs share a number while any operation holds it.
type infragrpcRefs struct {
	mu    sync.Mutex
	last  int32
	byKey map[infragrpcKey]*infragrpcRef
	byNum map[int32]*infragrpcRef
}

type infragrpcKey struct {
	class, secret digest
	hasSecret     bool
}

type infragrpcRef struct {
	infragrpcKey
	num             int32
	namespace, name string // the class's
	refs            int
}

func newInfragrpcRefs() *infragrpcRefs {
	return &infragrpcRefs{byKey: map[infragrpcKey]*infragrpcRef{}, byNum: map[int32]*infragrpcRef{}}
}

// pin returns the number of the class and secret an operation references, and its release.
func (t *infragrpcRefs) pin(class, secret *dialinv1.ObjectRef) (int32, func()) {
	var k infragrpcKey
	copy(k.class[:], class.Digest)
	if secret != nil {
		copy(k.secret[:], secret.Digest)
		k.hasSecret = true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	r, ok := t.byKey[k]
	if !ok {
		for {
			if t.last++; t.last <= infragrpcRegisterID {
				t.last = infragrpcRegisterID + 1
			}
			if _, used := t.byNum[t.last]; !used {
				break
			}
		}
		r = &infragrpcRef{infragrpcKey: k, num: t.last, namespace: class.Namespace, name: class.Name}
		t.byKey[k], t.byNum[r.num] = r, r
	}
	r.refs++
	var once sync.Once
	return r.num, func() {
		once.Do(func() {
			t.mu.Lock()
			defer t.mu.Unlock()
			if r.refs--; r.refs == 0 {
				delete(t.byKey, r.infragrpcKey)
				delete(t.byNum, r.num)
			}
		})
	}
}

func (t *infragrpcRefs) get(num int32) (infragrpcRef, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r, ok := t.byNum[num]
	if !ok {
		return infragrpcRef{}, false
	}
	return *r, true
}

var _ infra.InfragrpcServer = (*infragrpcService)(nil)
