package grpcbridge

import (
	"bytes"
	"hash/maphash"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/lru"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// Decoder decodes the objects of driver requests and keeps the versions it decoded last, by
// content, so a version that arrives again costs a hash and a comparison instead of a decode.
// Classes and secrets repeat on every call of a class (Encoder); a machine repeats when the
// controller makes two calls for one version of it, as it does for every new machine
// (GetMachineStatus, then CreateMachine) and on deletion. Every call of a version gets the same
// object: request objects are read-only for drivers (core/driver's contract, checked by
// core/drivertest's RequestsAreReadOnly), as they are in MCM, whose controller hands drivers the
// objects of its informer cache. It is safe for concurrent use.
type Decoder struct {
	machines *objectCache[*v1alpha1.Machine]
	classes  *objectCache[*v1alpha1.MachineClass]
	secrets  *objectCache[*corev1.Secret]
}

// Cache sizes: a controller has tens of classes and a secret each (plus the rendered userData
// of machines being created); machines repeat within one reconcile, while the controller's
// other workers make their calls in between.
const (
	decodedMachines = 128
	decodedClasses  = 64
	decodedSecrets  = 64
)

// NewDecoder returns an empty Decoder.
func NewDecoder() *Decoder {
	return &Decoder{
		machines: newObjectCache(decodedMachines, DecodeMachine),
		classes:  newObjectCache(decodedClasses, DecodeMachineClass),
		secrets:  newObjectCache(decodedSecrets, DecodeSecret),
	}
}

// Machine decodes as DecodeMachine does; b must not be modified afterwards, nor the object
// returned (it is shared).
func (d *Decoder) Machine(b []byte) (*v1alpha1.Machine, error) { return d.machines.get(b) }

// MachineClass decodes as DecodeMachineClass does; b must not be modified afterwards, nor the
// object returned (it is shared).
func (d *Decoder) MachineClass(b []byte) (*v1alpha1.MachineClass, error) { return d.classes.get(b) }

// Secret decodes as DecodeSecret does; b must not be modified afterwards, nor the object
// returned (it is shared).
func (d *Decoder) Secret(b []byte) (*corev1.Secret, error) { return d.secrets.get(b) }

// objectCache remembers decoded objects by their encoding; later requests of the same bytes pay a
// hash and a comparison and get the same object. The hash is seeded per process and confirmed by
// comparing the bytes, so crafted input cannot make two objects collide.
type objectCache[T comparable] struct {
	decode func([]byte) (T, error)
	seed   maphash.Seed
	lru    *lru.Cache // hash -> *cacheEntry[T]
}

type cacheEntry[T any] struct {
	raw []byte
	obj T
}

func newObjectCache[T comparable](size int, decode func([]byte) (T, error)) *objectCache[T] {
	return &objectCache[T]{decode: decode, seed: maphash.MakeSeed(), lru: lru.New(size)}
}

// get returns the object b encodes, shared with every other call of the same bytes; neither b
// nor the object may be modified afterwards. Empty bytes are the zero T (no object).
func (c *objectCache[T]) get(b []byte) (T, error) {
	var zero T
	if len(b) == 0 {
		return zero, nil
	}
	h := maphash.Bytes(c.seed, b)
	if v, ok := c.lru.Get(h); ok {
		if e := v.(*cacheEntry[T]); bytes.Equal(e.raw, b) {
			return e.obj, nil
		}
	}
	obj, err := c.decode(b)
	if err != nil || obj == zero {
		return obj, err
	}
	c.lru.Add(h, &cacheEntry[T]{raw: b, obj: obj})
	return obj, nil
}

func (c *objectCache[T]) len() int { return c.lru.Len() }
