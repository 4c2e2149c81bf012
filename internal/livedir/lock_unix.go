//go:build unix

package livedir

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

const canLock = true

// tryLock takes f's exclusive lock without waiting; false means another process holds it.
func tryLock(f *os.File) (bool, error) {
	err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return false, nil
	}
	return err == nil, err
}
