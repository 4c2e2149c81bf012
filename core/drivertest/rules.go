package drivertest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
)

// rule is one conformance rule; doc.go describes each.
type rule struct {
	name string
	slug string // short tag in machine names, so a leftover VM names the rule that made it
	run  func(c *ruleCtx)
}

var rules = []rule{
	{"CreateReturnsIdentity", "id", createReturnsIdentity},
	{"CreateIsIdempotent", "idem", createIsIdempotent},
	{"DeleteAbsentIsOK", "del", deleteAbsentIsOK},
	{"StatusTracksLifecycle", "st", statusTracksLifecycle},
	{"DeleteByProviderID", "pid", deleteByProviderID},
	{"ListShowsOnlyOwnClass", "ls", listShowsOnlyOwnClass},
	{"InvalidProviderSpecRejected", "spec", invalidProviderSpecRejected},
	{"ProviderMismatchRejected", "prov", providerMismatchRejected},
	{"EmptyMachineNameRejected", "name", emptyMachineNameRejected},
	{"CancelledContextReturnsPromptly", "ctx", cancelledContextReturnsPromptly},
	{"ConcurrentCreateDelete", "conc", concurrentCreateDelete},
	{"OptionalMethodsAnswerOrUnimplemented", "opt", optionalMethodsAnswerOrUnimplemented},
	{"VolumeIDsSkipOtherDrivers", "vol", volumeIDsSkipOtherDrivers},
	{"ErrorsAreStatuses", "err", errorsAreStatuses},
	{"ErrorsHideSecrets", "sec", errorsHideSecrets},
	{"RequestsAreReadOnly", "ro", requestsAreReadOnly},
	{"StopStartKeepsIdentity", "pow", stopStartKeepsIdentity},
	{"PowerOfAbsentIsNotFound", "powabs", powerOfAbsentIsNotFound},
}

const (
	// mismatchedProvider is a MachineClass.provider no driver can have (not a valid name).
	mismatchedProvider = "not-this-driver"
	// otherCSIDriver owns the CSI volumes no driver under test may claim.
	otherCSIDriver = "other.csi.drivertest.example.com"
)

func createReturnsIdentity(c *ruleCtx) {
	m := c.newMachine()
	resp := c.mustCreate(m)
	switch {
	case resp.ProviderID == "":
		c.t.Errorf("CreateMachine(%s) returned an empty ProviderID: return the ID the node's spec.providerID will carry", m.Name)
	case !strings.Contains(resp.ProviderID, "://"):
		c.t.Errorf("CreateMachine(%s) returned ProviderID %q without a scheme: use <provider>:///<region>/<id>, as in node.spec.providerID", m.Name, resp.ProviderID)
	}
	if resp.NodeName == "" {
		c.t.Errorf("CreateMachine(%s) returned an empty NodeName: return the name the VM's node registers with", m.Name)
	}
}

func createIsIdempotent(c *ruleCtx) {
	m := c.newMachine()
	first := c.mustCreate(m)
	second, err := c.create(m, c.target.Class)
	if err != nil {
		c.t.Fatalf("second CreateMachine(%s) failed: %v; creating a machine that has a VM must return that VM", m.Name, err)
	}
	if second.ProviderID != first.ProviderID {
		c.t.Errorf("second CreateMachine(%s) returned ProviderID %q, the first %q: creating a machine that has a VM must return that VM", m.Name, second.ProviderID, first.ProviderID)
	}
	if first.NodeName != "" && second.NodeName != "" && second.NodeName != first.NodeName {
		c.t.Errorf("second CreateMachine(%s) returned NodeName %q, the first %q", m.Name, second.NodeName, first.NodeName)
	}
	c.expectCount(m, 1, "after two CreateMachine calls")
}

func deleteAbsentIsOK(c *ruleCtx) {
	never := c.newMachine()
	if err := c.delete(never); err != nil {
		c.t.Errorf("DeleteMachine(%s) of a machine that never had a VM = %v; want OK (deleting nothing succeeds)", never.Name, show(err))
	}
	m := c.newMachine()
	c.mustCreate(m)
	if err := c.delete(m); err != nil {
		c.t.Fatalf("DeleteMachine(%s) of an existing VM failed: %v", m.Name, err)
	}
	if err := c.delete(m); err != nil {
		c.t.Errorf("second DeleteMachine(%s) = %v; want OK (delete is idempotent)", m.Name, show(err))
	}
	c.expectCount(m, 0, "after DeleteMachine")
}

