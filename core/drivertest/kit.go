package drivertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"runtime/debug"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
)

// Option tunes the kit.
type Option func(*options)

type options struct {
	timeout     time.Duration
	concurrency int
	promptBound time.Duration
	report      func(Result)
}

func buildOptions(opts []Option) options {
	o := options{timeout: time.Minute, concurrency: 8, promptBound: 5 * time.Second}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// WithTimeout bounds each driver call the rules make (default 1 minute). A call that takes
// longer fails its rule with DeadlineExceeded. Non-positive values keep the default.
func WithTimeout(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.timeout = d
		}
	}
}

// WithConcurrency sets how many machines ConcurrentCreateDelete creates and deletes at once
// (default 8). Values below 2 keep the default.
func WithConcurrency(n int) Option {
	return func(o *options) {
		if n >= 2 {
			o.concurrency = n
		}
	}
}

// WithPromptBound sets how soon a call with an already-cancelled or expired context must return
// (default 5 s). Non-positive values keep the default.
func WithPromptBound(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.promptBound = d
		}
	}
}

// WithReport makes Check call f with each rule's result as soon as the rule ends, to show
// progress. Run ignores it: `go test -v` shows progress already.
func WithReport(f func(Result)) Option {
	return func(o *options) { o.report = f }
}

// Run runs every rule as a named subtest of t (t.Run(rule, ...)), each against a fresh Target
// from newTarget, which receives the subtest. Target.Close runs when the subtest ends.
func Run(t *testing.T, newTarget func(t testing.TB) Target, opts ...Option) {
	t.Helper()
	if newTarget == nil {
		t.Fatal("drivertest: Run needs a newTarget function")
	}
	o := buildOptions(opts)
	factory := func(tt tester) (Target, error) {
		return newTarget(tt.(testingT).T), nil
	}
	runRules(testingT{t}, factory, o)
}

// Check runs every rule outside `go test`, each against a fresh Target from newTarget. It
// returns nil when no rule failed, else a *CheckError listing each failed rule and why. Rules
// the driver's capabilities rule out are skipped, not failed. When ctx ends, the rules not yet
// run fail as not run.
func Check(ctx context.Context, newTarget func(ctx context.Context) (Target, error), opts ...Option) error {
	if newTarget == nil {
		return fmt.Errorf("drivertest: Check needs a newTarget function")
	}
	results := evaluate(ctx, newTarget, buildOptions(opts))
	for _, r := range results {
		if r.Outcome == Failed {
			return &CheckError{Results: results}
		}
	}
	return nil
}

// evaluate runs the rules under a recorder and returns every rule's result in rule order.
func evaluate(ctx context.Context, newTarget func(ctx context.Context) (Target, error), o options) []Result {
	root := newRecorder(ctx, "")
	defer root.cancel()
	results := make([]Result, 0, len(rules))
	root.done = func(child *recorder) {
		res := child.result()
		results = append(results, res)
		if o.report != nil {
			o.report(res)
		}
	}
	factory := func(t tester) (Target, error) { return newTarget(t.Context()) }
	runRules(root, factory, o)
	return results
}

// RuleNames returns the names of the rules in the order they run; they are also the subtest
// names under Run.
func RuleNames() []string {
	names := make([]string, len(rules))
	for i, r := range rules {
		names[i] = r.name
	}
	return names
}

func runRules(t tester, factory func(tester) (Target, error), o options) {
	t.Helper()
	for _, r := range rules {
		t.Run(r.name, func(t tester) {
			if err := t.Context().Err(); err != nil {
				t.Fatalf("not run: %v", err)
			}
			c := setup(t, r.slug, factory, o)
			r.run(c)
		})
	}
}

// ruleCtx is one rule's run: its tester, fresh target and the machines it made.
type ruleCtx struct {
	t      tester
	target Target
	opts   options
	prefix string

	mu       sync.Mutex
	seq      int
	machines []made
}

// made is a machine a rule may have created, to delete when the rule ends.
type made struct {
	machine *v1alpha1.Machine
	class   *v1alpha1.MachineClass
}

func setup(t tester, slug string, factory func(tester) (Target, error), o options) *ruleCtx {
	t.Helper()
	target, err := factory(t)
	if err != nil {
		t.Fatalf("drivertest: newTarget: %v", err)
	}
	if target.Close != nil {
		t.Cleanup(target.Close)
	}
	switch {
	case target.Driver == nil:
		t.Fatalf("drivertest: Target.Driver is nil: set the driver under test")
	case target.Class == nil:
		t.Fatalf("drivertest: Target.Class is nil: set a valid MachineClass of the driver")
	}
	var suffix [3]byte
	_, _ = rand.Read(suffix[:])
	c := &ruleCtx{t: t, target: target, opts: o, prefix: "dt-" + slug + "-" + hex.EncodeToString(suffix[:])}
	// Registered after Close, so it runs before Close.
	t.Cleanup(c.deleteMachines)
	return c
}

