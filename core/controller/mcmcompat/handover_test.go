package mcmcompat_test

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/internal/eventually"
)

// TestHandoverFromMCM plays a takeover from Gardener MCM on both CRD sets: machinist's, and the
// set shaped like MCM's (what a Gardener seed has installed).
func TestHandoverFromMCM(t *testing.T) {
	t.Run("machinist-crds", func(t *testing.T) { handover(t, machinistCRDs(t), false) })
	t.Run("mcm-shaped-crds", func(t *testing.T) { handover(t, mcmShapedCRDs(t), true) })
}

// handover: MCM ran a Gardener-style MachineDeployment (template label "name") with the set it
// created, whose 3 machines it left Pending without VMs, and a set of an older template it had
// scaled to 0 whose Pending machine it had not deleted yet; its MachineClass's nodeTemplate has a
// field this API does not know.
//
//  1. machinist takes over: it brings MCM's 3 machines up in MCM's set and creates no set; the
//     surplus machine is deleted without a single CreateMachine call; the class keeps its unknown
//     nodeTemplate field although machinist wrote the class (its finalizer).
//  2. machinist stops. As if MCM had then started a rollout (an old set with a machine, every node
//     marked for Cluster Autoscaler): node 1 carries MCM's two annotations, node 2 the mark with
//     machinist's old key, node 3 an operator's own scale-down-disabled (no "by-mcm" key).
//  3. machinist takes over again and finishes the rollout: nodes 1 and 2 lose the mark and every
//     record of it, node 3 keeps its operator's annotation.
//  4. Quiet: the run is churned (machine events, a scale-up and -down, an in-place nodeTemplate
//     change) and must bring no API warning and no warning or error log at all; over the whole
//     test each distinct API warning came at most a few times per start (the first status
//     writes of a field the server drops), and under MCM's CRDs each missing field or feature
//     was logged once per start with its meaning.
//
// The issue saw 39 "unknown field" warnings in 2 minutes: one per status write, i.e. per
// reconcile. The churn in step 4 forces dozens of reconciles of every controller in seconds,
// more than an idle 2-minute run does (resyncs come every 10 minutes), so a warning loop shows
// here as surely as in a 2-minute run.
func handover(t *testing.T, w *world, mcmShaped bool) {
	unknown := map[string]any{"hugepages": "2Mi"}
	w.class("a", map[string]any{"nodeTemplate": map[string]any{
		"capacity": map[string]any{"cpu": "2", "gpu": "0", "memory": "4Gi"}, "instanceType": "local", "region": "local", "zone": "local-1",
		"futureField": unknown,
	}})
	w.class("old", nil)
	d := w.deployment("pool", "a", 3, map[string]string{"name": "pool"})
	w.create(d)
	current := w.mcmSet(d, "7b9f4", 3, d.Spec.Template)
	w.create(current)
	for _, n := range []string{"pool-7b9f4-aaaaa", "pool-7b9f4-bbbbb", "pool-7b9f4-ccccc"} {
		w.mcmMachine(current, n, v1alpha1.MachinePending, "")
	}
	oldTmpl := d.Spec.Template.DeepCopy()
	oldTmpl.Spec.Class.Name = "old"
	surplus := w.mcmSet(d, "5c6d7", 0, *oldTmpl)
	w.create(surplus)
	const surplusMachine = "pool-5c6d7-zzzzz"
	w.mcmMachine(surplus, surplusMachine, v1alpha1.MachinePending, "")

	// 1. The takeover.
	w.start()
	ms := w.running(3, 2*time.Minute)
	if got := names(ms); !slices.Equal(got, []string{"pool-7b9f4-aaaaa", "pool-7b9f4-bbbbb", "pool-7b9f4-ccccc"}) {
		t.Fatalf("machines %v: MCM's three must be the ones brought up", got)
	}
	if n := w.drv.createsOf(surplusMachine); n != 0 {
		t.Fatalf("%d CreateMachine calls for %s, whose set was scaled to 0", n, surplusMachine)
	}
	var setNames []string
	for _, s := range w.sets() {
		setNames = append(setNames, s.Name)
	}
	if !slices.Equal(setNames, []string{surplus.Name, current.Name}) { // by name
		t.Fatalf("machine sets %v: machinist must create none", setNames)
	}
	class := &unstructured.Unstructured{}
	class.SetGroupVersionKind(v1alpha1.SchemeGroupVersion.WithKind("MachineClass"))
	eventually.Explained(w.t, 30*time.Second, "the class's finalizer", func() (bool, string) {
		if err := w.c.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: "a"}, class); err != nil {
			return false, err.Error()
		}
		return slices.Contains(class.GetFinalizers(), v1alpha1.FinalizerMachineControllerManager), fmt.Sprint(class.GetFinalizers())
	})
	got, _, _ := unstructured.NestedMap(class.Object, "nodeTemplate", "futureField")
	if !maps.Equal(toStrings(got), toStrings(unknown)) {
		t.Fatalf("the class's unknown nodeTemplate field after machinist wrote the class: %v", got)
	}

	eventually.Explained(w.t, time.Minute, "the surplus machine gone", func() (bool, string) {
		err := w.c.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: surplusMachine}, &v1alpha1.Machine{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	if n := w.drv.createsOf(surplusMachine); n != 0 {
		t.Fatalf("%d CreateMachine calls for %s before it was deleted", n, surplusMachine)
	}

	// The surplus set's machine made this a rollout, for which machinist marked the nodes; it
	// unmarks them once the rollout is over, in a later pass. Stopping before that pass would
	// leave machinist's record on node 3 under the operator's mark of step 2.
	eventually.Explained(w.t, time.Minute, "the takeover's rollout marks gone", func() (bool, string) {
		for _, m := range ms {
			n := w.node(m.Labels[v1alpha1.LabelNode])
			if n == nil {
				return false, "node of " + m.Name + " missing"
			}
			if v1alpha1.ScaleDownDisabledByController(n.Annotations) {
				return false, fmt.Sprintf("node %s: %v", n.Name, n.Annotations)
			}
		}
		return true, ""
	})

	// 2. machinist stops; MCM starts a rollout and marks the nodes.
	w.stopManager()
	update(w, surplus, func(s *v1alpha1.MachineSet) { s.Spec.Replicas = 1 })
	// The old set's machine has a VM MCM made (a providerID the local provider does not know).
	w.mcmMachine(surplus, "pool-5c6d7-yyyyy", v1alpha1.MachineRunning, "local:///pool-5c6d7-yyyyy")
	marks := []map[string]string{
		{v1alpha1.AnnotationCAScaleDownDisabled: "true", v1alpha1.AnnotationCAScaleDownDisabledByMCM: "true"},
		{v1alpha1.AnnotationCAScaleDownDisabled: "true", v1alpha1.LegacyAnnotationCAScaleDownDisabledByMCM: "true"},
		{v1alpha1.AnnotationCAScaleDownDisabled: "true"},
	}
	var nodes []string
	for i, m := range ms {
		nodes = append(nodes, m.Labels[v1alpha1.LabelNode])
		n := w.node(nodes[i])
		patch := client.MergeFrom(n.DeepCopy())
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		maps.Copy(n.Annotations, marks[i])
		if err := w.c.Patch(w.ctx, n, patch); err != nil {
			t.Fatal(err)
		}
	}

	// 3. machinist finishes the rollout and unmarks what MCM or it marked.
	w.start()
	eventually.Explained(w.t, 2*time.Minute, "the rollout over: the old set's machine gone", func() (bool, string) {
		var desc []string
		for _, m := range w.machines() {
			desc = append(desc, m.Name+"="+string(m.Status.CurrentStatus.Phase))
		}
		dd := &v1alpha1.MachineDeployment{}
		if err := w.c.Get(w.ctx, client.ObjectKeyFromObject(d), dd); err != nil {
			return false, err.Error()
		}
		return len(desc) == 3 && dd.Status.UpdatedReplicas == 3 && dd.Status.AvailableReplicas == 3 && dd.Status.Replicas == 3,
			fmt.Sprintf("machines %v, status %+v", desc, dd.Status)
	})
	eventually.Explained(w.t, time.Minute, "MCM's and machinist's marks gone, the operator's kept", func() (bool, string) {
		for i, name := range nodes {
			n := w.node(name)
			if n == nil {
				return false, "node " + name + " gone"
			}
			left := maps.Clone(n.Annotations)
			maps.DeleteFunc(left, func(k, _ string) bool { return !strings.Contains(k, "scale-down-disabled") })
			want := map[string]string{}
			if i == 2 {
				want = marks[2]
			}
			if !maps.Equal(left, want) {
				return false, fmt.Sprintf("node %d %s: %v, want %v", i+1, name, left, want)
			}
		}
		return true, ""
	})
	if got := names(w.machines()); !slices.Equal(got, names(ms)) {
		t.Fatalf("machines %v after the rollout, want %v", got, names(ms))
	}

	// 4. Quiet under churn.
	warnings0, logs0 := w.warnings.count(), w.logs.count()
	for i := range 10 {
		for _, m := range w.machines() {
			patch := client.MergeFrom(m.DeepCopy())
			if m.Annotations == nil {
				m.Annotations = map[string]string{}
			}
			m.Annotations["test.machinist.io/touch"] = fmt.Sprint(i)
			if err := w.c.Patch(w.ctx, &m, patch); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	update(w, d, func(d *v1alpha1.MachineDeployment) { d.Spec.Replicas = 4 })
	w.running(4, 2*time.Minute)
	update(w, d, func(d *v1alpha1.MachineDeployment) {
		d.Spec.Replicas = 3
		d.Spec.Template.Spec.NodeTemplateSpec.Labels["team"] = "quiet"
	})
	eventually.Explained(w.t, time.Minute, "3 machines whose nodes carry team=quiet", func() (bool, string) {
		ms := w.machines()
		for _, m := range ms {
			if n := w.node(m.Labels[v1alpha1.LabelNode]); m.DeletionTimestamp != nil || n == nil || n.Labels["team"] != "quiet" {
				return false, m.Name
			}
		}
		return len(ms) == 3, fmt.Sprintf("%d machines", len(ms))
	})
	time.Sleep(2 * time.Second) // the last reconciles
	if ws := w.warnings.since(warnings0); len(ws) > 0 {
		t.Errorf("API warnings under churn: %q", ws)
	}
	for _, r := range w.logs.since(logs0) {
		if strings.Contains(r.msg, "unknown field") || r.level >= slog.LevelWarn {
			t.Errorf("log under churn: %s", r.String())
		}
	}

	// Over the whole test (two starts): few warnings, each a field the server was first seen to drop.
	perText := map[string]int{}
	for _, text := range w.warnings.since(0) {
		perText[text]++
	}
	for text, n := range perText {
		if n > 2*w.runs*3 {
			t.Errorf("API warning %q came %d times in %d starts: a loop", text, n, w.runs)
		}
		if !mcmShaped {
			t.Errorf("API warning on machinist's CRDs: %q", text)
		}
	}
	t.Logf("API warnings over the whole test: %v", perText)
	missing := map[string]int{}
	for _, r := range w.logs.since(0) {
		if strings.Contains(r.msg, "is missing (Gardener MCM's CRDs?)") {
			missing[fmt.Sprintf("run %d: %s", r.run, r.msg)]++
		}
	}
	for msg, n := range missing {
		if n != 1 {
			t.Errorf("logged %d times: %s", n, msg)
		}
	}
	if mcmShaped {
		for run := 1; run <= w.runs; run++ {
			for _, what := range []string{"the MachineClass CRD's status subresource", "the MachineSet CRD's status.labelSelector", "the MachineDeployment CRD's status.labelSelector"} {
				if !hasPrefixKey(missing, fmt.Sprintf("run %d: %s", run, what)) {
					t.Errorf("run %d did not say once that %s is missing; it said %v", run, what, slices.Collect(maps.Keys(missing)))
				}
			}
		}
	} else if len(missing) > 0 {
		t.Errorf("on machinist's CRDs nothing is missing, yet: %v", missing)
	}
}

func hasPrefixKey(m map[string]int, prefix string) bool {
	for k := range m {
		if strings.HasPrefix(k, prefix) {
			return true
		}
	}
	return false
}

func toStrings(m map[string]any) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = fmt.Sprint(v)
	}
	return out
}
