package fallback_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/fallback"
	"github.com/machinist-io/machinist/harness/machinetest"
	"github.com/machinist-io/machinist/internal/eventually"
)

// pricedClass creates a local MachineClass in zone with a price per hour.
func (w *world) pricedClass(name, zone, price string) {
	w.t.Helper()
	w.class(name, zone, false)
	cl := &v1alpha1.MachineClass{}
	cl.Namespace, cl.Name = w.ns, name
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, fallback.AnnotationPricePerHour, price)
	if err := w.c.Patch(w.ctx, cl, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		w.t.Fatal(err)
	}
}

// stockOut makes every create on a class fail with ResourceExhausted from now on.
func (w *world) stockOut(name string) {
	w.t.Helper()
	cl := &v1alpha1.MachineClass{}
	cl.Namespace, cl.Name = w.ns, name
	patch := `{"providerSpec":{"createError":{"code":"ResourceExhausted","message":"zone has no capacity left","times":0}}}`
	if err := w.c.Patch(w.ctx, cl, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		w.t.Fatal(err)
	}
}

// TestPriceOrderPicksTheCheapestClassWithCapacity: with machinist.io/fallback-order: price, a
// deployment whose template names its most expensive class runs its machines on the cheapest
// class; once that class runs out, new machines go to the next cheapest with capacity, and never
// to the template's class, which is the most expensive.
func TestPriceOrderPicksTheCheapestClassWithCapacity(t *testing.T) {
	w := newWorld(t)
	w.pricedClass("large", "local-1", "0.40")
	w.pricedClass("medium", "local-2", "0.20")
	w.pricedClass("small", "local-3", "0.10")
	// Listed order would try large first, then medium.
	w.deployment("pool", "large", 2, map[string]string{fallback.AnnotationClasses: "medium,small", fallback.AnnotationOrder: fallback.OrderPrice})
	never := machinetest.WatchMachines(t, w.c, w.ns, func(ms map[string]*v1alpha1.Machine) string {
		for _, m := range ms {
			if m.Spec.Class.Name == "large" {
				return "machine " + m.Name + " on the most expensive class large"
			}
		}
		return ""
	})
	never.Arm()
	w.start(time.Minute)

	w.waitRunningOn("small", 2, time.Minute)
	eventually.True(t, 30*time.Second, "condition FallbackClasses True naming the price order", func() bool {
		for _, c := range w.getDeployment("pool").Status.Conditions {
			if c.Type == fallback.ConditionClasses {
				return c.Status == v1alpha1.ConditionTrue && strings.Contains(c.Message, "cheapest class") && strings.Contains(c.Message, "large, medium, small")
			}
		}
		return false
	})

	// The cheapest class runs out: two more machines try it, are refused, and move on to the
	// next cheapest.
	w.stockOut("small")
	d := w.getDeployment("pool")
	patch := client.MergeFrom(d.DeepCopy())
	d.Spec.Replicas = 4
	if err := w.c.Patch(w.ctx, d, patch); err != nil {
		t.Fatal(err)
	}
	eventually.Explained(t, 2*time.Minute, "2 machines Running on small, 2 on medium", func() (bool, string) {
		small, live, desc := w.running("small")
		medium, _, _ := w.running("medium")
		return small == 2 && medium == 2 && live == 4, desc
	})
	if r := never.Stop(); len(r.Violations) > 0 {
		t.Fatalf("price order created on the most expensive class: %v", r.Violations)
	}
	if !w.hasEvent("pool", fallback.ReasonCapacityFallback, "small") {
		t.Error("no CapacityFallback event on the deployment names the exhausted class small")
	}
}

// TestPriceOrderReportsClassesWithoutAPrice: a price-ordered chain with a class whose price does
// not parse and one without a price says so in the condition, naming the annotation and what to
// write; the machines still run, on the only priced class.
func TestPriceOrderReportsClassesWithoutAPrice(t *testing.T) {
	w := newWorld(t)
	w.class("unpriced", "local-1", false)
	w.pricedClass("typo", "local-2", "0,10")
	w.pricedClass("priced", "local-3", "0.30")
	w.deployment("pool", "unpriced", 1, map[string]string{fallback.AnnotationClasses: "typo,priced", fallback.AnnotationOrder: fallback.OrderPrice})
	w.start(time.Minute)

	var msg string
	eventually.True(t, 30*time.Second, "condition FallbackClasses False", func() bool {
		for _, c := range w.getDeployment("pool").Status.Conditions {
			if c.Type == fallback.ConditionClasses && c.Status == v1alpha1.ConditionFalse {
				msg = c.Message
				return true
			}
		}
		return false
	})
	for _, want := range []string{
		"MachineClass " + w.ns + "/unpriced has no " + fallback.AnnotationPricePerHour,
		fallback.AnnotationPricePerHour + `="0,10" is not a price`, "e.g. 0.096",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("condition message lacks %q:\n%s", want, msg)
		}
	}
	w.waitRunningOn("priced", 1, time.Minute)
}
