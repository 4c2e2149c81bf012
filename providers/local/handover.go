package local

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// A machine recorded without a target of its own (record.Target "") joins the target cluster of
// the process that hosts its state dir. A host without a target cluster (a `machinist driver`
// from a shell, a lister, `--target-kubeconfig none`) runs no agent for it: its node gets no
// heartbeat and turns Unknown where a node lifecycle controller watches. Such a host therefore
// hands the state dir over when a process with a target cluster wants it: that process, finding
// the lock taken, keeps <state dir>/host.wanted fresh, and the host steps down at its next sync
// and stays off the lock while the file is fresh. This matters when the host restarts (a
// provider child killed and started again): any other opener of the state dir may take the lock
// in between.

// hostWantedFile is refreshed once a sync by a process with a target cluster waiting for the
// host lock.
const hostWantedFile = "host.wanted"

// wantFresh is how long host.wanted counts after its last refresh: a few syncs, so a waiting
// process that exited stops counting soon.
const wantFresh = 5 * time.Second

func (f *fleet) wantedPath() string { return filepath.Join(f.stateDir, hostWantedFile) }

// wantHost records that this process, which has a target cluster, waits for the host lock.
func (f *fleet) wantHost() {
	path := f.wantedPath()
	now := time.Now()
	if err := os.Chtimes(path, now, now); errors.Is(err, fs.ErrNotExist) {
		err = os.WriteFile(path, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600)
		if err != nil {
			f.log.Warn("local: record that this process waits to host the node agents", "error", err)
		}
	}
}

// dropWant removes host.wanted once this process hosts.
func (f *fleet) dropWant() {
	if err := os.Remove(f.wantedPath()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		f.log.Warn("local: remove "+hostWantedFile, "error", err)
	}
}

// hostWanted reports whether a process with a target cluster is waiting for the host lock.
func (f *fleet) hostWanted() bool {
	fi, err := os.Stat(f.wantedPath())
	return err == nil && time.Since(fi.ModTime()) < wantFresh
}

// cannotServe reports whether this host has a machine whose node it cannot run: one that joins
// the process's target cluster, in a process without one.
func (f *fleet) cannotServe() bool {
	if f.target != nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, a := range f.agents {
		if a.cluster == nil && a.rec.Target == "" {
			return true
		}
	}
	return false
}

// stepDown stops hosting: the agents stop (their nodes stay as they are; the next host adopts
// them) and the lock is released.
func (f *fleet) stepDown() {
	f.mu.Lock()
	agents := f.agents
	f.agents = map[string]*agent{}
	f.host = false
	f.mu.Unlock()
	for _, a := range agents {
		f.sched.unschedule(a)
		if a.cluster != nil {
			a.cluster.limit.add(-1)
		}
	}
	f.lock.unlock()
	f.log.Info("local: handed the node agents of the state dir to a process with a target cluster", "dir", f.stateDir, "machines", len(agents))
}
