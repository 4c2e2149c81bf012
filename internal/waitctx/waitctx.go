// Package waitctx is the tree's one context-aware sleep: a pause of a given length on a clock
// that ends early when the context does. Polls and retry loops use k8s.io/apimachinery's wait
// (PollUntilContextTimeout, Backoff) instead; this is for the pauses those do not fit, such as
// the backoff callbacks a cloud SDK calls between its own retries.
package waitctx

import (
	"context"
	"time"

	"k8s.io/utils/clock"
)

// Sleep waits d on c, or until ctx is done, whichever comes first. It returns ctx.Err() when the
// context ended the wait (or had ended before it), else nil. A d of zero or less only checks ctx.
func Sleep(ctx context.Context, c clock.Clock, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C():
		return nil
	}
}
