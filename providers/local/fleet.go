package local

import (
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/machinist-io/machinist/core/registry"
	"github.com/machinist-io/machinist/internal/kubeconfig"
)

// deps are what the driver's parts share: the environment, the target cluster, the state
// store and the per-machine locks.
type deps struct {
	env      registry.Env
	target   *rest.Config // registry.Env.Target resolved
	log      *slog.Logger
	store    store
	stateDir string // "" without a state dir

	names [64]sync.Mutex // serialise operations per machine name (by hash)
}

// lockName locks the operations on one machine name; it returns the unlock.
func (d *deps) lockName(name string) func() {
	h := fnv.New32a()
	h.Write([]byte(name))
	m := &d.names[h.Sum32()%uint32(len(d.names))]
	m.Lock()
	return m.Unlock
}

// claimPodCIDR claims a pod CIDR for the machine's node in the store.
func (d *deps) claimPodCIDR(rec *record) error {
	index, err := d.store.claimPodCIDR(rec.Name)
	if err != nil {
		return fmt.Errorf("local: pod CIDR for %s: %w", rec.Name, err)
	}
	rec.PodCIDR = podCIDR(index)
	return nil
}

// releasePodCIDR frees the pod CIDR of a machine that is gone.
func (d *deps) releasePodCIDR(rec *record) {
	if i := podCIDRIndex(rec.PodCIDR); i >= 0 {
		if err := d.store.releasePodCIDR(i, rec.Name); err != nil {
			d.log.Warn("local: release pod CIDR", "machine", rec.Name, "error", err)
		}
	}
}

// fleet supervises the node agents: as the host of the state directory (host.lock) it runs
// the agent of every machine recorded there, picks up machines other processes create or
// delete and the heartbeat switches they flip, and hands hosting over (handover.go).
type fleet struct {
	*deps
	lock         *hostLock
	sched        *scheduler
	syncInterval time.Duration
	updates      *updater

	mu       sync.Mutex
	host     bool
	agents   map[string]*agent   // by machine name; cluster nil when the machine has no target
	clusters map[string]*cluster // by target ("" = the process's target)
	closed   bool

	stopSync chan struct{}
	syncDone chan struct{}
}

// isHost reports whether this process runs the node agents of its state directory.
func (f *fleet) isHost() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.host
}

// close stops the sync loop, the agents' heartbeats, the in-place updates and the clusters'
// watches, and releases the host lock; it reports false when it was closed already.
func (f *fleet) close() bool {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return false
	}
	f.closed = true
	f.mu.Unlock()
	if f.stopSync != nil {
		close(f.stopSync)
		<-f.syncDone
	}
	f.sched.stop()
	f.updates.stop()
	f.mu.Lock()
	clusters := make([]*cluster, 0, len(f.clusters))
	for _, c := range f.clusters {
		clusters = append(clusters, c)
	}
	f.mu.Unlock()
	for _, c := range clusters {
		c.pods.stop()
		c.stopUpdates()
	}
	if f.lock != nil {
		f.lock.unlock()
	}
	return true
}

func (f *fleet) syncLoop() {
	defer close(f.syncDone)
	t := time.NewTicker(f.syncInterval)
	defer t.Stop()
	for {
		select {
		case <-f.stopSync:
			return
		case <-t.C:
			f.sync()
		}
	}
}

