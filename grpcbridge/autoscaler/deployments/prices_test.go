package deployments_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/fallback"
	"github.com/machinist-io/machinist/grpcbridge/autoscaler"
	"github.com/machinist-io/machinist/grpcbridge/autoscaler/clusterautoscaler"
	"github.com/machinist-io/machinist/grpcbridge/autoscaler/deployments"
	"github.com/machinist-io/machinist/grpcbridge/autoscaler/internal/autoscalertest"
	"github.com/machinist-io/machinist/internal/eventually"
)

// annotate merges annotations into an object's (a nil value removes one).
func (w *world) annotate(obj client.Object, annotations map[string]*string) {
	w.t.Helper()
	ann := map[string]any{}
	for k, v := range annotations {
		if v == nil {
			ann[k] = nil
		} else {
			ann[k] = *v
		}
	}
	raw := fmt.Sprintf(`{"metadata":{"annotations":%s}}`, mustJSON(w.t, ann))
	if err := w.c.Patch(w.ctx, obj, client.RawPatch(types.MergePatchType, []byte(raw))); err != nil {
		w.t.Fatalf("annotate %T %s: %v", obj, obj.GetName(), err)
	}
}

func price(v string) map[string]*string {
	return map[string]*string{fallback.AnnotationPricePerHour: &v}
}

// asTemplate is the node Cluster Autoscaler prices for a scale-up option of group id: the
// template it got from the server, sanitized (renamed, labelled as a template).
func asTemplate(n *corev1.Node, id string) *corev1.Node {
	n = n.DeepCopy()
	n.Name = "template-node-for-" + id + "-8674665223082153551"
	n.Labels[autoscaler.LabelTemplateNode] = "true"
	return n
}

// eventNotes lists the notes of the events of reason about an object of kind and name.
func (w *world) eventNotes(kind, name, reason string) []string {
	w.t.Helper()
	list, err := w.env.Clientset().EventsV1().Events(ns).List(w.ctx, metav1.ListOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Kind == kind && e.Regarding.Name == name && e.Reason == reason {
			out = append(out, e.Note)
		}
	}
	return out
}

// TestGroupPrices: a group's price is its class's machinist.io/price-per-hour (or its
// deployment's own), for the template node of a scale-up option and for the nodes of the group,
// per hour of the interval asked; a pod costs its share of the cheapest priced node. A group
// without a price, or whose price does not parse, answers what Cluster Autoscaler's price
// expander takes as "leave this option out" (not implemented); a bad value is a Warning Event on
// its object naming the annotation and what to write; a foreign node is NotFound.
func TestGroupPrices(t *testing.T) {
	w := newWorld(t)
	for _, c := range []struct{ name, price string }{{"std", "0.20"}, {"typo", "0,20"}, {"unpriced", ""}} {
		class := w.class(c.name, true)
		if c.price != "" {
			w.annotate(class, price(c.price))
		}
	}
	with := func(extra map[string]string) map[string]string {
		ann := sizeAnnotations(0, 5)
		for k, v := range extra {
			ann[k] = v
		}
		return ann
	}
	_, stdSet := w.deployment("std", "std", 1, with(nil))
	w.deployment("own", "std", 0, with(map[string]string{fallback.AnnotationPricePerHour: "0.15"}))
	w.deployment("badown", "std", 0, with(map[string]string{fallback.AnnotationPricePerHour: "cheap"}))
	w.deployment("typo", "typo", 0, with(nil))
	w.deployment("unpriced", "unpriced", 0, with(nil))
	w.machine(stdSet, "std-1", "local:///std-1", running())
	p := w.provider()
	certs := autoscalertest.NewCerts(t)
	scaler := autoscalertest.Connect(t, autoscalertest.Serve(t, p, certs), certs, clusterautoscaler.Current)

	start := time.Now()
	hour := start.Add(time.Hour)
	templatePrice := func(group string, end time.Time) (float64, error) {
		t.Helper()
		id := ns + "." + group
		node, err := scaler.TemplateNodeInfo(id)
		if err != nil {
			t.Fatalf("template of %s: %v", id, err)
		}
		return scaler.NodePrice(asTemplate(node, id), start, end)
	}
	for _, tc := range []struct {
		group string
		end   time.Time
		want  float64
	}{{"std", hour, 0.20}, {"std", start.Add(90 * time.Minute), 0.30}, {"own", hour, 0.15}} {
		if got, err := templatePrice(tc.group, tc.end); err != nil || math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("template of %s until %v: %v, %v; want %v", tc.group, tc.end.Sub(start), got, err, tc.want)
		}
	}
	for _, group := range []string{"typo", "unpriced", "badown"} {
		if _, err := templatePrice(group, hour); !errors.Is(err, clusterautoscaler.ErrNotImplemented) {
			t.Errorf("template of %s: %v, want not implemented (the price expander leaves the option out)", group, err)
		}
	}
	if got, err := scaler.NodePrice(realNode("std-1", "local:///std-1"), start, hour); err != nil || math.Abs(got-0.20) > 1e-9 {
		t.Errorf("node std-1: %v, %v; want its class's 0.20", got, err)
	}
	if _, err := scaler.NodePrice(realNode("elsewhere", "azure:///subscriptions/s/resourceGroups/r/providers/Microsoft.Compute/virtualMachines/x"), start, hour); err == nil || errors.Is(err, clusterautoscaler.ErrNotImplemented) {
		t.Errorf("a foreign node: %v, want NotFound", err)
	}
	// A pod of 1 CPU and 4Gi is a quarter of a node of 4 CPU and 16Gi; the cheapest such node is
	// "own"'s at 0.15.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: ns}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Name: "c", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: mustQ("1"), corev1.ResourceMemory: mustQ("4Gi")}}}}}}
	if got, err := scaler.PodPrice(pod, start, hour); err != nil || math.Abs(got-0.0375) > 1e-9 {
		t.Errorf("pod price %v, %v; want 0.0375", got, err)
	}

	eventually.True(t, 30*time.Second, "InvalidPrice events on the class typo and the deployment badown", func() bool {
		return len(w.eventNotes("MachineClass", "typo", deployments.ReasonInvalidPrice)) > 0 &&
			len(w.eventNotes("MachineDeployment", "badown", deployments.ReasonInvalidPrice)) > 0
	})
	for _, note := range append(w.eventNotes("MachineClass", "typo", deployments.ReasonInvalidPrice), w.eventNotes("MachineDeployment", "badown", deployments.ReasonInvalidPrice)...) {
		if !strings.Contains(note, fallback.AnnotationPricePerHour) || !strings.Contains(note, "e.g. 0.096") {
			t.Errorf("event note %q names neither the annotation nor what to write", note)
		}
	}
	groups, err := scaler.NodeGroups()
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range groups {
		if g.GetId() == ns+".own" && !strings.Contains(g.GetDebug(), "price 0.15/h from MachineDeployment "+ns+"/own") {
			t.Errorf("debug of own: %q", g.GetDebug())
		}
		if g.GetId() == ns+".badown" && !strings.Contains(g.GetDebug(), `ignored: `+fallback.AnnotationPricePerHour+`="cheap"`) {
			t.Errorf("debug of badown: %q", g.GetDebug())
		}
	}

	// Fixing the class gives its group a price.
	w.annotate(&v1alpha1.MachineClass{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "typo"}}, price("0.25"))
	eventually.True(t, 30*time.Second, "the fixed class's price", func() bool {
		_ = scaler.Refresh() // templates are cached until the next loop
		got, err := templatePrice("typo", hour)
		return err == nil && math.Abs(got-0.25) < 1e-9
	})
}

