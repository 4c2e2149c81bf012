package drivertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/drivertest/memdriver"
)

const testToken = "mem-token-5f3a9c1e"

func memClass(name, cluster, role string) *v1alpha1.MachineClass {
	return &v1alpha1.MachineClass{
		ObjectMeta:   metav1.ObjectMeta{Name: name, Namespace: "default"},
		Provider:     memdriver.ProviderName,
		ProviderSpec: runtime.RawExtension{Raw: []byte(fmt.Sprintf(`{"cluster":%q,"role":%q,"size":"small"}`, cluster, role))},
	}
}

func csiVolume(driverName, handle string) *corev1.PersistentVolumeSpec {
	return &corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{
		CSI: &corev1.CSIPersistentVolumeSource{Driver: driverName, VolumeHandle: handle},
	}}
}

// memSetup describes a memdriver target for the self-test.
type memSetup struct {
	// wrap gives the driver its defect; nil tests memdriver itself.
	wrap func(d *memdriver.Driver) driver.Driver
	// noCount leaves Target.CountVMs nil so the kit counts through the driver.
	noCount bool
	// requireInit makes new VMs Uninitialized until InitializeMachine.
	requireInit bool
	// bare leaves out OtherClass and Volumes.
	bare bool
}

func (s memSetup) newTarget(context.Context) (Target, error) {
	cloud := memdriver.NewCloud()
	cloud.SetCredentials(map[string]string{"token": testToken})
	cloud.SetRequireInitialization(s.requireInit)
	d := memdriver.New(cloud)
	t := Target{
		Driver: d,
		Class:  memClass("workers", "shoot-a", "worker"),
		Secret: &corev1.Secret{Data: map[string][]byte{
			"token":    []byte(testToken),
			"userData": []byte("#!/bin/sh\nkubeadm join --token abcdef.0123456789abcdef"),
		}},
	}
	if s.wrap != nil {
		t.Driver = s.wrap(d)
	}
	if !s.noCount {
		t.CountVMs = func(_ context.Context, name string) (int, error) { return cloud.Count(name), nil }
	}
	if !s.bare {
		t.OtherClass = memClass("others", "shoot-b", "worker")
		t.Volumes = []Volume{
			{Spec: csiVolume(memdriver.CSIDriverName, "vol-a"), ID: "vol-a"},
			{Spec: csiVolume(memdriver.CSIDriverName, "vol-b"), ID: "vol-b"},
		}
	}
	return t, nil
}

// outcomes runs the kit under the recorder and returns each rule's result by name.
func outcomes(t *testing.T, s memSetup, opts ...Option) map[string]Result {
	t.Helper()
	results := evaluate(t.Context(), s.newTarget, buildOptions(opts))
	if len(results) != len(rules) {
		t.Fatalf("got %d results for %d rules", len(results), len(rules))
	}
	byRule := map[string]Result{}
	for _, r := range results {
		byRule[r.Rule] = r
	}
	return byRule
}

func TestMemdriverPassesEveryRule(t *testing.T) {
	cases := map[string]memSetup{
		"backend counted":          {},
		"counted through driver":   {noCount: true},
		"requires initialization":  {requireInit: true},
		"no other class or volume": {bare: true, noCount: true},
	}
	for name, s := range cases {
		t.Run(name, func(t *testing.T) {
			for rule, r := range outcomes(t, s) {
				if r.Outcome != Passed {
					t.Errorf("%s %s: %s", rule, r.Outcome, strings.Join(r.Messages, "; "))
				}
			}
		})
	}
}

// minimal implements only the required methods.
type minimal struct {
	driver.UnimplementedDriver
	mem *memdriver.Driver
}

func (d minimal) CreateMachine(ctx context.Context, req *driver.CreateMachineRequest) (*driver.CreateMachineResponse, error) {
	return d.mem.CreateMachine(ctx, req)
}

func (d minimal) DeleteMachine(ctx context.Context, req *driver.DeleteMachineRequest) (*driver.DeleteMachineResponse, error) {
	return d.mem.DeleteMachine(ctx, req)
}

