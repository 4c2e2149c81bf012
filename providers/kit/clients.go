package kit

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"sync"

	"k8s.io/utils/lru"
)

// Clients keeps the SDK clients of the most recently used credential sets: a client (with its
// token cache and connections) is built once per credential set and reused by every call with
// the same secret, and the least recently used ones age out, so rotated secrets get fresh
// clients. It is an LRU of k8s.io/utils/lru keyed by a hash of the credentials (CredentialKey,
// never the credentials themselves), safe for concurrent use.
type Clients[V any] struct {
	mu  sync.Mutex // makes get-or-add one step
	lru *lru.Cache // key -> *entry[V]
}

// entry builds its value once; callers of the same key wait for that build.
type entry[V any] struct {
	mu    sync.Mutex
	built bool
	v     V
}

// NewClients returns a cache that keeps the clients of at most size credential sets
// (Options.MaxClientSets).
func NewClients[V any](size int) *Clients[V] {
	return &Clients[V]{lru: lru.New(size)}
}

// Get returns the client of key, building it with build on first use. Concurrent callers of one
// key share one build (the others wait for it); callers of other keys do not wait. A failed build
// is not kept: the next Get builds again.
func (c *Clients[V]) Get(key string, build func() (V, error)) (V, error) {
	c.mu.Lock()
	var e *entry[V]
	if v, ok := c.lru.Get(key); ok {
		e = v.(*entry[V])
	} else {
		e = &entry[V]{}
		c.lru.Add(key, e)
	}
	c.mu.Unlock()

	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.built {
		v, err := build()
		if err != nil {
			var zero V
			return zero, err
		}
		e.v, e.built = v, true
	}
	return e.v, nil
}

// Len returns the number of credential sets kept.
func (c *Clients[V]) Len() int { return c.lru.Len() }

// CredentialKey identifies a credential set by its fields without keeping them: a SHA-256 over every
// field, each length-prefixed so that ("ab", "c") and ("a", "bc") differ. Put every field that
// changes what a client may do or where it goes (secrets, endpoints, CA) in it.
func CredentialKey(fields ...string) string {
	h := sha256.New()
	var n [8]byte
	for _, f := range fields {
		binary.BigEndian.PutUint64(n[:], uint64(len(f)))
		h.Write(n[:])
		h.Write([]byte(f))
	}
	return hex.EncodeToString(h.Sum(nil))
}