func statusTracksLifecycle(c *ruleCtx) {
	m := c.newMachine()
	_, err := c.status(m)
	switch driver.CodeOf(err) {
	case driver.Unimplemented:
		c.t.Skipf("GetMachineStatus answers Unimplemented: %v", err)
	case driver.NotFound:
	default:
		c.t.Errorf("GetMachineStatus(%s) before CreateMachine = %v; want NotFound", m.Name, show(err))
	}
	created := c.mustCreate(m)
	// The controller asks with the machine as stored, spec.providerID set.
	withID := m.DeepCopy()
	withID.Spec.ProviderID = created.ProviderID
	st, err := c.status(withID)
	switch code := driver.CodeOf(err); {
	case code != driver.OK && code != driver.Uninitialized:
		c.t.Errorf("GetMachineStatus(%s) of an existing VM = %v; want OK (or Uninitialized)", m.Name, show(err))
	case code == driver.OK && st == nil:
		c.t.Errorf("GetMachineStatus(%s) returned neither a response nor an error", m.Name)
	case st != nil && (code == driver.OK || st.ProviderID != ""):
		if st.ProviderID != created.ProviderID {
			c.t.Errorf("GetMachineStatus(%s) returned ProviderID %q; CreateMachine returned %q", m.Name, st.ProviderID, created.ProviderID)
		}
		if st.NodeName != "" && created.NodeName != "" && st.NodeName != created.NodeName {
			c.t.Errorf("GetMachineStatus(%s) returned NodeName %q; CreateMachine returned %q", m.Name, st.NodeName, created.NodeName)
		}
	}
	// Deleting by name keeps this rule apart from DeleteByProviderID.
	if err := c.delete(m); err != nil {
		c.t.Fatalf("DeleteMachine(%s) failed: %v", m.Name, err)
	}
	if _, err := c.status(withID); !driver.IsCode(err, driver.NotFound) {
		c.t.Errorf("GetMachineStatus(%s) after DeleteMachine = %v; want NotFound", m.Name, show(err))
	}
}

func deleteByProviderID(c *ruleCtx) {
	m := c.newMachine()
	created := c.mustCreate(m)
	withID := m.DeepCopy()
	withID.Spec.ProviderID = created.ProviderID
	withID.Status.LastKnownState = created.LastKnownState
	if err := c.delete(withID); err != nil {
		c.t.Fatalf("DeleteMachine(%s) with spec.providerID %q failed: %v", m.Name, created.ProviderID, err)
	}
	n, ok := c.count(m)
	switch {
	case !ok:
		c.t.Skipf("cannot observe the backend: set Target.CountVMs or implement ListMachines or GetMachineStatus")
	case n != 0:
		c.t.Errorf("DeleteMachine(%s) with spec.providerID %q returned OK but %d VM(s) remain", m.Name, created.ProviderID, n)
	}
}

