package registry

import (
	"context"
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
)

// named is a driver that knows where it came from, so resolution order is observable.
type named struct {
	driver.UnimplementedDriver
	from string
}

func (n *named) ListMachines(context.Context, *driver.ListMachinesRequest) (*driver.ListMachinesResponse, error) {
	return &driver.ListMachinesResponse{MachineList: map[string]string{n.from: n.from}}, nil
}

func register(t *testing.T, name string, opens *int) {
	t.Helper()
	registerForTest(t, Registration{Name: name, Description: "test", New: func(Env) (driver.Driver, error) {
		if opens != nil {
			*opens++
		}
		return &named{from: "compiled"}, nil
	}})
}

// registerForTest registers r until the test ends, so the test can run again (go test -count=N).
func registerForTest(t *testing.T, r Registration) {
	t.Helper()
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		delete(regs, r.Name)
	})
	Register(r)
}

func mustPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Errorf("%s: Register did not panic", what)
		}
	}()
	f()
}

func TestRegisterRejectsBadRegistrations(t *testing.T) {
	ok := func(Env) (driver.Driver, error) { return &named{}, nil }
	mustPanic(t, "empty name", func() { Register(Registration{Name: "", New: ok}) })
	mustPanic(t, "upper case", func() { Register(Registration{Name: "OpenStack", New: ok}) })
	mustPanic(t, "dash", func() { Register(Registration{Name: "my-cloud", New: ok}) })
	mustPanic(t, "leading digit", func() { Register(Registration{Name: "9cloud", New: ok}) })
	mustPanic(t, "nil factory", func() { Register(Registration{Name: "nilfactory"}) })
	register(t, "dupcloud", nil)
	mustPanic(t, "duplicate", func() { register(t, "dupcloud", nil) })
}

func TestLookupIsCaseInsensitiveAndNamesSorted(t *testing.T) {
	register(t, "zetacloud", nil)
	register(t, "alphacloud", nil)
	if _, ok := Lookup("  ZetaCloud "); !ok {
		t.Fatal("Lookup must match case-insensitively and ignore surrounding space")
	}
	names := Names()
	for i := 1; i < len(names); i++ {
		if names[i-1] > names[i] {
			t.Fatalf("Names() not sorted: %v", names)
		}
	}
	if len(All()) != len(names) {
		t.Fatal("All and Names disagree")
	}
}

func TestUnknownProviderNamesTheFixes(t *testing.T) {
	_, err := Open("nosuchcloud", Env{})
	if !errors.Is(err, ErrUnknownProvider) {
		t.Fatalf("errors.Is(ErrUnknownProvider) = false: %v", err)
	}
	if driver.CodeOf(err) != driver.FailedPrecondition {
		t.Fatalf("code = %v", driver.CodeOf(err))
	}
	msg := driver.MessageOf(err)
	for _, want := range []string{`"nosuchcloud"`, "-tags provider_nosuchcloud", "--driver-endpoint nosuchcloud=", "dial in"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not mention %q", msg, want)
		}
	}
	if !strings.Contains(driver.MessageOf(UnknownProvider("")), "provider is empty") {
		t.Error("an empty provider must say so")
	}
}

func TestOpenWrapsFactoryErrors(t *testing.T) {
	boom := driver.Error(driver.Internal, "no state dir")
	registerForTest(t, Registration{Name: "brokencloud", New: func(Env) (driver.Driver, error) { return nil, boom }})
	_, err := Open("brokencloud", Env{})
	if driver.CodeOf(err) != driver.Internal || !strings.Contains(err.Error(), "brokencloud") {
		t.Fatalf("Open = %v", err)
	}
}

type source map[string]driver.Driver

func (s source) Driver(name string) (driver.Driver, bool) { d, ok := s[name]; return d, ok }

