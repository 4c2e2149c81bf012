package grpcbridge

import (
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	driverv1 "github.com/machinist-io/machinist/grpcbridge/proto/machinist/driver/v1"
)

// Conversions between core's Go types and the wire, on the generated machinist.driver.v1 types
// only. Objects travel typed down to the Kubernetes types that have a protobuf encoding of their
// own (Secret, ObjectMeta, NodeSpec, PersistentVolumeSpec), which travel as that encoding in bytes
// fields. A round trip yields an object equal to the original under apimachinery's
// equality.Semantic (times compare by instant, quantities by value, nil and empty collections
// alike) — the notion of equality Kubernetes itself uses. Decoding errors are InvalidArgument
// naming what could not be decoded.
//
// Each type has one conversion each way (MachineToProto / MachineFromProto and so on); a field
// added to Machine or MachineClass needs a field in driver.proto and a line in each of its two
// conversions, and TestRandomObjectsRoundTrip fails until it has them. EncodeMachine and friends
// are the conversion plus proto.Marshal, as the bridge's bytes fields carry them.
//
// The generated code is enough: the hand-written codec the bridge had beside it saved 14–37 µs
// of CPU and about 90 allocations per call (docs/performance.md, "Generated code only"), next to
// driver calls that wait tens of milliseconds to minutes for a cloud, and every field had to be
// written in four places.

var jsonMarshal = json.Marshal

// deterministic sorts map entries (a class's capacities), so that equal objects give equal
// bytes: the server's decoded-object cache and dial-in's digests rely on it.
var deterministic = proto.MarshalOptions{Deterministic: true}

// EncodeMachine encodes a Machine as a machinist.driver.v1.Machine message; nil yields nil.
func EncodeMachine(m *v1alpha1.Machine) ([]byte, error) {
	if m == nil {
		return nil, nil
	}
	t := machineTrees.Get().(*machineMessages)
	defer machineTrees.Put(t)
	p, err := t.fill(m)
	if err != nil {
		return nil, err
	}
	b, err := deterministic.Marshal(p)
	if err != nil {
		return nil, encodeError("machine", err)
	}
	return b, nil
}

// DecodeMachine decodes a machinist.driver.v1.Machine message; empty bytes yield nil.
func DecodeMachine(b []byte) (*v1alpha1.Machine, error) {
	if len(b) == 0 {
		return nil, nil
	}
	var p driverv1.Machine
	if err := proto.Unmarshal(b, &p); err != nil {
		return nil, decodeError("machine", err)
	}
	return MachineFromProto(&p)
}

// EncodeMachineClass encodes a class as a machinist.driver.v1.MachineClass message,
// deterministically: equal classes give equal bytes, which is what lets servers cache them.
// nil yields nil.
func EncodeMachineClass(c *v1alpha1.MachineClass) ([]byte, error) {
	p, err := MachineClassToProto(c)
	if p == nil || err != nil {
		return nil, err
	}
	b, err := deterministic.Marshal(p)
	if err != nil {
		return nil, encodeError("machineClass", err)
	}
	return b, nil
}

// DecodeMachineClass decodes a machinist.driver.v1.MachineClass message; empty bytes yield nil.
func DecodeMachineClass(b []byte) (*v1alpha1.MachineClass, error) {
	if len(b) == 0 {
		return nil, nil
	}
	var p driverv1.MachineClass
	if err := proto.Unmarshal(b, &p); err != nil {
		return nil, decodeError("machineClass", err)
	}
	return MachineClassFromProto(&p)
}

// MachineToProto converts a Machine; nil yields nil.
func MachineToProto(m *v1alpha1.Machine) (*driverv1.Machine, error) {
	if m == nil {
		return nil, nil
	}
	return new(machineMessages).fill(m)
}