func listShowsOnlyOwnClass(c *ruleCtx) {
	class, other := c.target.Class, c.target.OtherClass
	if _, err := c.list(class); driver.IsCode(err, driver.Unimplemented) {
		c.t.Skipf("ListMachines answers Unimplemented: %v", err)
	} else if err != nil {
		c.t.Fatalf("ListMachines(%s) failed: %v", class.Name, err)
	}
	own := map[string]string{} // providerID -> machine name
	for range 2 {
		m := c.newMachine()
		own[c.mustCreate(m).ProviderID] = m.Name
	}
	var foreignID, foreignName string
	if other == nil {
		c.t.Logf("Target.OtherClass is nil: not checking that another class's machines stay out of the list")
	} else {
		o := c.newMachineOf(other)
		resp, err := c.create(o, other)
		if err != nil {
			c.t.Fatalf("CreateMachine(%s) in Target.OtherClass %q failed: %v", o.Name, other.Name, err)
		}
		foreignID, foreignName = resp.ProviderID, o.Name
	}

	list, err := c.list(class)
	if err != nil {
		c.t.Fatalf("ListMachines(%s) failed: %v", class.Name, err)
	}
	for _, id := range slices.Sorted(maps.Keys(own)) {
		switch got, ok := list[id]; {
		case !ok:
			c.t.Errorf("ListMachines(%s) misses machine %s (%s)", class.Name, own[id], id)
		case got != own[id]:
			c.t.Errorf("ListMachines(%s) maps %s to %q, want machine name %q", class.Name, id, got, own[id])
		}
	}
	if other == nil {
		return
	}
	for id, name := range list {
		if id == foreignID || name == foreignName {
			c.t.Errorf("ListMachines(%s) shows %s -> %s, a machine of class %q: list only the class's cluster and role", class.Name, id, name, other.Name)
		}
	}
	otherList, err := c.list(other)
	if err != nil {
		c.t.Fatalf("ListMachines(%s) failed: %v", other.Name, err)
	}
	if otherList[foreignID] != foreignName {
		c.t.Errorf("ListMachines(%s) maps %s to %q, want %q", other.Name, foreignID, otherList[foreignID], foreignName)
	}
	for id := range own {
		if _, ok := otherList[id]; ok {
			c.t.Errorf("ListMachines(%s) shows %s of class %q", other.Name, id, class.Name)
		}
	}
}

func invalidProviderSpecRejected(c *ruleCtx) {
	bad, field, err := c.invalidClass()
	if err != nil {
		c.t.Fatalf("%v", err)
	}
	m := c.newMachine()
	_, err = c.create(m, bad)
	switch {
	case err == nil:
		c.t.Errorf("CreateMachine(%s) with providerSpec %s succeeded; want InvalidArgument naming the bad field", m.Name, bad.ProviderSpec.Raw)
	case !driver.IsCode(err, driver.InvalidArgument):
		c.t.Errorf("CreateMachine(%s) with providerSpec %s = %v; want InvalidArgument", m.Name, bad.ProviderSpec.Raw, show(err))
	case field != "" && !strings.Contains(driver.MessageOf(err), field):
		c.t.Errorf("CreateMachine(%s) rejected the mistyped field but the message %q does not name %q", m.Name, driver.MessageOf(err), field)
	}
	c.expectCount(m, 0, "after CreateMachine with an invalid providerSpec")
}

func providerMismatchRejected(c *ruleCtx) {
	wrong := c.mismatchedClass()
	m := c.newMachine()
	if _, err := c.create(m, wrong); !driver.IsCode(err, driver.InvalidArgument) {
		c.t.Errorf("CreateMachine(%s) with MachineClass.provider %q = %v; want InvalidArgument", m.Name, mismatchedProvider, show(err))
	}
	c.expectCount(m, 0, "after CreateMachine with a mismatched provider")

	existing := c.newMachine()
	c.mustCreate(existing)
	ctx, cancel := c.callCtx()
	defer cancel()
	if err := c.deleteIn(ctx, existing, wrong); !driver.IsCode(err, driver.InvalidArgument) {
		c.t.Errorf("DeleteMachine(%s) with MachineClass.provider %q = %v; want InvalidArgument", existing.Name, mismatchedProvider, show(err))
	}
	c.expectCount(existing, 1, "after DeleteMachine with a mismatched provider")
}

func emptyMachineNameRejected(c *ruleCtx) {
	unnamed := c.newMachine()
	unnamed.Name = ""
	if _, err := c.create(unnamed, c.target.Class); !driver.IsCode(err, driver.InvalidArgument) {
		c.t.Errorf("CreateMachine of a machine without a name = %v; want InvalidArgument", show(err))
	}
}

// optionalMethod reports whether a method may answer Unimplemented.
func optionalMethod(method string) bool {
	return method != "CreateMachine" && method != "DeleteMachine"
}

