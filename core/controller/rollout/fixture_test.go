package rollout

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// t0 is the time of every test decision.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// budget parses a maxSurge or maxUnavailable as a manifest writes it; "" is unset.
func budget(v string) *intstr.IntOrString {
	if v == "" {
		return nil
	}
	return ptr.To(intstr.Parse(v))
}

// deployment is a RollingUpdate deployment of class "a".
func deployment(replicas int32, surge, unavailable *intstr.IntOrString) *v1alpha1.MachineDeployment {
	return &v1alpha1.MachineDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: "md", Namespace: "ns", UID: "md-uid", Generation: 1},
		Spec: v1alpha1.MachineDeploymentSpec{
			Replicas: replicas,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}},
			Strategy: v1alpha1.MachineDeploymentStrategy{
				Type:          v1alpha1.RollingUpdateMachineDeploymentStrategyType,
				RollingUpdate: &v1alpha1.RollingUpdateMachineDeployment{UpdateConfiguration: v1alpha1.UpdateConfiguration{MaxSurge: surge, MaxUnavailable: unavailable}},
			},
			Template: v1alpha1.MachineTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "x"}},
				Spec:       v1alpha1.MachineSpec{Class: v1alpha1.ClassSpec{Kind: "MachineClass", Name: "a"}},
			},
		},
	}
}

// rollingMD is a RollingUpdate deployment with its budget as a manifest writes it.
func rollingMD(replicas int32, surge, unavailable string) *v1alpha1.MachineDeployment {
	return deployment(replicas, budget(surge), budget(unavailable))
}

func recreateMD(replicas int32) *v1alpha1.MachineDeployment {
	d := deployment(replicas, nil, nil)
	d.Spec.Strategy = v1alpha1.MachineDeploymentStrategy{Type: v1alpha1.RecreateMachineDeploymentStrategyType}
	return d
}

func inPlaceMD(replicas int32, surge, unavailable string, orchestration v1alpha1.OrchestrationType) *v1alpha1.MachineDeployment {
	d := deployment(replicas, nil, nil)
	d.Spec.Strategy = v1alpha1.MachineDeploymentStrategy{
		Type: v1alpha1.InPlaceUpdateMachineDeploymentStrategyType,
		InPlaceUpdate: &v1alpha1.InPlaceUpdateMachineDeployment{
			UpdateConfiguration: v1alpha1.UpdateConfiguration{MaxSurge: budget(surge), MaxUnavailable: budget(unavailable)},
			OrchestrationType:   orchestration,
		},
	}
	return d
}

// set is a MachineSet the deployment controls; age orders sets and machines (older first).
func set(name string, replicas int32, age time.Duration) *v1alpha1.MachineSet {
	return &v1alpha1.MachineSet{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, UID: types.UID(name), Namespace: "ns", Generation: 1,
			CreationTimestamp: metav1.NewTime(t0.Add(-age)),
		},
		Spec: v1alpha1.MachineSetSpec{Replicas: replicas},
	}
}

// setSpec describes a set of a test world.
type setSpec struct {
	name      string
	class     string // the template's class: the deployment's current one or another
	replicas  int32
	available int32
	machines  int   // live machines, Running
	dying     int   // terminating machines
	desired   int32 // the desired-replicas annotation; 0: the deployment's replicas
}

