package pool

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	machinistv1alpha1 "github.com/machinist-io/machinist/core/apis/machinist/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/rollout"
)

// t0 is the time of every test decision.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// policy selects the deployments labelled pool=workers, with a budget as a manifest writes it
// ("" leaves it unset).
func policy(surge, unavailable string) *machinistv1alpha1.PoolPolicy {
	p := &machinistv1alpha1.PoolPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "workers", Generation: 1},
		Spec:       machinistv1alpha1.PoolPolicySpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "workers"}}},
	}
	if surge != "" {
		p.Spec.Rollout.MaxSurge = ptr.To(intstr.Parse(surge))
	}
	if unavailable != "" {
		p.Spec.Rollout.MaxUnavailable = ptr.To(intstr.Parse(unavailable))
	}
	return p
}

// md is a RollingUpdate deployment of the pool on class, with its own budget of 5 and 5 (which
// the pool's replaces).
func md(name, class string, replicas int32) *v1alpha1.MachineDeployment {
	five := intstr.FromInt32(5)
	return &v1alpha1.MachineDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name), Labels: map[string]string{"pool": "workers"}, Generation: 1},
		Spec: v1alpha1.MachineDeploymentSpec{
			Replicas: replicas,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"md": name}},
			Strategy: v1alpha1.MachineDeploymentStrategy{Type: v1alpha1.RollingUpdateMachineDeploymentStrategyType,
				RollingUpdate: &v1alpha1.RollingUpdateMachineDeployment{UpdateConfiguration: v1alpha1.UpdateConfiguration{MaxSurge: &five, MaxUnavailable: &five}}},
			Template: v1alpha1.MachineTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"md": name}},
				Spec:       v1alpha1.MachineSpec{Class: v1alpha1.ClassSpec{Kind: "MachineClass", Name: class}},
			},
		},
	}
}

// world is a member's input: one set per class given, oldest first, each with replicas Running
// and available machines; a class other than the deployment's is an old template.
type setOf struct {
	class              string
	replicas           int32
	available, running int
	failed             int
}

func world(d *v1alpha1.MachineDeployment, sets ...setOf) rollout.Input {
	in := rollout.Input{Deployment: d, Machines: map[types.UID][]*v1alpha1.Machine{}, Now: t0}
	for i, s := range sets {
		t := d.Spec.Template.DeepCopy()
		t.Spec.Class.Name = s.class
		name := fmt.Sprintf("%s-%s", d.Name, s.class)
		ms := &v1alpha1.MachineSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name), Generation: 1,
				CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(i-len(sets)) * time.Hour)),
				OwnerReferences:   []metav1.OwnerReference{{Kind: "MachineDeployment", Name: d.Name, UID: d.UID, Controller: ptr.To(true)}}},
			Spec: v1alpha1.MachineSetSpec{Replicas: s.replicas, Template: *t},
		}
		ms.Status.AvailableReplicas = int32(s.available)
		for j := range s.running + s.failed {
			m := &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("%s-%d", name, j),
				CreationTimestamp: ms.CreationTimestamp,
				OwnerReferences:   []metav1.OwnerReference{{Kind: "MachineSet", Name: ms.Name, UID: ms.UID, Controller: ptr.To(true)}}}}
			m.Status.CurrentStatus.Phase = v1alpha1.MachineRunning
			if j >= s.running {
				m.Status.CurrentStatus.Phase = v1alpha1.MachineFailed
				m.Status.CurrentStatus.LastUpdateTime = metav1.NewTime(t0.Add(time.Duration(j) * time.Second))
				m.Status.LastOperation.Description = "did not join"
			}
			in.Machines[ms.UID] = append(in.Machines[ms.UID], m)
		}
		in.Sets = append(in.Sets, ms)
	}
	return in
}

// settled: every replica on class, available.
func settled(d *v1alpha1.MachineDeployment, class string) setOf {
	return setOf{class: class, replicas: d.Spec.Replicas, available: int(d.Spec.Replicas), running: int(d.Spec.Replicas)}
}
