package crdfield

import (
	"strings"
	"testing"
)

func TestObserveReportsTheFirstDropOnce(t *testing.T) {
	f := New("the X CRD's status.y", "z is lost")
	if f.Observe(false, false) || f.Observe(true, true) || f.Dropped() {
		t.Fatal("nothing sent, or kept: not dropped")
	}
	if !f.Observe(true, false) || !f.Dropped() {
		t.Fatal("sent and not kept: dropped, reported")
	}
	if f.Observe(true, false) {
		t.Fatal("reported twice")
	}
	if m := f.Message(); !strings.Contains(m, "the X CRD's status.y is missing") || !strings.Contains(m, "z is lost") {
		t.Fatalf("message %q", m)
	}
}
