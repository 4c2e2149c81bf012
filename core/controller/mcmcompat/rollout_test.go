package mcmcompat_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/internal/eventually"
)

// TestTemplateChangesInPlaceAndRollouts: what MCM applies in place is applied in place, what it
// rolls out is rolled out
// (docs/compatibility/mcm-controllers.md#what-rolls-out-and-what-applies-in-place). On a
// MachineDeployment of 3, a nodeTemplate label, taint and annotation are added, changed and
// removed, then the machine configuration (drainTimeout) changes: the nodes, or the machines'
// specs, follow within seconds, with the same three machines and the one MachineSet throughout (no
// machine created, deleted or drained). Then the class name changes: a rolling update to a new
// MachineSet, during which the nodes carry Cluster Autoscaler's scale-down-disabled mark with MCM's
// keys, and after which no node carries it.
func TestTemplateChangesInPlaceAndRollouts(t *testing.T) {
	w := machinistCRDs(t)
	w.class("a", nil)
	w.class("b", nil)
	d := w.deployment("pool", "a", 3, map[string]string{"pool": "pool"})
	w.create(d)
	w.start()
	before := w.running(3, 2*time.Minute)
	sets := w.sets()
	if len(sets) != 1 {
		t.Fatalf("%d machine sets, want 1", len(sets))
	}
	set := sets[0]
	if len(set.Spec.Template.Labels) != 2 || set.Spec.MachineClass != (v1alpha1.ClassSpec{}) {
		t.Fatalf("set %s not as MCM writes it: template labels %v, machineClass %+v", set.Name, set.Spec.Template.Labels, set.Spec.MachineClass)
	}
	ch := w.watchChurn()

	// The nodeTemplate: added, changed, removed.
	steps := []struct {
		what       string
		label, ann string // "" removes
		taint      string
	}{
		{"added", "a", "a", "a"},
		{"changed", "b", "b", "b"},
		{"removed", "", "", ""},
	}
	for _, s := range steps {
		update(w, d, func(d *v1alpha1.MachineDeployment) {
			nt := &d.Spec.Template.Spec.NodeTemplateSpec
			nt.Labels = map[string]string{"worker.gardener.cloud/pool": "pool"}
			nt.Annotations, nt.Spec.Taints = nil, nil
			if s.label != "" {
				nt.Labels["team"] = s.label
				nt.Annotations = map[string]string{"example.com/owner": s.ann}
				nt.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: s.taint, Effect: corev1.TaintEffectNoSchedule}}
			}
		})
		took := eventually.Explained(w.t, time.Minute, "nodes with the template's "+s.what+" label, annotation and taint", func() (bool, string) {
			for _, m := range w.machines() {
				n := w.node(m.Labels[v1alpha1.LabelNode])
				if n == nil {
					return false, m.Name + " has no node"
				}
				label, hasLabel := n.Labels["team"]
				ann, hasAnn := n.Annotations["example.com/owner"]
				var taint *corev1.Taint
				for i := range n.Spec.Taints {
					if n.Spec.Taints[i].Key == "dedicated" {
						taint = &n.Spec.Taints[i]
					}
				}
				if s.label == "" {
					if hasLabel || hasAnn || taint != nil {
						return false, fmt.Sprintf("node %s still has label %q annotation %q taint %v", n.Name, label, ann, taint)
					}
				} else if label != s.label || ann != s.ann || taint == nil || taint.Value != s.taint || taint.Effect != corev1.TaintEffectNoSchedule {
					return false, fmt.Sprintf("node %s: label %q annotation %q taint %v", n.Name, label, ann, taint)
				}
				if n.Labels["worker.gardener.cloud/pool"] != "pool" {
					return false, fmt.Sprintf("node %s lost the template's other label: %v", n.Name, n.Labels)
				}
			}
			return true, ""
		})
		t.Logf("nodeTemplate entries %s: all nodes followed in %s", s.what, took.Round(10*time.Millisecond))
	}

	// The machine configuration.
	update(w, d, func(d *v1alpha1.MachineDeployment) {
		d.Spec.Template.Spec.MachineConfiguration = &v1alpha1.MachineConfiguration{
			MachineDrainTimeout: &metav1.Duration{Duration: time.Hour}, MaxEvictRetries: ptr.To[int32](7),
		}
	})
	took := eventually.Explained(w.t, time.Minute, "machines with drainTimeout 1h and maxEvictRetries 7", func() (bool, string) {
		for _, m := range w.machines() {
			c := m.Spec.MachineConfiguration
			if c == nil || c.MachineDrainTimeout == nil || c.MachineDrainTimeout.Duration != time.Hour || c.MaxEvictRetries == nil || *c.MaxEvictRetries != 7 {
				return false, fmt.Sprintf("machine %s: %s", m.Name, toJSON(c))
			}
		}
		return true, ""
	})
	t.Logf("machine configuration: all machines followed in %s", took.Round(10*time.Millisecond))

	if got := names(w.machines()); !slices.Equal(got, names(before)) {
		t.Fatalf("machines %v after the in-place changes, before %v", got, names(before))
	}
	if ev := ch.seen(); len(ev) > 0 {
		t.Fatalf("in-place changes created, deleted or drained something: %v", ev)
	}
	if s := w.sets(); len(s) != 1 || s[0].Name != set.Name || s[0].Labels[v1alpha1.LabelMachineTemplateHash] != set.Labels[v1alpha1.LabelMachineTemplateHash] {
		t.Fatalf("machine sets after the in-place changes: %v", s)
	}

	// The class name: a rolling update. The mark of Cluster Autoscaler is MCM's while it runs.
	ch.stop()
	update(w, d, func(d *v1alpha1.MachineDeployment) { d.Spec.Template.Spec.Class.Name = "b" })
	sawMark := false
	eventually.Explained(w.t, 3*time.Minute, "3 Running machines of class b, the old set empty", func() (bool, string) {
		for _, m := range w.machines() {
			n := w.node(m.Labels[v1alpha1.LabelNode])
			if n == nil {
				continue
			}
			if _, legacy := n.Annotations[v1alpha1.LegacyAnnotationCAScaleDownDisabledByMCM]; legacy {
				t.Fatalf("node %s marked with machinist's old key during the rollout: %v", n.Name, n.Annotations)
			}
			if n.Annotations[v1alpha1.AnnotationCAScaleDownDisabled] == "true" && n.Annotations[v1alpha1.AnnotationCAScaleDownDisabledByMCM] == "true" {
				sawMark = true
			}
		}
		var desc []string
		onB := 0
		ms := w.machines()
		for _, m := range ms {
			desc = append(desc, m.Name+"="+m.Spec.Class.Name+"/"+string(m.Status.CurrentStatus.Phase))
			if m.Spec.Class.Name == "b" && m.Status.CurrentStatus.Phase == v1alpha1.MachineRunning && m.DeletionTimestamp == nil {
				onB++
			}
		}
		return onB == 3 && len(ms) == 3, strings.Join(desc, " ")
	})
	if !sawMark {
		t.Error("no node carried the scale-down-disabled mark with MCM's key during the rollout")
	}
	after := w.machines()
	for _, m := range after {
		if slices.Contains(names(before), m.Name) {
			t.Errorf("machine %s survived a class change: it must have been replaced", m.Name)
		}
	}
	sets = w.sets()
	if len(sets) != 2 {
		t.Fatalf("%d machine sets after the rollout, want the old and the new one", len(sets))
	}
	for _, ms := range sets {
		if ms.Name == set.Name && ms.Spec.Replicas != 0 {
			t.Errorf("old set %s still has %d replicas", ms.Name, ms.Spec.Replicas)
		}
	}
	// Once the rollout is over, no node keeps the mark or the old sets' taint.
	eventually.Explained(w.t, time.Minute, "no node marked by the rollout", func() (bool, string) {
		for _, m := range w.machines() {
			n := w.node(m.Labels[v1alpha1.LabelNode])
			if n == nil {
				return false, m.Name + " has no node"
			}
			marks := maps.Clone(n.Annotations)
			maps.DeleteFunc(marks, func(k, _ string) bool { return !strings.Contains(k, "scale-down-disabled") })
			if len(marks) > 0 {
				return false, fmt.Sprintf("node %s: %v", n.Name, marks)
			}
			for _, tn := range n.Spec.Taints {
				if tn.Key == v1alpha1.TaintPreferNoSchedule {
					return false, fmt.Sprintf("node %s: taint %v", n.Name, tn)
				}
			}
		}
		return true, ""
	})
}