// TestPriceFollowsTheNewNodesClass: with capacity fallback a group's price is that of the class
// a new node would get now; under price order that is the cheapest class not marked out of
// capacity, and the next cheapest once it is marked.
func TestPriceFollowsTheNewNodesClass(t *testing.T) {
	w := newWorld(t)
	for _, c := range []struct{ name, zone, price string }{{"p", "z-p", "0.30"}, {"f", "z-f", "0.20"}, {"c", "z-c", "0.10"}} {
		w.zoneClass(c.name, c.zone, false)
		w.annotate(&v1alpha1.MachineClass{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: c.name}}, price(c.price))
	}
	listed := sizeAnnotations(0, 3)
	listed[fallback.AnnotationClasses] = "f,c"
	w.deployment("listed", "p", 0, listed)
	cheapest := sizeAnnotations(0, 3)
	cheapest[fallback.AnnotationClasses] = "f,c"
	cheapest[fallback.AnnotationOrder] = fallback.OrderPrice
	w.deployment("cheapest", "p", 0, cheapest)
	p := w.provider()
	mark := func(class string, until time.Time) {
		t.Helper()
		v := fallback.Mark{Until: until, Message: "stock-out"}.Encode()
		w.annotate(&v1alpha1.MachineClass{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: class}}, map[string]*string{fallback.AnnotationExhausted: &v})
	}
	prices := func() string {
		var out []string
		for _, g := range []string{"listed", "cheapest"} {
			pr, err := p.GroupPrice(ns + "." + g)
			node, terr := p.TemplateNode(w.ctx, ns+"."+g)
			if err != nil || terr != nil {
				t.Fatalf("group %s: %v, %v", g, err, terr)
			}
			out = append(out, fmt.Sprintf("%s=%g@%s", g, pr.PerHour, node.Labels[corev1.LabelTopologyZone]))
		}
		return strings.Join(out, " ")
	}
	want := func(what, state string) {
		t.Helper()
		eventually.Explained(t, 30*time.Second, what, func() (bool, string) {
			got := prices()
			return got == state, got
		})
	}
	want("the template's class in listed order, the cheapest under price order", "listed=0.3@z-p cheapest=0.1@z-c")
	mark("c", time.Now().Add(time.Hour))
	want("the cheapest class marked: the next cheapest", "listed=0.3@z-p cheapest=0.2@z-f")
	mark("p", time.Now().Add(time.Hour))
	want("the primary marked too: listed order moves to f", "listed=0.2@z-f cheapest=0.2@z-f")
	mark("c", time.Now().Add(-time.Second))
	want("a mark expired: the cheapest again", "listed=0.2@z-f cheapest=0.1@z-c")
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
