// Package syncbuf is a bytes.Buffer that goroutines may write and read at once: the log sink of
// tests that check what a server or driver logged (and that no secret reached its logs).
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer collects writes under a lock. The zero value is ready to use.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
