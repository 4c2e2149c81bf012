package machinetest

import (
	"context"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// Watch keeps a namespace's Machines from a watch and, once armed, checks an invariant after
// every event: a rollout's bounds hold at every step, not only where it ends.
type Watch struct {
	mu       sync.Mutex
	machines map[string]*v1alpha1.Machine
	check    func(machines map[string]*v1alpha1.Machine) string
	armed    bool
	result   Result
	stop     func()
	stopped  sync.Once
}

// Result is what a Watch saw while armed.
type Result struct {
	// Violations are check's answers other than "", in order.
	Violations []string
	// MaxAll is the most machines at once, terminating ones included; MaxLive the most not
	// terminating; MinRunning the fewest Running and not terminating.
	MaxAll, MaxLive, MinRunning int
}

// Counts are the machines of one state: all of them, those not terminating, and those of them
// that are Running.
type Counts struct{ All, Live, Running int }

// Count counts machines.
func Count(machines map[string]*v1alpha1.Machine) Counts {
	c := Counts{All: len(machines)}
	for _, m := range machines {
		if m.DeletionTimestamp != nil {
			continue
		}
		c.Live++
		if m.Status.CurrentStatus.Phase == v1alpha1.MachineRunning {
			c.Running++
		}
	}
	return c
}

// Describe lists machines as name=phase, terminating ones marked, sorted by name.
func Describe(machines map[string]*v1alpha1.Machine) string {
	out := make([]string, 0, len(machines))
	for name, m := range machines {
		p := string(m.Status.CurrentStatus.Phase)
		if m.DeletionTimestamp != nil {
			p += "(deleting)"
		}
		out = append(out, name+"="+p)
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// WatchMachines lists the Machines of ns and watches them from that list on, so the Watch knows
// every machine that exists when it returns. check (nil for none) runs under the Watch's lock
// after every event once armed, and returns a violation or "". The Watch stops with the test.
func WatchMachines(t testing.TB, c client.WithWatch, ns string, check func(machines map[string]*v1alpha1.Machine) string) *Watch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var list v1alpha1.MachineList
	if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
		cancel()
		t.Fatalf("list machines: %v", err)
	}
	wi, err := c.Watch(ctx, &v1alpha1.MachineList{}, client.InNamespace(ns), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
	if err != nil {
		cancel()
		t.Fatalf("watch machines: %v", err)
	}
	w := &Watch{machines: map[string]*v1alpha1.Machine{}, check: check, result: Result{MinRunning: 1 << 30}}
	for i := range list.Items {
		w.machines[list.Items[i].Name] = &list.Items[i]
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer wi.Stop()
		for ev := range wi.ResultChan() {
			m, ok := ev.Object.(*v1alpha1.Machine)
			if !ok {
				continue
			}
			w.mu.Lock()
			if ev.Type == watch.Deleted {
				delete(w.machines, m.Name)
			} else {
				w.machines[m.Name] = m
			}
			if w.armed {
				w.observeLocked()
			}
			w.mu.Unlock()
		}
	}()
	w.stop = func() { cancel(); <-done }
	t.Cleanup(func() { w.Stop() })
	return w
}

func (w *Watch) observeLocked() {
	c := Count(w.machines)
	w.result.MaxAll = max(w.result.MaxAll, c.All)
	w.result.MaxLive = max(w.result.MaxLive, c.Live)
	w.result.MinRunning = min(w.result.MinRunning, c.Running)
	if w.check == nil {
		return
	}
	if v := w.check(w.machines); v != "" {
		w.result.Violations = append(w.result.Violations, v)
	}
}

// Arm starts checking from the machines the Watch knows now.
func (w *Watch) Arm() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.armed = true
	w.observeLocked()
}

// ArmWhen arms the Watch once ready holds for its machines' counts, and fails the test when
// that takes longer than 30 s.
func (w *Watch) ArmWhen(t testing.TB, what string, ready func(Counts) bool) {
	t.Helper()
	var c Counts
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		if c = Count(w.machines); !ready(c) {
			return false, nil
		}
		w.armed = true
		w.observeLocked()
		return true, nil
	})
	if err != nil {
		t.Fatalf("the machine watch never showed %s: %+v", what, c)
	}
}

// Stop ends the watch (once; later calls only read) and returns what it saw while armed.
func (w *Watch) Stop() Result {
	w.stopped.Do(w.stop)
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.result
	r.Violations = append([]string(nil), r.Violations...)
	return r
}
