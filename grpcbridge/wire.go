package grpcbridge

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
)

// The hot path: Machine and MachineClass are encoded straight from and decoded straight into the
// Go types, in the wire format of the machinist.driver.v1 Machine and MachineClass messages,
// without building the generated message tree in between. This is what protoc-gen-gogo does for
// the Kubernetes types; it halves the allocations of a call. MachineToProto and friends
// (convert.go) are the reference: tests decode this encoding with the generated code and the
// generated encoding with this decoder, and require the same objects.
//
// It stays hand-written on purpose: BenchmarkObjectEncoding measures 24 µs and 90 allocations
// per request's objects with it against 38 µs and 195 with the generated message types (and
// 343 instead of 252 allocations per bridge call; docs/performance.md).
//
// Field numbers below are those of driver.proto.

// EncodeMachine encodes a Machine as a machinist.driver.v1.Machine message; nil yields nil.
// The encoding is deterministic (map entries sorted).
func EncodeMachine(m *v1alpha1.Machine) ([]byte, error) {
	if m == nil {
		return nil, nil
	}
	e := encoder{b: make([]byte, 0, 1024)}
	if err := e.machine(m); err != nil {
		return nil, err
	}
	return e.b, nil
}

// machine appends the fields of a Machine message.
func (e *encoder) machine(m *v1alpha1.Machine) error {
	e.str(1, m.APIVersion)
	e.str(2, m.Kind)
	if err := e.gogo(3, &m.ObjectMeta); err != nil {
		return encodeError("machine metadata", err)
	}
	spec := e.begin(4)
	if s := &m.Spec; true {
		class := e.begin(1)
		e.str(1, s.Class.APIGroup)
		e.str(2, s.Class.Kind)
		e.str(3, s.Class.Name)
		e.end(class)
		e.str(2, s.ProviderID)
		tmpl := e.begin(3)
		if err := e.gogo(1, &s.NodeTemplateSpec.ObjectMeta); err != nil {
			return encodeError("machine nodeTemplate metadata", err)
		}
		if err := e.gogo(2, &s.NodeTemplateSpec.Spec); err != nil {
			return encodeError("machine nodeTemplate spec", err)
		}
		e.end(tmpl)
		if c := s.MachineConfiguration; c != nil {
			conf := e.begin(4)
			e.duration(1, c.MachineDrainTimeout)
			e.duration(2, c.MachineHealthTimeout)
			e.duration(3, c.MachineCreationTimeout)
			e.duration(4, c.MachineInPlaceUpdateTimeout)
			e.duration(5, c.MachinePreserveTimeout)
			if c.DisableHealthTimeout != nil {
				e.tagVarint(6, protowire.EncodeBool(*c.DisableHealthTimeout))
			}
			if c.MaxEvictRetries != nil {
				e.tagVarint(7, uint64(int64(*c.MaxEvictRetries)))
			}
			if c.NodeConditions != nil {
				e.tagString(8, *c.NodeConditions)
			}
			e.end(conf)
		}
	}
	e.end(spec)
	status := e.begin(5)
	if s := &m.Status; true {
		e.addresses(1, s.Addresses)
		for i := range s.Conditions {
			c := &s.Conditions[i]
			cond := e.begin(2)
			e.str(1, string(c.Type))
			e.str(2, string(c.Status))
			e.time(3, c.LastHeartbeatTime)
			e.time(4, c.LastTransitionTime)
			e.str(5, c.Reason)
			e.str(6, c.Message)
			e.end(cond)
		}
		op := e.begin(3)
		e.str(1, s.LastOperation.Description)
		e.str(2, s.LastOperation.ErrorCode)
		e.time(3, s.LastOperation.LastUpdateTime)
		e.str(4, string(s.LastOperation.State))
		e.str(5, string(s.LastOperation.Type))
		e.end(op)
		cur := e.begin(4)
		e.str(1, string(s.CurrentStatus.Phase))
		if s.CurrentStatus.TimeoutActive {
			e.tagVarint(2, 1)
		}
		e.time(3, s.CurrentStatus.LastUpdateTime)
		if t := s.CurrentStatus.PreserveExpiryTime; t != nil {
			e.timestamp(4, t.Time)
		}
		e.end(cur)
		e.str(5, s.LastKnownState)
	}
	e.end(status)
	return nil
}

