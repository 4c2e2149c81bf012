package machineset

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// expectations remember, per MachineSet, the machines this controller created or deleted that
// its informer cache has not shown yet. While any are outstanding the set is not scaled again:
// a stale cache would otherwise make it create (or delete) the same machines twice. An
// expectation is forgotten after a TTL so a lost watch event cannot block a set forever.
type expectations struct {
	ttl time.Duration
	now func() time.Time

	mu   sync.Mutex
	sets map[types.NamespacedName]*pending
	busy map[types.NamespacedName]int // creation or deletion passes running, per set
}

type pending struct {
	creates map[string]time.Time    // machine name -> when created
	deletes map[types.UID]time.Time // machine UID -> when deleted
}

func newExpectations(ttl time.Duration, now func() time.Time) *expectations {
	return &expectations{ttl: ttl, now: now, sets: map[types.NamespacedName]*pending{}, busy: map[types.NamespacedName]int{}}
}

// pass marks a creation or deletion pass of the set as running until the returned func is
// called.
func (e *expectations) pass(key types.NamespacedName) (done func()) {
	e.mu.Lock()
	e.busy[key]++
	e.mu.Unlock()
	return func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.busy[key]--; e.busy[key] <= 0 {
			delete(e.busy, key)
		}
	}
}

// observe takes what a machine event shows the cache — a machine of the set (name) is listed, or
// one (uid) terminates or is gone — and reports whether the set must look at once: a pass of it
// is running (the event only has it run again once the pass is done, when the cache may show all
// the pass did), or the event shows the last machine the set waited for. Other machine events
// can wait to be coalesced: an unsatisfied set would only find that it still waits.
func (e *expectations) observe(key types.NamespacedName, name string, uid types.UID, gone bool) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.busy[key] > 0 {
		return true
	}
	p := e.sets[key]
	if p == nil {
		return false
	}
	if gone {
		if _, waited := p.deletes[uid]; !waited {
			return false
		}
		delete(p.deletes, uid)
	} else {
		if _, waited := p.creates[name]; !waited {
			return false
		}
		delete(p.creates, name)
	}
	if len(p.creates) > 0 || len(p.deletes) > 0 {
		return false
	}
	delete(e.sets, key)
	return true
}

func (e *expectations) get(key types.NamespacedName) *pending {
	p := e.sets[key]
	if p == nil {
		p = &pending{creates: map[string]time.Time{}, deletes: map[types.UID]time.Time{}}
		e.sets[key] = p
	}
	return p
}

// created records that a machine was created for the set.
func (e *expectations) created(key types.NamespacedName, name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.get(key).creates[name] = e.now()
}

// deleted records that a machine of the set was deleted.
func (e *expectations) deleted(key types.NamespacedName, uid types.UID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.get(key).deletes[uid] = e.now()
}

// cacheView is what the cache shows of a set's machines.
type cacheView struct {
	names map[string]bool // every machine name listed
	live  map[types.UID]bool
}

// satisfied drops the expectations the cache now shows (created machines listed, deleted ones
// gone or terminating) or that outlived the TTL, and reports whether none remain. When some
// remain it also returns how long until the oldest expires.
func (e *expectations) satisfied(key types.NamespacedName, view cacheView) (bool, time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	p := e.sets[key]
	if p == nil {
		return true, 0
	}
	now := e.now()
	var wait time.Duration
	note := func(at time.Time) bool {
		left := e.ttl - now.Sub(at)
		if left <= 0 {
			return false
		}
		if wait == 0 || left < wait {
			wait = left
		}
		return true
	}
	for name, at := range p.creates {
		if view.names[name] || !note(at) {
			delete(p.creates, name)
		}
	}
	for uid, at := range p.deletes {
		if !view.live[uid] || !note(at) {
			delete(p.deletes, uid)
		}
	}
	if len(p.creates) == 0 && len(p.deletes) == 0 {
		delete(e.sets, key)
		return true, 0
	}
	return false, wait
}

// awaitsCreation reports whether a creation of the set that has not outlived the TTL is not
// shown by the cache yet (visible), and how long until the oldest such expires; visible ones are
// dropped. It reads only the awaited machines, so a set waiting for its last creations does not
// read all of them.
func (e *expectations) awaitsCreation(key types.NamespacedName, visible func(name string) bool) (time.Duration, bool) {
	e.mu.Lock()
	p := e.sets[key]
	if p == nil {
		e.mu.Unlock()
		return 0, false
	}
	now := e.now()
	left := map[string]time.Duration{}
	for name, at := range p.creates {
		left[name] = e.ttl - now.Sub(at)
	}
	e.mu.Unlock()

	var wait time.Duration
	var seen []string
	for name, l := range left {
		if l <= 0 || visible(name) { // read outside the lock: events keep flowing meanwhile
			seen = append(seen, name)
			continue
		}
		if wait == 0 || l < wait {
			wait = l
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if p := e.sets[key]; p != nil {
		for _, name := range seen {
			delete(p.creates, name)
		}
		if len(p.creates) == 0 && len(p.deletes) == 0 {
			delete(e.sets, key)
		}
	}
	return wait, wait > 0
}

// forget drops everything expected of a set (it was deleted).
func (e *expectations) forget(key types.NamespacedName) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.sets, key)
	delete(e.busy, key)
}