func TestCapabilitiesAreProbed(t *testing.T) {
	s := memSetup{noCount: true, wrap: func(d *memdriver.Driver) driver.Driver { return minimal{mem: d} }}
	wantSkipped := map[string]bool{
		"StatusTracksLifecycle":     true,
		"DeleteByProviderID":        true, // nothing can observe the backend
		"ListShowsOnlyOwnClass":     true,
		"VolumeIDsSkipOtherDrivers": true,
		"StopStartKeepsIdentity":    true, // no power capability
		"PowerOfAbsentIsNotFound":   true,
	}
	for rule, r := range outcomes(t, s) {
		want := Passed
		if wantSkipped[rule] {
			want = Skipped
		}
		if r.Outcome != want {
			t.Errorf("%s %s, want %s: %s", rule, r.Outcome, want, strings.Join(r.Messages, "; "))
		}
	}
}

// Each broken driver is memdriver with one defect; exactly the rule written for it must fail.
type (
	emptyNodeName      struct{ *memdriver.Driver }
	notIdempotent      struct{ *memdriver.Driver }
	deleteAbsentFails  struct{ *memdriver.Driver }
	deleteIgnoresID    struct{ *memdriver.Driver }
	listLeaks          struct{ *memdriver.Driver }
	acceptsWrongTypes  struct{ *memdriver.Driver }
	ignoresProvider    struct{ *memdriver.Driver }
	acceptsEmptyName   struct{ *memdriver.Driver }
	initInternal       struct{ *memdriver.Driver }
	claimsNFS          struct{ *memdriver.Driver }
	plainErrors        struct{ *memdriver.Driver }
	echoesCredentials  struct{ *memdriver.Driver }
	ignoresCancelSleep struct {
		*memdriver.Driver
		sleep time.Duration
	}
	staleStatus struct {
		*memdriver.Driver
		mu   sync.Mutex
		seen map[string]*driver.GetMachineStatusResponse
	}
	sharedResponse struct {
		*memdriver.Driver
		last atomic.Pointer[driver.CreateMachineResponse]
	}
)

func (d emptyNodeName) CreateMachine(ctx context.Context, req *driver.CreateMachineRequest) (*driver.CreateMachineResponse, error) {
	resp, err := d.Driver.CreateMachine(ctx, req)
	if resp != nil {
		resp.NodeName = ""
	}
	return resp, err
}

// CreateMachine makes a second VM when the machine has one already.
func (d notIdempotent) CreateMachine(ctx context.Context, req *driver.CreateMachineRequest) (*driver.CreateMachineResponse, error) {
	if ctx.Err() == nil && req != nil && req.Machine != nil {
		for _, vm := range d.Cloud().VMs() {
			if vm.MachineName == req.Machine.Name {
				dup := d.Cloud().Add(vm)
				return &driver.CreateMachineResponse{ProviderID: dup.ProviderID(), NodeName: dup.MachineName}, nil
			}
		}
	}
	return d.Driver.CreateMachine(ctx, req)
}

func (d deleteAbsentFails) DeleteMachine(ctx context.Context, req *driver.DeleteMachineRequest) (*driver.DeleteMachineResponse, error) {
	existed := req != nil && req.Machine != nil && d.Cloud().Count(req.Machine.Name) > 0
	resp, err := d.Driver.DeleteMachine(ctx, req)
	if err == nil && !existed {
		return nil, driver.Errorf(driver.NotFound, "broken: machine %q has no VM", req.Machine.Name)
	}
	return resp, err
}

// DeleteMachine looks the VM up by the whole providerID, finds nothing and reports success.
func (d deleteIgnoresID) DeleteMachine(ctx context.Context, req *driver.DeleteMachineRequest) (*driver.DeleteMachineResponse, error) {
	if ctx.Err() == nil && req != nil && req.Machine != nil && req.Machine.Spec.ProviderID != "" {
		return &driver.DeleteMachineResponse{}, nil
	}
	return d.Driver.DeleteMachine(ctx, req)
}

