//go:build !unix

package local

// hostLock without flock: every process hosts its agents (run one process per state dir).
type hostLock struct{ path string }

func (l *hostLock) tryLock() (bool, error) { return true, nil }
func (l *hostLock) unlock()                {}