// TestAdoptsMachineSetAsMCMWritesIt: a MachineDeployment MCM was running, with the MachineSet
// MCM created for it (no spec.machineClass, no label "name", an older nodeTemplate since
// changed in the deployment) and that set's machines MCM left Pending without VMs. machinist's
// CRDs accept the set; machinist takes it as the deployment's current set, creates no other,
// brings its machines up and applies the deployment's nodeTemplate in place.
func TestAdoptsMachineSetAsMCMWritesIt(t *testing.T) {
	w := machinistCRDs(t)
	w.class("a", nil)
	d := w.deployment("pool", "a", 2, map[string]string{"pool": "pool"})
	w.create(d)
	old := d.Spec.Template.DeepCopy()
	old.Spec.NodeTemplateSpec.Labels = map[string]string{"worker.gardener.cloud/pool": "pool", "generation": "1"}
	ms := w.mcmSet(d, "7b9f4", 2, *old)
	w.create(ms)
	w.mcmMachine(ms, "pool-7b9f4-aaaaa", v1alpha1.MachinePending, "")
	w.mcmMachine(ms, "pool-7b9f4-bbbbb", v1alpha1.MachinePending, "")
	update(w, d, func(d *v1alpha1.MachineDeployment) {
		d.Spec.Template.Spec.NodeTemplateSpec.Labels["generation"] = "2"
	})

	w.start()
	ms2 := w.running(2, 2*time.Minute)
	if got := names(ms2); !slices.Equal(got, []string{"pool-7b9f4-aaaaa", "pool-7b9f4-bbbbb"}) {
		t.Fatalf("machines %v: MCM's machines must be the ones brought up", got)
	}
	eventually.Explained(w.t, 30*time.Second, "nodes with the deployment's nodeTemplate", func() (bool, string) {
		for _, m := range w.machines() {
			if n := w.node(m.Labels[v1alpha1.LabelNode]); n == nil || n.Labels["generation"] != "2" {
				return false, fmt.Sprintf("machine %s: node %v", m.Name, n)
			}
		}
		return true, ""
	})
	sets := w.sets()
	if len(sets) != 1 || sets[0].Name != ms.Name {
		t.Fatalf("machine sets %v: MCM's set must stay the only one", sets)
	}
	if got := sets[0].Spec.Template.Spec.NodeTemplateSpec.Labels["generation"]; got != "2" {
		t.Fatalf("MCM's set's nodeTemplate not updated in place: generation=%q", got)
	}
	if got := sets[0].Labels[v1alpha1.LabelMachineTemplateHash]; got != "7b9f4" {
		t.Fatalf("MCM's set's hash label changed to %q", got)
	}
}
