package mcmcompat_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/registry"
	"github.com/machinist-io/machinist/harness/ctrltest"
	"github.com/machinist-io/machinist/harness/localcontrolplane"
	"github.com/machinist-io/machinist/harness/machinetest"
	"github.com/machinist-io/machinist/harness/testenv"
	"github.com/machinist-io/machinist/harness/testenv/mcmcrds"
	"github.com/machinist-io/machinist/internal/eventually"
	"github.com/machinist-io/machinist/providers/local"
)

func TestMain(m *testing.M) { ctrltest.Main(m) }

// world is one test's API server and namespace, the local provider counting its CreateMachine
// calls, and the controller manager, which the test can stop and start like a process.
type world struct {
	t   *testing.T
	ns  string
	cfg *rest.Config // for the controllers: API warnings are counted
	c   client.WithWatch
	ctx context.Context

	drv      *countingDriver
	logs     *logRecorder
	warnings *warningCounter
	stop     func()
	runs     int
}

// machinistCRDs is a world on the package's control plane, which serves machinist's CRDs.
func machinistCRDs(t *testing.T) *world {
	return newWorld(t, rest.CopyConfig(ctrltest.ControlPlane.Config))
}

// mcmShapedCRDs is a world on an API server of its own serving CRDs shaped like Gardener MCM's
// (built from machinist's with the facts of harness/testenv/mcmcrds).
func mcmShapedCRDs(t *testing.T) *world {
	root, err := localcontrolplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := mcmcrds.Write(filepath.Join(root, "kubernetes", "crds"), dir); err != nil {
		t.Fatal(err)
	}
	env := testenv.Start(t, testenv.WithCRDDirs(dir))
	return newWorld(t, rest.CopyConfig(env.Config))
}

var nsSeq sync.Map

func newWorld(t *testing.T, cfg *rest.Config) *world {
	t.Helper()
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: testenv.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(name) > 40 {
		name = strings.TrimRight(name[:40], "-")
	}
	n, _ := nsSeq.LoadOrStore(name, new(int))
	*n.(*int)++
	ns := fmt.Sprintf("%s-%d", name, *n.(*int))
	if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, ns: ns, c: c, ctx: context.Background(), logs: &logRecorder{}, warnings: &warningCounter{}}
	w.cfg = rest.CopyConfig(cfg)
	w.cfg.WarningHandlerWithContext = w.warnings
	ld, err := local.New(registry.Env{Target: cfg, StateDir: t.TempDir(), Log: ctrltest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ld.Close() })
	w.drv = &countingDriver{Driver: ld, creates: map[string]int{}, stops: map[string]int{}, starts: map[string]int{}, deletes: map[string]int{}}
	return w
}

// start runs the controller manager of `machinist run` on the namespace until stopManager or
// the end of the test.
func (w *world) start() {
	w.t.Helper()
	w.runs++
	opts := ctrltest.ProductOptions(w.t, w.cfg, w.ns)
	opts.Log = slog.New(w.logs.handler(w.runs))
	opts.Endpoints = endpoints{"local": w.drv}
	// Fast enough for a test; the semantics are the defaults'.
	opts.Machine.ShortRetry = 200 * time.Millisecond
	opts.Machine.MediumRetry = time.Second
	opts.Machine.DrainTimeout = 30 * time.Second
	w.stop = ctrltest.RunProduct(w.t, opts)
}

func (w *world) stopManager() { w.stop() }

type endpoints map[string]driver.Driver

func (e endpoints) Driver(provider string) (driver.Driver, bool) {
	d, ok := e[provider]
	return d, ok
}

// countingDriver counts CreateMachine calls per machine.
type countingDriver struct {
	driver.Driver
	mu      sync.Mutex
	creates map[string]int
	stops   map[string]int
	starts  map[string]int
	deletes map[string]int
}

func (d *countingDriver) CreateMachine(ctx context.Context, req *driver.CreateMachineRequest) (*driver.CreateMachineResponse, error) {
	d.mu.Lock()
	d.creates[req.Machine.Name]++
	d.mu.Unlock()
	return d.Driver.CreateMachine(ctx, req)
}

