package machine_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/drivertest/memdriver"
	"github.com/machinist-io/machinist/core/registry"
	"github.com/machinist-io/machinist/harness/ctrltest"
	"github.com/machinist-io/machinist/internal/eventually"
)

// specCheckProvider is compiled in (registered) and checks its specs offline, as the OpenStack,
// Azure and local providers do. Its driver (memdriver) refuses the machines of its classes, which
// these tests do not need to exist.
const specCheckProvider = "speccheck"

func init() {
	registry.Register(registry.Registration{
		Name:        specCheckProvider,
		Description: "test provider with an offline spec check",
		New:         func(registry.Env) (driver.Driver, error) { return memdriver.New(memdriver.NewCloud()), nil },
		CheckSpec: func(class *v1alpha1.MachineClass, mode driver.SpecMode) ([]driver.SpecWarning, error) {
			var spec struct {
				Cluster string `json:"cluster"`
				Role    string `json:"role"`
			}
			warnings, err := driver.DecodeSpec(class, &spec, mode, driver.FoldedNames)
			if err == nil && spec.Cluster == "" {
				err = driver.Invalid(class, field.ErrorList{field.Required(driver.ProviderSpecPath.Child("cluster"), "set the cluster")})
			}
			return warnings, err
		},
	})
}

func specCondition(t *testing.T, e *ctrltest.Env, name string) (*v1alpha1.MachineClass, *metav1.Condition) {
	t.Helper()
	class := &v1alpha1.MachineClass{}
	if err := e.C.Get(context.Background(), e.Key(name), class); err != nil {
		t.Fatal(err)
	}
	return class, meta.FindStatusCondition(class.Status.Conditions, v1alpha1.ClassConditionProviderSpecValid)
}

func waitSpecCondition(t *testing.T, e *ctrltest.Env, name, reason string, generation int64) *metav1.Condition {
	t.Helper()
	var cond *metav1.Condition
	eventually.True(t, 30*time.Second, "condition "+reason, func() bool {
		_, cond = specCondition(t, e, name)
		return cond != nil && cond.Reason == reason && cond.ObservedGeneration == generation
	})
	return cond
}

func countReason(reasons []string, reason string) int {
	n := 0
	for _, r := range reasons {
		if r == reason {
			n++
		}
	}
	return n
}

func setSpec(t *testing.T, e *ctrltest.Env, name, raw string) int64 {
	t.Helper()
	class := &v1alpha1.MachineClass{}
	if err := e.C.Get(context.Background(), e.Key(name), class); err != nil {
		t.Fatal(err)
	}
	class.ProviderSpec = runtime.RawExtension{Raw: []byte(raw)}
	if err := e.C.Update(context.Background(), class); err != nil {
		t.Fatal(err)
	}
	return class.Generation
}

