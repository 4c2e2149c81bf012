package pool_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmanager "sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/standby"
	"github.com/machinist-io/machinist/core/controller/standby/pool"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/drivertest/memdriver"
	"github.com/machinist-io/machinist/core/registry"
	"github.com/machinist-io/machinist/harness/ctrltest"
	"github.com/machinist-io/machinist/internal/eventually"
)

func TestMain(m *testing.M) { ctrltest.Main(m) }

// noPower is a driver without the power capability (a provider built before it).
type noPower struct{ driver.Driver }

func start(e *ctrltest.Env) {
	e.StartManager(func(mgr crmanager.Manager) error {
		return pool.Setup(mgr, pool.Options{Drivers: &registry.Resolver{Endpoints: e.Drivers}, Log: ctrltest.Logger()})
	})
}

// deployment creates a deployment of class with a standby annotation, and its current set of
// template hash (what the deployment controller would create).
func deployment(e *ctrltest.Env, class, want, hash string) (*v1alpha1.MachineDeployment, *v1alpha1.MachineSet) {
	e.T.Helper()
	md := &v1alpha1.MachineDeployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: e.NS,
		Annotations: map[string]string{standby.Annotation: want}}}
	md.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"name": "web"}}
	md.Spec.Template.Labels = map[string]string{"name": "web"}
	md.Spec.Template.Spec.Class = v1alpha1.ClassSpec{Kind: "MachineClass", Name: class}
	e.Create(md)
	return md, set(e, md, hash)
}

func set(e *ctrltest.Env, md *v1alpha1.MachineDeployment, hash string) *v1alpha1.MachineSet {
	e.T.Helper()
	ms := &v1alpha1.MachineSet{ObjectMeta: metav1.ObjectMeta{Name: "web-" + hash, Namespace: e.NS,
		Labels: map[string]string{"name": "web", v1alpha1.LabelMachineTemplateHash: hash},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "MachineDeployment",
			Name: md.Name, UID: md.UID, Controller: ptr.To(true)}}}}
	ms.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"name": "web", v1alpha1.LabelMachineTemplateHash: hash}}
	ms.Spec.Template = *md.Spec.Template.DeepCopy()
	ms.Spec.Template.Labels = map[string]string{"name": "web", v1alpha1.LabelMachineTemplateHash: hash}
	ms.Spec.MachineClass = md.Spec.Template.Spec.Class
	e.Create(ms)
	return ms
}

// poolOf lists the standby machines of web that are not being deleted.
func poolOf(e *ctrltest.Env) []v1alpha1.Machine {
	var list v1alpha1.MachineList
	if err := e.C.List(context.Background(), &list, client.InNamespace(e.NS), client.MatchingLabels{standby.LabelDeployment: "web"}); err != nil {
		e.T.Fatal(err)
	}
	return slices.DeleteFunc(list.Items, func(m v1alpha1.Machine) bool { return m.DeletionTimestamp != nil })
}

func waitPool(e *ctrltest.Env, what string, ok func([]v1alpha1.Machine) bool) []v1alpha1.Machine {
	e.T.Helper()
	var got []v1alpha1.Machine
	eventually.Explained(e.T, 30*time.Second, what, func() (bool, string) {
		got = poolOf(e)
		return ok(got), describe(got)
	})
	return got
}

func describe(ms []v1alpha1.Machine) string {
	s := fmt.Sprintf("%d standby machines:", len(ms))
	for _, m := range ms {
		s += fmt.Sprintf(" %s(%s,%s)", m.Name, m.Annotations[standby.AnnotationTemplateHash], m.Annotations[standby.AnnotationState])
	}
	return s
}

func waitCondition(e *ctrltest.Env, status v1alpha1.ConditionStatus, reason string) v1alpha1.MachineDeploymentCondition {
	e.T.Helper()
	var c v1alpha1.MachineDeploymentCondition
	eventually.Explained(e.T, 30*time.Second, "condition "+reason, func() (bool, string) {
		md := &v1alpha1.MachineDeployment{}
		if err := e.C.Get(context.Background(), e.Key("web"), md); err != nil {
			return false, err.Error()
		}
		for _, x := range md.Status.Conditions {
			if x.Type == pool.ConditionStandbyReady {
				c = x
				return x.Status == status && x.Reason == reason, fmt.Sprintf("%+v", x)
			}
		}
		return false, "no StandbyReady condition"
	})
	return c
}

