package dialin

import (
	"container/list"
	"context"
	"sync"
	"time"
)

// objectCache keeps decoded objects by digest (content-addressed: an entry never goes stale) in
// LRU order, and makes concurrent operations that need the same missing version share one pull.
type objectCache[T any] struct {
	max   int
	clone func(T) T

	mu       sync.Mutex
	entries  map[string]*list.Element
	lru      list.List
	inflight map[string]*pull[T]
}

type cached[T any] struct {
	key string
	v   T
}

type pull[T any] struct {
	done chan struct{}
	v    T
	err  error
}

// pullTimeout bounds one pull; it runs apart from the operation that started it so that one
// cancelled operation does not fail the others waiting for the same version.
const pullTimeout = 30 * time.Second

func newObjectCache[T any](max int, clone func(T) T) *objectCache[T] {
	return &objectCache[T]{max: max, clone: clone, entries: map[string]*list.Element{}, inflight: map[string]*pull[T]{}}
}

// get returns a copy of the object of key, fetching it when missing.
func (c *objectCache[T]) get(ctx context.Context, key string, fetch func(context.Context) (T, error)) (T, error) {
	c.mu.Lock()
	if el, ok := c.entries[key]; ok {
		c.lru.MoveToFront(el)
		v := el.Value.(*cached[T]).v
		c.mu.Unlock()
		return c.clone(v), nil
	}
	p, running := c.inflight[key]
	if !running {
		p = &pull[T]{done: make(chan struct{})}
		c.inflight[key] = p
	}
	c.mu.Unlock()

	if !running {
		go func() {
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pullTimeout)
			defer cancel()
			p.v, p.err = fetch(fctx)
			c.mu.Lock()
			delete(c.inflight, key)
			if p.err == nil {
				c.entries[key] = c.lru.PushFront(&cached[T]{key: key, v: p.v})
				for c.lru.Len() > c.max {
					oldest := c.lru.Back()
					c.lru.Remove(oldest)
					delete(c.entries, oldest.Value.(*cached[T]).key)
				}
			}
			c.mu.Unlock()
			close(p.done)
		}()
	}
	select {
	case <-p.done:
		if p.err != nil {
			var zero T
			return zero, p.err
		}
		return c.clone(p.v), nil
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}
