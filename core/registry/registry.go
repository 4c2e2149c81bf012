// Package registry is the set of compiled-in providers. Each provider package registers itself
// from the init() in its register.go; build tags (provider_<name>, see providers/all) decide
// which packages are linked in. Lookups are by name, case-insensitively, so the
// MachineClass.provider "OpenStack" of existing manifests selects the openstack driver.
package registry

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
)

// Registration describes one provider.
type Registration struct {
	// Name is the provider's name: lower-case letters and digits, starting with a letter. It is
	// also its directory under providers/, its build tag (provider_<name>) and its image suffix.
	Name string
	// Description is one line shown by `machinist providers`.
	Description string
	// New opens the provider's driver. It is called at most once per process and name by Open's
	// callers that cache (Resolver); it must not contact the cloud, since credentials arrive with
	// each request.
	New func(Env) (driver.Driver, error)
	// CheckSpec decodes and validates a class's providerSpec in mode the way the driver does,
	// without a cloud call and without credentials, and returns what decoding ignored or matched
	// loosely (driver.SpecWarning) and the error the driver would answer (InvalidArgument). The
	// controller records the result on the MachineClass and `machinist driver` prints the
	// warnings. nil means the provider cannot check a spec offline.
	CheckSpec func(class *v1alpha1.MachineClass, mode driver.SpecMode) ([]driver.SpecWarning, error)
}

// Env is what a process offers its drivers.
type Env struct {
	// Target is the cluster the machines' nodes join, or nil when there is none: a client-go
	// *rest.Config (the controller's own cluster) or a Kubeconfig (serve/connect/driver
	// --target-kubeconfig).
	// It is not typed *rest.Config so that the registry, and with it every slim cloud-provider
	// binary, links no Kubernetes client: only the local provider, which joins nodes, resolves it.
	Target any
	// StateDir is a directory the driver may keep state in; "" means keep none on disk.
	StateDir string
	// Log is the driver's logger; nil means slog.Default().
	Log *slog.Logger
	// SpecMode is how the driver decodes providerSpecs: driver.Lenient (the zero value) as
	// Gardener's providers do, or driver.Strict, refusing unknown, mis-cased and repeated fields.
	SpecMode driver.SpecMode
	// AmbientCredentials names the providers whose drivers may act with the process's own cloud
	// identity (their SDK's default chain: environment variables, shared files, the pod's
	// workload identity, the instance metadata service) when a class's secret holds no
	// credentials. Empty, the default: credentials come only from secrets, and a secret without
	// them is refused. `--aws-ambient-credentials` adds "aws".
	AmbientCredentials []string
	// UpdateTargets, when set, tells a driver whose node agents update nodes in place (the
	// local provider) what a machine is being updated to; nil where the process runs no
	// controllers.
	UpdateTargets UpdateTargets
}

// UpdateTargets answers node agents that perform in-place updates which MachineClass a machine
// is being updated to: the class its MachineDeployment names now. (Gardener's node agent learns
// its target from the OperatingSystemConfig Gardener publishes for its worker pool; a simulated
// node learns it from where its machine's configuration lives.)
type UpdateTargets interface {
	// UpdateTarget returns the MachineClass the MachineDeployment of the machine named machine
	// names, or nil when the machine belongs to no MachineDeployment.
	UpdateTarget(ctx context.Context, machine string) (*v1alpha1.MachineClass, error)
}

// Kubeconfig is a kubeconfig flag's value naming the target cluster, a form of Env.Target: a
// file, or "inClusterConfig" for the in-cluster config (internal/kubeconfig reads it).
type Kubeconfig string

// AmbientCredentialsFor reports whether the driver of provider name may use the process's own
// cloud identity (AmbientCredentials).
func (e Env) AmbientCredentialsFor(name string) bool {
	for _, n := range e.AmbientCredentials {
		if Normalize(n) == Normalize(name) {
			return true
		}
	}
	return false
}

// Logger returns Log or the default logger.
func (e Env) Logger() *slog.Logger {
	if e.Log != nil {
		return e.Log
	}
	return slog.Default()
}

var (
	mu   sync.RWMutex
	regs = map[string]Registration{}
)

var validName = regexp.MustCompile(`^[a-z][a-z0-9]*$`)

// ValidName reports whether name can name a provider.
func ValidName(name string) bool { return validName.MatchString(name) }

// Register adds a provider. It is meant to be called only from a provider's register.go init()
// and panics on an invalid or duplicate name or a nil factory, so a broken build fails at start.
func Register(r Registration) {
	if !ValidName(r.Name) {
		panic(fmt.Sprintf("registry: invalid provider name %q: use lower-case letters and digits, starting with a letter", r.Name))
	}
	if r.New == nil {
		panic(fmt.Sprintf("registry: provider %q registered without a New function", r.Name))
	}
	mu.Lock()
	defer mu.Unlock()
	if _, dup := regs[r.Name]; dup {
		panic(fmt.Sprintf("registry: provider %q registered twice", r.Name))
	}
	regs[r.Name] = r
}

// Lookup returns the registration of a provider, matching the name case-insensitively.
func Lookup(name string) (Registration, bool) {
	mu.RLock()
	defer mu.RUnlock()
	r, ok := regs[Normalize(name)]
	return r, ok
}

// Names returns the names of the compiled-in providers, sorted.
func Names() []string {
	mu.RLock()
	defer mu.RUnlock()
	names := make([]string, 0, len(regs))
	for n := range regs {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// All returns every registration, sorted by name.
func All() []Registration {
	names := Names()
	out := make([]Registration, 0, len(names))
	for _, n := range names {
		r, _ := Lookup(n)
		out = append(out, r)
	}
	return out
}

// Normalize maps a MachineClass.provider value to a registry name ("OpenStack" -> "openstack").
func Normalize(provider string) string { return strings.ToLower(strings.TrimSpace(provider)) }

// Open opens the compiled-in driver of a provider. An unknown provider is a FailedPrecondition
// error wrapping ErrUnknownProvider that names the fixes.
func Open(name string, env Env) (driver.Driver, error) {
	r, ok := Lookup(name)
	if !ok {
		return nil, UnknownProvider(name)
	}
	d, err := r.New(env)
	if err != nil {
		return nil, fmt.Errorf("registry: open provider %q: %w", r.Name, err)
	}
	return d, nil
}

// ErrUnknownProvider is wrapped by the error for a provider that no source can serve.
var ErrUnknownProvider = fmt.Errorf("unknown provider")

// UnknownProvider returns the error for a provider no source serves; it says how to get one.
func UnknownProvider(name string) error {
	n := Normalize(name)
	if n == "" {
		return driver.Errorf(driver.FailedPrecondition,
			"%w: machineClass.provider is empty: set it to one of %s", ErrUnknownProvider, strings.Join(Names(), ", "))
	}
	compiled := "no providers"
	if names := Names(); len(names) > 0 {
		compiled = strings.Join(names, ", ")
	}
	return driver.Errorf(driver.FailedPrecondition,
		"%w %q: this binary has %s; rebuild with -tags provider_%s, point --driver-endpoint %s=ADDR at a driver server, or let a %s provider dial in and register",
		ErrUnknownProvider, n, compiled, n, n, n)
}
