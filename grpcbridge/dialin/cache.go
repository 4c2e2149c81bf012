package dialin

import (
	"context"
	"time"

	"golang.org/x/sync/singleflight"
	"k8s.io/utils/lru"
)

// objectCache keeps decoded objects by digest (content-addressed: an entry never goes stale) in
// LRU order, and makes concurrent operations that need the same missing version share one pull.
// Every operation of a version gets the same object: request objects are read-only for drivers
// (core/driver).
type objectCache[T any] struct {
	lru   *lru.Cache
	pulls singleflight.Group
}

// pullTimeout bounds one pull; it runs apart from the operation that started it so that one
// cancelled operation does not fail the others waiting for the same version.
const pullTimeout = 30 * time.Second

func newObjectCache[T any](size int) *objectCache[T] {
	return &objectCache[T]{lru: lru.New(size)}
}

// get returns the object of key, fetching it when missing; it is shared, never to be modified.
func (c *objectCache[T]) get(ctx context.Context, key string, fetch func(context.Context) (T, error)) (T, error) {
	var zero T
	if v, ok := c.lru.Get(key); ok {
		return v.(T), nil
	}
	ch := c.pulls.DoChan(key, func() (any, error) {
		// A pull that finished between the miss above and this call has filled the cache:
		// without this look a late caller would pull the same version again.
		if v, ok := c.lru.Get(key); ok {
			return v, nil
		}
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pullTimeout)
		defer cancel()
		v, err := fetch(fctx)
		if err != nil {
			return nil, err
		}
		c.lru.Add(key, v)
		return v, nil
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return zero, r.Err
		}
		return r.Val.(T), nil
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}
