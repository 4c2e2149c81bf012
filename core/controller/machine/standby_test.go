package machine_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/machine"
	"github.com/machinist-io/machinist/core/controller/standby"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/drivertest/memdriver"
	"github.com/machinist-io/machinist/harness/ctrltest"
	"github.com/machinist-io/machinist/internal/eventually"
)

// standbyMachine creates a booting standby machine on memdriver, lets its node turn Ready and
// waits until the controller has stopped it.
func standbyMachine(t *testing.T, e *ctrltest.Env, cloud *memdriver.Cloud, name string) *v1alpha1.Machine {
	t.Helper()
	e.Machine(name, "mem", func(m *v1alpha1.Machine) {
		m.Annotations = map[string]string{standby.Annotation: "web", standby.AnnotationState: string(standby.Booting)}
	})
	m := e.WaitPhase(name, v1alpha1.MachinePending, 30*time.Second)
	e.ReadyNode(name, m.Spec.ProviderID, corev1.ConditionTrue)
	m = e.WaitMachine(name, 30*time.Second, "standby state Stopped", func(m *v1alpha1.Machine) bool {
		return m != nil && m.Annotations[standby.AnnotationState] == string(standby.Stopped)
	})
	if _, err := e.CS.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the stopped standby machine's node: %v; want it deleted", err)
	}
	if vms := cloud.VMs(); len(vms) != 1 || !vms[0].Stopped || vms[0].ProviderID() != m.Spec.ProviderID {
		t.Fatalf("VMs %+v; want the machine's VM, stopped", vms)
	}
	if n := cloud.Calls(memdriver.MethodStop); n != 1 {
		t.Errorf("%d StopMachine calls; want 1", n)
	}
	e.WaitEventReasons(name, 10*time.Second, machine.ReasonStandbyStopped)
	return m
}

// claim drops the standby annotation as a set's claim does (the state Stopped stays).
func claim(t *testing.T, e *ctrltest.Env, name string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		m := &v1alpha1.Machine{}
		if err := e.C.Get(context.Background(), e.Key(name), m); err != nil {
			return err
		}
		delete(m.Annotations, standby.Annotation)
		return e.C.Update(context.Background(), m)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A standby machine is stopped after its node's first Ready (node deleted, VM stopped) and stays
// so; claimed, its VM is started, not created, and the usual lifecycle follows its node again.
func TestStandbyStopsAfterFirstReadyAndResumesWhenClaimed(t *testing.T) {
	e := ctrltest.NewEnv(t)
	cloud := memdriver.NewCloud()
	e.Drivers.Set(memdriver.ProviderName, memdriver.New(cloud))
	e.Class("mem", "mem", memSpec(e), "")
	e.StartControllers(ctrltest.FastOptions(), true, nil)
	name := e.Name("sb")
	m := standbyMachine(t, e, cloud, name)

	claim(t, e, name)
	e.WaitMachine(name, 30*time.Second, "standby state dropped", func(m *v1alpha1.Machine) bool {
		_, has := m.Annotations[standby.AnnotationState]
		return m != nil && !has
	})
	if vms := cloud.VMs(); len(vms) != 1 || vms[0].Stopped || vms[0].ProviderID() != m.Spec.ProviderID {
		t.Fatalf("VMs %+v; want the same VM, running", vms)
	}
	if c, s := cloud.Calls(memdriver.MethodCreate), cloud.Calls(memdriver.MethodStart); c != 1 || s != 1 {
		t.Errorf("%d creates and %d starts; want 1 create (its first boot) and 1 start", c, s)
	}
	e.WaitEventReasons(name, 10*time.Second, machine.ReasonStandbyResumed)
	if stops, resumes, starts := standbyMetric(t, "machinist_standby_stops_total", e.NS), standbyMetric(t, "machinist_standby_resumes_total", e.NS),
		standbyMetric(t, "machinist_standby_start_duration_seconds", ""); stops != 1 || resumes != 1 || starts < 1 {
		t.Errorf("metrics: %v stops, %v resumes, %v timed starts; want 1, 1 and at least 1", stops, resumes, starts)
	}
	e.ReadyNode(name, m.Spec.ProviderID, corev1.ConditionTrue)
	e.WaitPhase(name, v1alpha1.MachineRunning, 30*time.Second)
}

// A start without capacity deletes the claimed machine (its set creates a fresh one), with an
// event saying so.
func TestStandbyFailedStartDeletesTheMachine(t *testing.T) {
	e := ctrltest.NewEnv(t)
	cloud := memdriver.NewCloud()
	e.Drivers.Set(memdriver.ProviderName, memdriver.New(cloud))
	e.Class("mem", "mem", memSpec(e), "")
	e.StartControllers(ctrltest.FastOptions(), true, nil)
	name := e.Name("sb")
	standbyMachine(t, e, cloud, name)

	cloud.Inject(memdriver.MethodStart, memdriver.Fault{Code: driver.ResourceExhausted})
	claim(t, e, name)
	e.WaitGone(name, 30*time.Second)
	eventually.Explained(t, 10*time.Second, "event "+machine.ReasonStandbyFreshStart, func() (bool, string) {
		got := e.EventReasons(name)
		return slices.Contains(got, machine.ReasonStandbyFreshStart), "events " + strings.Join(got, ", ")
	})
	if vms := cloud.VMs(); len(vms) != 0 {
		t.Fatalf("VMs %+v after the machine was deleted; want none", vms)
	}
	if n := standbyMetric(t, "machinist_standby_fresh_creates_total", e.NS); n != 1 {
		t.Errorf("machinist_standby_fresh_creates_total{namespace=%s} = %v; want 1", e.NS, n)
	}
}

// standbyMetric reads a standby metric of namespace ns ("": the unlabelled histogram's count).
func standbyMetric(t *testing.T, name, ns string) float64 {
	t.Helper()
	fams, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	if ns != "" {
		want["namespace"] = ns
	}
	return value(fams, name, want)
}