// machineMessages is the message tree of one Machine in one piece, where building it message by
// message took 25 allocations, and EncodeMachine reuses it through a pool: the client encodes
// the Machine of every call (no version names a machine's content, see Encoder), and the tree
// is garbage once marshalled. fill sets every field of the messages it links, so a reused tree
// carries nothing of the machine before.
type machineMessages struct {
	machine   driverv1.Machine
	spec      driverv1.MachineSpec
	class     driverv1.ClassSpec
	template  driverv1.NodeTemplateSpec
	config    driverv1.MachineConfiguration
	status    driverv1.MachineStatus
	lastOp    driverv1.LastOperation
	current   driverv1.CurrentStatus
	durations [5]durationpb.Duration

	conditions    []driverv1.NodeCondition
	conditionPtrs []*driverv1.NodeCondition
	addresses     []driverv1.NodeAddress
	addressPtrs   []*driverv1.NodeAddress
	times         []timestamppb.Timestamp // filled in order; never grown while pointers into it live

	// Kubernetes protobuf of the metadata, the node template's metadata and its spec.
	meta, templateMeta, templateSpec []byte
}

var machineTrees = sync.Pool{New: func() any { return new(machineMessages) }}

// fill converts m into t and returns the tree's root.
func (t *machineMessages) fill(m *v1alpha1.Machine) (*driverv1.Machine, error) {
	var err error
	if t.meta, err = marshalInto(t.meta, &m.ObjectMeta); err != nil {
		return nil, encodeError("machine metadata", err)
	}
	spec, err := t.fillSpec(&m.Spec)
	if err != nil {
		return nil, err
	}
	t.machine = driverv1.Machine{
		ApiVersion: m.APIVersion,
		Kind:       m.Kind,
		Metadata:   t.meta,
		Spec:       spec,
		Status:     t.fillStatus(&m.Status),
	}
	return &t.machine, nil
}

// kubeMessage is a Kubernetes type with its generated protobuf marshalling.
type kubeMessage interface {
	Size() int
	MarshalToSizedBuffer([]byte) (int, error)
}

// marshalInto marshals v into buf's array when it is large enough, as v.Marshal() would.
func marshalInto(buf []byte, v kubeMessage) ([]byte, error) {
	n := v.Size()
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := v.MarshalToSizedBuffer(buf); err != nil {
		return nil, err
	}
	return buf, nil
}

// MachineFromProto converts a wire Machine; nil yields nil.
func MachineFromProto(p *driverv1.Machine) (*v1alpha1.Machine, error) {
	if p == nil {
		return nil, nil
	}
	m := &v1alpha1.Machine{TypeMeta: metav1.TypeMeta{APIVersion: p.ApiVersion, Kind: p.Kind}}
	if err := m.ObjectMeta.Unmarshal(p.Metadata); err != nil {
		return nil, decodeError("machine.metadata", err)
	}
	if err := machineSpecFromProto(p.Spec, &m.Spec); err != nil {
		return nil, err
	}
	machineStatusFromProto(p.Status, &m.Status)
	return m, nil
}

func (t *machineMessages) fillSpec(s *v1alpha1.MachineSpec) (*driverv1.MachineSpec, error) {
	var err error
	if t.templateMeta, err = marshalInto(t.templateMeta, &s.NodeTemplateSpec.ObjectMeta); err != nil {
		return nil, encodeError("machine nodeTemplate metadata", err)
	}
	if t.templateSpec, err = marshalInto(t.templateSpec, &s.NodeTemplateSpec.Spec); err != nil {
		return nil, encodeError("machine nodeTemplate spec", err)
	}
	t.class = driverv1.ClassSpec{ApiGroup: s.Class.APIGroup, Kind: s.Class.Kind, Name: s.Class.Name}
	t.template = driverv1.NodeTemplateSpec{Metadata: t.templateMeta, Spec: t.templateSpec}
	t.spec = driverv1.MachineSpec{Class: &t.class, ProviderId: s.ProviderID, NodeTemplate: &t.template}
	if c := s.MachineConfiguration; c != nil {
		t.config = driverv1.MachineConfiguration{
			DrainTimeout:         t.duration(0, c.MachineDrainTimeout),
			HealthTimeout:        t.duration(1, c.MachineHealthTimeout),
			CreationTimeout:      t.duration(2, c.MachineCreationTimeout),
			InPlaceUpdateTimeout: t.duration(3, c.MachineInPlaceUpdateTimeout),
			PreserveTimeout:      t.duration(4, c.MachinePreserveTimeout),
			DisableHealthTimeout: c.DisableHealthTimeout,
			MaxEvictRetries:      c.MaxEvictRetries,
			NodeConditions:       c.NodeConditions,
		}
		t.spec.Configuration = &t.config
	}
	return &t.spec, nil
}

