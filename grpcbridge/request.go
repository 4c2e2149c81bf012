package grpcbridge

import (
	"errors"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	corev1 "k8s.io/api/core/v1"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// The client writes a request that carries objects (Create, Initialize, Delete,
// GetMachineStatus, ListMachines) in one pass, straight into a pooled buffer that gRPC sends and
// then hands back to the pool: no intermediate encoding per object and no proto.Marshal copy of
// it. The bytes are exactly those proto.Marshal writes for the generated request message (a test
// compares them), so the server sees an ordinary application/grpc+proto call.

// encodedRequest is a request message already in wire form; requestCodec sends it as it is.
type encodedRequest struct {
	buf  *[]byte
	sent bool
}

// Field numbers of the objects in the request messages of driver.proto.
var (
	machineRequestFields = requestFields{machine: 1, class: 2, secret: 3}
	listRequestFields    = requestFields{class: 1, secret: 2}
)

type requestFields struct{ machine, class, secret protowire.Number }

// encodeRequest encodes the objects of a request; a nil object leaves its field out, as the
// generated code does for a nil bytes field.
func encodeRequest(f requestFields, m *v1alpha1.Machine, c *v1alpha1.MachineClass, s *corev1.Secret) (*encodedRequest, error) {
	buf := requestBuffers.get()
	e := encoder{b: (*buf)[:0]}
	err := e.requestObjects(f, m, c, s)
	*buf = e.b
	if err != nil {
		requestBuffers.Put(buf)
		return nil, err
	}
	return &encodedRequest{buf: buf}, nil
}

func (e *encoder) requestObjects(f requestFields, m *v1alpha1.Machine, c *v1alpha1.MachineClass, s *corev1.Secret) error {
	if m != nil && f.machine != 0 {
		start := e.begin(f.machine)
		if err := e.machine(m); err != nil {
			return err
		}
		e.end(start)
	}
	if c != nil {
		start := e.begin(f.class)
		if err := e.machineClass(c); err != nil {
			return err
		}
		e.end(start)
	}
	if s != nil {
		if err := e.gogo(f.secret, s); err != nil {
			return encodeError("secret", err)
		}
	}
	return nil
}

// requestCodec is the proto codec, except that an encodedRequest is sent as it is. Its name is
// "proto", so the content type on the wire stays application/grpc+proto.
type requestCodec struct{}

var protoCodec = encoding.GetCodecV2(proto.Name)

var errEncodedTwice = errors.New("grpcbridge: an encoded request was marshalled twice")

func (requestCodec) Marshal(v any) (mem.BufferSlice, error) {
	r, ok := v.(*encodedRequest)
	if !ok {
		return protoCodec.Marshal(v)
	}
	if r.sent {
		// gRPC marshals a message once per call. The buffer belongs to gRPC after the first
		// time and may already be back in the pool: never hand it out again.
		return nil, errEncodedTwice
	}
	r.sent = true
	return mem.BufferSlice{mem.NewBuffer(r.buf, requestBuffers)}, nil
}

func (requestCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return protoCodec.Unmarshal(data, v)
}

func (requestCodec) Name() string { return proto.Name }

// bufferPool keeps request buffers between calls. It is a mem.BufferPool, so gRPC returns a
// buffer once the request has been written to the connection.
type bufferPool struct{ pool sync.Pool }

const (
	requestBufferSize = 8 << 10
	// Buffers that grew past this (a huge userData, say) are left to the garbage collector
	// rather than pinned in the pool.
	maxPooledRequestBuffer = 256 << 10
)

var requestBuffers = &bufferPool{pool: sync.Pool{New: func() any {
	b := make([]byte, 0, requestBufferSize)
	return &b
}}}

func (p *bufferPool) get() *[]byte { return p.pool.Get().(*[]byte) }

// Get returns a buffer of length n (mem.BufferPool).
func (p *bufferPool) Get(n int) *[]byte {
	b := p.get()
	if cap(*b) < n {
		*b = make([]byte, n)
	}
	*b = (*b)[:n]
	return b
}

// Put returns a buffer to the pool (mem.BufferPool).
func (p *bufferPool) Put(b *[]byte) {
	if cap(*b) > maxPooledRequestBuffer {
		return
	}
	*b = (*b)[:0]
	p.pool.Put(b)
}

var _ mem.BufferPool = (*bufferPool)(nil)
var _ encoding.CodecV2 = requestCodec{}

// sendEncoded is the call option that lets an encodedRequest through (made once: a call option
// per call would cost an allocation per call).
var sendEncoded = grpc.ForceCodecV2(requestCodec{})
