// Package livedir makes temporary directories that belong to the running process and removes
// those of earlier runs whose process is gone.
//
// Each directory holds a lock file that its process keeps locked (flock) while it lives; the
// kernel releases the lock when the process dies, however it dies (SIGKILL included). New first
// sweeps the directories of the same prefix whose lock is free, so a run that was killed before
// it could clean up leaves nothing behind after the next start. Directories without a lock file
// are never touched: they were not made here (or are being made this instant).
package livedir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// lockName is the lock file in each directory.
const lockName = ".machinist-owner.lock"

// Dir is a temporary directory owned by this process until Remove.
type Dir struct {
	path string
	lock *os.File
	once sync.Once
	err  error
}

// New removes the stale directories of prefix in the temp dir (see Sweep), then makes a new one
// named prefix plus a random suffix, owned by this process.
func New(prefix string) (*Dir, error) {
	if _, err := Sweep(prefix); err != nil {
		return nil, err
	}
	for range 10 {
		path, err := os.MkdirTemp("", prefix+"*")
		if err != nil {
			return nil, fmt.Errorf("livedir: %w", err)
		}
		lock, err := os.OpenFile(filepath.Join(path, lockName), os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
		if errors.Is(err, os.ErrNotExist) {
			continue // a sweep of another process removed it before the lock existed
		}
		if err != nil {
			os.RemoveAll(path)
			return nil, fmt.Errorf("livedir: %w", err)
		}
		held, err := tryLock(lock)
		if err != nil {
			lock.Close()
			os.RemoveAll(path)
			return nil, fmt.Errorf("livedir: lock %s: %w", path, err)
		}
		// A sweep that opened the lock file before we locked it may be removing the directory.
		if !held || !stillAt(lock, filepath.Join(path, lockName)) {
			lock.Close()
			continue
		}
		fmt.Fprintf(lock, "%d\n", os.Getpid())
		return &Dir{path: path, lock: lock}, nil
	}
	return nil, fmt.Errorf("livedir: could not make a directory %s* in %s: other processes keep removing them", prefix, os.TempDir())
}

// Path returns the directory's path.
func (d *Dir) Path() string { return d.path }

// Remove deletes the directory and gives up ownership. Later calls return the first result.
func (d *Dir) Remove() error {
	d.once.Do(func() {
		d.err = os.RemoveAll(d.path)
		d.lock.Close()
	})
	return d.err
}

// Sweep removes the directories in the temp dir whose name starts with prefix, that hold a lock
// file, and whose owner is gone (the lock is free). It returns the removed paths.
func Sweep(prefix string) ([]string, error) {
	if !canLock {
		return nil, nil
	}
	tmp := os.TempDir()
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return nil, fmt.Errorf("livedir: %w", err)
	}
	var removed []string
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), prefix) {
			continue
		}
		path := filepath.Join(tmp, e.Name())
		if sweepOne(path) {
			removed = append(removed, path)
		}
	}
	return removed, nil
}

// sweepOne removes path when its lock is free, holding the lock while it does.
func sweepOne(path string) bool {
	lock, err := os.OpenFile(filepath.Join(path, lockName), os.O_RDWR, 0)
	if err != nil {
		return false // not ours, another user's, or being made
	}
	defer lock.Close()
	if held, err := tryLock(lock); err != nil || !held {
		return false // its owner lives
	}
	return os.RemoveAll(path) == nil
}

// stillAt reports whether the open file f is still the file at path.
func stillAt(f *os.File, path string) bool {
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Stat(path)
	return err == nil && os.SameFile(a, b)
}