// sync becomes host when the lock is free and, as host, aligns the agents with the state dir.
// A process without a target cluster leaves the lock to one with a target that waits for it
// (handover.go).
func (f *fleet) sync() {
	f.mu.Lock()
	host := f.host
	f.mu.Unlock()
	if !host {
		if f.target == nil && f.hostWanted() {
			return
		}
		ok, err := f.lock.tryLock()
		if err != nil {
			f.log.Warn("local: cannot take the host lock; node agents run elsewhere or not at all", "error", err)
			return
		}
		if !ok {
			if f.target != nil {
				f.wantHost()
			}
			return
		}
		f.mu.Lock()
		f.host = true
		f.mu.Unlock()
		if f.target != nil {
			f.dropWant()
		}
		f.log.Debug("local: hosting the node agents of the state dir", "dir", f.stateDir)
	}
	defer func() {
		if f.target == nil && f.hostWanted() && f.cannotServe() {
			f.stepDown()
		}
	}()
	names, err := f.store.names()
	if err != nil {
		f.log.Warn("local: sync state dir", "error", err)
		return
	}
	onDisk := make(map[string]bool, len(names))
	for _, n := range names {
		onDisk[n] = true
	}
	off, err := f.store.stopped()
	if err != nil {
		f.log.Warn("local: sync stopped machines", "error", err)
		return
	}
	f.mu.Lock()
	var gone, added []string
	for n := range f.agents {
		if !onDisk[n] || off[n] {
			gone = append(gone, n)
		}
	}
	for _, n := range names {
		if _, ok := f.agents[n]; !ok && !off[n] {
			added = append(added, n)
		}
	}
	f.mu.Unlock()
	for _, n := range added {
		f.adopt(n)
	}
	for _, n := range gone {
		f.forget(n)
	}
	beats, err := f.store.heartbeats()
	if err != nil {
		f.log.Warn("local: sync heartbeat switches", "error", err)
		return
	}
	f.mu.Lock()
	agents := make([]*agent, 0, len(f.agents))
	for _, a := range f.agents {
		agents = append(agents, a)
	}
	f.mu.Unlock()
	for _, a := range agents {
		f.applySwitch(a, beats[a.rec.Name])
	}
}

// applySwitch sets an agent's heartbeat from the switch state (or its spec when unset) and
// beats at once when that changed it.
func (f *fleet) applySwitch(a *agent, state string) {
	if a.cluster == nil {
		return
	}
	stopped := a.rec.Spec.StopHeartbeat
	switch state {
	case heartbeatStopped:
		stopped = true
	case heartbeatRunning:
		stopped = false
	}
	if a.stopped.Swap(stopped) != stopped {
		a.log.Info("local: heartbeat switched", "running", !stopped)
		f.sched.schedule(a, time.Now())
	}
}

// adopt starts the agent of a machine found in the state dir (created by another process or
// before a restart).
func (f *fleet) adopt(name string) {
	unlock := f.lockName(name)
	defer unlock()
	rec, err := f.store.get(name)
	if err != nil {
		if !errors.Is(err, errNotFound) {
			f.log.Warn("local: load machine", "machine", name, "error", err)
		}
		return
	}
	if f.isStopped(name) {
		return // stopped by another process meanwhile: no agent
	}
	if rec.PodCIDR == "" {
		// Recorded before machines had a pod CIDR: claim one now, as on creation.
		if err := f.claimPodCIDR(rec); err != nil {
			f.log.Warn("local: machine gets no pod CIDR; its pods stay Pending", "machine", name, "error", err)
		} else if err := f.store.update(rec); err != nil {
			f.log.Warn("local: record the pod CIDR of a machine", "machine", name, "error", err)
		}
	}
	a, isNew := f.addAgentLocked(rec)
	if a == nil || !isNew {
		return
	}
	a.restored, a.leaseFirst = true, true
	// Spread restored heartbeats over one interval; a machine created moments ago boots now.
	due := time.Now().Add(rand.N(rec.Spec.HeartbeatInterval))
	if time.Since(rec.CreatedAt) < rec.Spec.HeartbeatInterval {
		due = a.bootAt()
	}
	f.sched.schedule(a, due)
}

// isStopped reports whether the machine's VM is stopped (an unreadable state counts as running).
func (f *fleet) isStopped(name string) bool {
	off, err := f.store.stopped()
	return err == nil && off[name]
}

// forget stops the agent of a machine whose record another process deleted or whose VM another
// process stopped, and deletes its node (that process may have had no access to the target).
func (f *fleet) forget(name string) {
	unlock := f.lockName(name)
	defer unlock()
	if _, err := f.store.get(name); !errors.Is(err, errNotFound) && !f.isStopped(name) {
		return // still there (recreated) or unreadable: keep the agent
	}
	if a := f.removeAgentLocked(name); a != nil && a.cluster != nil {
		a.cluster.deleteNode(f.log, name)
	}
}

