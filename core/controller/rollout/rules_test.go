package rollout

import (
	"fmt"
	"maps"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

func TestFenceposts(t *testing.T) {
	for _, tc := range []struct {
		replicas            int32
		surge, unavail      *intstr.IntOrString
		wantSurge, wantUnav int32
	}{
		{10, ptr.To(intstr.FromString("25%")), ptr.To(intstr.FromString("25%")), 3, 2}, // surge rounds up, unavailable down
		{3, ptr.To(intstr.FromInt32(0)), ptr.To(intstr.FromInt32(0)), 0, 1},            // both 0: one unavailable
		{3, nil, nil, 0, 1}, // unset is 0, as MCM
		{3, ptr.To(intstr.FromInt32(1)), ptr.To(intstr.FromInt32(0)), 1, 0},
		{1, ptr.To(intstr.FromString("10%")), ptr.To(intstr.FromString("10%")), 1, 0},
	} {
		d := deployment(tc.replicas, tc.surge, tc.unavail)
		s, u, err := fenceposts(d)
		if err != nil || s != tc.wantSurge || u != tc.wantUnav {
			t.Errorf("replicas %d surge %v unavailable %v: got %d/%d (%v), want %d/%d", tc.replicas, tc.surge, tc.unavail, s, u, err, tc.wantSurge, tc.wantUnav)
		}
	}
	if _, _, err := fenceposts(deployment(3, ptr.To(intstr.FromString("abc")), nil)); err == nil {
		t.Error("a malformed maxSurge must be an error")
	}
}

func TestTemplateHashChangesWithClass(t *testing.T) {
	d := deployment(3, nil, nil)
	h1 := TemplateHash(&d.Spec.Template, nil)
	if h1 != TemplateHash(&d.Spec.Template, nil) {
		t.Fatal("hash is not stable")
	}
	d2 := d.DeepCopy()
	d2.Spec.Template.Spec.Class.Name = "b"
	if TemplateHash(&d2.Spec.Template, nil) == h1 {
		t.Fatal("a class change must change the hash")
	}
	one := int32(1)
	if TemplateHash(&d.Spec.Template, &one) == h1 {
		t.Fatal("the collision count must change the hash")
	}
	ms := &v1alpha1.MachineSet{Spec: v1alpha1.MachineSetSpec{Template: setTemplate(d, h1)}}
	if want := map[string]string{"app": "x", v1alpha1.LabelMachineTemplateHash: h1}; !reflect.DeepEqual(ms.Spec.Template.Labels, want) {
		t.Fatalf("set template labels %v, want %v (the deployment's and the hash, as MCM writes them)", ms.Spec.Template.Labels, want)
	}
	if !TemplateMatches(d, ms) {
		t.Fatal("the set of the current template must match")
	}
	if TemplateMatches(d2, ms) {
		t.Fatal("a set of another class must not match")
	}
}

// TestSameTemplate: what rolls out and what does not, as MCM's EqualIgnoreHash decides.
func TestSameTemplate(t *testing.T) {
	base := deployment(3, nil, nil)
	base.Spec.Template.Annotations = map[string]string{"a": "1"}
	base.Spec.Template.Spec.NodeTemplateSpec.Labels = map[string]string{"zone": "a"}
	set := &v1alpha1.MachineSet{Spec: v1alpha1.MachineSetSpec{Template: setTemplate(base, "111")}}
	drain := metav1.Duration{Duration: time.Hour}
	for _, tc := range []struct {
		name   string
		change func(*v1alpha1.MachineTemplateSpec)
		same   bool
	}{
		{"unchanged", func(*v1alpha1.MachineTemplateSpec) {}, true},
		{"node label added", func(t *v1alpha1.MachineTemplateSpec) { t.Spec.NodeTemplateSpec.Labels["new"] = "x" }, true},
		{"node taint added", func(t *v1alpha1.MachineTemplateSpec) {
			t.Spec.NodeTemplateSpec.Spec.Taints = []corev1.Taint{{Key: "k", Effect: corev1.TaintEffectNoSchedule}}
		}, true},
		{"node annotation added", func(t *v1alpha1.MachineTemplateSpec) {
			t.Spec.NodeTemplateSpec.Annotations = map[string]string{"n": "1"}
		}, true},
		{"drain timeout", func(t *v1alpha1.MachineTemplateSpec) {
			t.Spec.MachineConfiguration = &v1alpha1.MachineConfiguration{MachineDrainTimeout: &drain}
		}, true},
		{"class kind", func(t *v1alpha1.MachineTemplateSpec) { t.Spec.Class.Kind = "OpenStackMachineClass" }, true},
		{"class name", func(t *v1alpha1.MachineTemplateSpec) { t.Spec.Class.Name = "b" }, false},
		{"template label added", func(t *v1alpha1.MachineTemplateSpec) { t.Labels["name"] = "md" }, false},
		{"template label changed", func(t *v1alpha1.MachineTemplateSpec) { t.Labels["app"] = "y" }, false},
		{"template annotation", func(t *v1alpha1.MachineTemplateSpec) { t.Annotations["a"] = "2" }, false},
		{"providerID", func(t *v1alpha1.MachineTemplateSpec) { t.Spec.ProviderID = "x" }, false},
	} {
		d := base.DeepCopy()
		d.Spec.Template.Labels = maps.Clone(d.Spec.Template.Labels)
		d.Spec.Template.Annotations = maps.Clone(d.Spec.Template.Annotations)
		tc.change(&d.Spec.Template)
		if got := TemplateMatches(d, set); got != tc.same {
			t.Errorf("%s: same template = %v, want %v", tc.name, got, tc.same)
		}
		// What does not roll out is copied into the current set.
		upd := set.DeepCopy()
		changed := syncInPlace(d, upd)
		if tc.same && tc.name != "unchanged" && (!changed || !TemplateMatches(d, upd) || !reflect.DeepEqual(upd.Spec.Template.Spec.NodeTemplateSpec, d.Spec.Template.Spec.NodeTemplateSpec) ||
			!reflect.DeepEqual(upd.Spec.Template.Spec.MachineConfiguration, d.Spec.Template.Spec.MachineConfiguration) || upd.Spec.Template.Spec.Class.Kind != d.Spec.Template.Spec.Class.Kind) {
			t.Errorf("%s: not copied in place: %+v", tc.name, upd.Spec.Template.Spec)
		}
		if tc.name == "unchanged" && changed {
			t.Errorf("unchanged template: syncInPlace reports a change")
		}
	}
	// MCM compares labels over the larger map: a label with an empty value on one side counts as
	// absent when the maps have the same size.
	a := &v1alpha1.MachineTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "x", v1alpha1.LabelMachineTemplateHash: "1"}}}
	b := &v1alpha1.MachineTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "x", "empty": ""}}}
	if !SameTemplate(a, b) || !SameTemplate(b, a) {
		t.Error("labels equal but for the hash and an empty value: MCM takes them as the same template")
	}
}

