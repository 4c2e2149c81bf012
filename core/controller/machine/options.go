package machine

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/fallback"
	"github.com/machinist-io/machinist/core/drain"
)

// Defaults of the flags of `machinist run` that configure the Machine controller. They are
// Gardener MCM's defaults where MCM has the flag
// (docs/compatibility/mcm-controllers.md#flags-and-defaults).
const (
	DefaultCreationTimeout        = 20 * time.Minute
	DefaultHealthTimeout          = 10 * time.Minute
	DefaultDrainTimeout           = 2 * time.Hour
	DefaultInPlaceUpdateTimeout   = 20 * time.Minute
	DefaultPVDetachTimeout        = 2 * time.Minute
	DefaultPVReattachTimeout      = 90 * time.Second
	DefaultMaxEvictRetries        = 360
	DefaultResourceExhaustedRetry = 10 * time.Minute
	DefaultConcurrentSyncs        = 50
	DefaultShortRetry             = 5 * time.Second
	DefaultMediumRetry            = 3 * time.Minute
	DefaultLongRetry              = 10 * time.Minute
	DefaultEvictRetryInterval     = 20 * time.Second
	DefaultDrainPollInterval      = 5 * time.Second
	DefaultForceDrainNotReady     = 5 * time.Minute
	DefaultPendingRecheck         = 30 * time.Second
	DefaultPreserveTimeout        = 96 * time.Hour
)

// DefaultNodeConditions are the node condition types that make a machine unhealthy when True
// (--node-conditions).
var DefaultNodeConditions = []string{"KernelDeadlock", "ReadonlyFilesystem", "DiskPressure", "NetworkUnavailable"}

// FreezeGate tells the controller whether the control plane is unreachable. While Frozen reports
// true, machines that are not being deleted are left alone: no creation and, above all, no
// Unknown → Failed transition, so an outage of the API server does not replace healthy machines.
// *safety.Controller implements it.
type FreezeGate interface {
	Frozen() bool
}