// DecodeMachine decodes a machinist.driver.v1.Machine message; empty bytes yield nil.
func DecodeMachine(b []byte) (*v1alpha1.Machine, error) {
	if len(b) == 0 {
		return nil, nil
	}
	m := &v1alpha1.Machine{}
	err := fields(b, "machine", func(f field) error {
		switch {
		case f.is(1, protowire.BytesType):
			m.APIVersion = str(f.b)
		case f.is(2, protowire.BytesType):
			m.Kind = str(f.b)
		case f.is(3, protowire.BytesType):
			m.ObjectMeta = metav1.ObjectMeta{}
			if err := m.ObjectMeta.Unmarshal(f.b); err != nil {
				return decodeError("machine.metadata", err)
			}
		case f.is(4, protowire.BytesType):
			return decodeMachineSpec(f.b, &m.Spec)
		case f.is(5, protowire.BytesType):
			return decodeMachineStatus(f.b, &m.Status)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

func decodeMachineSpec(b []byte, s *v1alpha1.MachineSpec) error {
	return fields(b, "machine.spec", func(f field) error {
		switch {
		case f.is(1, protowire.BytesType):
			return fields(f.b, "machine.spec.class", func(f field) error {
				switch {
				case f.is(1, protowire.BytesType):
					s.Class.APIGroup = str(f.b)
				case f.is(2, protowire.BytesType):
					s.Class.Kind = str(f.b)
				case f.is(3, protowire.BytesType):
					s.Class.Name = str(f.b)
				}
				return nil
			})
		case f.is(2, protowire.BytesType):
			s.ProviderID = str(f.b)
		case f.is(3, protowire.BytesType):
			return fields(f.b, "machine.spec.nodeTemplate", func(f field) error {
				switch {
				case f.is(1, protowire.BytesType):
					s.NodeTemplateSpec.ObjectMeta = metav1.ObjectMeta{}
					if err := s.NodeTemplateSpec.ObjectMeta.Unmarshal(f.b); err != nil {
						return decodeError("machine.spec.nodeTemplate.metadata", err)
					}
				case f.is(2, protowire.BytesType):
					s.NodeTemplateSpec.Spec = corev1.NodeSpec{}
					if err := s.NodeTemplateSpec.Spec.Unmarshal(f.b); err != nil {
						return decodeError("machine.spec.nodeTemplate.spec", err)
					}
				}
				return nil
			})
		case f.is(4, protowire.BytesType):
			if s.MachineConfiguration == nil {
				s.MachineConfiguration = &v1alpha1.MachineConfiguration{}
			}
			c := s.MachineConfiguration
			return fields(f.b, "machine.spec.configuration", func(f field) error {
				var err error
				switch {
				case f.is(1, protowire.BytesType):
					c.MachineDrainTimeout, err = decodeDuration(f.b)
				case f.is(2, protowire.BytesType):
					c.MachineHealthTimeout, err = decodeDuration(f.b)
				case f.is(3, protowire.BytesType):
					c.MachineCreationTimeout, err = decodeDuration(f.b)
				case f.is(4, protowire.BytesType):
					c.MachineInPlaceUpdateTimeout, err = decodeDuration(f.b)
				case f.is(5, protowire.BytesType):
					c.MachinePreserveTimeout, err = decodeDuration(f.b)
				case f.is(6, protowire.VarintType):
					v := protowire.DecodeBool(f.v)
					c.DisableHealthTimeout = &v
				case f.is(7, protowire.VarintType):
					v := int32(f.v)
					c.MaxEvictRetries = &v
				case f.is(8, protowire.BytesType):
					v := str(f.b)
					c.NodeConditions = &v
				}
				return err
			})
		}
		return nil
	})
}

func decodeMachineStatus(b []byte, s *v1alpha1.MachineStatus) error {
	return fields(b, "machine.status", func(f field) error {
		switch {
		case f.is(1, protowire.BytesType):
			a, err := decodeAddress(f.b)
			s.Addresses = append(s.Addresses, a)
			return err
		case f.is(2, protowire.BytesType):
			var c corev1.NodeCondition
			err := fields(f.b, "machine.status.conditions", func(f field) error {
				var err error
				switch {
				case f.is(1, protowire.BytesType):
					c.Type = corev1.NodeConditionType(str(f.b))
				case f.is(2, protowire.BytesType):
					c.Status = corev1.ConditionStatus(str(f.b))
				case f.is(3, protowire.BytesType):
					c.LastHeartbeatTime, err = decodeTime(f.b)
				case f.is(4, protowire.BytesType):
					c.LastTransitionTime, err = decodeTime(f.b)
				case f.is(5, protowire.BytesType):
					c.Reason = str(f.b)
				case f.is(6, protowire.BytesType):
					c.Message = str(f.b)
				}
				return err
			})
			s.Conditions = append(s.Conditions, c)
			return err
		case f.is(3, protowire.BytesType):
			o := &s.LastOperation
			return fields(f.b, "machine.status.lastOperation", func(f field) error {
				var err error
				switch {
				case f.is(1, protowire.BytesType):
					o.Description = str(f.b)
				case f.is(2, protowire.BytesType):
					o.ErrorCode = str(f.b)
				case f.is(3, protowire.BytesType):
					o.LastUpdateTime, err = decodeTime(f.b)
				case f.is(4, protowire.BytesType):
					o.State = v1alpha1.MachineState(str(f.b))
				case f.is(5, protowire.BytesType):
					o.Type = v1alpha1.MachineOperationType(str(f.b))
				}
				return err
			})
		case f.is(4, protowire.BytesType):
			c := &s.CurrentStatus
			return fields(f.b, "machine.status.currentStatus", func(f field) error {
				var err error
				switch {
				case f.is(1, protowire.BytesType):
					c.Phase = v1alpha1.MachinePhase(str(f.b))
				case f.is(2, protowire.VarintType):
					c.TimeoutActive = protowire.DecodeBool(f.v)
				case f.is(3, protowire.BytesType):
					c.LastUpdateTime, err = decodeTime(f.b)
				case f.is(4, protowire.BytesType):
					var t metav1.Time
					t, err = decodeTime(f.b)
					c.PreserveExpiryTime = &t
				}
				return err
			})
		case f.is(5, protowire.BytesType):
			s.LastKnownState = str(f.b)
		}
		return nil
	})
}

// EncodeMachineClass encodes a class as a machinist.driver.v1.MachineClass message,
// deterministically: equal classes give equal bytes, which is what lets servers cache them.
// A providerSpec held only as a decoded Object (never the case for classes read from the API)
// travels as its JSON. nil yields nil.
func EncodeMachineClass(c *v1alpha1.MachineClass) ([]byte, error) {
	if c == nil {
		return nil, nil
	}
	e := encoder{b: make([]byte, 0, 512+len(c.ProviderSpec.Raw))}
	if err := e.machineClass(c); err != nil {
		return nil, err
	}
	return e.b, nil
}

// machineClass appends the fields of a MachineClass message.
func (e *encoder) machineClass(c *v1alpha1.MachineClass) error {
	raw, err := providerSpecJSON(c)
	if err != nil {
		return err
	}
	e.str(1, c.APIVersion)
	e.str(2, c.Kind)
	if err := e.gogo(3, &c.ObjectMeta); err != nil {
		return encodeError("machineClass metadata", err)
	}
	if t := c.NodeTemplate; t != nil {
		tmpl := e.begin(4)
		e.resources(1, t.Capacity)
		e.resources(2, t.VirtualCapacity)
		e.str(3, t.InstanceType)
		e.str(4, t.Region)
		e.str(5, t.Zone)
		if t.Architecture != nil {
			e.tagString(6, *t.Architecture)
		}
		e.end(tmpl)
	}
	e.secretRef(5, c.CredentialsSecretRef)
	if len(raw) > 0 {
		e.b = protowire.AppendTag(e.b, 6, protowire.BytesType)
		e.b = protowire.AppendBytes(e.b, raw)
	}
	e.str(7, c.Provider)
	e.secretRef(8, c.SecretRef)
	return nil
}

// DecodeMachineClass decodes a machinist.driver.v1.MachineClass message; empty bytes yield nil.
func DecodeMachineClass(b []byte) (*v1alpha1.MachineClass, error) {
	if len(b) == 0 {
		return nil, nil
	}
	c := &v1alpha1.MachineClass{}
	err := fields(b, "machineClass", func(f field) error {
		switch {
		case f.is(1, protowire.BytesType):
			c.APIVersion = str(f.b)
		case f.is(2, protowire.BytesType):
			c.Kind = str(f.b)
		case f.is(3, protowire.BytesType):
			c.ObjectMeta = metav1.ObjectMeta{}
			if err := c.ObjectMeta.Unmarshal(f.b); err != nil {
				return decodeError("machineClass.metadata", err)
			}
		case f.is(4, protowire.BytesType):
			if c.NodeTemplate == nil {
				c.NodeTemplate = &v1alpha1.NodeTemplate{}
			}
			t := c.NodeTemplate
			return fields(f.b, "machineClass.nodeTemplate", func(f field) error {
				switch {
				case f.is(1, protowire.BytesType):
					return decodeResource(f.b, &t.Capacity, "machineClass.nodeTemplate.capacity")
				case f.is(2, protowire.BytesType):
					return decodeResource(f.b, &t.VirtualCapacity, "machineClass.nodeTemplate.virtualCapacity")
				case f.is(3, protowire.BytesType):
					t.InstanceType = str(f.b)
				case f.is(4, protowire.BytesType):
					t.Region = str(f.b)
				case f.is(5, protowire.BytesType):
					t.Zone = str(f.b)
				case f.is(6, protowire.BytesType):
					v := str(f.b)
					t.Architecture = &v
				}
				return nil
			})
		case f.is(5, protowire.BytesType):
			return decodeSecretRef(f.b, &c.CredentialsSecretRef)
		case f.is(6, protowire.BytesType):
			c.ProviderSpec.Raw = slices.Clone(f.b)
		case f.is(7, protowire.BytesType):
			c.Provider = str(f.b)
		case f.is(8, protowire.BytesType):
			return decodeSecretRef(f.b, &c.SecretRef)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// encoder appends protobuf fields to b. Nested messages are written in place: begin reserves one
// byte for the length and end moves the body when the length needs more.
type encoder struct{ b []byte }

func (e *encoder) str(num protowire.Number, s string) {
	if s != "" {
		e.tagString(num, s)
	}
}

func (e *encoder) tagString(num protowire.Number, s string) {
	e.b = protowire.AppendTag(e.b, num, protowire.BytesType)
	e.b = protowire.AppendString(e.b, s)
}

func (e *encoder) tagVarint(num protowire.Number, v uint64) {
	e.b = protowire.AppendTag(e.b, num, protowire.VarintType)
	e.b = protowire.AppendVarint(e.b, v)
}

func (e *encoder) varint(num protowire.Number, v uint64) {
	if v != 0 {
		e.tagVarint(num, v)
	}
}

func (e *encoder) begin(num protowire.Number) int {
	e.b = protowire.AppendTag(e.b, num, protowire.BytesType)
	e.b = append(e.b, 0)
	return len(e.b)
}

func (e *encoder) end(start int) {
	n := len(e.b) - start
	if n < 0x80 {
		e.b[start-1] = byte(n)
		return
	}
	extra := protowire.SizeVarint(uint64(n)) - 1
	e.b = append(e.b, make([]byte, extra)...)
	copy(e.b[start+extra:], e.b[start:start+n])
	protowire.AppendVarint(e.b[:start-1], uint64(n))
}

// gogo writes a Kubernetes type in its own protobuf encoding, straight into the buffer.
func (e *encoder) gogo(num protowire.Number, m interface {
	Size() int
	MarshalToSizedBuffer([]byte) (int, error)
}) error {
	n := m.Size()
	e.b = protowire.AppendTag(e.b, num, protowire.BytesType)
	e.b = protowire.AppendVarint(e.b, uint64(n))
	e.b = slices.Grow(e.b, n)
	start := len(e.b)
	e.b = e.b[:start+n]
	_, err := m.MarshalToSizedBuffer(e.b[start:])
	return err
}

// time leaves a zero time out; timestamp always writes (pointer times keep nil apart from zero).
func (e *encoder) time(num protowire.Number, t metav1.Time) {
	if !t.IsZero() {
		e.timestamp(num, t.Time)
	}
}

func (e *encoder) timestamp(num protowire.Number, t time.Time) {
	m := e.begin(num)
	e.varint(1, uint64(t.Unix()))
	e.varint(2, uint64(int64(t.Nanosecond())))
	e.end(m)
}

func (e *encoder) duration(num protowire.Number, d *metav1.Duration) {
	if d == nil {
		return
	}
	nanos := d.Duration.Nanoseconds()
	secs := nanos / 1e9
	m := e.begin(num)
	e.varint(1, uint64(secs))
	e.varint(2, uint64(nanos-secs*1e9))
	e.end(m)
}

func (e *encoder) addresses(num protowire.Number, as []corev1.NodeAddress) {
	for _, a := range as {
		m := e.begin(num)
		e.str(1, string(a.Type))
		e.str(2, a.Address)
		e.end(m)
	}
}

func (e *encoder) resources(num protowire.Number, l corev1.ResourceList) {
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, string(k))
	}
	sort.Strings(keys)
	for _, k := range keys {
		q := l[corev1.ResourceName(k)]
		m := e.begin(num)
		e.tagString(1, k)
		e.tagString(2, q.String())
		e.end(m)
	}
}

func (e *encoder) secretRef(num protowire.Number, r *corev1.SecretReference) {
	if r == nil {
		return
	}
	m := e.begin(num)
	e.str(1, r.Name)
	e.str(2, r.Namespace)
	e.end(m)
}

// field is one decoded field: a varint value or the bytes of a length-delimited one.
type field struct {
	num protowire.Number
	typ protowire.Type
	v   uint64
	b   []byte
}

func (f field) is(num protowire.Number, typ protowire.Type) bool { return f.num == num && f.typ == typ }

// fields calls fn for each field of the message b. Unknown fields, and known fields with an
// unexpected wire type, are skipped, as the generated code does; malformed input is
// InvalidArgument naming what.
func fields(b []byte, what string, fn func(field) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return wireError(what, n)
		}
		b = b[n:]
		f := field{num: num, typ: typ}
		switch typ {
		case protowire.VarintType:
			f.v, n = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			f.b, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return wireError(what, n)
		}
		b = b[n:]
		if err := fn(f); err != nil {
			return err
		}
	}
	return nil
}

func wireError(what string, n int) error {
	return driver.Errorf(driver.InvalidArgument, "grpcbridge: decode %s: %v", what, protowire.ParseError(n))
}

func decodeTime(b []byte) (metav1.Time, error) {
	var secs, nanos int64
	err := fields(b, "timestamp", func(f field) error {
		switch {
		case f.is(1, protowire.VarintType):
			secs = int64(f.v)
		case f.is(2, protowire.VarintType):
			nanos = int64(int32(f.v))
		}
		return nil
	})
	return metav1.Time{Time: time.Unix(secs, nanos).Local()}, err
}

func decodeDuration(b []byte) (*metav1.Duration, error) {
	var secs, nanos int64
	err := fields(b, "duration", func(f field) error {
		switch {
		case f.is(1, protowire.VarintType):
			secs = int64(f.v)
		case f.is(2, protowire.VarintType):
			nanos = int64(int32(f.v))
		}
		return nil
	})
	return &metav1.Duration{Duration: time.Duration(secs)*time.Second + time.Duration(nanos)}, err
}

func decodeAddress(b []byte) (corev1.NodeAddress, error) {
	var a corev1.NodeAddress
	err := fields(b, "address", func(f field) error {
		switch {
		case f.is(1, protowire.BytesType):
			a.Type = corev1.NodeAddressType(str(f.b))
		case f.is(2, protowire.BytesType):
			a.Address = str(f.b)
		}
		return nil
	})
	return a, err
}

func decodeResource(b []byte, l *corev1.ResourceList, path string) error {
	var key, value string
	if err := fields(b, path, func(f field) error {
		switch {
		case f.is(1, protowire.BytesType):
			key = str(f.b)
		case f.is(2, protowire.BytesType):
			value = str(f.b)
		}
		return nil
	}); err != nil {
		return err
	}
	q, err := resource.ParseQuantity(value)
	if err != nil {
		return driver.Errorf(driver.InvalidArgument, "grpcbridge: decode %s[%s]: %q is not a quantity: %v", path, key, value, err)
	}
	if *l == nil {
		*l = corev1.ResourceList{}
	}
	(*l)[corev1.ResourceName(key)] = q
	return nil
}

func decodeSecretRef(b []byte, r **corev1.SecretReference) error {
	if *r == nil {
		*r = &corev1.SecretReference{}
	}
	ref := *r
	return fields(b, "secretRef", func(f field) error {
		switch {
		case f.is(1, protowire.BytesType):
			ref.Name = str(f.b)
		case f.is(2, protowire.BytesType):
			ref.Namespace = str(f.b)
		}
		return nil
	})
}

func providerSpecJSON(c *v1alpha1.MachineClass) ([]byte, error) {
	if c.ProviderSpec.Raw != nil || c.ProviderSpec.Object == nil {
		return c.ProviderSpec.Raw, nil
	}
	raw, err := jsonMarshal(c.ProviderSpec.Object)
	if err != nil {
		return nil, encodeError("machineClass providerSpec", fmt.Errorf("%w", err))
	}
	return raw, nil
}

// str returns b as a string, without allocating for the values every machine repeats (kinds,
// phases, node condition types, statuses, reasons and messages, address types).
func str(b []byte) string {
	if s, ok := interned[string(b)]; ok { // a map lookup by string(b) does not allocate
		return s
	}
	return string(b)
}

var interned = func() map[string]string {
	m := map[string]string{}
	for _, s := range []string{
		"machine.sapcloud.io/v1alpha1", "machine.sapcloud.io", "Machine", "MachineClass",
		string(v1alpha1.MachinePending), string(v1alpha1.MachineAvailable), string(v1alpha1.MachineRunning),
		string(v1alpha1.MachineTerminating), string(v1alpha1.MachineUnknown), string(v1alpha1.MachineFailed),
		string(v1alpha1.MachineCrashLoopBackOff), string(v1alpha1.MachineInPlaceUpdating),
		string(v1alpha1.MachineInPlaceUpdateSuccessful), string(v1alpha1.MachineInPlaceUpdateFailed),
		string(v1alpha1.MachineStatePending), string(v1alpha1.MachineStateProcessing),
		string(v1alpha1.MachineStateFailed), string(v1alpha1.MachineStateSuccessful),
		string(v1alpha1.MachineOperationCreate), string(v1alpha1.MachineOperationUpdate),
		string(v1alpha1.MachineOperationInPlaceUpdate), string(v1alpha1.MachineOperationDrainNode),
		string(v1alpha1.MachineOperationHealthCheck), string(v1alpha1.MachineOperationDelete),
		string(corev1.NodeReady), string(corev1.NodeMemoryPressure), string(corev1.NodeDiskPressure),
		string(corev1.NodePIDPressure), string(corev1.NodeNetworkUnavailable),
		string(corev1.ConditionTrue), string(corev1.ConditionFalse), string(corev1.ConditionUnknown),
		"KubeletReady", "KubeletNotReady", "NodeStatusUnknown", "KubeletHasSufficientMemory",
		"KubeletHasNoDiskPressure", "KubeletHasSufficientPID", "RouteCreated",
		"kubelet is posting ready status", "kubelet has sufficient memory available",
		"kubelet has no disk pressure", "kubelet has sufficient PID available",
		"Kubelet stopped posting node status.", "RouteController created a route",
		string(corev1.NodeInternalIP), string(corev1.NodeExternalIP), string(corev1.NodeHostName),
		string(corev1.NodeInternalDNS), string(corev1.NodeExternalDNS),
	} {
		m[s] = s
	}
	return m
}()
