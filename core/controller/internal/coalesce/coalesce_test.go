package coalesce

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// queue records what the handler enqueues.
type queue struct {
	workqueue.TypedRateLimitingInterface[reconcile.Request]
	now   []reconcile.Request
	after map[reconcile.Request]time.Duration
}

func (q *queue) Add(r reconcile.Request) { q.now = append(q.now, r) }
func (q *queue) AddAfter(r reconcile.Request, d time.Duration) {
	if q.after == nil {
		q.after = map[reconcile.Request]time.Duration{}
	}
	q.after[r] = d
}

func member(name, group string) *v1alpha1.Machine {
	return &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{"group": group}}}
}

func req(group string) reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: group}}
}

func byLabel(_ context.Context, o client.Object) []reconcile.Request {
	if g := o.GetLabels()["group"]; g != "" {
		return []reconcile.Request{req(g)}
	}
	return nil
}

func TestDelayGrowsWithMembersAndUrgentEventsGoAtOnce(t *testing.T) {
	ctx := context.Background()
	h := &Handler{Map: byLabel, Delay: time.Second, PerDelay: 10, MaxDelay: 3 * time.Second,
		Urgent: func(kind Event, _, _ client.Object) bool { return kind == Delete }}
	q := &queue{}

	h.Create(ctx, event.CreateEvent{Object: member("m0", "a")}, q)
	if d := q.after[req("a")]; d != time.Second {
		t.Fatalf("first member waits %s, want the 1s floor", d)
	}
	for i := 1; i < 25; i++ {
		h.Create(ctx, event.CreateEvent{Object: member("m"+string(rune('a'+i)), "a")}, q)
	}
	old, moved := member("m0", "a"), member("m0", "b")
	h.Update(ctx, event.UpdateEvent{ObjectOld: old, ObjectNew: old}, q)
	if d := q.after[req("a")]; d != 2500*time.Millisecond {
		t.Fatalf("with 25 members an update waits %s, want 2.5s (1s per 10)", d)
	}
	for i := 25; i < 50; i++ {
		h.Create(ctx, event.CreateEvent{Object: member("m"+string(rune('a'+i)), "a")}, q)
	}
	h.Update(ctx, event.UpdateEvent{ObjectOld: old, ObjectNew: old}, q)
	if d := q.after[req("a")]; d != 3*time.Second {
		t.Fatalf("with 50 members an update waits %s, want the 3s ceiling", d)
	}

	// A member moving to another gatherer wakes both and is counted there.
	h.Update(ctx, event.UpdateEvent{ObjectOld: old, ObjectNew: moved}, q)
	if _, ok := q.after[req("b")]; !ok || h.members[req("a")] != 49 || h.members[req("b")] != 1 {
		t.Fatalf("after a move: members %v, queued %v", h.members, q.after)
	}
	if len(q.now) != 0 {
		t.Fatalf("non-urgent events enqueued at once: %v", q.now)
	}
	h.Delete(ctx, event.DeleteEvent{Object: moved}, q)
	if len(q.now) != 1 || q.now[0] != req("b") || h.members[req("b")] != 0 {
		t.Fatalf("an urgent deletion: queued at once %v, members %v", q.now, h.members)
	}
}

func TestOwnStatusUpdatesWait(t *testing.T) {
	ctx := context.Background()
	h := &Handler{Map: byLabel, Delay: time.Second, PerDelay: 1}
	q := &queue{}
	h.Create(ctx, event.CreateEvent{Object: member("m0", "a")}, q)
	h.Create(ctx, event.CreateEvent{Object: member("m1", "a")}, q)
	q.after = nil

	set := &v1alpha1.MachineSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", Generation: 1}}
	withStatus := set.DeepCopy()
	withStatus.Status.ReadyReplicas = 2
	scaled := withStatus.DeepCopy()
	scaled.Generation = 2
	own := h.Own()
	own.Update(ctx, event.UpdateEvent{ObjectOld: set, ObjectNew: scaled}, q)
	if len(q.after) != 0 || len(q.now) != 0 {
		t.Fatalf("a spec change is the controller's own watch's: queued %v %v", q.after, q.now)
	}
	if NotStatusOnly().Update(event.UpdateEvent{ObjectOld: set, ObjectNew: withStatus}) || !NotStatusOnly().Update(event.UpdateEvent{ObjectOld: set, ObjectNew: scaled}) {
		t.Fatal("NotStatusOnly passes status-only updates or drops spec changes")
	}
	own.Update(ctx, event.UpdateEvent{ObjectOld: set, ObjectNew: withStatus}, q)
	if d := q.after[req("a")]; d != 2*time.Second || len(q.now) != 0 {
		t.Fatalf("a status-only update of a set of 2 waits %s (queued at once: %v), want 2s", d, q.now)
	}
}

func TestSizedByTakesTheOtherHandlersCounts(t *testing.T) {
	ctx := context.Background()
	machines := &Handler{Map: byLabel, Delay: time.Second, PerDelay: 1, MaxDelay: time.Minute}
	sets := &Handler{Map: byLabel, SizedBy: machines}
	q := &queue{}
	for _, n := range []string{"m0", "m1", "m2"} {
		machines.Create(ctx, event.CreateEvent{Object: member(n, "a")}, q)
	}
	set := member("set", "a")
	sets.Update(ctx, event.UpdateEvent{ObjectOld: set, ObjectNew: set}, q)
	if d := q.after[req("a")]; d != 3*time.Second {
		t.Fatalf("a set event of a deployment of 3 machines waits %s, want 3s", d)
	}
}

func TestOwnDropsTheEchoOfItsOwnWriteOnly(t *testing.T) {
	ctx := context.Background()
	h := &Handler{Map: byLabel}
	own := h.Own()
	q := &queue{}
	set := &v1alpha1.MachineSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", ResourceVersion: "1"}}
	written := set.DeepCopy()
	written.ResourceVersion, written.Status.Replicas = "2", 2
	h.Wrote(written)

	own.Update(ctx, event.UpdateEvent{ObjectOld: set, ObjectNew: written}, q)
	if len(q.after) != 0 || len(q.now) != 0 {
		t.Fatalf("the echo of the controller's own write woke the gatherer: %v %v", q.after, q.now)
	}
	// Another writer's status update (and a second delivery of the same version) still wakes it.
	other := written.DeepCopy()
	other.ResourceVersion, other.Status.ReadyReplicas = "3", 1
	own.Update(ctx, event.UpdateEvent{ObjectOld: written, ObjectNew: other}, q)
	if _, ok := q.after[req("a")]; !ok {
		t.Fatal("a status update by another writer was dropped")
	}
	q.after = nil
	own.Update(ctx, event.UpdateEvent{ObjectOld: set, ObjectNew: written}, q)
	if _, ok := q.after[req("a")]; !ok {
		t.Fatal("an echo is dropped once only")
	}
}
