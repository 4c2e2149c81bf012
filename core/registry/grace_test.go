package registry

import (
	"errors"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/machinist-io/machinist/core/driver"
)

// TestResolverPreferGrace: a preferred provider with no replica connected makes its classes wait
// (Unavailable, with a WaitingError saying until when and what serves then) for PreferGrace from
// the first time it is resolved; a replica connecting within it gets the work; afterwards the
// fallback serves. A provider nothing else serves, or one not preferred, never waits.
func TestResolverPreferGrace(t *testing.T) {
	register(t, "gracecloud", nil)
	start := time.Date(2026, 3, 14, 15, 9, 26, 0, time.UTC)
	clk := clocktesting.NewFakePassiveClock(start)
	remote := source{}
	r := &Resolver{Remote: remote, PreferRemote: []string{"gracecloud", "lonecloud"}, PreferGrace: 15 * time.Second, Clock: clk}

	_, err := r.Resolve("GraceCloud")
	var w *WaitingError
	if !errors.As(err, &w) || driver.CodeOf(err) != driver.Unavailable {
		t.Fatalf("within the grace period: %v, want Unavailable with a WaitingError", err)
	}
	if w.Provider != "gracecloud" || !w.Until.Equal(start.Add(15*time.Second)) || w.Fallback != "compiled-in driver" {
		t.Fatalf("WaitingError %+v", w)
	}
	if msg := driver.MessageOf(err); !strings.Contains(msg, "--prefer-dialin gracecloud") || !strings.Contains(msg, "2026-03-14T15:09:41Z") {
		t.Fatalf("message %q does not say what is awaited and until when", msg)
	}

	clk.SetTime(start.Add(14 * time.Second))
	if _, err := r.Resolve("gracecloud"); !errors.As(err, &w) {
		t.Fatalf("the grace period counts from the first resolution: %v", err)
	}
	remote["gracecloud"] = &named{from: "remote"}
	if d, err := r.Resolve("gracecloud"); err != nil || from(t, d) != "remote" {
		t.Fatalf("a replica connected within the grace period: %v", err)
	}
	if !r.ServedRemotely("gracecloud") {
		t.Fatal("ServedRemotely is false for a connected preferred provider")
	}
	delete(remote, "gracecloud")
	clk.SetTime(start.Add(15 * time.Second))
	if d, err := r.Resolve("gracecloud"); err != nil || from(t, d) != "compiled" {
		t.Fatalf("after the grace period the compiled-in driver serves: %v", err)
	}
	if r.ServedRemotely("gracecloud") {
		t.Fatal("ServedRemotely is true with no replica")
	}

	// Nothing else serves lonecloud: no wait, the unknown-provider answer as before.
	if _, err := r.Resolve("lonecloud"); !errors.Is(err, ErrUnknownProvider) {
		t.Fatalf("a preferred provider with no fallback: %v", err)
	}
	// Not preferred: the compiled-in driver at once, even with a grace period.
	r.PreferRemote = nil
	r.graceStart = nil
	clk.SetTime(start)
	if d, err := r.Resolve("gracecloud"); err != nil || from(t, d) != "compiled" {
		t.Fatalf("a provider not preferred waited: %v", err)
	}
}

// notifying is a Source that tells when it changes.
type notifying struct {
	source
	changed chan struct{}
}

func (n notifying) Changed() <-chan struct{} { return n.changed }

func TestResolverRemoteChanged(t *testing.T) {
	if ch := (&Resolver{}).RemoteChanged(); ch != nil {
		t.Fatal("a resolver without Remote has a change channel")
	}
	if ch := (&Resolver{Remote: source{}}).RemoteChanged(); ch != nil {
		t.Fatal("a Remote that cannot tell has a change channel")
	}
	n := notifying{source: source{}, changed: make(chan struct{})}
	if ch := (&Resolver{Remote: n}).RemoteChanged(); ch != n.changed {
		t.Fatal("RemoteChanged is not the source's channel")
	}
	// Not preferred, nothing else serves it: a connected replica gets the work.
	n.source["onlyremote"] = &named{from: "remote"}
	if !(&Resolver{Remote: n}).ServedRemotely("OnlyRemote") {
		t.Fatal("a dialled-in provider that nothing else serves is not served remotely")
	}
}