// GetMachineStatus answers from a cache that never forgets a VM.
func (d *staleStatus) GetMachineStatus(ctx context.Context, req *driver.GetMachineStatusRequest) (*driver.GetMachineStatusResponse, error) {
	resp, err := d.Driver.GetMachineStatus(ctx, req)
	d.mu.Lock()
	defer d.mu.Unlock()
	name := req.Machine.Name
	if err == nil {
		d.seen[name] = resp
	} else if cached := d.seen[name]; cached != nil && driver.IsCode(err, driver.NotFound) {
		return cached, nil
	}
	return resp, err
}

// ListMachines lists every VM of the cloud.
func (d listLeaks) ListMachines(ctx context.Context, req *driver.ListMachinesRequest) (*driver.ListMachinesResponse, error) {
	resp, err := d.Driver.ListMachines(ctx, req)
	if err != nil {
		return nil, err
	}
	for _, vm := range d.Cloud().VMs() {
		resp.MachineList[vm.ProviderID()] = vm.MachineName
	}
	return resp, nil
}

// CreateMachine decodes the providerSpec leniently, dropping unknown fields.
// CreateMachine turns the values that do not decode into strings, as a careless decoder would.
func (d acceptsWrongTypes) CreateMachine(ctx context.Context, req *driver.CreateMachineRequest) (*driver.CreateMachineResponse, error) {
	if req != nil && req.MachineClass != nil {
		var fields map[string]json.RawMessage
		if json.Unmarshal(req.MachineClass.ProviderSpec.Raw, &fields) == nil {
			for k, v := range fields {
				one, _ := json.Marshal(map[string]json.RawMessage{k: v})
				if json.Unmarshal(one, &memdriver.ProviderSpec{}) != nil {
					fields[k] = json.RawMessage(`"coerced"`)
				}
			}
			r := *req
			r.MachineClass = req.MachineClass.DeepCopy()
			r.MachineClass.ProviderSpec.Raw, _ = json.Marshal(fields)
			req = &r
		}
	}
	return d.Driver.CreateMachine(ctx, req)
}

func (d ignoresProvider) CreateMachine(ctx context.Context, req *driver.CreateMachineRequest) (*driver.CreateMachineResponse, error) {
	if req != nil && req.MachineClass != nil {
		r := *req
		r.MachineClass = req.MachineClass.DeepCopy()
		r.MachineClass.Provider = memdriver.ProviderName
		req = &r
	}
	return d.Driver.CreateMachine(ctx, req)
}

func (d ignoresProvider) DeleteMachine(ctx context.Context, req *driver.DeleteMachineRequest) (*driver.DeleteMachineResponse, error) {
	if req != nil && req.MachineClass != nil {
		r := *req
		r.MachineClass = req.MachineClass.DeepCopy()
		r.MachineClass.Provider = memdriver.ProviderName
		req = &r
	}
	return d.Driver.DeleteMachine(ctx, req)
}

// CreateMachine names an unnamed machine itself.
func (d acceptsEmptyName) CreateMachine(ctx context.Context, req *driver.CreateMachineRequest) (*driver.CreateMachineResponse, error) {
	if req != nil && req.Machine != nil && req.Machine.Name == "" {
		r := *req
		r.Machine = req.Machine.DeepCopy()
		r.Machine.Name = "generated"
		req = &r
	}
	return d.Driver.CreateMachine(ctx, req)
}

// CreateMachine makes a slow cloud call first and looks at the context only afterwards.
func (d ignoresCancelSleep) CreateMachine(ctx context.Context, req *driver.CreateMachineRequest) (*driver.CreateMachineResponse, error) {
	if ctx.Err() != nil {
		time.Sleep(d.sleep)
	}
	return d.Driver.CreateMachine(ctx, req)
}

// CreateMachine passes its response through a field shared by all calls.
func (d *sharedResponse) CreateMachine(ctx context.Context, req *driver.CreateMachineRequest) (*driver.CreateMachineResponse, error) {
	resp, err := d.Driver.CreateMachine(ctx, req)
	if err != nil {
		return nil, err
	}
	d.last.Store(resp)
	time.Sleep(20 * time.Millisecond) // the cloud call that lets concurrent creates overwrite it
	return d.last.Load(), nil
}