// duration converts d into the tree's i-th duration; nil yields nil.
func (t *machineMessages) duration(i int, d *metav1.Duration) *durationpb.Duration {
	if d == nil {
		return nil
	}
	nanos := d.Duration.Nanoseconds()
	t.durations[i] = durationpb.Duration{Seconds: nanos / 1e9, Nanos: int32(nanos % 1e9)}
	return &t.durations[i]
}

func machineSpecFromProto(p *driverv1.MachineSpec, s *v1alpha1.MachineSpec) error {
	if p == nil {
		return nil
	}
	if c := p.Class; c != nil {
		s.Class = v1alpha1.ClassSpec{APIGroup: c.ApiGroup, Kind: c.Kind, Name: c.Name}
	}
	s.ProviderID = p.ProviderId
	if t := p.NodeTemplate; t != nil {
		if err := s.NodeTemplateSpec.ObjectMeta.Unmarshal(t.Metadata); err != nil {
			return decodeError("machine.spec.nodeTemplate.metadata", err)
		}
		if err := s.NodeTemplateSpec.Spec.Unmarshal(t.Spec); err != nil {
			return decodeError("machine.spec.nodeTemplate.spec", err)
		}
	}
	if c := p.Configuration; c != nil {
		s.MachineConfiguration = &v1alpha1.MachineConfiguration{
			MachineDrainTimeout:         durationFromProto(c.DrainTimeout),
			MachineHealthTimeout:        durationFromProto(c.HealthTimeout),
			MachineCreationTimeout:      durationFromProto(c.CreationTimeout),
			MachineInPlaceUpdateTimeout: durationFromProto(c.InPlaceUpdateTimeout),
			MachinePreserveTimeout:      durationFromProto(c.PreserveTimeout),
			DisableHealthTimeout:        c.DisableHealthTimeout,
			MaxEvictRetries:             c.MaxEvictRetries,
			NodeConditions:              c.NodeConditions,
		}
	}
	return nil
}

func (t *machineMessages) fillStatus(s *v1alpha1.MachineStatus) *driverv1.MachineStatus {
	// Every time the status may carry, so that t.times is sized once and its pointers stay valid.
	t.times = resize(t.times, 3+2*len(s.Conditions))[:0]
	t.lastOp = driverv1.LastOperation{
		Description:    s.LastOperation.Description,
		ErrorCode:      s.LastOperation.ErrorCode,
		LastUpdateTime: t.time(s.LastOperation.LastUpdateTime),
		State:          string(s.LastOperation.State),
		Type:           string(s.LastOperation.Type),
	}
	t.current = driverv1.CurrentStatus{
		Phase:          string(s.CurrentStatus.Phase),
		TimeoutActive:  s.CurrentStatus.TimeoutActive,
		LastUpdateTime: t.time(s.CurrentStatus.LastUpdateTime),
	}
	if p := s.CurrentStatus.PreserveExpiryTime; p != nil {
		t.current.PreserveExpiryTime = t.setTime(p.Time) // a set zero time too: nil stays apart
	}
	t.status = driverv1.MachineStatus{
		LastOperation:  &t.lastOp,
		CurrentStatus:  &t.current,
		LastKnownState: s.LastKnownState,
	}
	if n := len(s.Addresses); n > 0 {
		t.addresses, t.addressPtrs = resize(t.addresses, n), resize(t.addressPtrs, n)
		for i, a := range s.Addresses {
			t.addresses[i] = driverv1.NodeAddress{Type: string(a.Type), Address: a.Address}
			t.addressPtrs[i] = &t.addresses[i]
		}
		t.status.Addresses = t.addressPtrs
	}
	if n := len(s.Conditions); n > 0 {
		t.conditions, t.conditionPtrs = resize(t.conditions, n), resize(t.conditionPtrs, n)
		for i := range s.Conditions {
			c := &s.Conditions[i]
			t.conditions[i] = driverv1.NodeCondition{
				Type: string(c.Type), Status: string(c.Status),
				LastHeartbeatTime:  t.time(c.LastHeartbeatTime),
				LastTransitionTime: t.time(c.LastTransitionTime),
				Reason:             c.Reason, Message: c.Message,
			}
			t.conditionPtrs[i] = &t.conditions[i]
		}
		t.status.Conditions = t.conditionPtrs
	}
	return &t.status
}

