package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/internal/waitctx"
)

// snapshot is what the watches show: machines, those Running, nodes, and the machines seen
// Unknown (a machine is Unknown only after Running, while its node is not Ready) since the
// watcher started or was last reset.
type snapshot struct{ machines, running, nodes, unknown int }

// watcher follows the machines' phases and the nodes through watches, counting incrementally
// (the benchmark shares the CPUs it measures).
type watcher struct {
	c client.WithWatch

	mu      sync.Mutex
	phases  map[string]v1alpha1.MachinePhase
	running int
	// wentUnknown holds the machines seen Unknown since resetUnknown.
	wentUnknown map[string]bool
	nodes       map[string]bool
	changed     chan struct{}
	cancel      context.CancelFunc
	done        sync.WaitGroup
	err         error
}

func (w *watcher) start(ctx context.Context) error {
	w.phases, w.nodes, w.changed = map[string]v1alpha1.MachinePhase{}, map[string]bool{}, make(chan struct{}, 1)
	w.wentUnknown = map[string]bool{}
	ctx, w.cancel = context.WithCancel(ctx)
	for _, follow := range []func(context.Context) error{w.followMachines, w.followNodes} {
		w.done.Add(1)
		go func() {
			defer w.done.Done()
			for ctx.Err() == nil {
				// The API server ends watches now and then: list again and resume.
				if err := follow(ctx); err != nil && ctx.Err() == nil {
					w.mu.Lock()
					w.err = err
					w.mu.Unlock()
					_ = waitctx.Sleep(ctx, clock.RealClock{}, time.Second) // then list again
				}
			}
		}()
	}
	return nil
}

func (w *watcher) stop() {
	w.cancel()
	w.done.Wait()
}

func (w *watcher) notify() {
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// hasNode reports whether the watch shows the node.
func (w *watcher) hasNode(name string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.nodes[name]
}

// resetUnknown starts counting the machines that go Unknown afresh (a new phase).
func (w *watcher) resetUnknown() {
	w.mu.Lock()
	defer w.mu.Unlock()
	clear(w.wentUnknown)
}

func (w *watcher) setPhase(name string, p v1alpha1.MachinePhase, gone bool) {
	old, had := w.phases[name]
	if p == v1alpha1.MachineUnknown && !gone {
		w.wentUnknown[name] = true
	}
	if had && old == v1alpha1.MachineRunning {
		w.running--
	}
	if gone {
		delete(w.phases, name)
		return
	}
	w.phases[name] = p
	if p == v1alpha1.MachineRunning {
		w.running++
	}
}

func (w *watcher) followMachines(ctx context.Context) error {
	var list v1alpha1.MachineList
	if err := w.c.List(ctx, &list, client.InNamespace("default")); err != nil {
		return fmt.Errorf("list machines: %w", err)
	}
	w.mu.Lock()
	clear(w.phases)
	w.running = 0
	for _, m := range list.Items {
		w.setPhase(m.Name, m.Status.CurrentStatus.Phase, false)
	}
	w.mu.Unlock()
	w.notify()
	wi, err := w.c.Watch(ctx, &v1alpha1.MachineList{}, client.InNamespace("default"),
		&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
	if err != nil {
		return fmt.Errorf("watch machines: %w", err)
	}
	defer wi.Stop()
	for ev := range wi.ResultChan() {
		m, ok := ev.Object.(*v1alpha1.Machine)
		if !ok {
			continue
		}
		w.mu.Lock()
		w.setPhase(m.Name, m.Status.CurrentStatus.Phase, ev.Type == watch.Deleted)
		w.mu.Unlock()
		w.notify()
	}
	return nil
}

func (w *watcher) followNodes(ctx context.Context) error {
	var list corev1.NodeList
	if err := w.c.List(ctx, &list); err != nil {
		return fmt.Errorf("list nodes: %w", err)
	}
	w.mu.Lock()
	clear(w.nodes)
	for _, n := range list.Items {
		w.nodes[n.Name] = true
	}
	w.mu.Unlock()
	w.notify()
	wi, err := w.c.Watch(ctx, &corev1.NodeList{}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
	if err != nil {
		return fmt.Errorf("watch nodes: %w", err)
	}
	defer wi.Stop()
	for ev := range wi.ResultChan() {
		n, ok := ev.Object.(*corev1.Node)
		if !ok {
			continue
		}
		w.mu.Lock()
		if ev.Type == watch.Deleted {
			delete(w.nodes, n.Name)
		} else {
			w.nodes[n.Name] = true
		}
		w.mu.Unlock()
		w.notify()
	}
	return nil
}

// until calls check on every change and every second (tick) until it reports done or fails,
// printing its progress line every 5 seconds.
// The expensive parts of check (reading /proc, listing VMs, sampling the load) belong in its
// tick calls, once a second.
func (w *watcher) until(ctx context.Context, timeout time.Duration, check func(s snapshot, tick bool) (bool, string, error)) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	deadline := time.After(timeout)
	var lastReport time.Time
	var line string
	ticked := true
	for {
		w.mu.Lock()
		s := snapshot{machines: len(w.phases), running: w.running, nodes: len(w.nodes), unknown: len(w.wentUnknown)}
		w.mu.Unlock()
		done, l, err := check(s, ticked)
		if err != nil {
			return err
		}
		line = l
		ticked = false
		if done {
			fmt.Println(line)
			return nil
		}
		if time.Since(lastReport) >= 5*time.Second {
			lastReport = time.Now()
			fmt.Println(line)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline:
			w.mu.Lock()
			err := w.err
			w.mu.Unlock()
			if err != nil {
				return fmt.Errorf("not done after %s: %s (last watch error: %w)", timeout, line, err)
			}
			return fmt.Errorf("not done after %s: %s", timeout, line)
		case <-w.changed:
		case <-tick.C:
			ticked = true
		}
	}
}
