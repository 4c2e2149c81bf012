package grpcbridge

import (
	"context"
	"time"
)

// Timeouts bound calls whose caller set no deadline. A caller's own deadline always wins, longer
// or shorter.
type Timeouts struct {
	// Mutating bounds CreateMachine, InitializeMachine and DeleteMachine.
	Mutating time.Duration
	// Reading bounds GetMachineStatus, ListMachines and GetVolumeIDs.
	Reading time.Duration
}

// DefaultTimeouts apply when none are configured: long enough for a slow cloud to build a VM,
// short enough that a lost call does not hold a controller worker forever.
var DefaultTimeouts = Timeouts{Mutating: 10 * time.Minute, Reading: 2 * time.Minute}

func (t Timeouts) orDefault() Timeouts {
	if t.Mutating <= 0 {
		t.Mutating = DefaultTimeouts.Mutating
	}
	if t.Reading <= 0 {
		t.Reading = DefaultTimeouts.Reading
	}
	return t
}

// bound applies d when ctx has no deadline.
func bound(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}

// Bound applies the mutating or reading bound to ctx when ctx has no deadline.
func (t Timeouts) Bound(ctx context.Context, mutating bool) (context.Context, context.CancelFunc) {
	t = t.orDefault()
	if mutating {
		return bound(ctx, t.Mutating)
	}
	return bound(ctx, t.Reading)
}
