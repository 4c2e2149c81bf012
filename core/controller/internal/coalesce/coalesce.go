// Package coalesce is an event handler for controllers whose object gathers many others (a
// MachineSet its machines, a MachineDeployment its sets' machines): a reconcile of the gatherer
// reads all of them, so reconciling it on every event of every member costs the fleet size per
// event — quadratic in the fleet over a scale-up. The handler enqueues the gatherer at once only
// for the events that must not wait (Urgent), and otherwise after Delay, so a burst of member
// events within Delay costs one reconcile. The work queue keeps one waiting entry per key with
// the earliest due time, so a steady stream of events still reconciles the gatherer every Delay.
//
// Delaying an event never makes a reconcile read older data: whenever the gatherer is reconciled
// it reads the informer cache as it is then. It only delays when the reconcile happens.
package coalesce

import (
	"context"
	"time"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// DefaultDelay is how long a member event may wait for its gatherer's reconcile: long against
// the reconciles a scale-up's events would cause (hundreds per second), short against what a
// user or a status reader waits for.
const DefaultDelay = time.Second

// Event is the kind of a member event.
type Event int

// The kinds of member events.
const (
	Create Event = iota
	Update
	Delete
	Generic
)

// Handler maps a member's events to requests of its gatherers.
type Handler struct {
	// Map returns the gatherers of a member (nil: none).
	Map func(ctx context.Context, member client.Object) []reconcile.Request
	// Urgent reports whether an event must reach the gatherers at once; old is nil except for
	// updates. Nil means no event is urgent.
	Urgent func(kind Event, old, member client.Object) bool
	// Delay is how long other events wait; zero means DefaultDelay.
	Delay time.Duration
}

var _ handler.EventHandler = Handler{}

// Create enqueues the member's gatherers.
func (h Handler) Create(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	h.enqueue(ctx, q, Create, nil, e.Object)
}

// Update enqueues the gatherers of the new member and, when they differ (a member moved), of the
// old one.
func (h Handler) Update(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	urgent := h.urgent(Update, e.ObjectOld, e.ObjectNew)
	seen := map[reconcile.Request]bool{}
	for _, o := range []client.Object{e.ObjectNew, e.ObjectOld} {
		if o == nil {
			continue
		}
		for _, req := range h.Map(ctx, o) {
			if !seen[req] {
				seen[req] = true
				h.add(q, req, urgent)
			}
		}
	}
}

// Delete enqueues the member's gatherers.
func (h Handler) Delete(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	h.enqueue(ctx, q, Delete, nil, e.Object)
}

// Generic enqueues the member's gatherers.
func (h Handler) Generic(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	h.enqueue(ctx, q, Generic, nil, e.Object)
}

func (h Handler) enqueue(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request], kind Event, old, o client.Object) {
	if o == nil {
		return
	}
	urgent := h.urgent(kind, old, o)
	for _, req := range h.Map(ctx, o) {
		h.add(q, req, urgent)
	}
}

func (h Handler) urgent(kind Event, old, o client.Object) bool {
	return h.Urgent != nil && h.Urgent(kind, old, o)
}

func (h Handler) add(q workqueue.TypedRateLimitingInterface[reconcile.Request], req reconcile.Request, urgent bool) {
	if urgent {
		q.Add(req)
		return
	}
	d := h.Delay
	if d <= 0 {
		d = DefaultDelay
	}
	q.AddAfter(req, d)
}
