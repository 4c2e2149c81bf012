package preservation

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// TestEffective follows MCM's getEffectivePreservationAnnotations and
// shouldAnnotationsBeUpdatedOnMachine: the node's value wins (even once removed, if it had been
// applied), the machine's counts without a node value or without a node.
func TestEffective(t *testing.T) {
	const none = "<none>"
	ann := func(kv ...string) map[string]string {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i+1] != none {
				m[kv[i]] = kv[i+1]
			}
		}
		return m
	}
	const key, last = v1alpha1.AnnotationPreserve, v1alpha1.AnnotationLastAppliedNodePreserveValue
	for _, tc := range []struct {
		name           string
		machine, node  map[string]string
		nodeGone       bool
		want           string
		bound, syncing bool
	}{
		{"nothing", ann(), ann(), false, "", false, false},
		{"machine only", ann(key, "now"), ann(), false, "now", true, false},
		{"node wins", ann(key, "now"), ann(key, "false"), false, "false", true, true},
		{"node value applied", ann(last, "when-failed"), ann(key, "when-failed"), false, "when-failed", true, false},
		{"node annotation removed after being applied", ann(last, "now"), ann(), false, "", true, true},
		{"empty node value: the machine's counts once, then is removed", ann(key, "now"), ann(key, ""), false, "now", true, true},
		{"node gone: machine counts", ann(key, "when-failed", last, "now"), nil, true, "when-failed", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Annotations: tc.machine}}
			var node *corev1.Node
			if !tc.nodeGone {
				node = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: tc.node}}
			}
			s := Of(m, node, tc.nodeGone)
			if got := s.Effective(); got != tc.want {
				t.Errorf("effective %q, want %q", got, tc.want)
			}
			if got := s.Bound(m); got != tc.bound {
				t.Errorf("bound %v, want %v", got, tc.bound)
			}
			if got := s.SyncMachine(); got != tc.syncing {
				t.Errorf("sync machine %v, want %v", got, tc.syncing)
			}
		})
	}
}

func TestPreservedAndKeepsFailed(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := &v1alpha1.Machine{}
	if Preserved(m, now) {
		t.Fatal("no expiry: not preserved")
	}
	m.Status.CurrentStatus.PreserveExpiryTime = &metav1.Time{Time: now.Add(time.Second)}
	if !Preserved(m, now) || Preserved(m, now.Add(time.Second)) {
		t.Fatal("preserved until, not at, the expiry")
	}
	for v, want := range map[string]bool{"now": true, "when-failed": true, "auto-preserved": true, "false": false, "": false, "yes": false} {
		if KeepsFailed(v) != want {
			t.Errorf("KeepsFailed(%q) = %v", v, !want)
		}
	}
}
