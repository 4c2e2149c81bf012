// Package safety keeps the machine controllers from doing damage: it collects orphan VMs (VMs
// no Machine owns) carefully, freezes MachineSets that overshoot their replicas, and freezes the
// Machine controller while the control plane or the target cluster's API server is unreachable.
package safety

import (
	"log/slog"
	"time"

	"k8s.io/utils/clock"
)

// Defaults of the flags of `machinist run` that configure the safety controller; MCM's defaults
// where MCM has the flag (docs/compatibility/mcm-controllers.md#flags-and-defaults).
const (
	DefaultOrphanPeriod                = 15 * time.Minute
	DefaultOrphanGracePeriod           = 10 * time.Minute
	DefaultOrphanMaxDeletesPerPass     = 10
	DefaultOrphanMinInterval           = time.Minute
	DefaultSafetyUp                    = 2
	DefaultSafetyDown                  = 1
	DefaultOvershootingPeriod          = time.Minute
	DefaultAPIServerStatusCheckPeriod  = time.Minute
	DefaultAPIServerStatusCheckTimeout = 30 * time.Second
)

// Options configure the safety controller. Start from DefaultOptions: a zero period, timeout or
// cap takes its default, but zero is a meaningful value for OrphanGracePeriod (delete orphans at
// the first pass after they are found), SafetyUp and SafetyDown.
type Options struct {
	// Namespace of the Machine* objects in the control cluster (--namespace).
	Namespace string

	// OrphanPeriod is how often every MachineClass's VMs are listed to find orphans
	// (--machine-safety-orphan-vms-period, 15m). Machine deletions and OutOfRange errors trigger
	// extra passes, at most one per OrphanMinInterval.
	OrphanPeriod time.Duration
	// OrphanGracePeriod is how long a VM must have been seen without a Machine before it is
	// deleted (--machine-safety-orphan-vms-grace-period, 10m).
	OrphanGracePeriod time.Duration
	// OrphanMaxDeletesPerPass caps the orphan VMs deleted by one pass; the rest wait for the next
	// (--machine-safety-orphan-vms-max-deletes, 10).
	OrphanMaxDeletesPerPass int
	// OrphanDryRun only reports orphans (log, event on the class, metric) and deletes nothing
	// (--orphan-dry-run).
	OrphanDryRun bool
	// OrphanMinInterval spaces triggered orphan passes (1m).
	OrphanMinInterval time.Duration

	// SafetyUp is added to a MachineSet's allowed maximum (replicas + surge) before it freezes
	// (--safety-up, 2).
	SafetyUp int32
	// SafetyDown is how far below the freeze threshold the count must fall to unfreeze
	// (--safety-down, 1).
	SafetyDown int32
	// OvershootingPeriod is how often every MachineSet is checked for overshooting
	// (--machine-safety-overshooting-period, 1m).
	OvershootingPeriod time.Duration

	// APIServerStatusCheckPeriod is how often the API servers are probed
	// (--machine-safety-apiserver-statuscheck-period, 1m).
	APIServerStatusCheckPeriod time.Duration
	// APIServerStatusCheckTimeout is how long an API server may be unreachable before the Machine
	// controller freezes (--machine-safety-apiserver-statuscheck-timeout, 30s).
	APIServerStatusCheckTimeout time.Duration

	// WithoutMachineSafety leaves out the orphan collector and the API-server freeze, and
	// WithoutOvershoot the overshooting freeze: MCM splits them the same way, the overshooting
	// freeze in its core (machine-controller-manager), the other two in each provider's
	// machine-controller. Neither set (the all-in-one) runs all three.
	WithoutMachineSafety, WithoutOvershoot bool

	// Log is the controller's logger; nil means slog.Default().
	Log *slog.Logger
	// Clock is the time of the periods, grace periods and timeouts above; nil means the real
	// clock. Tests pass a fake clock (k8s.io/utils/clock/testing) and step it instead of
	// waiting. The calls to API servers and drivers keep real deadlines.
	Clock clock.Clock
}

// DefaultOptions returns the defaults of every option.
func DefaultOptions() Options {
	return Options{
		OrphanPeriod:                DefaultOrphanPeriod,
		OrphanGracePeriod:           DefaultOrphanGracePeriod,
		OrphanMaxDeletesPerPass:     DefaultOrphanMaxDeletesPerPass,
		OrphanMinInterval:           DefaultOrphanMinInterval,
		SafetyUp:                    DefaultSafetyUp,
		SafetyDown:                  DefaultSafetyDown,
		OvershootingPeriod:          DefaultOvershootingPeriod,
		APIServerStatusCheckPeriod:  DefaultAPIServerStatusCheckPeriod,
		APIServerStatusCheckTimeout: DefaultAPIServerStatusCheckTimeout,
	}
}

func (o Options) withDefaults() Options {
	d := DefaultOptions()
	setDur := func(v *time.Duration, def time.Duration) {
		if *v <= 0 {
			*v = def
		}
	}
	setDur(&o.OrphanPeriod, d.OrphanPeriod)
	setDur(&o.OrphanMinInterval, d.OrphanMinInterval)
	setDur(&o.OvershootingPeriod, d.OvershootingPeriod)
	setDur(&o.APIServerStatusCheckPeriod, d.APIServerStatusCheckPeriod)
	setDur(&o.APIServerStatusCheckTimeout, d.APIServerStatusCheckTimeout)
	if o.OrphanGracePeriod < 0 {
		o.OrphanGracePeriod = 0
	}
	if o.OrphanMaxDeletesPerPass <= 0 {
		o.OrphanMaxDeletesPerPass = d.OrphanMaxDeletesPerPass
	}
	if o.SafetyUp < 0 {
		o.SafetyUp = d.SafetyUp
	}
	if o.SafetyDown < 0 {
		o.SafetyDown = d.SafetyDown
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	return o
}
