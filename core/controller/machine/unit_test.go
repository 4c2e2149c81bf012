package machine

import (
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
)

func TestSameOperationIgnoresVolatileTokens(t *testing.T) {
	op := func(desc string) v1alpha1.LastOperation {
		return v1alpha1.LastOperation{Type: v1alpha1.MachineOperationCreate, State: v1alpha1.MachineStateFailed, ErrorCode: "Unavailable", Description: desc}
	}
	same := [][2]string{
		{"quota exceeded (request req-3f2a9c1e-aa)", "quota exceeded (request req-77b1c0de-bb)"},
		{"server 0b9e6a44-5c1e-4f5e-9d7c-2f1e0a3b4c5d failed", "server 9c1d2e3f-0a1b-4c2d-8e3f-4a5b6c7d8e9f failed"},
		{"retry after 17 seconds", "retry after 3 seconds"},
		{"trace 0123456789abcdef0123", "trace fedcba9876543210fedc"},
	}
	for _, p := range same {
		if !sameOperation(op(p[0]), op(p[1])) {
			t.Errorf("%q and %q should count as the same operation", p[0], p[1])
		}
	}
	different := [][2]string{
		{"quota exceeded", "flavor not found"},
		{"quota exceeded in region a", "quota exceeded in region b"},
	}
	for _, p := range different {
		if sameOperation(op(p[0]), op(p[1])) {
			t.Errorf("%q and %q must not count as the same", p[0], p[1])
		}
	}
	a, b := op("x"), op("x")
	b.ErrorCode = "Internal"
	if sameOperation(a, b) {
		t.Error("a changed error code must be written")
	}
}

func TestRetryBoundsByCode(t *testing.T) {
	o := DefaultOptions()
	for c := driver.Code(0); c < driver.NumCodes; c++ {
		base, ceiling := retryBounds(c, o)
		switch c {
		case driver.ResourceExhausted:
			if base != o.ResourceExhaustedRetry || ceiling != 4*o.ResourceExhaustedRetry {
				t.Errorf("%s: %s..%s", c, base, ceiling)
			}
		case driver.Unknown, driver.DeadlineExceeded, driver.Aborted, driver.Unavailable, driver.Canceled:
			if base != o.ShortRetry || ceiling != o.MediumRetry {
				t.Errorf("%s: %s..%s, want short..medium", c, base, ceiling)
			}
		default:
			if base != o.MediumRetry || ceiling != o.LongRetry {
				t.Errorf("%s: %s..%s, want medium..long", c, base, ceiling)
			}
		}
	}
}

func TestBackoffDoublesWithJitterAndResets(t *testing.T) {
	o := DefaultOptions()
	b := newBackoff()
	prevMax := time.Duration(0)
	for i := 1; i <= 12; i++ {
		d := b.next("m", driver.Unavailable, o)
		want := o.ShortRetry << (i - 1)
		if want > o.MediumRetry || want <= 0 {
			want = o.MediumRetry
		}
		lo, hi := time.Duration(float64(want)*0.8), time.Duration(float64(want)*1.2)
		if d < lo || d > hi {
			t.Fatalf("attempt %d: %s, want within %s..%s", i, d, lo, hi)
		}
		prevMax = max(prevMax, d)
	}
	if prevMax > time.Duration(float64(o.MediumRetry)*1.2) {
		t.Fatalf("backoff exceeded its ceiling: %s", prevMax)
	}
	b.forget("m")
	if d := b.next("m", driver.Unavailable, o); d > time.Duration(float64(o.ShortRetry)*1.2) {
		t.Fatalf("after a success the backoff must restart: %s", d)
	}
}

func TestBootstrapTokenIDAndPlaceholders(t *testing.T) {
	if id := bootstrapTokenID("shoot--pool-z1-7d9f8-abcde"); id != "616263" {
		t.Fatalf("token id %q, want the hex of the last bytes (MCM's rule)", id)
	}
	if id := bootstrapTokenID("ab"); len(id) != 6 {
		t.Fatalf("short name id %q", id)
	}
	ud := []byte("a=<<BOOTSTRAP_TOKEN>> b=%3C%3CBOOTSTRAP_TOKEN%3E%3E")
	if !containsPlaceholder(ud, v1alpha1.UserDataBootstrapTokenPlaceholder) {
		t.Fatal("placeholder not found")
	}
	if got := string(replacePlaceholder(ud, v1alpha1.UserDataBootstrapTokenPlaceholder, "abc123.0123456789abcdef")); got != "a=abc123.0123456789abcdef b=abc123.0123456789abcdef" {
		t.Fatalf("replaced: %q", got)
	}
	if containsPlaceholder([]byte("nothing"), v1alpha1.UserDataBootstrapTokenPlaceholder) {
		t.Fatal("false placeholder")
	}
}