// InitializeMachine says "not supported" with the wrong code.
func (d initInternal) InitializeMachine(ctx context.Context, req *driver.InitializeMachineRequest) (*driver.InitializeMachineResponse, error) {
	if ctx.Err() != nil {
		return d.Driver.InitializeMachine(ctx, req)
	}
	return nil, driver.Error(driver.Internal, "broken: initialization is not supported")
}

// GetVolumeIDs also answers for NFS volumes.
func (d claimsNFS) GetVolumeIDs(ctx context.Context, req *driver.GetVolumeIDsRequest) (*driver.GetVolumeIDsResponse, error) {
	resp, err := d.Driver.GetVolumeIDs(ctx, req)
	if err != nil {
		return nil, err
	}
	for _, pv := range req.PVSpecs {
		if pv != nil && pv.NFS != nil {
			resp.VolumeIDs = append(resp.VolumeIDs, pv.NFS.Server+":"+pv.NFS.Path)
		}
	}
	return resp, nil
}

// Every method returns the context's own error instead of a status.
func (d plainErrors) CreateMachine(ctx context.Context, req *driver.CreateMachineRequest) (*driver.CreateMachineResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return d.Driver.CreateMachine(ctx, req)
}

func (d plainErrors) DeleteMachine(ctx context.Context, req *driver.DeleteMachineRequest) (*driver.DeleteMachineResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return d.Driver.DeleteMachine(ctx, req)
}

func (d plainErrors) ListMachines(ctx context.Context, req *driver.ListMachinesRequest) (*driver.ListMachinesResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return d.Driver.ListMachines(ctx, req)
}

// CreateMachine repeats the rejected credential in its error.
func (d echoesCredentials) CreateMachine(ctx context.Context, req *driver.CreateMachineRequest) (*driver.CreateMachineResponse, error) {
	resp, err := d.Driver.CreateMachine(ctx, req)
	if driver.IsCode(err, driver.Unauthenticated) {
		return nil, driver.Errorf(driver.Unauthenticated, "%s (got token %q)", driver.MessageOf(err), driver.SecretValue(req.Secret, "token"))
	}
	return resp, err
}

// recordsProviderID writes the new VM's ProviderID into the request's Machine, as if it were the
// driver's own copy.
type recordsProviderID struct{ *memdriver.Driver }

func (d recordsProviderID) CreateMachine(ctx context.Context, req *driver.CreateMachineRequest) (*driver.CreateMachineResponse, error) {
	resp, err := d.Driver.CreateMachine(ctx, req)
	if err == nil {
		req.Machine.Spec.ProviderID = resp.ProviderID
	}
	return resp, err
}

// StartMachine answers with a new provider ID, as if it had created another VM.
type startNewIdentity struct{ *memdriver.Driver }

func (d startNewIdentity) StartMachine(ctx context.Context, req *driver.StartMachineRequest) (*driver.StartMachineResponse, error) {
	resp, err := d.Driver.StartMachine(ctx, req)
	if resp != nil {
		resp.ProviderID += "-new"
	}
	return resp, err
}

// StartMachine of a machine without a VM answers OK.
type startAbsentOK struct{ *memdriver.Driver }

func (d startAbsentOK) StartMachine(ctx context.Context, req *driver.StartMachineRequest) (*driver.StartMachineResponse, error) {
	resp, err := d.Driver.StartMachine(ctx, req)
	if driver.IsCode(err, driver.NotFound) {
		return &driver.StartMachineResponse{}, nil
	}
	return resp, err
}

// claimsNoPower has the power methods but reports the capability absent and still stops.
type claimsNoPower struct{ *memdriver.Driver }

func (claimsNoPower) Capabilities(context.Context) (driver.Capabilities, error) {
	return driver.Capabilities{}, nil
}