// A class whose spec has unknown or mis-cased fields gets the ProviderSpecValid condition with
// reason ProviderSpecFieldWarnings naming the fields (never their values) and one Warning Event,
// once per generation: reconciling the unchanged class again, also after a controller restart,
// neither rewrites the condition nor repeats the event. A fixed spec clears the warnings; an
// invalid one is False with its own Warning Event.
func TestClassProviderSpecCondition(t *testing.T) {
	e := ctrltest.NewEnv(t)
	ctx := context.Background()
	e.Class("warn", specCheckProvider, map[string]any{"cluster": "c", "Role": "w", "password": "hunter2-not-a-field"}, "")
	e.StartControllers(ctrltest.FastOptions(), false, nil)

	cond := waitSpecCondition(t, e, "warn", v1alpha1.ReasonProviderSpecFieldWarnings, 1)
	if cond.Status != metav1.ConditionTrue || !strings.Contains(cond.Message, "providerSpec.Role: read as role") ||
		!strings.Contains(cond.Message, "providerSpec.password: unknown field: ignored") {
		t.Fatalf("condition %+v", cond)
	}
	eventually.True(t, 10*time.Second, "ProviderSpecFieldWarnings event", func() bool {
		return countReason(e.EventReasons("warn"), v1alpha1.ReasonProviderSpecFieldWarnings) == 1
	})
	list, err := e.CS.EventsV1().Events(e.NS).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range list.Items {
		if strings.Contains(ev.Note, "hunter2") || strings.Contains(cond.Message, "hunter2") {
			t.Fatalf("a value reached an event or the condition: %q / %q", ev.Note, cond.Message)
		}
	}
	written := cond.LastTransitionTime

	// Reconcile the unchanged class again, once while running and once after a restart: each
	// time the class lacks the finalizer and gets a machine, so the class controller adds the
	// finalizer in the same reconcile that checks the spec; seeing it back means the check ran.
	for i, restart := range []bool{false, true} {
		if restart {
			e.StopControllers()
			class, _ := specCondition(t, e, "warn")
			orig := class.DeepCopy()
			controllerutil.RemoveFinalizer(class, v1alpha1.FinalizerMachineControllerManager)
			if err := e.C.Patch(ctx, class, client.MergeFrom(orig)); err != nil {
				t.Fatal(err)
			}
		}
		m := e.Name("m" + strings.Repeat("x", i+1))
		e.Machine(m, "warn")
		if restart {
			e.StartControllers(ctrltest.FastOptions(), false, nil)
		}
		eventually.True(t, 30*time.Second, "class reconciled (finalizer)", func() bool {
			c, _ := specCondition(t, e, "warn")
			return controllerutil.ContainsFinalizer(c, v1alpha1.FinalizerMachineControllerManager)
		})
		if n := countReason(e.EventReasons("warn"), v1alpha1.ReasonProviderSpecFieldWarnings); n != 1 {
			t.Fatalf("after reconciling the unchanged class (restart %v): %d warning events, want 1", restart, n)
		}
		if _, c := specCondition(t, e, "warn"); !c.LastTransitionTime.Equal(&written) || c.ObservedGeneration != 1 {
			t.Fatalf("the condition was rewritten: %+v", c)
		}
	}

	gen := setSpec(t, e, "warn", `{"cluster":"c","role":"w"}`)
	cond = waitSpecCondition(t, e, "warn", v1alpha1.ReasonProviderSpecValid, gen)
	if cond.Status != metav1.ConditionTrue || !strings.Contains(cond.Message, "lenient decoding") {
		t.Fatalf("condition %+v", cond)
	}
	gen = setSpec(t, e, "warn", `{"role":"w"}`)
	cond = waitSpecCondition(t, e, "warn", v1alpha1.ReasonProviderSpecInvalid, gen)
	if cond.Status != metav1.ConditionFalse || !strings.Contains(cond.Message, "providerSpec.cluster: Required value") {
		t.Fatalf("condition %+v", cond)
	}
	eventually.True(t, 10*time.Second, "ProviderSpecInvalid event", func() bool {
		return countReason(e.EventReasons("warn"), v1alpha1.ReasonProviderSpecInvalid) == 1
	})
	if n := countReason(e.EventReasons("warn"), v1alpha1.ReasonProviderSpecFieldWarnings); n != 1 {
		t.Fatalf("%d warning events, want 1", n)
	}
}

// In strict mode the same class is refused: False, with the refused names. A class whose
// provider is served by a driver server is not checked here: Unknown.
func TestClassProviderSpecConditionStrictAndRemote(t *testing.T) {
	e := ctrltest.NewEnv(t)
	e.SpecMode = driver.Strict
	e.Drivers.Set(memdriver.ProviderName, memdriver.New(memdriver.NewCloud()))
	e.Class("strict", specCheckProvider, map[string]any{"cluster": "c", "Role": "w"}, "")
	e.Class("remote", memdriver.ProviderName, memSpec(e), "")
	e.StartControllers(ctrltest.FastOptions(), false, nil)

	cond := waitSpecCondition(t, e, "strict", v1alpha1.ReasonProviderSpecInvalid, 1)
	if cond.Status != metav1.ConditionFalse || !strings.Contains(cond.Message, "strict decoding") ||
		!strings.Contains(cond.Message, "providerSpec.Role: field name differs in case from role") {
		t.Fatalf("condition %+v", cond)
	}
	cond = waitSpecCondition(t, e, "remote", v1alpha1.ReasonProviderSpecNotChecked, 1)
	if cond.Status != metav1.ConditionUnknown {
		t.Fatalf("condition %+v", cond)
	}
	if n := len(e.EventReasons("remote")); n != 0 {
		t.Fatalf("events for an unchecked class: %v", e.EventReasons("remote"))
	}
}