// StopMachine and StartMachine pass the local provider's power capability through (standby
// machines), counted per machine; without them the wrapper would hide it.
func (d *countingDriver) StopMachine(ctx context.Context, req *driver.StopMachineRequest) (*driver.StopMachineResponse, error) {
	d.count(d.stops, req.Machine.Name)
	return d.Driver.(driver.PowerDriver).StopMachine(ctx, req)
}

func (d *countingDriver) StartMachine(ctx context.Context, req *driver.StartMachineRequest) (*driver.StartMachineResponse, error) {
	d.count(d.starts, req.Machine.Name)
	return d.Driver.(driver.PowerDriver).StartMachine(ctx, req)
}

func (d *countingDriver) DeleteMachine(ctx context.Context, req *driver.DeleteMachineRequest) (*driver.DeleteMachineResponse, error) {
	d.count(d.deletes, req.Machine.Name)
	return d.Driver.DeleteMachine(ctx, req)
}

func (d *countingDriver) count(m map[string]int, machine string) {
	d.mu.Lock()
	m[machine]++
	d.mu.Unlock()
}

// count0 is one machine's entry of a count.
func (d *countingDriver) count0(m map[string]int, machine string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return m[machine]
}

func (d *countingDriver) snapshot(m map[string]int) map[string]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return maps.Clone(m)
}

// total is the sum of one of the counts (creates, stops, starts, deletes).
func (d *countingDriver) total(m map[string]int) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, c := range m {
		n += c
	}
	return n
}

func (d *countingDriver) createsOf(machine string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.creates[machine]
}

// warningCounter counts the API server's warnings (299 headers) the controllers receive.
type warningCounter struct {
	mu    sync.Mutex
	texts []string
}

func (c *warningCounter) HandleWarningHeaderWithContext(_ context.Context, code int, _ string, text string) {
	if code != 299 || text == "" {
		return
	}
	c.mu.Lock()
	c.texts = append(c.texts, text)
	c.mu.Unlock()
}

func (c *warningCounter) since(i int) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.texts[i:])
}

func (c *warningCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.texts)
}

// logRecorder keeps the controller manager's log records (and passes them on to the test log
// handler, which discards them unless MACHINIST_TEST_LOG is set).
type logRecorder struct {
	mu      sync.Mutex
	records []logRecord
}

type logRecord struct {
	run   int
	level slog.Level
	msg   string
	attrs string
}

func (r *logRecord) String() string {
	return fmt.Sprintf("run %d %s %q %s", r.run, r.level, r.msg, r.attrs)
}

func (r *logRecorder) handler(run int) slog.Handler {
	return &recordingHandler{rec: r, run: run, next: ctrltest.Logger().Handler()}
}

func (r *logRecorder) since(i int) []logRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.records[i:])
}

func (r *logRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.records)
}

type recordingHandler struct {
	rec   *logRecorder
	run   int
	attrs []slog.Attr
	group string
	next  slog.Handler
}

func (h *recordingHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *recordingHandler) Handle(ctx context.Context, r slog.Record) error {
	var b strings.Builder
	for _, a := range h.attrs {
		fmt.Fprintf(&b, "%s=%v ", a.Key, a.Value)
	}
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, "%s=%v ", a.Key, a.Value)
		return true
	})
	h.rec.mu.Lock()
	h.rec.records = append(h.rec.records, logRecord{run: h.run, level: r.Level, msg: r.Message, attrs: b.String()})
	h.rec.mu.Unlock()
	if h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

func (h *recordingHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(slices.Clone(h.attrs), attrs...)
	c.next = h.next.WithAttrs(attrs)
	return &c
}

func (h *recordingHandler) WithGroup(name string) slog.Handler {
	c := *h
	c.group = name
	c.next = h.next.WithGroup(name)
	return &c
}

// class creates a local MachineClass; extra is merged into its top level (an unstructured
// object, so fields this API does not know reach the server).
func (w *world) class(name string, extra map[string]any) {
	w.t.Helper()
	obj := map[string]any{
		"apiVersion": v1alpha1.SchemeGroupVersion.String(),
		"kind":       "MachineClass",
		"metadata":   map[string]any{"name": name, "namespace": w.ns},
		"provider":   local.ProviderName,
		"providerSpec": map[string]any{
			"cluster": w.ns, "heartbeatInterval": "1s", "nodeMonitorGracePeriod": "5s",
		},
	}
	maps.Copy(obj, extra)
	if err := w.c.Create(w.ctx, &unstructured.Unstructured{Object: obj}); err != nil {
		w.t.Fatal(err)
	}
}