// Options configure the Machine controller. A zero field takes its default (see DefaultOptions),
// so a caller sets only what its flags changed. Per-machine overrides in
// Machine.spec (drainTimeout, healthTimeout, creationTimeout, inPlaceUpdateTimeout,
// machinePreserveTimeout, maxEvictRetries, nodeConditions) and the
// node.machine.sapcloud.io/effective-creation-timeout annotation win over these.
type Options struct {
	// Namespace of the Machine, MachineClass and Secret objects in the control cluster
	// (--namespace). "" watches what the manager's cache holds.
	Namespace string

	// CreationTimeout is how long a machine may take from creation until its node is healthy
	// before it is Failed (--machine-creation-timeout, 20m). The bootstrap token expires with it.
	CreationTimeout time.Duration
	// HealthTimeout is how long a machine may stay Unknown before it is Failed and replaced
	// (--machine-health-timeout, 10m).
	HealthTimeout time.Duration
	// DrainTimeout bounds the graceful drain of a node; after it the drain turns forceful
	// (--machine-drain-timeout, 2h).
	DrainTimeout time.Duration
	// InPlaceUpdateTimeout is how long the agent on a node drained for an in-place update may
	// take to report the result (label update-result) before the machine is InPlaceUpdateFailed
	// (--machine-inplace-update-timeout, 20m).
	InPlaceUpdateTimeout time.Duration
	// PVDetachTimeout bounds the wait for the volumes of one evicted pod to detach
	// (--machine-pv-detach-timeout, 2m).
	PVDetachTimeout time.Duration
	// PVReattachTimeout bounds the wait for those volumes to attach elsewhere; running out is not
	// an error (--machine-pv-reattach-timeout, 90s).
	PVReattachTimeout time.Duration
	// MaxEvictRetries bounds eviction retries of a pod blocked by a PodDisruptionBudget
	// (--machine-max-evict-retries, 360).
	MaxEvictRetries int32
	// PreserveTimeout is how long a machine stays preserved (annotation
	// node.machine.sapcloud.io/preserve) before preservation ends by itself; a machine's
	// spec.machinePreserveTimeout wins (--machine-preserve-timeout, 96h).
	PreserveTimeout time.Duration
	// NodeConditions are node condition types that make a machine unhealthy when True
	// (--node-conditions, KernelDeadlock,ReadonlyFilesystem,DiskPressure,NetworkUnavailable).
	NodeConditions []string
	// ResourceExhaustedRetry is the first wait after a ResourceExhausted (quota, capacity) error;
	// later retries back off exponentially from it (--resource-exhausted-retry, 10m).
	ResourceExhaustedRetry time.Duration
	// BootstrapTokenAuthExtraGroups are extra groups (comma-separated) of the bootstrap tokens
	// (--bootstrap-token-auth-extra-groups).
	BootstrapTokenAuthExtraGroups string
	// ConcurrentSyncs is the number of machines reconciled in parallel, for creation and for
	// deletion each (--concurrent-syncs, 50).
	ConcurrentSyncs int
	// MaxReplacements limits how many machines of one MachineDeployment (found through the
	// machine's MachineSet, or by MCM's label "name" for a machine without one) may be
	// replaced at a time after failing their health check: a count ("1") or a percentage of the
	// deployment's machines ("10%", rounded down). The first replacement is never blocked, so 0
	// behaves like 1 (--max-replacements-per-deployment, 1).
	MaxReplacements intstr.IntOrString

	// ShortRetry is the first wait after a transient driver error (Unknown, DeadlineExceeded,
	// Aborted, Unavailable) and the step period of deletion (5s).
	ShortRetry time.Duration
	// MediumRetry is the first wait after an error that needs a change to succeed
	// (InvalidArgument, PermissionDenied, ...) (3m).
	MediumRetry time.Duration
	// LongRetry is the period of the steady-state resync and the cap of backoffs (10m).
	LongRetry time.Duration
	// EvictRetryInterval is the wait between evictions refused by a PodDisruptionBudget (20s).
	EvictRetryInterval time.Duration
	// DrainPollInterval is how often the drain checks pod deletion and volume detachment (5s).
	DrainPollInterval time.Duration
	// ForceDrainNotReadyAfter: a node NotReady for longer than this is drained forcefully (5m).
	ForceDrainNotReadyAfter time.Duration
	// PendingRecheck is the longest a Pending machine waits before its node is looked at again
	// without a node event (30s): a backstop, since the node's events bring the machine back.
	PendingRecheck time.Duration

	// Fallback is the cache of MachineClasses marked exhausted (capacity fallback); share it with
	// the MachineSet controller. nil means a cache of the controller's own with the default TTL.
	Fallback *fallback.Cache

	// Freeze is consulted before acting on machines that are not being deleted; nil means never
	// frozen. Pass the *safety.Controller returned by safety.Setup.
	Freeze FreezeGate
	// Log is the controller's logger; nil means slog.Default().
	Log *slog.Logger
	// Clock is the time of every timeout, backoff and expiry the controller measures (creation,
	// health, drain, in-place update and preservation timeouts, the replacement limiter, the
	// exhausted-class marks of its own fallback cache); nil means the real clock. Tests pass a
	// fake clock (k8s.io/utils/clock/testing) and step it instead of waiting. The work queues
	// keep real time: a requeue computed from the clock comes after at most LongRetry, and an
	// update of the machine or its node reconciles it at once.
	Clock clock.Clock
}

