// Package machinesettest stands in for the Machine controller in tests of the MachineSet and
// MachineDeployment controllers that want to control machine phases exactly: it moves machines
// "" → Pending → Running against the real API server, holds a finalizer while a machine
// "terminates" (as the real controller does while it deletes the VM), and lets a test pick
// classes whose machines never become Running. End-to-end tests use the real Machine controller
// and the local provider instead.
package machinesettest

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// Finalizer is held on machines while they "have a VM".
const Finalizer = "test.machinist.io/vm"

// Lifecycle moves the machines of one namespace through their phases.
type Lifecycle struct {
	// BootDelay is how long a machine stays Pending before it is Running.
	BootDelay time.Duration
	// TerminationDelay is how long a deleted machine keeps its finalizer (its VM being deleted).
	TerminationDelay time.Duration
	// Tick is the polling period (default 50ms).
	Tick time.Duration

	c  client.Client
	ns string

	mu    sync.Mutex
	stuck map[string]bool // class names whose machines stay Pending
}

// Start runs a lifecycle for namespace ns until the test ends.
func Start(t testing.TB, c client.Client, ns string, boot, terminate time.Duration) *Lifecycle {
	l := &Lifecycle{BootDelay: boot, TerminationDelay: terminate, Tick: 50 * time.Millisecond, c: c, ns: ns, stuck: map[string]bool{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(l.Tick)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				l.step(ctx)
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return l
}

// Stuck keeps machines of class name Pending forever (a template that never boots).
func (l *Lifecycle) Stuck(class string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stuck[class] = true
}

func (l *Lifecycle) isStuck(class string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stuck[class]
}

func (l *Lifecycle) step(ctx context.Context) {
	var list v1alpha1.MachineList
	if err := l.c.List(ctx, &list, client.InNamespace(l.ns)); err != nil {
		return
	}
	now := time.Now()
	for i := range list.Items {
		m := &list.Items[i]
		switch {
		case m.DeletionTimestamp != nil:
			if !controllerutil.ContainsFinalizer(m, Finalizer) {
				continue
			}
			if m.Status.CurrentStatus.Phase != v1alpha1.MachineTerminating {
				m.Status.CurrentStatus = v1alpha1.CurrentStatus{Phase: v1alpha1.MachineTerminating, LastUpdateTime: metav1.NewTime(now)}
				_ = l.c.Status().Update(ctx, m)
				continue
			}
			if now.Sub(m.DeletionTimestamp.Time) >= l.TerminationDelay {
				m.Finalizers = slices.DeleteFunc(m.Finalizers, func(f string) bool { return f == Finalizer })
				if err := l.c.Update(ctx, m); err != nil && !apierrors.IsNotFound(err) {
					continue
				}
			}
		case !controllerutil.ContainsFinalizer(m, Finalizer):
			controllerutil.AddFinalizer(m, Finalizer)
			_ = l.c.Update(ctx, m)
		case m.Status.CurrentStatus.Phase == "":
			m.Status.CurrentStatus = v1alpha1.CurrentStatus{Phase: v1alpha1.MachinePending, LastUpdateTime: metav1.NewTime(now)}
			_ = l.c.Status().Update(ctx, m)
		case m.Status.CurrentStatus.Phase == v1alpha1.MachinePending && !l.isStuck(m.Spec.Class.Name) &&
			now.Sub(m.Status.CurrentStatus.LastUpdateTime.Time) >= l.BootDelay:
			m.Status.CurrentStatus = v1alpha1.CurrentStatus{Phase: v1alpha1.MachineRunning, LastUpdateTime: metav1.NewTime(now)}
			_ = l.c.Status().Update(ctx, m)
		}
	}
}