// time converts a time into the tree's next timestamp, leaving a zero time out.
func (t *machineMessages) time(v metav1.Time) *timestamppb.Timestamp {
	if v.IsZero() {
		return nil
	}
	return t.setTime(v.Time)
}

func (t *machineMessages) setTime(v time.Time) *timestamppb.Timestamp {
	i := len(t.times)
	t.times = t.times[:i+1] // within the capacity fillStatus sized
	t.times[i] = timestamppb.Timestamp{Seconds: v.Unix(), Nanos: int32(v.Nanosecond())}
	return &t.times[i]
}

// resize returns s with length n, reusing its array when large enough.
func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

func machineStatusFromProto(p *driverv1.MachineStatus, s *v1alpha1.MachineStatus) {
	if p == nil {
		return
	}
	s.Addresses = AddressesFromProto(p.Addresses)
	if len(p.Conditions) > 0 {
		s.Conditions = make([]corev1.NodeCondition, len(p.Conditions))
		for i, c := range p.Conditions {
			if c == nil {
				continue
			}
			s.Conditions[i] = corev1.NodeCondition{
				Type: corev1.NodeConditionType(c.Type), Status: corev1.ConditionStatus(c.Status),
				LastHeartbeatTime:  timeFromProto(c.LastHeartbeatTime),
				LastTransitionTime: timeFromProto(c.LastTransitionTime),
				Reason:             c.Reason, Message: c.Message,
			}
		}
	}
	if o := p.LastOperation; o != nil {
		s.LastOperation = v1alpha1.LastOperation{
			Description: o.Description, ErrorCode: o.ErrorCode,
			LastUpdateTime: timeFromProto(o.LastUpdateTime),
			State:          v1alpha1.MachineState(o.State), Type: v1alpha1.MachineOperationType(o.Type),
		}
	}
	if c := p.CurrentStatus; c != nil {
		s.CurrentStatus = v1alpha1.CurrentStatus{
			Phase: v1alpha1.MachinePhase(c.Phase), TimeoutActive: c.TimeoutActive,
			LastUpdateTime:     timeFromProto(c.LastUpdateTime),
			PreserveExpiryTime: timePtrFromProto(c.PreserveExpiryTime),
		}
	}
	s.LastKnownState = p.LastKnownState
}

// MachineClassToProto converts a MachineClass; nil yields nil. A providerSpec held only as a
// decoded Object (never the case for classes read from the API) travels as its JSON. The
// class's status (the controller's own record) does not travel: drivers never read it.
func MachineClassToProto(c *v1alpha1.MachineClass) (*driverv1.MachineClass, error) {
	if c == nil {
		return nil, nil
	}
	meta, err := c.ObjectMeta.Marshal()
	if err != nil {
		return nil, encodeError("machineClass metadata", err)
	}
	raw, err := providerSpecJSON(c)
	if err != nil {
		return nil, err
	}
	out := &driverv1.MachineClass{
		ApiVersion:           c.APIVersion,
		Kind:                 c.Kind,
		Metadata:             meta,
		CredentialsSecretRef: secretRefToProto(c.CredentialsSecretRef),
		ProviderSpec:         raw,
		Provider:             c.Provider,
		SecretRef:            secretRefToProto(c.SecretRef),
	}
	if t := c.NodeTemplate; t != nil {
		out.NodeTemplate = &driverv1.NodeTemplate{
			Capacity:        resourcesToProto(t.Capacity),
			VirtualCapacity: resourcesToProto(t.VirtualCapacity),
			InstanceType:    t.InstanceType,
			Region:          t.Region,
			Zone:            t.Zone,
			Architecture:    t.Architecture,
		}
	}
	return out, nil
}

