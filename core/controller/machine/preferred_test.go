package machine_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/machine"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/drivertest/memdriver"
	"github.com/machinist-io/machinist/core/registry"
	"github.com/machinist-io/machinist/harness/ctrltest"
)

// dialledIn plays the providers that dial in: a registry.Source and registry.Notifier a test
// connects a provider to.
type dialledIn struct {
	mu      sync.Mutex
	drivers map[string]driver.Driver
	changed chan struct{}
}

func newDialledIn() *dialledIn {
	return &dialledIn{drivers: map[string]driver.Driver{}, changed: make(chan struct{})}
}

func (d *dialledIn) Driver(provider string) (driver.Driver, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	drv, ok := d.drivers[provider]
	return drv, ok
}

func (d *dialledIn) Changed() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.changed
}

func (d *dialledIn) connect(provider string, drv driver.Driver) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.drivers[provider] = drv
	close(d.changed)
	d.changed = make(chan struct{})
}

// startPreferring runs the Machine controller with the test's drivers as the endpoint of "mem"
// and remote as the dialled-in providers, "mem" preferred dialled in with the given grace.
func startPreferring(e *ctrltest.Env, opts machine.Options, remote *dialledIn, grace time.Duration) {
	e.StartManager(func(mgr manager.Manager) error {
		r := &registry.Resolver{Endpoints: e.Drivers, Remote: remote, PreferRemote: []string{memdriver.ProviderName}, PreferGrace: grace}
		opts.Namespace = e.NS
		return machine.Setup(mgr, nil, r, opts)
	})
}

// TestPreferredProviderGrace: while a preferred provider's grace period lasts and none of its
// replicas is connected, a new machine waits (lastOperation says for what, an event too) and the
// driver that would otherwise serve is not called; the provider connecting creates the machine at
// once, long before the grace period ends.
func TestPreferredProviderGrace(t *testing.T) {
	e := ctrltest.NewEnv(t)
	fallbackCloud, remoteCloud := memdriver.NewCloud(), memdriver.NewCloud()
	fallback := &countingDriver{Driver: memdriver.New(fallbackCloud)}
	e.Drivers.Set(memdriver.ProviderName, fallback)
	e.Class("mem", "mem", memSpec(e), "")
	remote := newDialledIn()
	startPreferring(e, ctrltest.FastOptions(), remote, time.Hour)

	name := e.Name("waits")
	e.Machine(name, "mem")
	m := e.WaitMachine(name, 30*time.Second, "waiting for the preferred provider", func(m *v1alpha1.Machine) bool {
		return strings.HasPrefix(m.Status.LastOperation.Description, "Waiting for the preferred provider - ")
	})
	if lo := m.Status.LastOperation; lo.State != v1alpha1.MachineStateProcessing || lo.Type != v1alpha1.MachineOperationCreate ||
		!strings.Contains(lo.Description, "--prefer-dialin mem") || !strings.Contains(lo.Description, "driver endpoint serves this class") {
		t.Fatalf("lastOperation %+v", lo)
	}
	e.WaitEventReasons(name, 30*time.Second, "WaitingForProvider")
	if n := len(fallback.statusCalls(name)); n != 0 || fallbackCloud.Count(name) != 0 {
		t.Fatalf("the fallback driver was called %d times while the preferred provider was awaited", n)
	}

	remote.connect(memdriver.ProviderName, memdriver.New(remoteCloud))
	m = e.WaitMachine(name, 30*time.Second, "created by the dialled-in provider", func(m *v1alpha1.Machine) bool { return m.Spec.ProviderID != "" })
	if remoteCloud.Count(name) != 1 || fallbackCloud.Count(name) != 0 || len(fallback.statusCalls(name)) != 0 {
		t.Fatalf("machine %s: dialled-in cloud %d VMs, fallback %d VMs and %d calls; want only the dialled-in provider's VM",
			ctrltest.Describe(m), remoteCloud.Count(name), fallbackCloud.Count(name), len(fallback.statusCalls(name)))
	}
}

// TestFailedOnFallbackRetriedWhenPreferredConnects: with no grace period the fallback driver
// serves a preferred provider's class until the provider connects; a machine whose creation
// failed there (InvalidArgument: the next attempt in minutes) is created by the provider as soon
// as it connects, not when its backoff ends.
func TestFailedOnFallbackRetriedWhenPreferredConnects(t *testing.T) {
	e := ctrltest.NewEnv(t)
	fallbackCloud, remoteCloud := memdriver.NewCloud(), memdriver.NewCloud()
	e.Drivers.Set(memdriver.ProviderName, memdriver.New(fallbackCloud))
	e.Class("mem", "mem", memSpec(e), "")
	remote := newDialledIn()
	opts := ctrltest.FastOptions()
	opts.MediumRetry, opts.LongRetry = 30*time.Minute, 30*time.Minute // InvalidArgument's backoff: far beyond the test
	startPreferring(e, opts, remote, 0)

	name := e.Name("failed")
	fallbackCloud.Inject(memdriver.MethodCreate, memdriver.Fault{Code: driver.InvalidArgument, Machine: name, Message: "the seed-era spec has no networkInterfaces"})
	e.Machine(name, "mem")
	m := e.WaitPhase(name, v1alpha1.MachineCrashLoopBackOff, 30*time.Second)
	if lo := m.Status.LastOperation; lo.ErrorCode != driver.InvalidArgument.String() {
		t.Fatalf("lastOperation %+v, want the fallback's InvalidArgument", lo)
	}

	remote.connect(memdriver.ProviderName, memdriver.New(remoteCloud))
	m = e.WaitMachine(name, 30*time.Second, "created by the dialled-in provider", func(m *v1alpha1.Machine) bool { return m.Spec.ProviderID != "" })
	if remoteCloud.Count(name) != 1 || fallbackCloud.Count(name) != 0 {
		t.Fatalf("machine %s: dialled-in cloud %d VMs, fallback %d", ctrltest.Describe(m), remoteCloud.Count(name), fallbackCloud.Count(name))
	}
}
