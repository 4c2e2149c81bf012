// Package coalesce is an event handler for controllers whose object gathers many others (a
// MachineSet its machines, a MachineDeployment its sets' machines): a reconcile of the gatherer
// reads all of them, so reconciling it on every event of every member costs the fleet size per
// event — quadratic in the fleet over a scale-up. The handler enqueues the gatherer at once only
// for the events that must not wait (Urgent), and otherwise after a delay, so the member events
// within it cost one reconcile. The work queue keeps one waiting entry per key with the earliest
// due time, so a steady stream of events reconciles the gatherer once per delay.
//
// The delay grows with the gatherer's members (Delay per PerDelay members, counted from the
// events): a reconcile's cost grows with them too, so the gatherer's reconciles cost the same
// share of a CPU whatever its size, and a scale-up's total stays linear in the machines.
//
// Delaying an event never makes a reconcile read older data: whenever the gatherer is reconciled
// it reads the informer cache as it is then. It only delays when the reconcile happens.
package coalesce

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Defaults of Handler's delay: a member event waits one second per 1000 members of its
// gatherer, at least one second and at most ten — long against the reconciles a scale-up's
// events would cause (hundreds per second), short against what a user or a status reader waits
// for.
const (
	DefaultDelay    = time.Second
	DefaultPerDelay = 1000
	DefaultMaxDelay = 10 * time.Second
)

// Event is the kind of a member event.
type Event int

// The kinds of member events.
const (
	Create Event = iota
	Update
	Delete
	Generic
)

// Handler maps a member's events to requests of its gatherers. Use it by pointer.
type Handler struct {
	// Map returns the gatherers of a member (nil: none).
	Map func(ctx context.Context, member client.Object) []reconcile.Request
	// Urgent reports whether an event must reach the gatherers at once; old is nil except for
	// updates. Nil means no event is urgent.
	Urgent func(kind Event, old, member client.Object) bool
	// Delay is how long other events wait per PerDelay members (zero: DefaultDelay and
	// DefaultPerDelay), at least Delay and at most MaxDelay (zero: DefaultMaxDelay).
	Delay    time.Duration
	PerDelay int
	MaxDelay time.Duration
	// SizedBy, when set, is the handler whose member counts set the delay (a deployment's
	// machines, for the events of its MachineSets).
	SizedBy *Handler

	mu      sync.Mutex
	members map[reconcile.Request]int
	// written: the resourceVersion each gatherer's last own status write left (see Wrote).
	written map[reconcile.Request]string
}

var _ handler.EventHandler = &Handler{}

// Create enqueues the member's gatherers.
func (h *Handler) Create(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	h.enqueue(ctx, q, Create, nil, e.Object)
}

// Update enqueues the gatherers of the new member and, when they differ (a member moved), of the
// old one.
func (h *Handler) Update(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	if e.ObjectNew == nil {
		return
	}
	urgent := h.urgent(Update, e.ObjectOld, e.ObjectNew)
	now := h.Map(ctx, e.ObjectNew)
	var before []reconcile.Request
	if e.ObjectOld != nil {
		before = h.Map(ctx, e.ObjectOld)
	}
	for _, req := range before {
		if !slices.Contains(now, req) {
			h.count(req, -1)
			h.add(q, req, urgent)
		}
	}
	for _, req := range now {
		if !slices.Contains(before, req) {
			h.count(req, +1)
		}
		h.add(q, req, urgent)
	}
}

// Delete enqueues the member's gatherers.
func (h *Handler) Delete(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	h.enqueue(ctx, q, Delete, nil, e.Object)
}

// Generic enqueues the member's gatherers.
func (h *Handler) Generic(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	h.enqueue(ctx, q, Generic, nil, e.Object)
}

func (h *Handler) enqueue(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request], kind Event, old, o client.Object) {
	if o == nil {
		return
	}
	urgent := h.urgent(kind, old, o)
	for _, req := range h.Map(ctx, o) {
		switch kind {
		case Create:
			h.count(req, +1)
		case Delete:
			h.count(req, -1)
		}
		h.add(q, req, urgent)
	}
}