// MachineClassFromProto converts a wire MachineClass; nil yields nil.
func MachineClassFromProto(p *driverv1.MachineClass) (*v1alpha1.MachineClass, error) {
	if p == nil {
		return nil, nil
	}
	c := &v1alpha1.MachineClass{
		TypeMeta:             metav1.TypeMeta{APIVersion: p.ApiVersion, Kind: p.Kind},
		CredentialsSecretRef: secretRefFromProto(p.CredentialsSecretRef),
		Provider:             p.Provider,
		SecretRef:            secretRefFromProto(p.SecretRef),
	}
	if len(p.ProviderSpec) > 0 {
		c.ProviderSpec.Raw = p.ProviderSpec
	}
	if err := c.ObjectMeta.Unmarshal(p.Metadata); err != nil {
		return nil, decodeError("machineClass.metadata", err)
	}
	if t := p.NodeTemplate; t != nil {
		capacity, err := resourcesFromProto(t.Capacity, "machineClass.nodeTemplate.capacity")
		if err != nil {
			return nil, err
		}
		virtual, err := resourcesFromProto(t.VirtualCapacity, "machineClass.nodeTemplate.virtualCapacity")
		if err != nil {
			return nil, err
		}
		c.NodeTemplate = &v1alpha1.NodeTemplate{
			Capacity: capacity, VirtualCapacity: virtual,
			InstanceType: t.InstanceType, Region: t.Region, Zone: t.Zone, Architecture: t.Architecture,
		}
	}
	return c, nil
}

// EncodeSecret encodes a secret in Kubernetes protobuf (deterministic: map keys are sorted); nil
// yields nil.
func EncodeSecret(s *corev1.Secret) ([]byte, error) {
	if s == nil {
		return nil, nil
	}
	b, err := s.Marshal()
	if err != nil {
		return nil, encodeError("secret", err)
	}
	if len(b) == 0 {
		// Never the case (metadata is always written), but nil must stay distinct from empty.
		return nil, encodeError("secret", fmt.Errorf("empty encoding"))
	}
	return b, nil
}

// DecodeSecret decodes a secret field; empty bytes yield nil.
func DecodeSecret(b []byte) (*corev1.Secret, error) {
	if len(b) == 0 {
		return nil, nil
	}
	s := &corev1.Secret{}
	if err := s.Unmarshal(b); err != nil {
		return nil, decodeError("secret", err)
	}
	return s, nil
}

// PVSpecsToProto encodes persistent volume specs; a nil entry becomes empty bytes.
func PVSpecsToProto(specs []*corev1.PersistentVolumeSpec) ([][]byte, error) {
	if specs == nil {
		return nil, nil
	}
	out := make([][]byte, len(specs))
	for i, s := range specs {
		if s == nil {
			continue
		}
		b, err := s.Marshal()
		if err != nil {
			return nil, encodeError(fmt.Sprintf("pvSpecs[%d]", i), err)
		}
		out[i] = b
	}
	return out, nil
}

// PVSpecsFromProto decodes persistent volume specs; empty bytes become a nil entry. (An encoded
// spec is never empty: its volume source is always written.)
func PVSpecsFromProto(specs [][]byte) ([]*corev1.PersistentVolumeSpec, error) {
	if specs == nil {
		return nil, nil
	}
	out := make([]*corev1.PersistentVolumeSpec, len(specs))
	for i, b := range specs {
		if len(b) == 0 {
			continue
		}
		s := &corev1.PersistentVolumeSpec{}
		if err := s.Unmarshal(b); err != nil {
			return nil, decodeError(fmt.Sprintf("pvSpecs[%d]", i), err)
		}
		out[i] = s
	}
	return out, nil
}

// AddressesToProto converts node addresses.
func AddressesToProto(as []corev1.NodeAddress) []*driverv1.NodeAddress {
	if len(as) == 0 {
		return nil
	}
	out := make([]*driverv1.NodeAddress, len(as))
	for i, a := range as {
		out[i] = &driverv1.NodeAddress{Type: string(a.Type), Address: a.Address}
	}
	return out
}

// AddressesFromProto converts wire node addresses.
func AddressesFromProto(as []*driverv1.NodeAddress) []corev1.NodeAddress {
	if len(as) == 0 {
		return nil
	}
	out := make([]corev1.NodeAddress, len(as))
	for i, a := range as {
		if a != nil {
			out[i] = corev1.NodeAddress{Type: corev1.NodeAddressType(a.Type), Address: a.Address}
		}
	}
	return out
}

func secretRefToProto(r *corev1.SecretReference) *driverv1.SecretReference {
	if r == nil {
		return nil
	}
	return &driverv1.SecretReference{Name: r.Name, Namespace: r.Namespace}
}

func secretRefFromProto(r *driverv1.SecretReference) *corev1.SecretReference {
	if r == nil {
		return nil
	}
	return &corev1.SecretReference{Name: r.Name, Namespace: r.Namespace}
}

