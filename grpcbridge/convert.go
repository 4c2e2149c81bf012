package grpcbridge

import (
	"encoding/json"
	"fmt"
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
	p, err := MachineToProto(m)
	if p == nil || err != nil {
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
	meta, err := m.ObjectMeta.Marshal()
	if err != nil {
		return nil, encodeError("machine metadata", err)
	}
	spec, err := machineSpecToProto(&m.Spec)
	if err != nil {
		return nil, err
	}
	return &driverv1.Machine{
		ApiVersion: m.APIVersion,
		Kind:       m.Kind,
		Metadata:   meta,
		Spec:       spec,
		Status:     machineStatusToProto(&m.Status),
	}, nil
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

func machineSpecToProto(s *v1alpha1.MachineSpec) (*driverv1.MachineSpec, error) {
	tmplMeta, err := s.NodeTemplateSpec.ObjectMeta.Marshal()
	if err != nil {
		return nil, encodeError("machine nodeTemplate metadata", err)
	}
	tmplSpec, err := s.NodeTemplateSpec.Spec.Marshal()
	if err != nil {
		return nil, encodeError("machine nodeTemplate spec", err)
	}
	out := &driverv1.MachineSpec{
		Class:        &driverv1.ClassSpec{ApiGroup: s.Class.APIGroup, Kind: s.Class.Kind, Name: s.Class.Name},
		ProviderId:   s.ProviderID,
		NodeTemplate: &driverv1.NodeTemplateSpec{Metadata: tmplMeta, Spec: tmplSpec},
	}
	if c := s.MachineConfiguration; c != nil {
		out.Configuration = &driverv1.MachineConfiguration{
			DrainTimeout:         durationToProto(c.MachineDrainTimeout),
			HealthTimeout:        durationToProto(c.MachineHealthTimeout),
			CreationTimeout:      durationToProto(c.MachineCreationTimeout),
			InPlaceUpdateTimeout: durationToProto(c.MachineInPlaceUpdateTimeout),
			PreserveTimeout:      durationToProto(c.MachinePreserveTimeout),
			DisableHealthTimeout: c.DisableHealthTimeout,
			MaxEvictRetries:      c.MaxEvictRetries,
			NodeConditions:       c.NodeConditions,
		}
	}
	return out, nil
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

func machineStatusToProto(s *v1alpha1.MachineStatus) *driverv1.MachineStatus {
	out := &driverv1.MachineStatus{
		Addresses: AddressesToProto(s.Addresses),
		LastOperation: &driverv1.LastOperation{
			Description:    s.LastOperation.Description,
			ErrorCode:      s.LastOperation.ErrorCode,
			LastUpdateTime: timeToProto(s.LastOperation.LastUpdateTime),
			State:          string(s.LastOperation.State),
			Type:           string(s.LastOperation.Type),
		},
		CurrentStatus: &driverv1.CurrentStatus{
			Phase:              string(s.CurrentStatus.Phase),
			TimeoutActive:      s.CurrentStatus.TimeoutActive,
			LastUpdateTime:     timeToProto(s.CurrentStatus.LastUpdateTime),
			PreserveExpiryTime: timePtrToProto(s.CurrentStatus.PreserveExpiryTime),
		},
		LastKnownState: s.LastKnownState,
	}
	if len(s.Conditions) > 0 {
		out.Conditions = make([]*driverv1.NodeCondition, len(s.Conditions))
		for i := range s.Conditions {
			c := &s.Conditions[i]
			out.Conditions[i] = &driverv1.NodeCondition{
				Type: string(c.Type), Status: string(c.Status),
				LastHeartbeatTime:  timeToProto(c.LastHeartbeatTime),
				LastTransitionTime: timeToProto(c.LastTransitionTime),
				Reason:             c.Reason, Message: c.Message,
			}
		}
	}
	return out
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

// timeToProto leaves a zero time out; timeFromProto reads absence as zero.
func timeToProto(t metav1.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t.Time)
}

func timeFromProto(ts *timestamppb.Timestamp) metav1.Time {
	if ts == nil {
		return metav1.Time{}
	}
	return metav1.Time{Time: time.Unix(ts.Seconds, int64(ts.Nanos)).Local()}
}

// Pointer times keep nil apart from a set zero time.
func timePtrToProto(t *metav1.Time) *timestamppb.Timestamp {
	if t == nil {
		return nil
	}
	return timestamppb.New(t.Time)
}

func timePtrFromProto(ts *timestamppb.Timestamp) *metav1.Time {
	if ts == nil {
		return nil
	}
	t := timeFromProto(ts)
	return &t
}

func durationToProto(d *metav1.Duration) *durationpb.Duration {
	if d == nil {
		return nil
	}
	return durationpb.New(d.Duration)
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