// The pool fills to the annotation with machines no set selects, shrinks youngest in life first,
// and a new template replaces its machines.
func TestPoolFillsShrinksAndRollsOut(t *testing.T) {
	e := ctrltest.NewEnv(t)
	e.Drivers.Set(memdriver.ProviderName, memdriver.New(memdriver.NewCloud()))
	e.Class("small", memdriver.ProviderName, map[string]any{}, "")
	md, _ := deployment(e, "small", "2", "h1")
	start(e)

	got := waitPool(e, "two standby machines of h1", func(ms []v1alpha1.Machine) bool { return len(ms) == 2 })
	for _, m := range got {
		if o := metav1.GetControllerOf(&m); o == nil || o.UID != md.UID || m.Annotations[standby.AnnotationTemplateHash] != "h1" ||
			m.Annotations[standby.AnnotationState] != string(standby.Booting) || m.Labels["name"] != "" || m.Spec.Class.Name != "small" {
			t.Fatalf("standby machine %s: owner %+v, labels %v, annotations %v, class %q; want the deployment's, of h1, booting, no template label",
				m.Name, o, m.Labels, m.Annotations, m.Spec.Class.Name)
		}
	}
	c := waitCondition(e, v1alpha1.ConditionFalse, pool.ReasonFilling)
	if c.Message != "0 of 2 standby machines stopped, 2 booting or stopping" {
		t.Errorf("condition message %q", c.Message)
	}

	// Both stop (what the Machine controller will record); the pool is ready.
	for _, m := range got {
		m.Annotations[standby.AnnotationState] = string(standby.Stopped)
		if err := e.C.Update(context.Background(), &m); err != nil {
			t.Fatal(err)
		}
	}
	waitCondition(e, v1alpha1.ConditionTrue, pool.ReasonReady)

	// One is back to booting (as if just made); shrinking to 1 deletes it, not the stopped one.
	booting := got[0]
	if err := e.C.Get(context.Background(), client.ObjectKeyFromObject(&booting), &booting); err != nil {
		t.Fatal(err)
	}
	booting.Annotations[standby.AnnotationState] = string(standby.Booting)
	if err := e.C.Update(context.Background(), &booting); err != nil {
		t.Fatal(err)
	}
	patchAnnotation(e, "1")
	left := waitPool(e, "one standby machine", func(ms []v1alpha1.Machine) bool { return len(ms) == 1 })
	if left[0].Name != got[1].Name {
		t.Fatalf("shrinking kept %s; want the stopped %s", left[0].Name, got[1].Name)
	}

	// A new template (another class): its set appears; the outdated machine goes, a new one comes.
	e.Class("large", memdriver.ProviderName, map[string]any{}, "")
	md = updateDeployment(e, func(md *v1alpha1.MachineDeployment) { md.Spec.Template.Spec.Class.Name = "large" })
	set(e, md, "h2")
	waitPool(e, "one standby machine of h2", func(ms []v1alpha1.Machine) bool {
		return len(ms) == 1 && ms[0].Annotations[standby.AnnotationTemplateHash] == "h2" && ms[0].Spec.Class.Name == "large"
	})
}

func patchAnnotation(e *ctrltest.Env, v string) {
	e.T.Helper()
	updateDeployment(e, func(md *v1alpha1.MachineDeployment) { md.Annotations[standby.Annotation] = v })
}

// updateDeployment changes web, again on a conflict (the pool writes its status meanwhile).
func updateDeployment(e *ctrltest.Env, change func(*v1alpha1.MachineDeployment)) *v1alpha1.MachineDeployment {
	e.T.Helper()
	md := &v1alpha1.MachineDeployment{}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := e.C.Get(context.Background(), e.Key("web"), md); err != nil {
			return err
		}
		change(md)
		return e.C.Update(context.Background(), md)
	})
	if err != nil {
		e.T.Fatal(err)
	}
	return md
}

