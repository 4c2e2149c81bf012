package grpcbridge

import (
	"bytes"
	"container/list"
	"hash/maphash"
	"sync"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// classCache remembers decoded MachineClasses by their encoding. Every machine of a class sends
// the same bytes (the encoding is deterministic), so a server decodes each class version once;
// later requests pay a hash, a comparison and a DeepCopy (each call gets its own copy, so a
// driver that modifies its request cannot affect another). The hash is seeded per process and
// confirmed by comparing the bytes, so crafted input cannot make two classes collide.
type classCache struct {
	mu     sync.Mutex
	seed   maphash.Seed
	max    int
	byHash map[uint64]*list.Element
	lru    list.List
}

type classEntry struct {
	hash  uint64
	raw   []byte
	class *v1alpha1.MachineClass
}

func newClassCache(max int) *classCache {
	return &classCache{seed: maphash.MakeSeed(), max: max, byHash: map[uint64]*list.Element{}}
}

// decode returns a fresh copy of the class b encodes; b must not be modified afterwards.
func (c *classCache) decode(b []byte) (*v1alpha1.MachineClass, error) {
	if len(b) == 0 {
		return nil, nil
	}
	h := maphash.Bytes(c.seed, b)
	c.mu.Lock()
	if el, ok := c.byHash[h]; ok {
		if e := el.Value.(*classEntry); bytes.Equal(e.raw, b) {
			c.lru.MoveToFront(el)
			class := e.class
			c.mu.Unlock()
			return class.DeepCopy(), nil
		}
	}
	c.mu.Unlock()

	class, err := DecodeMachineClass(b)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byHash[h]; ok {
		c.lru.Remove(el)
	}
	c.byHash[h] = c.lru.PushFront(&classEntry{hash: h, raw: b, class: class})
	for c.lru.Len() > c.max {
		oldest := c.lru.Back()
		c.lru.Remove(oldest)
		delete(c.byHash, oldest.Value.(*classEntry).hash)
	}
	return class.DeepCopy(), nil
}

func (c *classCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}