func cancelledContextReturnsPromptly(c *ruleCtx) {
	base := context.WithoutCancel(c.t.Context())
	cancelled, cancel := context.WithCancel(base)
	cancel()
	expired, cancelExpired := context.WithDeadline(base, time.Now().Add(-time.Second))
	defer cancelExpired()

	fresh := c.newMachine()
	existing := c.newMachine()
	c.mustCreate(existing)
	specs, _ := c.volumeSpecs()
	calls := map[string]func() error{}
	for kind, ctx := range map[string]context.Context{"a cancelled": cancelled, "an expired": expired} {
		calls["CreateMachine/"+kind] = func() error { _, err := c.createIn(ctx, fresh, c.target.Class); return err }
		calls["DeleteMachine/"+kind] = func() error { return c.deleteIn(ctx, existing, c.target.Class) }
		calls["GetMachineStatus/"+kind] = func() error { _, err := c.statusIn(ctx, existing); return err }
		calls["InitializeMachine/"+kind] = func() error { _, err := c.initializeIn(ctx, existing); return err }
		calls["ListMachines/"+kind] = func() error { _, err := c.listIn(ctx, c.target.Class); return err }
		calls["GetVolumeIDs/"+kind] = func() error { _, err := c.volumesIn(ctx, specs); return err }
	}
	results := c.bounded(calls)
	for _, name := range slices.Sorted(maps.Keys(results)) {
		res := results[name]
		method, kind, _ := strings.Cut(name, "/")
		if !res.returned {
			c.t.Errorf("%s with %s context did not return within %s: check ctx before and during every cloud call", method, kind, c.opts.promptBound)
			continue
		}
		code := driver.CodeOf(res.err)
		switch {
		case code == driver.Canceled || code == driver.DeadlineExceeded:
		case code == driver.Unimplemented && optionalMethod(method):
		case res.err == nil && method == "GetVolumeIDs": // a pure mapping; an answer is harmless
		default:
			c.t.Errorf("%s with %s context = %v; want Canceled or DeadlineExceeded", method, kind, show(res.err))
		}
	}
	if results["CreateMachine/a cancelled"].returned && results["CreateMachine/an expired"].returned {
		c.expectCount(fresh, 0, "after CreateMachine with a cancelled context")
	}
}