// A provider without the power capability gets no standby machine and a condition saying why; an
// invalid count names the annotation and leaves the pool alone.
func TestProviderWithoutPowerGetsACondition(t *testing.T) {
	e := ctrltest.NewEnv(t)
	e.Drivers.Set("old", noPower{memdriver.New(memdriver.NewCloud())})
	e.Class("small", "old", map[string]any{}, "")
	deployment(e, "small", "2", "h1")
	start(e)

	c := waitCondition(e, v1alpha1.ConditionFalse, pool.ReasonUnavailable)
	if want := `provider "old" cannot stop and start machines`; !strings.Contains(c.Message, want) {
		t.Errorf("condition message %q; want it to say %q", c.Message, want)
	}
	if got := poolOf(e); len(got) != 0 {
		t.Fatalf("%s; want none for a provider without the capability", describe(got))
	}

	patchAnnotation(e, "lots")
	c = waitCondition(e, v1alpha1.ConditionFalse, pool.ReasonInvalid)
	if !strings.Contains(c.Message, standby.Annotation) {
		t.Errorf("condition message %q does not name the annotation", c.Message)
	}
}

// waitCounts waits for web's status.standbyReady and status.standbyStarting.
func waitCounts(e *ctrltest.Env, ready, starting int32) {
	e.T.Helper()
	eventually.Explained(e.T, 30*time.Second, fmt.Sprintf("standbyReady %d, standbyStarting %d", ready, starting), func() (bool, string) {
		md := &v1alpha1.MachineDeployment{}
		if err := e.C.Get(context.Background(), e.Key("web"), md); err != nil {
			return false, err.Error()
		}
		st := md.Status
		return st.StandbyReady == ready && st.StandbyStarting == starting,
			fmt.Sprintf("standbyReady %d, standbyStarting %d, conditions %+v", st.StandbyReady, st.StandbyStarting, st.Conditions)
	})
}

// The status counts follow the pool: starting while it fills, ready once stopped, one ready less
// and one starting more after a claim (the pool refills), and both gone with the pool.
func TestStatusCountsFollowThePool(t *testing.T) {
	e := ctrltest.NewEnv(t)
	e.Drivers.Set(memdriver.ProviderName, memdriver.New(memdriver.NewCloud()))
	e.Class("small", memdriver.ProviderName, map[string]any{}, "")
	_, ms := deployment(e, "small", "2", "h1")
	start(e)

	got := waitPool(e, "two standby machines", func(ms []v1alpha1.Machine) bool { return len(ms) == 2 })
	waitCounts(e, 0, 2)

	// One stops, then the other (what the Machine controller records).
	setState(e, got[0].Name, standby.Stopped)
	waitCounts(e, 1, 1)
	setState(e, got[1].Name, standby.Stopped)
	waitCounts(e, 2, 0)
	waitCondition(e, v1alpha1.ConditionTrue, pool.ReasonReady)

	// The set claims a stopped one: it leaves the pool, which refills with a booting one.
	m := &v1alpha1.Machine{}
	if err := e.C.Get(context.Background(), e.Key(got[0].Name), m); err != nil {
		t.Fatal(err)
	}
	if err := e.C.Update(context.Background(), standby.Claim(m, ms)); err != nil {
		t.Fatal(err)
	}
	waitCounts(e, 1, 1)
	c := waitCondition(e, v1alpha1.ConditionFalse, pool.ReasonFilling)
	if c.Message != "1 of 2 standby machines stopped, 1 booting or stopping" {
		t.Errorf("condition message %q disagrees with the counts", c.Message)
	}

	// No annotation: the pool drains, the condition and both counts go.
	updateDeployment(e, func(md *v1alpha1.MachineDeployment) { delete(md.Annotations, standby.Annotation) })
	waitPool(e, "no standby machine", func(ms []v1alpha1.Machine) bool { return len(ms) == 0 })
	eventually.Explained(t, 30*time.Second, "no StandbyReady condition and no counts", func() (bool, string) {
		md := &v1alpha1.MachineDeployment{}
		if err := e.C.Get(context.Background(), e.Key("web"), md); err != nil {
			return false, err.Error()
		}
		st := md.Status
		has := slices.ContainsFunc(st.Conditions, func(c v1alpha1.MachineDeploymentCondition) bool { return c.Type == pool.ConditionStandbyReady })
		return !has && st.StandbyReady == 0 && st.StandbyStarting == 0, fmt.Sprintf("%+v", st)
	})
}

// setState records a standby machine's state, again on a conflict.
func setState(e *ctrltest.Env, name string, st standby.State) {
	e.T.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		m := &v1alpha1.Machine{}
		if err := e.C.Get(context.Background(), e.Key(name), m); err != nil {
			return err
		}
		m.Annotations[standby.AnnotationState] = string(st)
		return e.C.Update(context.Background(), m)
	})
	if err != nil {
		e.T.Fatal(err)
	}
}