func TestIsHealthy(t *testing.T) {
	cond := func(t corev1.NodeConditionType, s corev1.ConditionStatus) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: s}
	}
	problems := DefaultNodeConditions
	cases := []struct {
		name  string
		conds []corev1.NodeCondition
		want  bool
	}{
		{"no conditions", nil, false},
		{"ready", []corev1.NodeCondition{cond(corev1.NodeReady, corev1.ConditionTrue)}, true},
		{"not ready", []corev1.NodeCondition{cond(corev1.NodeReady, corev1.ConditionFalse)}, false},
		{"unknown", []corev1.NodeCondition{cond(corev1.NodeReady, corev1.ConditionUnknown)}, false},
		{"disk pressure", []corev1.NodeCondition{cond(corev1.NodeReady, corev1.ConditionTrue), cond("DiskPressure", corev1.ConditionTrue)}, false},
		{"problem unknown", []corev1.NodeCondition{cond(corev1.NodeReady, corev1.ConditionTrue), cond("KernelDeadlock", corev1.ConditionUnknown)}, false},
		{"other condition true", []corev1.NodeCondition{cond(corev1.NodeReady, corev1.ConditionTrue), cond("MemoryPressure", corev1.ConditionTrue)}, true},
		{"problems false", []corev1.NodeCondition{cond(corev1.NodeReady, corev1.ConditionTrue), cond("ReadonlyFilesystem", corev1.ConditionFalse)}, true},
	}
	for _, c := range cases {
		if got := isHealthy(c.conds, problems); got != c.want {
			t.Errorf("%s: healthy=%v, want %v", c.name, got, c.want)
		}
	}
}

func TestSyncTaintsKeepsOthers(t *testing.T) {
	foreign := corev1.Taint{Key: "node.kubernetes.io/unreachable", Effect: corev1.TaintEffectNoExecute}
	old := corev1.Taint{Key: "dedicated", Value: "a", Effect: corev1.TaintEffectNoSchedule}
	added := metav1.Now()
	kept := corev1.Taint{Key: "gpu", Value: "x", Effect: corev1.TaintEffectNoSchedule, TimeAdded: &added}
	cur := []corev1.Taint{foreign, old, kept}
	got := syncTaints(cur, []corev1.Taint{old, kept}, []corev1.Taint{{Key: "gpu", Value: "x", Effect: corev1.TaintEffectNoSchedule}, {Key: "new", Effect: corev1.TaintEffectPreferNoSchedule}})
	raw, _ := json.Marshal(got)
	if len(got) != 3 || got[0].Key != foreign.Key || got[1].Key != "gpu" || got[1].TimeAdded == nil || got[2].Key != "new" {
		t.Fatalf("taints = %s", raw)
	}
}

func TestMaxReplacements(t *testing.T) {
	cases := []struct {
		v     intstr.IntOrString
		total int
		want  int
	}{
		{intstr.FromInt32(1), 10, 1},
		{intstr.FromInt32(0), 10, 1},
		{intstr.FromInt32(3), 10, 3},
		{intstr.FromString("20%"), 10, 2},
		{intstr.FromString("10%"), 5, 1}, // rounds down to 0, never blocks the first
		{intstr.FromString("50%"), 0, 1},
	}
	for _, c := range cases {
		if got := maxReplacements(c.v, c.total); got != c.want {
			t.Errorf("%s of %d = %d, want %d", c.v.String(), c.total, got, c.want)
		}
	}
	bad := DefaultOptions()
	bad.MaxReplacements = intstr.FromString("lots")
	if err := bad.validate(); err == nil {
		t.Error("an invalid --max-replacements-per-deployment was accepted")
	}
}

func TestDeletionStepFromMarkerOrMCMText(t *testing.T) {
	m := &v1alpha1.Machine{}
	m.Status.CurrentStatus.Phase = v1alpha1.MachineTerminating
	m.Status.LastOperation.Description = "Drain failed due to - x. Will retry in next sync. Initiate node drain"
	if s, ok := mcmStep(m); !ok || s != stepDrain {
		t.Fatalf("MCM text step = %q %v", s, ok)
	}
	m.Status.LastOperation.Description = "Initiate VM deletion"
	if s, _ := mcmStep(m); s != stepVMDeletion {
		t.Fatalf("MCM text step = %q", s)
	}
	// Our marker wins over the text.
	raw, _ := json.Marshal(deletionState{Step: stepNodeDeletion})
	m.Annotations = map[string]string{AnnotationDeletion: string(raw)}
	if s, ok := deletionStateOf(m); !ok || s.Step != stepNodeDeletion {
		t.Fatalf("marker step = %+v %v", s, ok)
	}
	m.Annotations[AnnotationDeletion] = `{"step":"Bogus"}`
	if _, ok := deletionStateOf(m); ok {
		t.Fatal("an unknown step was accepted")
	}
}

func TestOwnWritesOutdatedUntilTheCacheCatchesUp(t *testing.T) {
	w := newOwnWrites()
	if w.outdated("ns/m", "1") {
		t.Fatal("a machine never written is not outdated")
	}
	// Two writes in one reconcile: 1 → 2 → 3. The cache may still show 1 or 2.
	w.record("ns/m", "1")
	w.record("ns/m", "2")
	for _, rv := range []string{"1", "2", "2"} {
		if !w.outdated("ns/m", rv) {
			t.Fatalf("version %s was replaced by our write: outdated", rv)
		}
	}
	if w.outdated("ns/other", "1") {
		t.Fatal("versions are per machine")
	}
	// The cache shows 3 (or anything newer): caught up, and the replaced versions are forgotten.
	if w.outdated("ns/m", "3") {
		t.Fatal("our latest write is not outdated")
	}
	if w.outdated("ns/m", "1") || len(w.superseded) != 0 {
		t.Fatalf("after catching up nothing is remembered: %v", w.superseded)
	}
	w.record("ns/m", "3")
	w.forget("ns/m")
	if w.outdated("ns/m", "3") {
		t.Fatal("a forgotten machine is not outdated")
	}
}