func concurrentCreateDelete(c *ruleCtx) {
	n := c.opts.concurrency
	machines := make([]*v1alpha1.Machine, n)
	for i := range machines {
		machines[i] = c.newMachine()
	}
	// all calls call for every machine at once, released together so the calls overlap.
	all := func(call func(ctx context.Context, i int, m *v1alpha1.Machine) error) []error {
		errs := make([]error, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, m := range machines {
			wg.Go(func() {
				<-start
				ctx, cancel := c.callCtx()
				defer cancel()
				errs[i] = safeCall(func() error { return call(ctx, i, m) })
			})
		}
		close(start)
		wg.Wait()
		return errs
	}

	resps := make([]*driver.CreateMachineResponse, n)
	errs := all(func(ctx context.Context, i int, m *v1alpha1.Machine) error {
		var err error
		resps[i], err = c.createIn(ctx, m, c.target.Class)
		return err
	})
	owner := map[string]string{} // providerID -> machine name
	for i, m := range machines {
		switch {
		case errs[i] != nil:
			c.t.Errorf("concurrent CreateMachine(%s) failed: %v", m.Name, errs[i])
			continue
		case resps[i] == nil || resps[i].ProviderID == "":
			c.t.Errorf("concurrent CreateMachine(%s) returned no ProviderID", m.Name)
			continue
		}
		id := resps[i].ProviderID
		if prev, dup := owner[id]; dup {
			c.t.Errorf("concurrent CreateMachine(%s) and CreateMachine(%s) both returned ProviderID %q", prev, m.Name, id)
		}
		owner[id] = m.Name
		c.expectCount(m, 1, "after concurrent creates")
	}

	errs = all(func(ctx context.Context, _ int, m *v1alpha1.Machine) error { return c.deleteIn(ctx, m, c.target.Class) })
	for i, m := range machines {
		if errs[i] != nil {
			c.t.Errorf("concurrent DeleteMachine(%s) failed: %v", m.Name, errs[i])
			continue
		}
		c.expectCount(m, 0, "after concurrent deletes")
	}
}

func optionalMethodsAnswerOrUnimplemented(c *ruleCtx) {
	m := c.newMachine()
	created := c.mustCreate(m)
	withID := m.DeepCopy()
	withID.Spec.ProviderID = created.ProviderID
	ctx, cancel := c.callCtx()
	defer cancel()

	initResp, err := c.initializeIn(ctx, withID)
	switch driver.CodeOf(err) {
	case driver.OK:
		if initResp != nil && initResp.ProviderID != "" && initResp.ProviderID != created.ProviderID {
			c.t.Errorf("InitializeMachine(%s) returned ProviderID %q; CreateMachine returned %q", m.Name, initResp.ProviderID, created.ProviderID)
		}
	case driver.Unimplemented, driver.Uninitialized:
	default:
		c.t.Errorf("InitializeMachine(%s) of a VM CreateMachine just made = %v; want OK, Uninitialized or, when not supported, exactly Unimplemented", m.Name, show(err))
	}
	if _, err := c.statusIn(ctx, withID); !slices.Contains([]driver.Code{driver.OK, driver.Uninitialized, driver.Unimplemented}, driver.CodeOf(err)) {
		c.t.Errorf("GetMachineStatus(%s) of an existing VM = %v; want OK, Uninitialized or, when not supported, exactly Unimplemented", m.Name, show(err))
	}
	if _, err := c.listIn(ctx, c.target.Class); !slices.Contains([]driver.Code{driver.OK, driver.Unimplemented}, driver.CodeOf(err)) {
		c.t.Errorf("ListMachines(%s) = %v; want OK or, when not supported, exactly Unimplemented", c.target.Class.Name, show(err))
	}
	ids, err := c.volumesIn(ctx, nil)
	switch driver.CodeOf(err) {
	case driver.OK:
		if len(ids) != 0 {
			c.t.Errorf("GetVolumeIDs of no volumes returned %q; want none", ids)
		}
	case driver.Unimplemented:
	default:
		c.t.Errorf("GetVolumeIDs of no volumes = %v; want OK or, when not supported, exactly Unimplemented", show(err))
	}
}

func volumeIDsSkipOtherDrivers(c *ruleCtx) {
	if _, err := c.volumes(nil); driver.IsCode(err, driver.Unimplemented) {
		c.t.Skipf("GetVolumeIDs answers Unimplemented: %v", err)
	} else if err != nil {
		c.t.Fatalf("GetVolumeIDs of no volumes failed: %v", err)
	}
	specs, want := c.volumeSpecs()
	if len(c.target.Volumes) == 0 {
		c.t.Logf("Target.Volumes is empty: checking only that other drivers' volumes are skipped")
	}
	got, err := c.volumes(specs)
	if err != nil {
		c.t.Fatalf("GetVolumeIDs failed: %v", err)
	}
	if !slices.Equal(got, want) {
		c.t.Errorf("GetVolumeIDs = %q; want %q: this driver's volumes in request order, skipping NFS, hostPath, local and CSI volumes of %s", got, want, otherCSIDriver)
	}
	again, err := c.volumes(specs)
	if err != nil {
		c.t.Fatalf("second GetVolumeIDs failed: %v", err)
	}
	if !slices.Equal(again, got) {
		c.t.Errorf("second GetVolumeIDs = %q, the first %q: it must be idempotent", again, got)
	}
}

func errorsAreStatuses(c *ruleCtx) {
	errs := c.inducedErrors()
	for _, e := range errs {
		var st *driver.Status
		switch {
		case !errors.As(e.err, &st) || st == nil:
			c.t.Errorf("%s returned %T %q, not a *driver.Status: return driver.Error, Errorf or Wrap with a code", e.call, e.err, e.err)
		case !st.Code().Valid() || st.Code() == driver.OK:
			c.t.Errorf("%s returned a status with code %s: use one of the 17 error codes", e.call, st.Code())
		case strings.TrimSpace(st.Message()) == "":
			c.t.Errorf("%s returned %s with an empty message: say what went wrong and what to do", e.call, st.Code())
		}
	}
	if len(errs) == 0 {
		c.t.Logf("no call returned an error; nothing to check")
	}
}

func errorsHideSecrets(c *ruleCtx) {
	secrets := secretValues(c.target.Secret)
	if len(secrets) == 0 {
		c.t.Skipf("Target.Secret has no secret-looking values (keys naming a password, secret, token, key, credential or userData)")
	}
	// Wrong credentials are where drivers tend to echo what they were given.
	wrongSecret := c.target.Secret.DeepCopy()
	if wrongSecret.StringData == nil {
		wrongSecret.StringData = map[string]string{}
	}
	wrongValues := map[string]string{}
	for k := range secrets {
		v := "drivertest-wrong-" + strings.ToLower(k) + "-" + c.prefix
		wrongValues[k] = v
		if _, inData := wrongSecret.Data[k]; inData {
			wrongSecret.Data[k] = []byte(v)
		} else {
			wrongSecret.StringData[k] = v
		}
	}
	m := c.newMachine()
	ctx, cancel := c.callCtx()
	defer cancel()
	_, err := c.target.Driver.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: m.DeepCopy(), MachineClass: c.target.Class.DeepCopy(), Secret: wrongSecret})
	errs := c.inducedErrors()
	if err != nil {
		errs = append(errs, callError{"CreateMachine with wrong credentials", err})
		maps.Copy(secrets, wrongValues)
	}
	for _, e := range errs {
		text := e.err.Error()
		for _, k := range slices.Sorted(maps.Keys(secrets)) {
			if strings.Contains(text, secrets[k]) {
				c.t.Errorf("%s returned an error showing the secret's %q: never put credentials or userData into messages", e.call, k)
			}
		}
	}
}