func TestPowerWithoutTheCapabilityMustBeUnimplemented(t *testing.T) {
	r := outcomes(t, memSetup{wrap: func(d *memdriver.Driver) driver.Driver { return claimsNoPower{d} }})
	for _, rule := range []string{"StopStartKeepsIdentity", "PowerOfAbsentIsNotFound"} {
		if r[rule].Outcome != Failed {
			t.Errorf("%s %s for a driver that stops machines without reporting the capability; want failed", rule, r[rule].Outcome)
		}
	}
}

func TestEachRuleCatchesItsBrokenDriver(t *testing.T) {
	cases := []struct {
		rule string
		wrap func(d *memdriver.Driver) driver.Driver
		opts []Option
	}{
		{"CreateReturnsIdentity", func(d *memdriver.Driver) driver.Driver { return emptyNodeName{d} }, nil},
		{"CreateIsIdempotent", func(d *memdriver.Driver) driver.Driver { return notIdempotent{d} }, nil},
		{"DeleteAbsentIsOK", func(d *memdriver.Driver) driver.Driver { return deleteAbsentFails{d} }, nil},
		{"StatusTracksLifecycle", func(d *memdriver.Driver) driver.Driver {
			return &staleStatus{Driver: d, seen: map[string]*driver.GetMachineStatusResponse{}}
		}, nil},
		{"DeleteByProviderID", func(d *memdriver.Driver) driver.Driver { return deleteIgnoresID{d} }, nil},
		{"ListShowsOnlyOwnClass", func(d *memdriver.Driver) driver.Driver { return listLeaks{d} }, nil},
		{"InvalidProviderSpecRejected", func(d *memdriver.Driver) driver.Driver { return acceptsWrongTypes{d} }, nil},
		{"ProviderMismatchRejected", func(d *memdriver.Driver) driver.Driver { return ignoresProvider{d} }, nil},
		{"EmptyMachineNameRejected", func(d *memdriver.Driver) driver.Driver { return acceptsEmptyName{d} }, nil},
		{"CancelledContextReturnsPromptly", func(d *memdriver.Driver) driver.Driver {
			return ignoresCancelSleep{Driver: d, sleep: 4 * time.Second}
		}, []Option{WithPromptBound(time.Second)}},
		{"ConcurrentCreateDelete", func(d *memdriver.Driver) driver.Driver { return &sharedResponse{Driver: d} }, nil},
		{"OptionalMethodsAnswerOrUnimplemented", func(d *memdriver.Driver) driver.Driver { return initInternal{d} }, nil},
		{"VolumeIDsSkipOtherDrivers", func(d *memdriver.Driver) driver.Driver { return claimsNFS{d} }, nil},
		{"ErrorsAreStatuses", func(d *memdriver.Driver) driver.Driver { return plainErrors{d} }, nil},
		{"ErrorsHideSecrets", func(d *memdriver.Driver) driver.Driver { return echoesCredentials{d} }, nil},
		{"RequestsAreReadOnly", func(d *memdriver.Driver) driver.Driver { return recordsProviderID{d} }, nil},
		{"StopStartKeepsIdentity", func(d *memdriver.Driver) driver.Driver { return startNewIdentity{d} }, nil},
		{"PowerOfAbsentIsNotFound", func(d *memdriver.Driver) driver.Driver { return startAbsentOK{d} }, nil},
	}
	covered := map[string]bool{}
	for _, tc := range cases {
		covered[tc.rule] = true
		t.Run(tc.rule, func(t *testing.T) {
			t.Parallel()
			for rule, r := range outcomes(t, memSetup{wrap: tc.wrap}, tc.opts...) {
				switch {
				case rule == tc.rule && r.Outcome != Failed:
					t.Errorf("%s %s against its broken driver; want failed", rule, r.Outcome)
				case rule != tc.rule && r.Outcome != Passed:
					t.Errorf("%s %s against the driver broken for %s: %s", rule, r.Outcome, tc.rule, strings.Join(r.Messages, "; "))
				}
			}
		})
	}
	for _, name := range RuleNames() {
		if !covered[name] {
			t.Errorf("rule %s has no broken driver that it must catch", name)
		}
	}
}

