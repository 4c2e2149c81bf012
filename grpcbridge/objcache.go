package grpcbridge

import (
	"bytes"
	"hash/maphash"

	"k8s.io/utils/lru"
)

// objectCache remembers decoded objects by their encoding. Every machine of a class sends the
// same class and (outside of creation, where userData is rendered per machine) the same secret
// bytes, so a server decodes each version once; later requests pay a hash, a comparison and a
// copy (each call gets its own copy, so a driver that modifies its request cannot affect another).
// The hash is seeded per process and confirmed by comparing the bytes, so crafted input cannot
// make two objects collide.
type objectCache[T comparable] struct {
	decode func([]byte) (T, error)
	clone  func(T) T
	seed   maphash.Seed
	lru    *lru.Cache // hash -> *cacheEntry[T]
}

type cacheEntry[T any] struct {
	raw []byte
	obj T
}

func newObjectCache[T comparable](size int, decode func([]byte) (T, error), clone func(T) T) *objectCache[T] {
	return &objectCache[T]{decode: decode, clone: clone, seed: maphash.MakeSeed(), lru: lru.New(size)}
}

// get returns a fresh copy of the object b encodes; b must not be modified afterwards. Empty
// bytes are the zero T (no object).
func (c *objectCache[T]) get(b []byte) (T, error) {
	var zero T
	if len(b) == 0 {
		return zero, nil
	}
	h := maphash.Bytes(c.seed, b)
	if v, ok := c.lru.Get(h); ok {
		if e := v.(*cacheEntry[T]); bytes.Equal(e.raw, b) {
			return c.clone(e.obj), nil
		}
	}
	obj, err := c.decode(b)
	if err != nil || obj == zero {
		return obj, err
	}
	c.lru.Add(h, &cacheEntry[T]{raw: b, obj: obj})
	return c.clone(obj), nil
}

func (c *objectCache[T]) len() int { return c.lru.Len() }