// DefaultOptions returns the defaults of every option.
func DefaultOptions() Options {
	return Options{
		CreationTimeout:         DefaultCreationTimeout,
		HealthTimeout:           DefaultHealthTimeout,
		DrainTimeout:            DefaultDrainTimeout,
		InPlaceUpdateTimeout:    DefaultInPlaceUpdateTimeout,
		PVDetachTimeout:         DefaultPVDetachTimeout,
		PVReattachTimeout:       DefaultPVReattachTimeout,
		MaxEvictRetries:         DefaultMaxEvictRetries,
		NodeConditions:          append([]string(nil), DefaultNodeConditions...),
		ResourceExhaustedRetry:  DefaultResourceExhaustedRetry,
		ConcurrentSyncs:         DefaultConcurrentSyncs,
		MaxReplacements:         intstr.FromInt32(1),
		ShortRetry:              DefaultShortRetry,
		MediumRetry:             DefaultMediumRetry,
		LongRetry:               DefaultLongRetry,
		EvictRetryInterval:      DefaultEvictRetryInterval,
		DrainPollInterval:       DefaultDrainPollInterval,
		ForceDrainNotReadyAfter: DefaultForceDrainNotReady,
		PendingRecheck:          DefaultPendingRecheck,
		PreserveTimeout:         DefaultPreserveTimeout,
	}
}