func resourcesToProto(l corev1.ResourceList) map[string]string {
	if l == nil {
		return nil
	}
	out := make(map[string]string, len(l))
	for name, q := range l {
		out[string(name)] = q.String()
	}
	return out
}

func resourcesFromProto(m map[string]string, path string) (corev1.ResourceList, error) {
	if m == nil {
		return nil, nil
	}
	out := make(corev1.ResourceList, len(m))
	for name, s := range m {
		q, err := resource.ParseQuantity(s)
		if err != nil {
			return nil, driver.Errorf(driver.InvalidArgument, "grpcbridge: decode %s[%s]: %q is not a quantity: %v", path, name, s, err)
		}
		out[corev1.ResourceName(name)] = q
	}
	return out, nil
}

// timeFromProto reads an absent time as zero (machineMessages.time leaves a zero time out).
func timeFromProto(ts *timestamppb.Timestamp) metav1.Time {
	if ts == nil {
		return metav1.Time{}
	}
	return metav1.Time{Time: time.Unix(ts.Seconds, int64(ts.Nanos)).Local()}
}

// timePtrFromProto keeps nil apart from a set zero time.
func timePtrFromProto(ts *timestamppb.Timestamp) *metav1.Time {
	if ts == nil {
		return nil
	}
	t := timeFromProto(ts)
	return &t
}

func durationFromProto(d *durationpb.Duration) *metav1.Duration {
	if d == nil {
		return nil
	}
	return &metav1.Duration{Duration: time.Duration(d.Seconds)*time.Second + time.Duration(d.Nanos)}
}

func providerSpecJSON(c *v1alpha1.MachineClass) ([]byte, error) {
	if c.ProviderSpec.Raw != nil || c.ProviderSpec.Object == nil {
		return c.ProviderSpec.Raw, nil
	}
	raw, err := jsonMarshal(c.ProviderSpec.Object)
	if err != nil {
		return nil, encodeError("machineClass providerSpec", err)
	}
	return raw, nil
}

func encodeError(what string, err error) error {
	return driver.Wrap(driver.Internal, err, "grpcbridge: encode "+what)
}

func decodeError(what string, err error) error {
	return driver.Wrap(driver.InvalidArgument, err, "grpcbridge: decode "+what)
}

// Responses. A nil driver response converts like an empty one.

// CreateResponseToProto converts a CreateMachine response.
func CreateResponseToProto(r *driver.CreateMachineResponse) *driverv1.CreateMachineResponse {
	if r == nil {
		return &driverv1.CreateMachineResponse{}
	}
	return &driverv1.CreateMachineResponse{ProviderId: r.ProviderID, NodeName: r.NodeName, LastKnownState: r.LastKnownState, Addresses: AddressesToProto(r.Addresses)}
}

// CreateResponseFromProto converts a wire CreateMachine response.
func CreateResponseFromProto(p *driverv1.CreateMachineResponse) *driver.CreateMachineResponse {
	return &driver.CreateMachineResponse{ProviderID: p.GetProviderId(), NodeName: p.GetNodeName(), LastKnownState: p.GetLastKnownState(), Addresses: AddressesFromProto(p.GetAddresses())}
}

// InitializeResponseToProto converts an InitializeMachine response.
func InitializeResponseToProto(r *driver.InitializeMachineResponse) *driverv1.InitializeMachineResponse {
	if r == nil {
		return &driverv1.InitializeMachineResponse{}
	}
	return &driverv1.InitializeMachineResponse{ProviderId: r.ProviderID, NodeName: r.NodeName, Addresses: AddressesToProto(r.Addresses)}
}

// InitializeResponseFromProto converts a wire InitializeMachine response.
func InitializeResponseFromProto(p *driverv1.InitializeMachineResponse) *driver.InitializeMachineResponse {
	return &driver.InitializeMachineResponse{ProviderID: p.GetProviderId(), NodeName: p.GetNodeName(), Addresses: AddressesFromProto(p.GetAddresses())}
}

// DeleteResponseToProto converts a DeleteMachine response.
func DeleteResponseToProto(r *driver.DeleteMachineResponse) *driverv1.DeleteMachineResponse {
	if r == nil {
		return &driverv1.DeleteMachineResponse{}
	}
	return &driverv1.DeleteMachineResponse{LastKnownState: r.LastKnownState}
}