// input builds an input: each set carries the deployment's template with its class, its
// machines (with nodes of the same names when target), and replica annotations naming the
// deployment's replicas (or desired) and maxSurge; older sets first.
func input(d *v1alpha1.MachineDeployment, target bool, specs ...setSpec) Input {
	in := Input{Deployment: d, Machines: map[types.UID][]*v1alpha1.Machine{}, Now: t0, TargetCluster: target}
	if target {
		in.Nodes = map[string]*corev1.Node{}
	}
	surge := limitsOf(d, nil, nil).annotationSurge(d)
	for i, s := range specs {
		ms := set(s.name, s.replicas, time.Duration(len(specs)-i)*time.Hour)
		ms.Spec.Template = *d.Spec.Template.DeepCopy()
		ms.Spec.Template.Spec.Class.Name = s.class
		ms.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x", v1alpha1.LabelMachineTemplateHash: s.name}}
		desired := s.desired
		if desired == 0 {
			desired = d.Spec.Replicas
		}
		setReplicaAnnotations(ms, desired, desired+surge)
		ms.Annotations[v1alpha1.AnnotationRevision] = fmt.Sprint(i + 1)
		ms.Status.Replicas, ms.Status.AvailableReplicas = int32(s.machines+s.dying), s.available
		ms.Status.ObservedGeneration = ms.Generation
		for j := range s.machines + s.dying {
			m := machine(fmt.Sprintf("%s-%d", s.name, j), ms, ms.CreationTimestamp.Add(time.Duration(j)*time.Minute))
			if j >= s.machines {
				m.DeletionTimestamp = ptr.To(metav1.NewTime(t0))
			}
			in.Machines[ms.UID] = append(in.Machines[ms.UID], m)
			if target {
				in.Nodes[m.Name] = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: m.Name, Labels: map[string]string{}}}
			}
		}
		in.Sets = append(in.Sets, ms)
	}
	return in
}

func machine(name string, ms *v1alpha1.MachineSet, created time.Time) *v1alpha1.Machine {
	m := &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{
		Name: name, Namespace: "ns", CreationTimestamp: metav1.NewTime(created),
		Labels:          map[string]string{"app": "x", v1alpha1.LabelNode: name},
		OwnerReferences: []metav1.OwnerReference{{Kind: "MachineSet", Name: ms.Name, UID: ms.UID, Controller: ptr.To(true)}},
	}}
	m.Status.CurrentStatus.Phase = v1alpha1.MachineRunning
	return m
}

// ops renders a step compactly; the set the step creates is NEW.
func ops(dec Decision) string {
	created := ""
	var out []string
	name := func(s string) string {
		if s == created && s != "" {
			return "NEW"
		}
		return s
	}
	for _, op := range dec.Step.Ops {
		switch op := op.(type) {
		case CreateSet:
			created = op.Name
			out = append(out, fmt.Sprintf("create NEW(%d)", op.Replicas))
		case ScaleSet:
			s := fmt.Sprintf("scale %s %d→%d", name(op.Set), op.From, op.To)
			if len(op.Goes) > 0 {
				s += " goes " + strings.Join(op.Goes, ",")
			}
			out = append(out, s)
		case SyncSet:
			out = append(out, "sync "+name(op.Set))
		case DeleteSet:
			out = append(out, "delete "+op.Set)
		case MarkForDeletion:
			out = append(out, "mark "+op.Machine+" at "+op.At)
		case PruneTrigger:
			out = append(out, fmt.Sprintf("prune %q", op.Value))
		case SetScaleUpDisabled:
			out = append(out, fmt.Sprintf("scale-up-disabled %s %v", name(op.Set), op.Disabled))
		case LabelNode:
			out = append(out, "label "+op.Node+" "+strings.TrimPrefix(op.Label, "node.machine.sapcloud.io/"))
		case MoveMachine:
			out = append(out, "move "+op.Machine+" "+name(op.From)+"→"+name(op.To))
		case Uncordon:
			out = append(out, "uncordon "+op.Node)
		case ClearUpdateResult:
			out = append(out, "clear "+op.Machine)
		case FinishInPlaceUpdate:
			out = append(out, "finish "+op.Node)
		case MarkNode:
			out = append(out, fmt.Sprintf("marknode %s taint=%v annotate=%v", op.Node, op.PreferNoSchedule, op.ScaleDownDisabled))
		default:
			out = append(out, op.Kind())
		}
	}
	return strings.Join(out, "; ")
}