// callError is an error a rule provoked.
type callError struct {
	call string
	err  error
}

// inducedErrors makes the calls that should fail (invalid input, no VM, cancelled context) and
// returns the errors they returned. Calls with a cancelled context that do not return within the
// prompt bound are left out: CancelledContextReturnsPromptly reports them.
func (c *ruleCtx) inducedErrors() []callError {
	var out []callError
	add := func(call string, err error) {
		if err != nil {
			out = append(out, callError{call, err})
		}
	}
	absent := c.newMachine()
	wrong := c.mismatchedClass()
	ctx, cancel := c.callCtx()
	defer cancel()
	if bad, _, err := c.invalidClass(); err == nil {
		_, err := c.createIn(ctx, c.newMachine(), bad)
		add("CreateMachine with an invalid providerSpec", err)
	}
	_, err := c.createIn(ctx, c.newMachine(), wrong)
	add("CreateMachine with a mismatched provider", err)
	add("DeleteMachine with a mismatched provider", c.deleteIn(ctx, absent, wrong))
	_, err = c.listIn(ctx, wrong)
	add("ListMachines with a mismatched provider", err)
	_, err = c.statusIn(ctx, absent)
	add("GetMachineStatus of a machine without a VM", err)
	_, err = c.initializeIn(ctx, absent)
	add("InitializeMachine of a machine without a VM", err)

	cancelled, cancelNow := context.WithCancel(context.WithoutCancel(c.t.Context()))
	cancelNow()
	specs, _ := c.volumeSpecs()
	results := c.bounded(map[string]func() error{
		"CreateMachine":     func() error { _, err := c.createIn(cancelled, c.newMachine(), c.target.Class); return err },
		"DeleteMachine":     func() error { return c.deleteIn(cancelled, absent, c.target.Class) },
		"GetMachineStatus":  func() error { _, err := c.statusIn(cancelled, absent); return err },
		"InitializeMachine": func() error { _, err := c.initializeIn(cancelled, absent); return err },
		"ListMachines":      func() error { _, err := c.listIn(cancelled, c.target.Class); return err },
		"GetVolumeIDs":      func() error { _, err := c.volumesIn(cancelled, specs); return err },
	})
	for _, method := range slices.Sorted(maps.Keys(results)) {
		add(method+" with a cancelled context", results[method].err)
	}
	return out
}