// newMachine returns a machine of Class with a name unique to this rule run, remembered so the
// rule's cleanup deletes its VM.
func (c *ruleCtx) newMachine() *v1alpha1.Machine { return c.newMachineOf(c.target.Class) }

func (c *ruleCtx) newMachineOf(class *v1alpha1.MachineClass) *v1alpha1.Machine {
	c.mu.Lock()
	defer c.mu.Unlock()
	name := fmt.Sprintf("%s-%d", c.prefix, c.seq)
	c.seq++
	ns := class.Namespace
	if ns == "" {
		ns = "default"
	}
	m := &v1alpha1.Machine{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "Machine"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       v1alpha1.MachineSpec{Class: v1alpha1.ClassSpec{Kind: "MachineClass", Name: class.Name}},
	}
	c.machines = append(c.machines, made{machine: m.DeepCopy(), class: class})
	return m
}

// deleteMachines deletes every machine the rule named, ignoring errors: it tidies the backend
// and proves nothing.
func (c *ruleCtx) deleteMachines() {
	c.mu.Lock()
	machines := c.machines
	c.mu.Unlock()
	ctx := context.WithoutCancel(c.t.Context())
	for _, m := range machines {
		callCtx, cancel := context.WithTimeout(ctx, c.opts.timeout)
		_, err := c.target.Driver.DeleteMachine(callCtx, &driver.DeleteMachineRequest{
			Machine: m.machine, MachineClass: m.class.DeepCopy(), Secret: c.secret(),
		})
		cancel()
		if err != nil {
			c.t.Logf("cleanup: DeleteMachine(%s): %v", m.machine.Name, err)
		}
	}
}

func (c *ruleCtx) secret() *corev1.Secret {
	if c.target.Secret == nil {
		return nil
	}
	return c.target.Secret.DeepCopy()
}

// callCtx bounds one driver call.
func (c *ruleCtx) callCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.t.Context(), c.opts.timeout)
}

// The driver calls below pass deep copies, so a driver that modifies its request cannot change
// what later calls send.

func (c *ruleCtx) createIn(ctx context.Context, m *v1alpha1.Machine, class *v1alpha1.MachineClass) (*driver.CreateMachineResponse, error) {
	return c.target.Driver.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: m.DeepCopy(), MachineClass: class.DeepCopy(), Secret: c.secret()})
}

func (c *ruleCtx) create(m *v1alpha1.Machine, class *v1alpha1.MachineClass) (*driver.CreateMachineResponse, error) {
	c.t.Helper()
	ctx, cancel := c.callCtx()
	defer cancel()
	resp, err := c.createIn(ctx, m, class)
	if err == nil && resp == nil {
		c.t.Errorf("CreateMachine(%s) returned neither a response nor an error", m.Name)
		return &driver.CreateMachineResponse{}, nil
	}
	return resp, err
}

// mustCreate creates m in Class and ends the rule when that fails.
func (c *ruleCtx) mustCreate(m *v1alpha1.Machine) *driver.CreateMachineResponse {
	c.t.Helper()
	resp, err := c.create(m, c.target.Class)
	if err != nil {
		c.t.Fatalf("CreateMachine(%s) of a valid machine failed: %v", m.Name, err)
	}
	return resp
}

func (c *ruleCtx) deleteIn(ctx context.Context, m *v1alpha1.Machine, class *v1alpha1.MachineClass) error {
	_, err := c.target.Driver.DeleteMachine(ctx, &driver.DeleteMachineRequest{Machine: m.DeepCopy(), MachineClass: class.DeepCopy(), Secret: c.secret()})
	return err
}

func (c *ruleCtx) delete(m *v1alpha1.Machine) error {
	ctx, cancel := c.callCtx()
	defer cancel()
	return c.deleteIn(ctx, m, c.target.Class)
}

func (c *ruleCtx) statusIn(ctx context.Context, m *v1alpha1.Machine) (*driver.GetMachineStatusResponse, error) {
	return c.target.Driver.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: m.DeepCopy(), MachineClass: c.target.Class.DeepCopy(), Secret: c.secret()})
}

func (c *ruleCtx) status(m *v1alpha1.Machine) (*driver.GetMachineStatusResponse, error) {
	ctx, cancel := c.callCtx()
	defer cancel()
	return c.statusIn(ctx, m)
}

func (c *ruleCtx) initializeIn(ctx context.Context, m *v1alpha1.Machine) (*driver.InitializeMachineResponse, error) {
	return c.target.Driver.InitializeMachine(ctx, &driver.InitializeMachineRequest{Machine: m.DeepCopy(), MachineClass: c.target.Class.DeepCopy(), Secret: c.secret()})
}