// addAgentLocked registers the agent of rec (caller holds the name lock) and reports whether
// it is new (not yet scheduled). It returns nil when this process is not the host or the machine
// has no target cluster.
func (f *fleet) addAgentLocked(rec *record) (*agent, bool) {
	f.mu.Lock()
	if !f.host || f.closed {
		f.mu.Unlock()
		return nil, false
	}
	if a, ok := f.agents[rec.Name]; ok {
		f.mu.Unlock()
		if a.cluster == nil {
			return nil, false
		}
		return a, false
	}
	f.mu.Unlock()
	c, err := f.cluster(rec.Target)
	if err != nil {
		f.log.Warn("local: machine's target cluster unusable; it gets no node", "machine", rec.Name, "error", err)
	}
	state, _ := f.store.heartbeat(rec.Name)
	stopped := rec.Spec.StopHeartbeat
	if state != heartbeatUnset {
		stopped = state == heartbeatStopped
	}
	a := newAgent(rec, c, f.log, stopped)
	a.forgotten = func() bool {
		_, err := f.store.get(rec.Name)
		return errors.Is(err, errNotFound) || f.isStopped(rec.Name)
	}
	f.mu.Lock()
	f.agents[rec.Name] = a
	agents := len(f.agents)
	f.mu.Unlock()
	if c == nil {
		return nil, false
	}
	c.limit.add(1)
	f.sched.grow(min(maxWorkers, agents/agentsPerWorker))
	c.pods.start()
	c.watchUpdates(f.updates.nodeReadyForUpdate)
	return a, true
}

// agent returns the agent of a machine (= node) name, or nil; the pod trackers dispatch pods
// to agents with it.
func (f *fleet) agent(name string) *agent {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.agents[name]
}

// removeAgentLocked stops and drops the agent of name (caller holds the name lock).
func (f *fleet) removeAgentLocked(name string) *agent {
	f.mu.Lock()
	a, ok := f.agents[name]
	delete(f.agents, name)
	f.mu.Unlock()
	if !ok {
		return nil
	}
	f.sched.unschedule(a)
	if a.cluster != nil {
		a.cluster.limit.add(-1)
	}
	return a
}

// cluster returns the cluster of a target: "" is the process's target (nil when it has none),
// anything else a kubeconfig kept from a class secret.
// inClusterConfig), so a wrong --target-kubeconfig fails at start.
func targetConfig(target any) (*rest.Config, error) {
	switch t := target.(type) {
	case nil:
		return nil, nil
	case *rest.Config:
		return t, nil
	case registry.Kubeconfig:
		cfg, err := kubeconfig.Load(string(t))
		if err != nil {
			return nil, fmt.Errorf("local: the target cluster (--target-kubeconfig): %w", err)
		}
		return cfg, nil
	default:
		return nil, fmt.Errorf("local: the target cluster is a %T; want a *rest.Config or a registry.Kubeconfig", target)
	}
}

// targetConfig resolves registry.Env.Target: the cluster of every class without a kubeconfig of
// its own. A kubeconfig is read once, at open (internal/kubeconfig's rules: a file or
func (f *fleet) cluster(target string) (*cluster, error) {
	f.mu.Lock()
	c, ok := f.clusters[target]
	f.mu.Unlock()
	if ok {
		return c, nil
	}
	var cfg *rest.Config
	if target == "" {
		if f.target == nil {
			return nil, nil
		}
		cfg = rest.CopyConfig(f.target)
	} else {
		kc, err := f.store.target(target)
		if err != nil {
			return nil, err
		}
		if cfg, err = clientcmd.RESTConfigFromKubeConfig(kc); err != nil {
			return nil, fmt.Errorf("local: target kubeconfig %s: %w", target, err)
		}
	}
	// One client carries the heartbeats of every node: its rate limit grows with them
	// (ratelimit.go).
	cfg.UserAgent = "machinist-local-node-agent"
	// Protobuf, as kubelet talks to the API server (--kube-api-content-type): the heartbeats of
	// thousands of nodes are cheaper to encode and decode than JSON, on both sides.
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	c, err := newCluster(cfg, f.log, f.agent)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	if existing, ok := f.clusters[target]; ok {
		c = existing // another caller made it meanwhile
	} else {
		f.clusters[target] = c
	}
	f.mu.Unlock()
	return c, nil
}
