package pool_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/standby"
	"github.com/machinist-io/machinist/core/drivertest/memdriver"
	"github.com/machinist-io/machinist/harness/ctrltest"
	"github.com/machinist-io/machinist/internal/eventually"
)

// readyNodes plays the kubelets: every machine with a VM and no node gets a Ready node, except
// stopped standby machines. It returns once cond holds (checked after each pass).
func readyNodes(t *testing.T, e *ctrltest.Env, timeout time.Duration, what string, cond func([]v1alpha1.Machine) (bool, string)) {
	t.Helper()
	eventually.Explained(t, timeout, what, func() (bool, string) {
		var list v1alpha1.MachineList
		if err := e.C.List(context.Background(), &list, client.InNamespace(e.NS)); err != nil {
			return false, err.Error()
		}
		for _, m := range list.Items {
			st := standby.State(m.Annotations[standby.AnnotationState])
			if m.Spec.ProviderID == "" || m.DeletionTimestamp != nil || st == standby.Stopping || st == standby.Stopped {
				continue
			}
			if m.Status.CurrentStatus.Phase == v1alpha1.MachineRunning || nodeReady(e, m.Name) {
				// A Ready node is left alone: the list may be a moment older than a stop that
				// is deleting it, and a kubelet does not write to a node being deleted.
				continue
			}
			e.ReadyNode(m.Name, m.Spec.ProviderID, corev1.ConditionTrue)
		}
		ok, desc := cond(list.Items)
		for _, m := range list.Items {
			if m.Status.CurrentStatus.Phase == v1alpha1.MachineUnknown {
				n, err := e.CS.CoreV1().Nodes().Get(context.Background(), m.Name, metav1.GetOptions{})
				if err != nil {
					desc += fmt.Sprintf("; node %s: %v", m.Name, err)
				} else {
					desc += fmt.Sprintf("; node %s: deleting %v finalizers %v conditions %v", m.Name, n.DeletionTimestamp, n.Finalizers, n.Status.Conditions)
				}
			}
		}
		return ok, desc
	})
}

// nodeReady reports whether node name exists and is Ready.
func nodeReady(e *ctrltest.Env, name string) bool {
	n, err := e.CS.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return false
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// count sorts the namespace's machines: standby ones by state, and the set's running ones.
func count(ms []v1alpha1.Machine) (stopped, otherStandby, running int, desc string) {
	for _, m := range ms {
		if m.DeletionTimestamp != nil {
			continue
		}
		_, isStandby := m.Annotations[standby.Annotation]
		switch {
		case isStandby && m.Annotations[standby.AnnotationState] == string(standby.Stopped):
			stopped++
		case isStandby:
			otherStandby++
		case m.Status.CurrentStatus.Phase == v1alpha1.MachineRunning:
			running++
		}
		desc += fmt.Sprintf(" %s(%s,standby=%v,%s)", m.Name, m.Status.CurrentStatus.Phase, isStandby, m.Annotations[standby.AnnotationState])
	}
	return stopped, otherStandby, running, desc
}

// Through machinist's controller manager: standby 2 and a scale-up of 3 start the 2 stopped VMs
// and create 1; the pool refills to 2 stopped machines; scaling to zero keeps them.
func TestScaleUpResumesStandbyFirst(t *testing.T) {
	e := ctrltest.NewEnv(t)
	cloud := memdriver.NewCloud()
	e.Drivers.Set(memdriver.ProviderName, memdriver.New(cloud))
	e.Class("small", memdriver.ProviderName, map[string]string{"cluster": e.NS, "role": "worker"}, "")
	md := &v1alpha1.MachineDeployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: e.NS,
		Annotations: map[string]string{standby.Annotation: "2"}}}
	md.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"name": "web"}}
	md.Spec.Template.Labels = map[string]string{"name": "web"}
	md.Spec.Template.Spec.Class = v1alpha1.ClassSpec{Kind: "MachineClass", Name: "small"}
	e.Create(md)
	e.StartProduct(nil)

	standbyStopped := func(want int) func([]v1alpha1.Machine) (bool, string) {
		return func(ms []v1alpha1.Machine) (bool, string) {
			stopped, other, _, desc := count(ms)
			return stopped == want && other == 0, desc
		}
	}
	readyNodes(t, e, 60*time.Second, "two stopped standby machines", standbyStopped(2))
	creates := cloud.Calls(memdriver.MethodCreate)
	if creates != 2 || cloud.Calls(memdriver.MethodStart) != 0 {
		t.Fatalf("%d creates, %d starts before the scale-up; want 2 and 0", creates, cloud.Calls(memdriver.MethodStart))
	}
	waitCondition(e, v1alpha1.ConditionTrue, "StandbyStopped")

	updateDeployment(e, func(md *v1alpha1.MachineDeployment) { md.Spec.Replicas = 3 })
	readyNodes(t, e, 60*time.Second, "3 running machines and the pool refilled", func(ms []v1alpha1.Machine) (bool, string) {
		stopped, other, running, desc := count(ms)
		return running == 3 && stopped == 2 && other == 0, desc
	})
	if s := cloud.Calls(memdriver.MethodStart); s != 2 {
		t.Errorf("%d starts for the scale-up; want 2 (the stopped standby machines)", s)
	}
	// 2 first boots of the pool, 1 create for the scale-up, 2 to refill the pool.
	if c := cloud.Calls(memdriver.MethodCreate); c != 5 {
		t.Errorf("%d creates in all; want 5 (2 standby, 1 for the scale-up, 2 refills)", c)
	}

	updateDeployment(e, func(md *v1alpha1.MachineDeployment) { md.Spec.Replicas = 0 })
	readyNodes(t, e, 60*time.Second, "scaled to zero, the pool kept", func(ms []v1alpha1.Machine) (bool, string) {
		stopped, other, _, desc := count(ms)
		live := 0
		for _, m := range ms {
			if m.DeletionTimestamp == nil {
				live++
			}
		}
		return stopped == 2 && other == 0 && live == 2, desc
	})
}
