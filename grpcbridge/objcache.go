package grpcbridge

import (
	"bytes"
	"container/list"
	"hash/maphash"
	"sync"
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

	mu     sync.Mutex
	seed   maphash.Seed
	max    int
	byHash map[uint64]*list.Element
	lru    list.List
}

type cacheEntry[T any] struct {
	hash uint64
	raw  []byte
	obj  T
}

func newObjectCache[T comparable](max int, decode func([]byte) (T, error), clone func(T) T) *objectCache[T] {
	return &objectCache[T]{decode: decode, clone: clone, seed: maphash.MakeSeed(), max: max, byHash: map[uint64]*list.Element{}}
}

// get returns a fresh copy of the object b encodes; b must not be modified afterwards. Empty
// bytes are the zero T (no object).
func (c *objectCache[T]) get(b []byte) (T, error) {
	var zero T
	if len(b) == 0 {
		return zero, nil
	}
	h := maphash.Bytes(c.seed, b)
	c.mu.Lock()
	if el, ok := c.byHash[h]; ok {
		if e := el.Value.(*cacheEntry[T]); bytes.Equal(e.raw, b) {
			c.lru.MoveToFront(el)
			obj := e.obj
			c.mu.Unlock()
			return c.clone(obj), nil
		}
	}
	c.mu.Unlock()

	obj, err := c.decode(b)
	if err != nil || obj == zero {
		return obj, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byHash[h]; ok {
		c.lru.Remove(el)
	}
	c.byHash[h] = c.lru.PushFront(&cacheEntry[T]{hash: h, raw: b, obj: obj})
	for c.lru.Len() > c.max {
		oldest := c.lru.Back()
		c.lru.Remove(oldest)
		delete(c.byHash, oldest.Value.(*cacheEntry[T]).hash)
	}
	return c.clone(obj), nil
}

func (c *objectCache[T]) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}