func (h *Handler) urgent(kind Event, old, o client.Object) bool {
	return h.Urgent != nil && h.Urgent(kind, old, o)
}

// count keeps the number of members of each gatherer, as the events tell it.
func (h *Handler) count(req reconcile.Request, delta int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.members == nil {
		h.members = map[reconcile.Request]int{}
	}
	n := h.members[req] + delta
	if n <= 0 {
		delete(h.members, req)
		return
	}
	h.members[req] = n
}

// delay is how long a non-urgent event of a member of req waits.
func (h *Handler) delay(req reconcile.Request) time.Duration {
	if h.SizedBy != nil {
		return h.SizedBy.delay(req)
	}
	base, per, ceiling := h.Delay, h.PerDelay, h.MaxDelay
	if base <= 0 {
		base = DefaultDelay
	}
	if per <= 0 {
		per = DefaultPerDelay
	}
	if ceiling <= 0 {
		ceiling = DefaultMaxDelay
	}
	h.mu.Lock()
	n := h.members[req]
	h.mu.Unlock()
	d := time.Duration(float64(base) * float64(n) / float64(per))
	return min(max(d, base), max(ceiling, base))
}

func (h *Handler) add(q workqueue.TypedRateLimitingInterface[reconcile.Request], req reconcile.Request, urgent bool) {
	if urgent {
		q.Add(req)
		return
	}
	q.AddAfter(req, h.delay(req))
}

// StatusOnly reports whether an update changed nothing but the object's status (same
// generation, labels, annotations, finalizers, owners and deletion timestamp).
func StatusOnly(old, o client.Object) bool {
	return old.GetGeneration() == o.GetGeneration() &&
		maps.Equal(old.GetLabels(), o.GetLabels()) &&
		maps.Equal(old.GetAnnotations(), o.GetAnnotations()) &&
		slices.Equal(old.GetFinalizers(), o.GetFinalizers()) &&
		equality.Semantic.DeepEqual(old.GetOwnerReferences(), o.GetOwnerReferences()) &&
		(old.GetDeletionTimestamp() == nil) == (o.GetDeletionTimestamp() == nil)
}

// NotStatusOnly is the predicate of a gatherer's own watch whose status-only updates go through
// Own instead.
func NotStatusOnly() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		return e.ObjectOld == nil || e.ObjectNew == nil || !StatusOnly(e.ObjectOld, e.ObjectNew)
	}}
}

// Own handles the status-only updates of the gatherers themselves (every other event of theirs
// is left to the controller's own watch, filtered with NotStatusOnly): most are the
// controller's own status writes, which would otherwise wake the gatherer again at once — a
// reconcile, a status write, a reconcile, … reading all members each time while they change
// during a scale-up. They wait as long as a member event would.
//
// The echo of a write recorded with Wrote is dropped: the reconcile that wrote it had read all
// the write reflects, and what changed since comes as events of its own.
func (h *Handler) Own() handler.EventHandler {
	return handler.Funcs{UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		if e.ObjectOld == nil || e.ObjectNew == nil || !StatusOnly(e.ObjectOld, e.ObjectNew) {
			return
		}
		req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(e.ObjectNew)}
		if h.echo(req, e.ObjectNew.GetResourceVersion()) {
			return
		}
		q.AddAfter(req, h.delay(req))
	}}
}

// Wrote records a gatherer as the controller's own status write left it (the object the API
// server returned), so that Own drops that write's update event. With hundreds of small
// gatherers each status write would otherwise cost a second reconcile that finds nothing to do.
func (h *Handler) Wrote(o client.Object) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.written == nil {
		h.written = map[reconcile.Request]string{}
	}
	h.written[reconcile.Request{NamespacedName: client.ObjectKeyFromObject(o)}] = o.GetResourceVersion()
}

// echo reports whether rv is the version the gatherer's last own write left, forgetting it.
func (h *Handler) echo(req reconcile.Request, rv string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if w, ok := h.written[req]; ok && w == rv && rv != "" {
		delete(h.written, req)
		return true
	}
	return false
}