func TestParseTrigger(t *testing.T) {
	got := parseTrigger(" [m1~2026-01-01T00:00:00Z, m2~2026-01-01T00:00:01Z,m1~x,,m3] ")
	want := []triggerEntry{{"m1", "2026-01-01T00:00:00Z"}, {"m2", "2026-01-01T00:00:01Z"}, {"m3", ""}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v want %v", got, want)
	}
	if s := formatTrigger(want); s != "m1~2026-01-01T00:00:00Z,m2~2026-01-01T00:00:01Z,m3" {
		t.Fatalf("format: %s", s)
	}
}

func TestDistribute(t *testing.T) {
	for _, tc := range []struct {
		sizes  []int32
		target int32
		want   []int32
	}{
		{[]int32{6, 3, 1}, 5, []int32{3, 2, 0}},
		{[]int32{6, 3, 1}, 20, []int32{12, 6, 2}},
		{[]int32{1, 1}, 1, []int32{0, 1}}, // equal sets: the older one shrinks first
		{[]int32{1, 1}, 3, []int32{1, 2}}, // equal sets: the newer one grows first
		{[]int32{2, 2}, 0, []int32{0, 0}},
	} {
		var sets []*v1alpha1.MachineSet
		sizes := map[types.UID]int32{}
		for i, s := range tc.sizes {
			ms := set(fmt.Sprintf("s%d", i), s, time.Duration(len(tc.sizes)-i)*time.Hour)
			sets = append(sets, ms)
			sizes[ms.UID] = s
		}
		distribute(sets, sizes, tc.target)
		var sum int32
		for i, ms := range sets {
			sum += sizes[ms.UID]
			if sizes[ms.UID] != tc.want[i] {
				t.Errorf("sizes %v → %d: set %d got %d want %d", tc.sizes, tc.target, i, sizes[ms.UID], tc.want[i])
			}
		}
		if sum != tc.target {
			t.Errorf("sizes %v → %d: sum %d", tc.sizes, tc.target, sum)
		}
	}
}

func TestNewSetReplicasCountsTerminatingMachines(t *testing.T) {
	d := deployment(3, ptr.To(intstr.FromInt32(1)), ptr.To(intstr.FromInt32(0)))
	old := set("old", 2, 2*time.Hour)
	newMS := set("new", 1, time.Hour)
	ro := newPlanner(Input{Deployment: d, Machines: map[types.UID][]*v1alpha1.Machine{
		old.UID:   {{}, {}, {}}, // one of the three is still terminating
		newMS.UID: {{}},
	}})
	if got := ro.newSetReplicas([]*v1alpha1.MachineSet{old, newMS}, newMS); got != 1 {
		t.Fatalf("with a terminating machine the new set must wait: got %d want 1", got)
	}
	ro.in.Machines[old.UID] = ro.in.Machines[old.UID][:2]
	if got := ro.newSetReplicas([]*v1alpha1.MachineSet{old, newMS}, newMS); got != 2 {
		t.Fatalf("once it is gone the new set may grow: got %d want 2", got)
	}
}