func (c *ruleCtx) listIn(ctx context.Context, class *v1alpha1.MachineClass) (map[string]string, error) {
	resp, err := c.target.Driver.ListMachines(ctx, &driver.ListMachinesRequest{MachineClass: class.DeepCopy(), Secret: c.secret()})
	if err != nil {
		return nil, err
	}
	if resp == nil {
		return nil, nil
	}
	return resp.MachineList, nil
}

func (c *ruleCtx) list(class *v1alpha1.MachineClass) (map[string]string, error) {
	ctx, cancel := c.callCtx()
	defer cancel()
	return c.listIn(ctx, class)
}

func (c *ruleCtx) volumesIn(ctx context.Context, specs []*corev1.PersistentVolumeSpec) ([]string, error) {
	in := make([]*corev1.PersistentVolumeSpec, len(specs))
	for i, s := range specs {
		in[i] = s.DeepCopy()
	}
	resp, err := c.target.Driver.GetVolumeIDs(ctx, &driver.GetVolumeIDsRequest{PVSpecs: in})
	if err != nil || resp == nil {
		return nil, err
	}
	return resp.VolumeIDs, nil
}

func (c *ruleCtx) volumes(specs []*corev1.PersistentVolumeSpec) ([]string, error) {
	ctx, cancel := c.callCtx()
	defer cancel()
	return c.volumesIn(ctx, specs)
}

// count returns how many VMs the backend holds for a machine of Class: from Target.CountVMs,
// else from ListMachines, else from GetMachineStatus (0, 1, or 2 for "several"). ok is false
// when none of them can tell.
func (c *ruleCtx) count(m *v1alpha1.Machine) (n int, ok bool) {
	c.t.Helper()
	ctx, cancel := c.callCtx()
	defer cancel()
	if c.target.CountVMs != nil {
		n, err := c.target.CountVMs(ctx, m.Name)
		if err != nil {
			c.t.Fatalf("Target.CountVMs(%s): %v", m.Name, err)
		}
		return n, true
	}
	list, err := c.listIn(ctx, c.target.Class)
	switch {
	case err == nil:
		for _, name := range list {
			if name == m.Name {
				n++
			}
		}
		return n, true
	case !driver.IsCode(err, driver.Unimplemented):
		c.t.Fatalf("counting the VMs of %s with ListMachines: %v", m.Name, err)
	}
	_, err = c.statusIn(ctx, m)
	switch driver.CodeOf(err) {
	case driver.OK, driver.Uninitialized:
		return 1, true
	case driver.NotFound:
		return 0, true
	case driver.OutOfRange:
		return 2, true
	case driver.Unimplemented:
		return 0, false
	}
	c.t.Fatalf("counting the VMs of %s with GetMachineStatus: %v", m.Name, err)
	return 0, false
}

// expectCount fails the rule unless the backend holds want VMs of m; it only logs when the
// backend cannot be observed.
func (c *ruleCtx) expectCount(m *v1alpha1.Machine, want int, when string) {
	c.t.Helper()
	n, ok := c.count(m)
	if !ok {
		c.t.Logf("cannot count the VMs of %s %s: set Target.CountVMs or implement ListMachines or GetMachineStatus", m.Name, when)
		return
	}
	if n != want {
		c.t.Errorf("the backend holds %d VM(s) of machine %s %s, want %d", n, m.Name, when, want)
	}
}

// outcome is the result of a call made under a bound.
type outcome struct {
	err      error
	returned bool
	took     time.Duration
}

// bounded runs call and waits at most the prompt bound for it. A call that does not return in
// time is left running; its result is dropped.
func (c *ruleCtx) bounded(calls map[string]func() error) map[string]outcome {
	type done struct {
		name string
		err  error
		took time.Duration
	}
	ch := make(chan done, len(calls))
	start := time.Now()
	for name, call := range calls {
		go func() {
			err := safeCall(call)
			ch <- done{name, err, time.Since(start)}
		}()
	}
	out := make(map[string]outcome, len(calls))
	for name := range calls {
		out[name] = outcome{}
	}
	timer := time.NewTimer(c.opts.promptBound)
	defer timer.Stop()
	for range calls {
		select {
		case d := <-ch:
			out[d.name] = outcome{err: d.err, returned: true, took: d.took}
		case <-timer.C:
			return out
		}
	}
	return out
}

// safeCall runs call, turning a panic into an error so that a driver panicking in a goroutine
// the kit started fails a rule instead of the process.
func safeCall(call func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v\n%s", p, debug.Stack())
		}
	}()
	return call()
}
