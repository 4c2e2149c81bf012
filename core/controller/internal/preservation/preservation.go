// Package preservation reads what a Machine and its Node say about machine preservation
// (annotation node.machine.sapcloud.io/preserve), with MCM's rules, for the Machine controller
// (which preserves) and the MachineSet controller (which keeps preserved Failed machines,
// auto-preserves and orders scale-down).
package preservation

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// State is what a machine and its node say about preservation (MCM's preserveStateInfo).
type State struct {
	MachineValue     string
	MachineAnnotated bool
	NodeValue        string
	NodeAnnotated    bool
	// LastApplied is the node's value the Machine controller last moved onto the machine
	// (node.machine.sapcloud.io/last-applied-node-preserve-value).
	LastApplied string
	// NodeGone: the machine names a node that does not exist.
	NodeGone bool
}

// Of reads the state of m whose node is node; nodeGone says the machine names a node that does
// not exist (node is then nil).
func Of(m *v1alpha1.Machine, node *corev1.Node, nodeGone bool) State {
	s := State{NodeGone: nodeGone}
	s.MachineValue, s.MachineAnnotated = m.Annotations[v1alpha1.AnnotationPreserve]
	s.LastApplied = m.Annotations[v1alpha1.AnnotationLastAppliedNodePreserveValue]
	if node != nil {
		s.NodeValue, s.NodeAnnotated = node.Annotations[v1alpha1.AnnotationPreserve]
	}
	return s
}

// Bound reports whether the machine has anything to do with preservation; other machines are
// left alone.
func (s State) Bound(m *v1alpha1.Machine) bool {
	return m.Status.CurrentStatus.PreserveExpiryTime != nil || s.MachineAnnotated || s.NodeAnnotated || s.LastApplied != ""
}

// Effective is the value that counts. The node's annotation wins — even once removed, as long as
// a node value had been applied before (so a node annotation removed while the controller was
// down still ends preservation). Without a node the machine's value counts.
func (s State) Effective() string {
	if s.NodeGone || (s.NodeValue == "" && s.LastApplied == "") {
		return s.MachineValue
	}
	return s.NodeValue
}

// SyncMachine reports whether the node's value must be moved onto the machine: once a node's
// value is in control the machine's own annotation is removed and the node's value recorded in
// last-applied-node-preserve-value (MCM's shouldAnnotationsBeUpdatedOnMachine), so both tell one
// story.
func (s State) SyncMachine() bool {
	if s.NodeGone || (!s.NodeAnnotated && s.LastApplied == "") {
		return false
	}
	return !(s.NodeValue == s.LastApplied && !s.MachineAnnotated)
}

// Preserved reports whether m is preserved at now: its preserveExpiryTime is set and not yet
// reached (MCM's rule for scale-down order).
func Preserved(m *v1alpha1.Machine, now time.Time) bool {
	exp := m.Status.CurrentStatus.PreserveExpiryTime
	return exp != nil && exp.After(now)
}

// KeepsFailed reports whether the effective value asks to keep a Failed machine (preservation
// may not have started yet): now, when-failed or auto-preserved.
func KeepsFailed(value string) bool {
	switch value {
	case v1alpha1.PreserveNow, v1alpha1.PreserveWhenFailed, v1alpha1.PreserveAuto:
		return true
	}
	return false
}