// DeleteResponseFromProto converts a wire DeleteMachine response.
func DeleteResponseFromProto(p *driverv1.DeleteMachineResponse) *driver.DeleteMachineResponse {
	return &driver.DeleteMachineResponse{LastKnownState: p.GetLastKnownState()}
}

// StatusResponseToProto converts a GetMachineStatus response.
func StatusResponseToProto(r *driver.GetMachineStatusResponse) *driverv1.GetMachineStatusResponse {
	if r == nil {
		return &driverv1.GetMachineStatusResponse{}
	}
	return &driverv1.GetMachineStatusResponse{ProviderId: r.ProviderID, NodeName: r.NodeName, Addresses: AddressesToProto(r.Addresses)}
}

// StatusResponseFromProto converts a wire GetMachineStatus response.
func StatusResponseFromProto(p *driverv1.GetMachineStatusResponse) *driver.GetMachineStatusResponse {
	return &driver.GetMachineStatusResponse{ProviderID: p.GetProviderId(), NodeName: p.GetNodeName(), Addresses: AddressesFromProto(p.GetAddresses())}
}

// ListResponseToProto converts a ListMachines response.
func ListResponseToProto(r *driver.ListMachinesResponse) *driverv1.ListMachinesResponse {
	if r == nil {
		return &driverv1.ListMachinesResponse{}
	}
	return &driverv1.ListMachinesResponse{MachineList: r.MachineList}
}

// ListResponseFromProto converts a wire ListMachines response; the list is never nil.
func ListResponseFromProto(p *driverv1.ListMachinesResponse) *driver.ListMachinesResponse {
	list := p.GetMachineList()
	if list == nil {
		list = map[string]string{}
	}
	return &driver.ListMachinesResponse{MachineList: list}
}

// VolumeIDsResponseToProto converts a GetVolumeIDs response.
func VolumeIDsResponseToProto(r *driver.GetVolumeIDsResponse) *driverv1.GetVolumeIDsResponse {
	if r == nil {
		return &driverv1.GetVolumeIDsResponse{}
	}
	return &driverv1.GetVolumeIDsResponse{VolumeIds: r.VolumeIDs}
}

// VolumeIDsResponseFromProto converts a wire GetVolumeIDs response.
func VolumeIDsResponseFromProto(p *driverv1.GetVolumeIDsResponse) *driver.GetVolumeIDsResponse {
	return &driver.GetVolumeIDsResponse{VolumeIDs: p.GetVolumeIds()}
}

// StopResponseToProto converts a StopMachine response.
func StopResponseToProto(r *driver.StopMachineResponse) *driverv1.StopMachineResponse {
	if r == nil {
		return &driverv1.StopMachineResponse{}
	}
	return &driverv1.StopMachineResponse{LastKnownState: r.LastKnownState}
}

// StopResponseFromProto converts a wire StopMachine response.
func StopResponseFromProto(p *driverv1.StopMachineResponse) *driver.StopMachineResponse {
	return &driver.StopMachineResponse{LastKnownState: p.GetLastKnownState()}
}

// StartResponseToProto converts a StartMachine response.
func StartResponseToProto(r *driver.StartMachineResponse) *driverv1.StartMachineResponse {
	if r == nil {
		return &driverv1.StartMachineResponse{}
	}
	return &driverv1.StartMachineResponse{ProviderId: r.ProviderID, NodeName: r.NodeName, LastKnownState: r.LastKnownState, Addresses: AddressesToProto(r.Addresses)}
}

// StartResponseFromProto converts a wire StartMachine response.
func StartResponseFromProto(p *driverv1.StartMachineResponse) *driver.StartMachineResponse {
	return &driver.StartMachineResponse{ProviderID: p.GetProviderId(), NodeName: p.GetNodeName(), LastKnownState: p.GetLastKnownState(), Addresses: AddressesFromProto(p.GetAddresses())}
}

// CapabilitiesToProto converts a driver's optional capabilities.
func CapabilitiesToProto(c driver.Capabilities) *driverv1.GetCapabilitiesResponse {
	return &driverv1.GetCapabilitiesResponse{Power: c.Power}
}

// CapabilitiesFromProto converts wire capabilities; nil (a peer built before them) is none.
func CapabilitiesFromProto(p *driverv1.GetCapabilitiesResponse) driver.Capabilities {
	return driver.Capabilities{Power: p.GetPower()}
}
