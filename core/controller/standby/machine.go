package standby

import (
	"maps"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
)

// NewMachine builds a standby machine of deployment md from the template of its current set ms:
// the set's spec and annotations, none of its labels (LabelDeployment only), owned by md and by
// no set, in state Booting, its node tainted NoSchedule with Annotation. Its health timeout is disabled: a stopped machine has no node, and
// MCM's Machine controller turns a Running machine whose node went missing Unknown and then, after
// the health timeout, Failed, unless spec.disableHealthTimeout is set (after a handover to MCM a
// stopped standby machine stays Unknown instead). A claim restores the template's setting.
func NewMachine(md *v1alpha1.MachineDeployment, ms *v1alpha1.MachineSet) *v1alpha1.Machine {
	t := ms.Spec.Template.DeepCopy()
	m := &v1alpha1.Machine{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: md.Name + "-standby-",
			Namespace:    md.Namespace,
			Labels:       map[string]string{LabelDeployment: md.Name},
			Annotations:  maps.Clone(t.Annotations),
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion:         v1alpha1.SchemeGroupVersion.String(),
				Kind:               "MachineDeployment",
				Name:               md.Name,
				UID:                md.UID,
				Controller:         ptr.To(true),
				BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: t.Spec,
	}
	if m.Spec.Class.Name == "" {
		m.Spec.Class = ms.Spec.MachineClass
	}
	if m.Annotations == nil {
		m.Annotations = map[string]string{}
	}
	if _, ok := m.Annotations[v1alpha1.AnnotationMachinePriority]; !ok {
		m.Annotations[v1alpha1.AnnotationMachinePriority] = v1alpha1.DefaultMachinePriority
	}
	// Workloads stay off it while it boots (the controller syncs the node template's taints);
	// the stop drains whatever landed before the taint did.
	m.Spec.NodeTemplateSpec.Spec.Taints = append(m.Spec.NodeTemplateSpec.Spec.Taints,
		corev1.Taint{Key: Annotation, Value: md.Name, Effect: corev1.TaintEffectNoSchedule})
	if m.Spec.MachineConfiguration == nil {
		m.Spec.MachineConfiguration = &v1alpha1.MachineConfiguration{}
	}
	m.Spec.MachineConfiguration.DisableHealthTimeout = ptr.To(true)
	m.Annotations[Annotation] = md.Name
	m.Annotations[AnnotationState] = string(Booting)
	m.Annotations[AnnotationTemplateHash] = ms.Labels[v1alpha1.LabelMachineTemplateHash]
	return m
}

// Claim returns standby machine m made a machine of set ms: the set's template labels (beside the
// labels the Machine controller wrote, such as node; LabelDeployment goes), the set as
// its controller, the template's machine configuration (health timeout included) and node
// template (the standby taint gone), the standby annotation and label gone. A stopped machine keeps AnnotationState
// Stopped, which tells the Machine controller to start its VM (and to drop the state once it has);
// a booting one drops it and goes on as any new machine.
func Claim(m *v1alpha1.Machine, ms *v1alpha1.MachineSet) *v1alpha1.Machine {
	c := m.DeepCopy()
	if c.Labels == nil {
		c.Labels = map[string]string{}
	}
	delete(c.Labels, LabelDeployment)
	maps.Copy(c.Labels, ms.Spec.Template.Labels) // the controller's own labels (node) stay
	c.OwnerReferences = []metav1.OwnerReference{{
		APIVersion:         v1alpha1.SchemeGroupVersion.String(),
		Kind:               "MachineSet",
		Name:               ms.Name,
		UID:                ms.UID,
		Controller:         ptr.To(true),
		BlockOwnerDeletion: ptr.To(true),
	}}
	c.Spec.MachineConfiguration = ms.Spec.Template.Spec.MachineConfiguration.DeepCopy()
	c.Spec.NodeTemplateSpec = *ms.Spec.Template.Spec.NodeTemplateSpec.DeepCopy()
	delete(c.Annotations, Annotation)
	delete(c.Annotations, AnnotationTemplateHash)
	if State(c.Annotations[AnnotationState]) != Stopped {
		delete(c.Annotations, AnnotationState)
	}
	return c
}

// Step is what the Machine controller does next with a machine of the feature.
type Step int

const (
	// None: not a standby machine, nor one resumed from standby; the usual lifecycle applies.
	None Step = iota
	// AwaitReady: a booting standby machine whose node has not been Ready yet; the usual
	// creation and health rules apply until it has.
	AwaitReady
	// Stop: drain it, delete its Node, stop its VM, then mark it Stopped. Repeated until done
	// (every part is idempotent), so a restart half-way finishes the stop.
	Stop
	// Idle: a stopped standby machine; no node is expected, so health rules do not apply.
	Idle
	// Start: a set claimed it while stopped; start its VM, then drop AnnotationState and let the
	// usual rules follow its node.
	Start
)

// NextStep decides a machine's step: nodeReadyOnce says its node has been Ready (the condition is
// read by the caller, so a restart between Ready and the stop still stops it).
func NextStep(m *v1alpha1.Machine, nodeReadyOnce bool) Step {
	st, has := m.Annotations[AnnotationState]
	if !has || m.DeletionTimestamp != nil {
		return None
	}
	_, standing := m.Annotations[Annotation]
	switch {
	case !standing && State(st) == Stopped:
		return Start
	case !standing:
		return None // claimed while booting; a stale state is dropped by the claim
	case State(st) == Stopped:
		return Idle
	case State(st) == Stopping:
		return Stop
	case nodeReadyOnce:
		return Stop
	}
	return AwaitReady
}

// DeletesItsNode reports whether the controller itself deletes m's node as part of a standby stop
// (Stopping or Stopped), so a node deletion is no request to delete the machine (MCM's rule for
// nodes someone else deletes).
func DeletesItsNode(m *v1alpha1.Machine) bool {
	st := State(m.Annotations[AnnotationState])
	return st == Stopping || st == Stopped
}

// StartFailure is what a failed start of a claimed machine leads to.
type StartFailure int

const (
	// Retry the start with the usual backoff.
	Retry StartFailure = iota
	// Replace: delete the machine; its set creates a fresh one (capacity fallback applies), and
	// an event on the machine and its deployment says so.
	Replace
)

// OnStartError decides after a failed StartMachine: no capacity to start it (ResourceExhausted),
// a VM that is gone (NotFound) or a driver that lost the capability (Unimplemented) replace the
// machine with a fresh create; anything else is retried.
func OnStartError(err error) StartFailure {
	switch driver.CodeOf(err) {
	case driver.ResourceExhausted, driver.NotFound, driver.Unimplemented:
		return Replace
	}
	return Retry
}