func from(t *testing.T, d driver.Driver) string {
	t.Helper()
	resp, err := d.ListMachines(context.Background(), &driver.ListMachinesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for k := range resp.MachineList {
		return k
	}
	return ""
}

func TestResolverOrder(t *testing.T) {
	opens := 0
	register(t, "ordercloud", &opens)
	class := &v1alpha1.MachineClass{Provider: "OrderCloud"}

	r := &Resolver{
		Endpoints: source{"ordercloud": &named{from: "endpoint"}},
		Remote:    source{"ordercloud": &named{from: "remote"}, "onlyremote": &named{from: "remote"}},
	}
	d, err := r.ForClass(class)
	if err != nil || from(t, d) != "endpoint" {
		t.Fatalf("a configured endpoint must win: %v", err)
	}

	r.Endpoints = nil
	for range 3 {
		d, err = r.ForClass(class)
		if err != nil || from(t, d) != "compiled" {
			t.Fatalf("compiled-in must come before dialled-in: %v", err)
		}
	}
	if opens != 1 {
		t.Fatalf("compiled-in driver opened %d times, want once", opens)
	}

	d, err = r.Resolve("OnlyRemote")
	if err != nil || from(t, d) != "remote" {
		t.Fatalf("a dialled-in provider must be the fallback: %v", err)
	}
	if _, err := r.Resolve("nowhere"); !errors.Is(err, ErrUnknownProvider) {
		t.Fatalf("unresolvable: %v", err)
	}
	if _, err := r.ForClass(nil); driver.CodeOf(err) != driver.InvalidArgument {
		t.Fatalf("nil class: %v", err)
	}
}

// TestResolverPreferRemote: a dialled-in provider shadowed by a compiled-in driver or an endpoint
// is reported as shadowed and gets the work once preferred (by name or "*"), but only while one is
// connected; the other sources serve again when none is.
func TestResolverPreferRemote(t *testing.T) {
	register(t, "shadowcloud", nil)
	remote := source{"shadowcloud": &named{from: "remote"}, "endpointcloud": &named{from: "remote"}}
	r := &Resolver{Endpoints: source{"endpointcloud": &named{from: "endpoint"}}, Remote: remote}
	for name, by := range map[string]string{"ShadowCloud": "compiled-in driver", "endpointcloud": "driver endpoint", "onlyremote": ""} {
		if got := r.ShadowedBy(name); got != by {
			t.Errorf("ShadowedBy(%s) = %q, want %q", name, got, by)
		}
	}
	if d, _ := r.Resolve("shadowcloud"); from(t, d) != "compiled" {
		t.Fatal("without a preference the compiled-in driver serves")
	}
	for _, prefer := range [][]string{{"ShadowCloud", "endpointcloud"}, {"*"}} {
		r.PreferRemote = prefer
		for _, name := range []string{"shadowcloud", "endpointcloud"} {
			if got := r.ShadowedBy(name); got != "" {
				t.Errorf("prefer %v: %s still shadowed by %s", prefer, name, got)
			}
			d, err := r.Resolve(name)
			if err != nil || from(t, d) != "remote" {
				t.Fatalf("prefer %v: %s resolved to %v (%v), want the dialled-in provider", prefer, name, d, err)
			}
		}
	}
	r.Remote = source{}
	if d, _ := r.Resolve("shadowcloud"); from(t, d) != "compiled" {
		t.Fatal("a preferred provider with no replica connected must fall back to the compiled-in driver")
	}
	if d, _ := r.Resolve("endpointcloud"); from(t, d) != "endpoint" {
		t.Fatal("a preferred provider with no replica connected must fall back to its endpoint")
	}
}

type closer struct {
	named
	closed int
}

func (c *closer) Close() error { c.closed++; return nil }

func TestResolverCloseClosesOpenedDrivers(t *testing.T) {
	c := &closer{}
	registerForTest(t, Registration{Name: "closecloud", New: func(Env) (driver.Driver, error) { return c, nil }})
	r := &Resolver{}
	if _, err := r.Resolve("closecloud"); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil || c.closed != 1 {
		t.Fatalf("Close: %v, closed %d times", err, c.closed)
	}
}

// CheckSpec answers for classes served by the compiled-in driver, in the resolver's mode, and
// knows nothing of classes a driver server or a dialled-in provider serves.
func TestResolverCheckSpec(t *testing.T) {
	var modes []driver.SpecMode
	registerForTest(t, Registration{Name: "checkcloud", Description: "test",
		New: func(Env) (driver.Driver, error) { return &named{from: "compiled"}, nil },
		CheckSpec: func(class *v1alpha1.MachineClass, mode driver.SpecMode) ([]driver.SpecWarning, error) {
			modes = append(modes, mode)
			var spec struct {
				Size string `json:"size"`
			}
			return driver.DecodeSpec(class, &spec, mode, driver.FoldedNames)
		},
	})
	register(t, "nocheckcloud", nil)
	class := &v1alpha1.MachineClass{Provider: "CheckCloud", ProviderSpec: runtime.RawExtension{Raw: []byte(`{"Size":"s","extra":1}`)}}
	class.Name = "c"

	r := &Resolver{Env: Env{SpecMode: driver.Strict}}
	got := r.CheckSpec(class)
	if !got.Checked || got.Mode != driver.Strict || len(got.Warnings) != 2 || driver.CodeOf(got.Err) != driver.InvalidArgument {
		t.Fatalf("strict check: %+v", got)
	}
	r = &Resolver{}
	got = r.CheckSpec(class)
	if !got.Checked || got.Mode != driver.Lenient || len(got.Warnings) != 2 || got.Err != nil {
		t.Fatalf("lenient check: %+v", got)
	}
	if got.Warnings[0].Problem != driver.CaseMismatch || got.Warnings[1].Path != "providerSpec.extra" {
		t.Fatalf("warnings %+v", got.Warnings)
	}
	if len(modes) != 2 || modes[0] != driver.Strict || modes[1] != driver.Lenient {
		t.Fatalf("modes passed %v", modes)
	}

	r = &Resolver{Endpoints: source{"checkcloud": &named{from: "endpoint"}}}
	if got := r.CheckSpec(class); got.Checked {
		t.Fatalf("a class served by a driver server must not be checked here: %+v", got)
	}
	if got := (&Resolver{}).CheckSpec(&v1alpha1.MachineClass{Provider: "nocheckcloud"}); got.Checked {
		t.Fatalf("a provider without CheckSpec: %+v", got)
	}
	if got := (&Resolver{Remote: source{"remoteonly": &named{}}}).CheckSpec(&v1alpha1.MachineClass{Provider: "remoteonly"}); got.Checked {
		t.Fatalf("a dialled-in provider: %+v", got)
	}
	if got := CheckSpec(class, driver.Lenient); !got.Checked || len(got.Warnings) != 2 {
		t.Fatalf("CheckSpec: %+v", got)
	}
}

func TestAmbientCredentialsFor(t *testing.T) {
	env := Env{AmbientCredentials: []string{"AWS"}}
	if !env.AmbientCredentialsFor("aws") || env.AmbientCredentialsFor("gcp") {
		t.Errorf("AmbientCredentialsFor with %v: aws %v, gcp %v; want true, false", env.AmbientCredentials, env.AmbientCredentialsFor("aws"), env.AmbientCredentialsFor("gcp"))
	}
	if (Env{}).AmbientCredentialsFor("aws") {
		t.Error("the zero Env allows ambient credentials")
	}
}