// withDefaults fills zero fields with their defaults.
func (o Options) withDefaults() Options {
	d := DefaultOptions()
	setDur := func(v *time.Duration, def time.Duration) {
		if *v <= 0 {
			*v = def
		}
	}
	setDur(&o.CreationTimeout, d.CreationTimeout)
	setDur(&o.HealthTimeout, d.HealthTimeout)
	setDur(&o.DrainTimeout, d.DrainTimeout)
	setDur(&o.InPlaceUpdateTimeout, d.InPlaceUpdateTimeout)
	setDur(&o.PVDetachTimeout, d.PVDetachTimeout)
	setDur(&o.PVReattachTimeout, d.PVReattachTimeout)
	setDur(&o.ResourceExhaustedRetry, d.ResourceExhaustedRetry)
	setDur(&o.ShortRetry, d.ShortRetry)
	setDur(&o.MediumRetry, d.MediumRetry)
	setDur(&o.LongRetry, d.LongRetry)
	setDur(&o.EvictRetryInterval, d.EvictRetryInterval)
	setDur(&o.DrainPollInterval, d.DrainPollInterval)
	setDur(&o.ForceDrainNotReadyAfter, d.ForceDrainNotReadyAfter)
	setDur(&o.PendingRecheck, d.PendingRecheck)
	setDur(&o.PreserveTimeout, d.PreserveTimeout)
	if o.MaxEvictRetries <= 0 {
		o.MaxEvictRetries = d.MaxEvictRetries
	}
	if o.NodeConditions == nil {
		o.NodeConditions = d.NodeConditions
	}
	if o.ConcurrentSyncs <= 0 {
		o.ConcurrentSyncs = d.ConcurrentSyncs
	}
	if o.MaxReplacements.Type == intstr.String && o.MaxReplacements.StrVal == "" {
		o.MaxReplacements = d.MaxReplacements
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Fallback == nil {
		o.Fallback = fallback.NewCache(fallback.DefaultTTL).WithClock(o.Clock)
	}
	return o
}

// validate reports options that cannot work, naming the flag.
func (o Options) validate() error {
	if _, err := intstr.GetScaledValueFromIntOrPercent(&o.MaxReplacements, 100, false); err != nil {
		return fmt.Errorf("machine: --max-replacements-per-deployment %q: %w: use a count like 1 or a percentage like 10%%", o.MaxReplacements.String(), err)
	}
	if o.MaxReplacements.Type == intstr.Int && o.MaxReplacements.IntVal < 0 {
		return fmt.Errorf("machine: --max-replacements-per-deployment %d is negative: use a count ≥ 0 or a percentage", o.MaxReplacements.IntVal)
	}
	for _, c := range o.NodeConditions {
		if strings.TrimSpace(c) == "" {
			return fmt.Errorf("machine: --node-conditions %q has an empty entry: use a comma-separated list of condition types", strings.Join(o.NodeConditions, ","))
		}
	}
	return nil
}

// ParseNodeConditions splits a --node-conditions value ("A,B, C") into condition types.
func ParseNodeConditions(s string) []string {
	var out []string
	for _, c := range strings.Split(s, ",") {
		if c = strings.TrimSpace(c); c != "" {
			out = append(out, c)
		}
	}
	return out
}

// The per-machine overrides: a machine's spec.machineConfiguration wins over the flags.

// creationTimeout: the effective-creation-timeout annotation (copied from the
// MachineDeployment), then spec.creationTimeout, then the flag.
func (o Options) creationTimeout(m *v1alpha1.Machine) time.Duration {
	if v := m.Annotations[v1alpha1.AnnotationEffectiveCreationTimeout]; v != "" {
		if d, err := time.ParseDuration(v); err == nil && d > 0 {
			return d
		}
	}
	if c := m.Spec.MachineConfiguration; c != nil && c.MachineCreationTimeout != nil && c.MachineCreationTimeout.Duration > 0 {
		return c.MachineCreationTimeout.Duration
	}
	return o.CreationTimeout
}

func (o Options) healthTimeout(m *v1alpha1.Machine) time.Duration {
	if c := m.Spec.MachineConfiguration; c != nil && c.MachineHealthTimeout != nil && c.MachineHealthTimeout.Duration > 0 {
		return c.MachineHealthTimeout.Duration
	}
	return o.HealthTimeout
}

func healthTimeoutDisabled(m *v1alpha1.Machine) bool {
	c := m.Spec.MachineConfiguration
	return c != nil && c.DisableHealthTimeout != nil && *c.DisableHealthTimeout
}

func (o Options) drainTimeout(m *v1alpha1.Machine) time.Duration {
	if c := m.Spec.MachineConfiguration; c != nil && c.MachineDrainTimeout != nil && c.MachineDrainTimeout.Duration > 0 {
		return c.MachineDrainTimeout.Duration
	}
	return o.DrainTimeout
}

func (o Options) maxEvictRetries(m *v1alpha1.Machine) int32 {
	if c := m.Spec.MachineConfiguration; c != nil && c.MaxEvictRetries != nil && *c.MaxEvictRetries > 0 {
		return *c.MaxEvictRetries
	}
	return o.MaxEvictRetries
}

// evictRetries bounds a graceful drain's eviction retries by what fits into its drain timeout.
func (o Options) evictRetries(m *v1alpha1.Machine, drainTimeout time.Duration) int32 {
	return min(o.maxEvictRetries(m), max(1, int32(drainTimeout/o.EvictRetryInterval)))
}

func (o Options) nodeConditions(m *v1alpha1.Machine) []string {
	if c := m.Spec.MachineConfiguration; c != nil && c.NodeConditions != nil {
		return ParseNodeConditions(*c.NodeConditions)
	}
	return o.NodeConditions
}

// preserveTimeout: spec.machinePreserveTimeout, then the flag.
func (o Options) preserveTimeout(m *v1alpha1.Machine) time.Duration {
	if c := m.Spec.MachineConfiguration; c != nil && c.MachinePreserveTimeout != nil && c.MachinePreserveTimeout.Duration > 0 {
		return c.MachinePreserveTimeout.Duration
	}
	return o.PreserveTimeout
}

func (o Options) inPlaceUpdateTimeout(m *v1alpha1.Machine) time.Duration {
	if c := m.Spec.MachineConfiguration; c != nil && c.MachineInPlaceUpdateTimeout != nil && c.MachineInPlaceUpdateTimeout.Duration > 0 {
		return c.MachineInPlaceUpdateTimeout.Duration
	}
	return o.InPlaceUpdateTimeout
}

func (o Options) controllerOptions() controller.Options {
	return controller.Options{MaxConcurrentReconciles: o.ConcurrentSyncs}
}

// drainOptions are the settings every drain of the controller shares; the caller sets the
// timeout, the retries and whether it is forceful.
func (o Options) drainOptions() drain.Options {
	return drain.Options{
		EvictRetryInterval: o.EvictRetryInterval,
		PollInterval:       o.DrainPollInterval,
		PVDetachTimeout:    o.PVDetachTimeout,
		PVReattachTimeout:  o.PVReattachTimeout,
	}
}