// deployment is a MachineDeployment of replicas on class, replaced one machine at a time
// (maxSurge 1, maxUnavailable 0), whose template carries labels.
func (w *world) deployment(name, class string, replicas int32, labels map[string]string) *v1alpha1.MachineDeployment {
	d := machinetest.Deployment(w.ns, name, class, replicas, labels, 1, 0)
	d.Spec.Template.Spec.NodeTemplateSpec.Labels = map[string]string{"worker.gardener.cloud/pool": name}
	d.Spec.Template.Spec.MachineConfiguration = &v1alpha1.MachineConfiguration{MachineDrainTimeout: &metav1.Duration{Duration: 10 * time.Minute}}
	return d
}

// mcmSet is a MachineSet of d as MCM's getNewMachineSet writes it: named <d>-<hash>, labels and
// template labels those of d's template plus machine-template-hash, the selector d's plus the
// hash, no spec.machineClass, controlled by d. template is the template it was made from.
func (w *world) mcmSet(d *v1alpha1.MachineDeployment, hash string, replicas int32, template v1alpha1.MachineTemplateSpec) *v1alpha1.MachineSet {
	tmpl := *template.DeepCopy()
	tmpl.Labels = maps.Clone(tmpl.Labels)
	tmpl.Labels[v1alpha1.LabelMachineTemplateHash] = hash
	sel := d.Spec.Selector.DeepCopy()
	sel.MatchLabels = maps.Clone(sel.MatchLabels)
	sel.MatchLabels[v1alpha1.LabelMachineTemplateHash] = hash
	return &v1alpha1.MachineSet{
		ObjectMeta: metav1.ObjectMeta{
			Name: d.Name + "-" + hash, Namespace: w.ns, Labels: maps.Clone(tmpl.Labels),
			Annotations: map[string]string{v1alpha1.AnnotationRevision: "1", v1alpha1.AnnotationDesiredReplicas: fmt.Sprint(d.Spec.Replicas)},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "MachineDeployment", Name: d.Name, UID: d.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: v1alpha1.MachineSetSpec{Replicas: replicas, Selector: sel, Template: tmpl, MinReadySeconds: d.Spec.MinReadySeconds},
	}
}

// mcmMachine is a machine of ms as MCM's MachineSet controller creates it, with the status MCM's
// machine controller left: phase (Pending) and, when it made one, the VM's providerID.
func (w *world) mcmMachine(ms *v1alpha1.MachineSet, name string, phase v1alpha1.MachinePhase, providerID string) *v1alpha1.Machine {
	w.t.Helper()
	t := ms.Spec.Template.DeepCopy()
	m := &v1alpha1.Machine{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: w.ns, Labels: t.Labels,
			Annotations: map[string]string{v1alpha1.AnnotationMachinePriority: v1alpha1.DefaultMachinePriority},
			Finalizers:  []string{v1alpha1.FinalizerMachineControllerManager},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "MachineSet", Name: ms.Name, UID: ms.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: t.Spec,
	}
	m.Spec.ProviderID = providerID
	w.create(m)
	m.Status.CurrentStatus = v1alpha1.CurrentStatus{Phase: phase, LastUpdateTime: metav1.Now()}
	m.Status.LastOperation = v1alpha1.LastOperation{Type: v1alpha1.MachineOperationCreate, State: v1alpha1.MachineStateProcessing, Description: "Creating machine on cloud provider", LastUpdateTime: metav1.Now()}
	if err := w.c.Status().Update(w.ctx, m); err != nil {
		w.t.Fatal(err)
	}
	return m
}

func (w *world) create(o client.Object) {
	w.t.Helper()
	o.SetNamespace(w.ns)
	if err := w.c.Create(w.ctx, o); err != nil {
		w.t.Fatalf("create %T %s: %v", o, o.GetName(), err)
	}
}

// update re-reads obj, changes it and writes it, retrying on conflicts.
func update[T client.Object](w *world, obj T, change func(T)) {
	w.t.Helper()
	for range 20 {
		if err := w.c.Get(w.ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			w.t.Fatal(err)
		}
		change(obj)
		err := w.c.Update(w.ctx, obj)
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) {
			w.t.Fatal(err)
		}
	}
	w.t.Fatalf("update %s: too many conflicts", obj.GetName())
}

