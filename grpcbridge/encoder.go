package grpcbridge

import (
	"bytes"
	"crypto/sha256"
	"hash/maphash"
	"reflect"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/lru"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// Encoder encodes the MachineClass and Secret of driver requests once per version and hands out
// the same bytes afterwards. Every machine of a class sends the same class and (outside of
// creation, where userData is rendered per machine) the same secret, while each encoding builds
// and marshals a message tree; the client and the dial-in controller send these bytes instead.
//
// A class is known by its UID and resourceVersion, as the API server names an object's content:
// a class read from the API (the controllers read them from their informer cache) has both, and
// a changed class has a new resourceVersion. A class without either is encoded on every call. A
// caller that changes a class in memory must clear its resourceVersion, or it is sent as the
// version it was read as.
//
// The Secret a driver receives is assembled by the controller (secretRef overlaid by
// credentialsSecretRef, userData rendered per machine) and has no UID or resourceVersion, so a
// secret that holds nothing but data is known by its content: a per-process seeded hash of its
// entries, confirmed by comparing them with the entries it was encoded from. Any other secret is
// encoded on every call.
//
// The zero Encoder is not usable; NewEncoder makes one. It is safe for concurrent use.
type Encoder struct {
	seed    maphash.Seed
	classes *lru.Cache // classVersion -> *Encoded
	secrets *lru.Cache // data hash -> *encodedSecret
}

// Encoded is an object's wire encoding. Its bytes are shared by every call that sends this
// version: never modify them.
type Encoded struct {
	Bytes []byte

	digestOnce sync.Once
	digest     [sha256.Size]byte
}

// Digest is the SHA-256 of Bytes (dial-in names a version by it), computed once.
func (e *Encoded) Digest() [sha256.Size]byte {
	e.digestOnce.Do(func() { e.digest = sha256.Sum256(e.Bytes) })
	return e.digest
}

type classVersion struct {
	uid             types.UID
	resourceVersion string
}

type encodedSecret struct {
	data map[string][]byte // a copy of the entries the bytes encode
	enc  *Encoded
}

// encoderSize bounds each cache. A controller has tens of classes; the secrets are one per class
// plus one per machine being created (rendered userData), of which a few at a time matter.
const encoderSize = 256

// NewEncoder returns an empty Encoder.
func NewEncoder() *Encoder {
	return &Encoder{seed: maphash.MakeSeed(), classes: lru.New(encoderSize), secrets: lru.New(encoderSize)}
}

// MachineClass returns the encoding of c (EncodeMachineClass); nil for nil.
func (e *Encoder) MachineClass(c *v1alpha1.MachineClass) (*Encoded, error) {
	if c == nil {
		return nil, nil
	}
	key := classVersion{c.UID, c.ResourceVersion}
	versioned := key.uid != "" && key.resourceVersion != ""
	if versioned {
		if v, ok := e.classes.Get(key); ok {
			return v.(*Encoded), nil
		}
	}
	b, err := EncodeMachineClass(c)
	if err != nil {
		return nil, err
	}
	enc := &Encoded{Bytes: b}
	if versioned {
		e.classes.Add(key, enc)
	}
	return enc, nil
}

// Secret returns the encoding of s (EncodeSecret); nil for nil.
func (e *Encoder) Secret(s *corev1.Secret) (*Encoded, error) {
	if s == nil {
		return nil, nil
	}
	if !dataOnly(s) {
		b, err := EncodeSecret(s)
		if err != nil {
			return nil, err
		}
		return &Encoded{Bytes: b}, nil
	}
	h := e.hashData(s.Data)
	if v, ok := e.secrets.Get(h); ok {
		if es := v.(*encodedSecret); sameData(es.data, s.Data) {
			return es.enc, nil
		}
	}
	b, err := EncodeSecret(s)
	if err != nil {
		return nil, err
	}
	es := &encodedSecret{data: cloneData(s.Data), enc: &Encoded{Bytes: b}}
	e.secrets.Add(h, es)
	return es.enc, nil
}

// dataOnly reports whether s holds nothing but Data, the shape of the secret the controller
// assembles for a driver.
func dataOnly(s *corev1.Secret) bool {
	return s.TypeMeta == (metav1.TypeMeta{}) && s.Type == "" && s.Immutable == nil && s.StringData == nil &&
		reflect.ValueOf(&s.ObjectMeta).Elem().IsZero()
}

// hashData hashes the entries of a secret's data independently of map order: the sum of one
// hash per entry, each mixing a one-shot hash of the key and of the value (a streaming
// maphash.Hash per entry cost twice as much). A collision costs an encoding, never a wrong
// answer: sameData confirms a match.
func (e *Encoder) hashData(data map[string][]byte) uint64 {
	sum := uint64(len(data))
	for k, v := range data {
		h := maphash.String(e.seed, k)*0x9e3779b97f4a7c15 ^ maphash.Bytes(e.seed, v)
		if v == nil {
			h = ^h // nil and empty values encode differently
		}
		sum += h
	}
	return sum
}

// sameData compares secret data exactly, nil values apart from empty ones (they encode apart).
func sameData(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, va := range a {
		vb, ok := b[k]
		if !ok || (va == nil) != (vb == nil) || !bytes.Equal(va, vb) {
			return false
		}
	}
	return true
}

func cloneData(data map[string][]byte) map[string][]byte {
	out := make(map[string][]byte, len(data))
	for k, v := range data {
		out[k] = bytes.Clone(v) // keeps nil apart from empty
	}
	return out
}

// bytes returns the encoding, nil for no object.
func (e *Encoded) bytes() []byte {
	if e == nil {
		return nil
	}
	return e.Bytes
}
