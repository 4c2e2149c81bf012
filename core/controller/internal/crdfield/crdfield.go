// Package crdfield remembers what the installed CRDs cannot store. machinist's CRDs have a few
// fields and features Gardener MCM's lack (status.labelSelector, status.fallbackReplicas, the
// MachineClass status subresource); with MCM's CRDs installed the API server drops such a field
// from every write (with an "unknown field" warning) or refuses the subresource. A controller that
// kept sending it would write the same status again on every reconcile and fill the log with
// warnings. So each such field is a Field: once the server is seen to drop it, the controller
// stops sending it and logs, once, what that means.
package crdfield

import "sync/atomic"

// Field is one field or feature a CRD may lack. The zero value is not usable: use New.
type Field struct {
	what    string
	meaning string
	dropped atomic.Bool
}

// New returns a Field for what ("the MachineSet CRD's status.labelSelector"), whose absence
// means meaning (what is lost, and how to get it back).
func New(what, meaning string) *Field {
	return &Field{what: what, meaning: meaning}
}

// Dropped reports whether the server has been seen to drop the field: do not send it again.
func (f *Field) Dropped() bool { return f.dropped.Load() }

// Observe records the outcome of a write that sent the field (sent) and whether the server kept
// it (stored). It reports true exactly once: when the field is first seen dropped, which is
// when the caller logs Message.
func (f *Field) Observe(sent, stored bool) bool {
	if !sent || stored {
		return false
	}
	return !f.dropped.Swap(true)
}

// Message is the line to log once the field is seen dropped.
func (f *Field) Message() string {
	return f.what + " is missing (Gardener MCM's CRDs?): it is no longer written; " + f.meaning
}