// invalidClass returns Class with Target.InvalidProviderSpec, or with the value of the first
// top-level field of its providerSpec (in key order) replaced by a value of another JSON type,
// which no decoder reads into the field; field is that field's name, "" for
// Target.InvalidProviderSpec. (An unknown field is not invalid: drivers decode like Gardener's
// providers and ignore it.)
func (c *ruleCtx) invalidClass() (class *v1alpha1.MachineClass, field string, err error) {
	class = c.target.Class.DeepCopy()
	class.ResourceVersion = "" // changed in memory: no longer the version it was read as
	if c.target.InvalidProviderSpec != nil {
		class.ProviderSpec = runtime.RawExtension{Raw: slices.Clone(c.target.InvalidProviderSpec)}
		return class, "", nil
	}
	var spec map[string]json.RawMessage
	if err := json.Unmarshal(c.target.Class.ProviderSpec.Raw, &spec); err != nil || len(spec) == 0 {
		return nil, "", fmt.Errorf("cannot mistype a field of Target.Class's providerSpec (not a non-empty JSON object): set Target.InvalidProviderSpec")
	}
	field = slices.Sorted(maps.Keys(spec))[0]
	spec[field] = otherJSONType(spec[field])
	raw, err := json.Marshal(spec)
	if err != nil {
		return nil, "", fmt.Errorf("drivertest: encode providerSpec: %w", err)
	}
	class.ProviderSpec = runtime.RawExtension{Raw: raw}
	return class, field, nil
}

// otherJSONType returns a JSON value of another type than v: an array for an object, an object
// for anything else (a string, number, bool, array or null).
func otherJSONType(v json.RawMessage) json.RawMessage {
	if t := bytes.TrimSpace(v); len(t) > 0 && t[0] == '{' {
		return json.RawMessage(`["drivertest-wrong-type"]`)
	}
	return json.RawMessage(`{"drivertest":"wrong-type"}`)
}

// mismatchedClass returns Class naming a provider no driver has.
func (c *ruleCtx) mismatchedClass() *v1alpha1.MachineClass {
	class := c.target.Class.DeepCopy()
	class.ResourceVersion = "" // changed in memory: no longer the version it was read as
	class.Provider = mismatchedProvider
	return class
}

// volumeSpecs returns Target.Volumes interleaved with volumes of other drivers, and the IDs
// GetVolumeIDs must answer.
func (c *ruleCtx) volumeSpecs() (specs []*corev1.PersistentVolumeSpec, want []string) {
	src := func(s corev1.PersistentVolumeSource) *corev1.PersistentVolumeSpec {
		return &corev1.PersistentVolumeSpec{PersistentVolumeSource: s}
	}
	specs = append(specs,
		src(corev1.PersistentVolumeSource{NFS: &corev1.NFSVolumeSource{Server: "nfs.drivertest.example.com", Path: "/exports/a"}}),
		src(corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/drivertest"}}))
	want = []string{}
	for i, v := range c.target.Volumes {
		if v.Spec == nil {
			c.t.Fatalf("Target.Volumes[%d].Spec is nil", i)
		}
		specs = append(specs, v.Spec,
			src(corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: otherCSIDriver, VolumeHandle: fmt.Sprintf("other-%d", i)}}))
		want = append(want, v.ID)
	}
	specs = append(specs,
		src(corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: "/mnt/drivertest"}}),
		src(corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: otherCSIDriver, VolumeHandle: "other-last"}}))
	return specs, want
}

// secretValues returns the values of the secret's keys that name credentials or userData, long
// enough not to match by chance.
func secretValues(secret *corev1.Secret) map[string]string {
	out := map[string]string{}
	if secret == nil {
		return out
	}
	consider := func(k, v string) {
		lk := strings.ToLower(k)
		sensitive := false
		for _, s := range []string{"password", "secret", "token", "key", "credential", "userdata"} {
			sensitive = sensitive || strings.Contains(lk, s)
		}
		if sensitive && len(strings.TrimSpace(v)) >= 6 {
			out[k] = v
		}
	}
	for k, v := range secret.Data {
		consider(k, string(v))
	}
	for k, v := range secret.StringData {
		if _, inData := secret.Data[k]; !inData {
			consider(k, v)
		}
	}
	return out
}

// show renders a call's error for a message; nil reads as OK.
func show(err error) string {
	if err == nil {
		return "OK (no error)"
	}
	return err.Error()
}
