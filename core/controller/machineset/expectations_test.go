package machineset

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

func TestObserveIsUrgentOnlyForTheLastAwaitedMachineOrDuringAPass(t *testing.T) {
	now := time.Unix(1000, 0)
	e := newExpectations(time.Minute, func() time.Time { return now })
	set := types.NamespacedName{Namespace: "ns", Name: "set"}

	done := e.pass(set)
	e.created(set, "m1")
	e.created(set, "m2")
	if !e.observe(set, "m1", "", false) {
		t.Fatal("an event during a pass must reach the set at once (it runs again after the pass)")
	}
	done()
	if e.observe(set, "other", "", false) {
		t.Fatal("a machine the set does not wait for is not urgent")
	}
	if e.observe(set, "m1", "", false) {
		t.Fatal("m2 is still awaited: m1's event is not urgent")
	}
	if !e.observe(set, "m2", "", false) {
		t.Fatal("the last awaited creation is urgent")
	}
	if ok, _ := e.satisfied(set, cacheView{names: map[string]bool{}, live: map[types.UID]bool{}}); !ok {
		t.Fatal("observed expectations still hold the set back")
	}

	e.deleted(set, "u1")
	if !e.observe(set, "", "u1", true) {
		t.Fatal("the last awaited deletion is urgent")
	}
	if e.observe(set, "", "u1", true) {
		t.Fatal("a deletion observed twice is urgent twice")
	}
}

func TestAwaitsCreationReadsOnlyTheAwaitedMachines(t *testing.T) {
	now := time.Unix(1000, 0)
	e := newExpectations(time.Minute, func() time.Time { return now })
	set := types.NamespacedName{Namespace: "ns", Name: "set"}
	if _, waiting := e.awaitsCreation(set, func(string) bool { t.Fatal("read without expectations"); return false }); waiting {
		t.Fatal("a set without expectations waits")
	}
	e.created(set, "m1")
	now = now.Add(10 * time.Second)
	e.created(set, "m2")
	shown := map[string]bool{"m2": true}
	var read []string
	wait, waiting := e.awaitsCreation(set, func(n string) bool { read = append(read, n); return shown[n] })
	if !waiting || wait != 50*time.Second || len(read) != 2 {
		t.Fatalf("waiting %v for %s after reading %v; want m1 awaited, 50s left", waiting, wait, read)
	}
	now = now.Add(time.Minute)
	if _, waiting := e.awaitsCreation(set, func(string) bool { return false }); waiting {
		t.Fatal("an expectation past its TTL still holds the set")
	}
}
