//go:build unix

package local

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// hostLock is an advisory lock on <state dir>/host.lock: the process holding it runs the node
// agents of the state dir. The kernel releases it when the process exits, however it exits.
type hostLock struct {
	path string
	f    *os.File
}

// tryLock takes the lock without waiting; it reports false when another process holds it.
func (l *hostLock) tryLock() (bool, error) {
	if l.f != nil {
		return true, nil
	}
	f, err := os.OpenFile(l.path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return false, fmt.Errorf("local: open %s: %w", l.path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return false, nil
		}
		return false, fmt.Errorf("local: lock %s: %w", l.path, err)
	}
	l.f = f
	return true, nil
}

func (l *hostLock) unlock() {
	if l.f != nil {
		l.f.Close() // closing the descriptor releases the flock
		l.f = nil
	}
}