func TestCheck(t *testing.T) {
	var reported []string
	err := Check(t.Context(), memSetup{}.newTarget, WithReport(func(r Result) { reported = append(reported, r.Rule) }))
	if err != nil {
		t.Fatalf("Check(memdriver) = %v", err)
	}
	if strings.Join(reported, ",") != strings.Join(RuleNames(), ",") {
		t.Fatalf("reported %v, want every rule in order %v", reported, RuleNames())
	}

	err = Check(t.Context(), memSetup{wrap: func(d *memdriver.Driver) driver.Driver { return listLeaks{d} }}.newTarget)
	var ce *CheckError
	if !errors.As(err, &ce) {
		t.Fatalf("Check(broken) = %v, want a *CheckError", err)
	}
	if f := ce.Failed(); len(f) != 1 || f[0].Rule != "ListShowsOnlyOwnClass" {
		t.Fatalf("failed rules = %+v", f)
	}
	if !strings.Contains(err.Error(), "1 of 18 rules failed") || !strings.Contains(err.Error(), "--- ListShowsOnlyOwnClass") ||
		!strings.Contains(err.Error(), `class "others"`) {
		t.Fatalf("error text does not say which rule failed and why:\n%v", err)
	}

	failing := func(context.Context) (Target, error) { return Target{}, errors.New("no cloud") }
	if err := Check(t.Context(), failing); err == nil || !strings.Contains(err.Error(), "newTarget: no cloud") {
		t.Fatalf("Check with a failing newTarget = %v", err)
	}

	done, cancel := context.WithCancel(t.Context())
	cancel()
	if err := Check(done, memSetup{}.newTarget); err == nil || !strings.Contains(err.Error(), "not run") {
		t.Fatalf("Check with a cancelled context = %v", err)
	}
}

// panicky panics in GetVolumeIDs.
type panicky struct{ *memdriver.Driver }

func (panicky) GetVolumeIDs(context.Context, *driver.GetVolumeIDsRequest) (*driver.GetVolumeIDsResponse, error) {
	panic("broken: index out of range")
}

func TestPanicsFailRulesNotTheProcess(t *testing.T) {
	res := outcomes(t, memSetup{wrap: func(d *memdriver.Driver) driver.Driver { return panicky{d} }})
	r := res["VolumeIDsSkipOtherDrivers"]
	if r.Outcome != Failed || !strings.Contains(strings.Join(r.Messages, " "), "broken: index out of range") {
		t.Fatalf("VolumeIDsSkipOtherDrivers = %s %v; want failed with the panic", r.Outcome, r.Messages)
	}
	if res["CreateIsIdempotent"].Outcome != Passed {
		t.Fatalf("a panic in GetVolumeIDs failed CreateIsIdempotent: %v", res["CreateIsIdempotent"].Messages)
	}
}

func TestRecorder(t *testing.T) {
	root := newRecorder(t.Context(), "")
	var order []string
	root.Run("fatal", func(tt tester) {
		tt.Cleanup(func() { order = append(order, "first") })
		tt.Cleanup(func() {
			order = append(order, "second")
			if tt.Context().Err() == nil {
				order = append(order, "context still live")
			}
		})
		tt.Fatalf("stop %d", 1)
		order = append(order, "after Fatalf")
	})
	root.Run("skip", func(tt tester) { tt.Skipf("not supported") })
	root.Run("pass", func(tt tester) { tt.Logf("fine") })
	if got := strings.Join(order, ","); got != "second,first" {
		t.Fatalf("cleanup order = %s, want second,first (after the context ended)", got)
	}
	want := map[string]Outcome{"fatal": Failed, "skip": Skipped, "pass": Passed}
	for _, c := range root.children {
		if r := c.result(); r.Outcome != want[r.Rule] {
			t.Errorf("%s = %s, want %s (%v)", r.Rule, r.Outcome, want[r.Rule], r.Messages)
		}
	}
	if !root.Failed() {
		t.Fatal("a failed child did not fail its parent")
	}
}