func (w *world) machines() []v1alpha1.Machine {
	w.t.Helper()
	var l v1alpha1.MachineList
	if err := w.c.List(w.ctx, &l, client.InNamespace(w.ns)); err != nil {
		w.t.Fatal(err)
	}
	sort.Slice(l.Items, func(i, j int) bool { return l.Items[i].Name < l.Items[j].Name })
	return l.Items
}

func (w *world) sets() []v1alpha1.MachineSet {
	w.t.Helper()
	var l v1alpha1.MachineSetList
	if err := w.c.List(w.ctx, &l, client.InNamespace(w.ns)); err != nil {
		w.t.Fatal(err)
	}
	sort.Slice(l.Items, func(i, j int) bool { return l.Items[i].Name < l.Items[j].Name })
	return l.Items
}

func (w *world) node(name string) *corev1.Node {
	w.t.Helper()
	if name == "" {
		return nil
	}
	n := &corev1.Node{}
	if err := w.c.Get(w.ctx, client.ObjectKey{Name: name}, n); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		w.t.Fatal(err)
	}
	return n
}

// running waits until the namespace has exactly n machines, all Running with a node, and
// returns them.
func (w *world) running(n int, timeout time.Duration) []v1alpha1.Machine {
	w.t.Helper()
	var ms []v1alpha1.Machine
	eventually.Explained(w.t, timeout, fmt.Sprintf("%d Running machines", n), func() (bool, string) {
		ms = w.machines()
		var desc []string
		ok := len(ms) == n
		for _, m := range ms {
			desc = append(desc, m.Name+"="+string(m.Status.CurrentStatus.Phase))
			if m.DeletionTimestamp != nil || m.Status.CurrentStatus.Phase != v1alpha1.MachineRunning || w.node(m.Labels[v1alpha1.LabelNode]) == nil {
				ok = false
			}
		}
		return ok, strings.Join(desc, " ")
	})
	return ms
}

func names(ms []v1alpha1.Machine) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Name)
	}
	return out
}

// churn records, from a watch, every machine and MachineSet that appears or goes and every
// machine that starts terminating, once armed.
type churn struct {
	mu     sync.Mutex
	events []string
	cancel context.CancelFunc
	done   sync.WaitGroup
}

func (w *world) watchChurn() *churn {
	w.t.Helper()
	ctx, cancel := context.WithCancel(w.ctx)
	ch := &churn{cancel: cancel}
	for _, list := range []client.ObjectList{&v1alpha1.MachineList{}, &v1alpha1.MachineSetList{}} {
		// Watch from the list's version: only what happens from now on.
		if err := w.c.List(ctx, list, client.InNamespace(w.ns)); err != nil {
			w.t.Fatal(err)
		}
		rv := list.(metav1.ListInterface).GetResourceVersion()
		wi, err := w.c.Watch(ctx, list, client.InNamespace(w.ns), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv}})
		if err != nil {
			w.t.Fatal(err)
		}
		ch.done.Go(func() {
			defer wi.Stop()
			for ev := range wi.ResultChan() {
				o, ok := ev.Object.(client.Object)
				if !ok {
					continue
				}
				kind := strings.TrimPrefix(fmt.Sprintf("%T", o), "*v1alpha1.")
				switch {
				case ev.Type == watch.Added:
					ch.add(kind + " " + o.GetName() + " created")
				case ev.Type == watch.Deleted:
					ch.add(kind + " " + o.GetName() + " deleted")
				case o.GetDeletionTimestamp() != nil:
					ch.add(kind + " " + o.GetName() + " terminating")
				}
			}
		})
	}
	w.t.Cleanup(ch.stop)
	return ch
}

func (c *churn) add(e string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !slices.Contains(c.events, e) {
		c.events = append(c.events, e)
	}
}

func (c *churn) stop() { c.cancel(); c.done.Wait() }

func (c *churn) seen() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.events)
}

func toJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
