package fallback_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/yaml"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/fallback"
	"github.com/machinist-io/machinist/core/registry"
	"github.com/machinist-io/machinist/harness/ctrltest"
	"github.com/machinist-io/machinist/harness/localcontrolplane"
	"github.com/machinist-io/machinist/harness/machinetest"
	"github.com/machinist-io/machinist/harness/testenv"
	"github.com/machinist-io/machinist/internal/eventually"
	_ "github.com/machinist-io/machinist/providers/local"
)

// End-to-end tests of the capacity fallback: the real controller manager (Machine, MachineSet,
// MachineDeployment and safety controllers) on a real kube-apiserver, with the local provider
// whose machines become real Nodes. A local class with providerSpec.createError
// ResourceExhausted is a zone out of capacity; removing it brings the zone back.

func TestMain(m *testing.M) { ctrltest.Main(m) }

type world struct {
	t   testing.TB
	ns  string
	cfg *rest.Config
	c   client.WithWatch
	ctx context.Context
}

func newWorld(t *testing.T) *world {
	e := ctrltest.NewEnv(t)
	c, err := client.NewWithWatch(e.Config, client.Options{Scheme: testenv.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return &world{t: t, ns: e.NS, cfg: e.Config, c: c, ctx: context.Background()}
}

// newWorldIn is newWorld in namespace ns of the shared control plane, created unless it exists
// (benchmarks).
func newWorldIn(t testing.TB, ns string) *world {
	cfg := rest.CopyConfig(ctrltest.ControlPlane.Config)
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: testenv.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return &world{t: t, ns: ns, cfg: cfg, c: c, ctx: context.Background()}
}

// events lists the reasons of the events about name.
func (w *world) events(name string) []string {
	w.t.Helper()
	cs, err := kubernetes.NewForConfig(w.cfg)
	if err != nil {
		w.t.Fatal(err)
	}
	list, err := cs.EventsV1().Events(w.ns).List(w.ctx, metav1.ListOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	var out []string
	for _, ev := range list.Items {
		if ev.Regarding.Name == name {
			out = append(out, ev.Reason)
		}
	}
	return out
}

var benchSeq atomic.Int32

func (w *world) key(name string) client.ObjectKey {
	return client.ObjectKey{Namespace: w.ns, Name: name}
}

func (w *world) create(o client.Object) {
	w.t.Helper()
	o.SetNamespace(w.ns)
	if err := w.c.Create(w.ctx, o); err != nil {
		w.t.Fatalf("create %T %s: %v", o, o.GetName(), err)
	}
}

// start runs the controller manager of `machinist run` for the test's namespace with marks
// lasting ttl and the default ResourceExhausted retry (10 minutes).
func (w *world) start(ttl time.Duration) { w.startWith(ttl, nil) }

// startWith is start with the drivers of endpoints before the compiled-in ones.
func (w *world) startWith(ttl time.Duration, endpoints registry.Source) {
	w.t.Helper()
	opts := ctrltest.ProductOptions(w.t, w.cfg, w.ns)
	opts.Endpoints = endpoints
	opts.Machine.Fallback = fallback.NewCache(ttl)
	ctrltest.RunProduct(w.t, opts)
}

// class creates a local MachineClass in zone; exhausted makes every create fail with
// ResourceExhausted.
func (w *world) class(name, zone string, exhausted bool) {
	w.t.Helper()
	times := -1
	if exhausted {
		times = 0
	}
	w.classFailing(name, zone, times)
}

// classFailing creates a local MachineClass in zone whose creates fail with ResourceExhausted:
// the first times per machine, every one for 0, none for -1.
func (w *world) classFailing(name, zone string, times int) {
	w.t.Helper()
	spec := fmt.Sprintf(`{"cluster":%q,"zone":%q,"heartbeatInterval":"1s","nodeMonitorGracePeriod":"5s"`, w.ns, zone)
	if times >= 0 {
		spec += fmt.Sprintf(`,"createError":{"code":"ResourceExhausted","message":"zone %s has no capacity for flavor local","times":%d}`, zone, times)
	}
	w.create(&v1alpha1.MachineClass{
		ObjectMeta:   metav1.ObjectMeta{Name: name},
		Provider:     "local",
		ProviderSpec: runtime.RawExtension{Raw: []byte(spec + "}")},
	})
}

// capacityBack removes the simulated stock-out from a class.
func (w *world) capacityBack(name string) {
	w.t.Helper()
	cl := &v1alpha1.MachineClass{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: name}}
	if err := w.c.Patch(w.ctx, cl, client.RawPatch(types.MergePatchType, []byte(`{"providerSpec":{"createError":null}}`))); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) deployment(name, primary string, replicas int32, annotations map[string]string) {
	w.t.Helper()
	d := machinetest.Deployment("", name, primary, replicas, machinetest.Pool(name), 1, 1)
	d.Annotations = annotations
	w.create(d)
}

func (w *world) getDeployment(name string) *v1alpha1.MachineDeployment {
	w.t.Helper()
	d := &v1alpha1.MachineDeployment{}
	if err := w.c.Get(w.ctx, w.key(name), d); err != nil {
		w.t.Fatal(err)
	}
	return d
}

func (w *world) machines() []v1alpha1.Machine {
	w.t.Helper()
	var list v1alpha1.MachineList
	if err := w.c.List(w.ctx, &list, client.InNamespace(w.ns)); err != nil {
		w.t.Fatal(err)
	}
	return list.Items
}

// running counts the live machines Running on class, and all live machines.
func (w *world) running(class string) (onClass, live int, desc string) {
	var parts []string
	for _, m := range w.machines() {
		if m.DeletionTimestamp != nil {
			continue
		}
		live++
		if m.Spec.Class.Name == class && m.Status.CurrentStatus.Phase == v1alpha1.MachineRunning {
			onClass++
		}
		parts = append(parts, m.Name+"="+m.Spec.Class.Name+"/"+string(m.Status.CurrentStatus.Phase))
	}
	sort.Strings(parts)
	return onClass, live, strings.Join(parts, " ")
}

func (w *world) waitRunningOn(class string, n int, timeout time.Duration) {
	w.t.Helper()
	eventually.Explained(w.t, timeout, fmt.Sprintf("%d machines Running on %s", n, class), func() (bool, string) {
		on, live, desc := w.running(class)
		return on == n && live == n, desc
	})
}

// hasEvent reports whether an event of reason about name has a note containing text.
func (w *world) hasEvent(name, reason, text string) bool {
	cs, err := kubernetes.NewForConfig(w.cfg)
	if err != nil {
		return false
	}
	list, err := cs.EventsV1().Events(w.ns).List(w.ctx, metav1.ListOptions{})
	if err != nil {
		return false
	}
	for _, ev := range list.Items {
		if ev.Regarding.Name == name && ev.Reason == reason && strings.Contains(ev.Note, text) {
			return true
		}
	}
	return false
}

// gauge reads a fallback metric of the namespace from the controllers' registry.
func gauge(t testing.TB, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	fams, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue next
				}
			}
			if m.GetGauge() != nil {
				return m.GetGauge().GetValue(), true
			}
			return m.GetCounter().GetValue(), true
		}
	}
	return 0, false
}

// TestDeploymentFallsBackAndRebalances is the whole story on one deployment of 5:
// the primary zone is out of capacity, so the 5 machines run on the fallback class within a
// minute (the ResourceExhausted retry is the default 10 minutes: only the fallback can do it),
// visible in status, printer column, events and metrics. Then the zone comes back and
// rebalancing moves all 5 to the primary, surge first, one at a time, and the deployment never
// has fewer than replicas − maxUnavailable Ready machines (it never has fewer than replicas).
func TestDeploymentFallsBackAndRebalances(t *testing.T) {
	w := newWorld(t)
	w.class("zone-1", "local-1", true)
	w.class("zone-2", "local-2", false)
	w.deployment("pool", "zone-1", 5, map[string]string{fallback.AnnotationClasses: "zone-2"})
	w.start(3 * time.Second)

	w.waitRunningOn("zone-2", 5, time.Minute)

	eventually.True(t, 30*time.Second, "status.fallbackReplicas 5 and condition FallbackClasses True", func() bool {
		d := w.getDeployment("pool")
		for _, c := range d.Status.Conditions {
			if c.Type == fallback.ConditionClasses && c.Status == v1alpha1.ConditionTrue {
				return d.Status.FallbackReplicas == 5
			}
		}
		return false
	})
	for _, name := range []string{"pool", w.machines()[0].Name} {
		found := false
		for _, r := range w.events(name) {
			found = found || r == fallback.ReasonCapacityFallback
		}
		if !found {
			t.Errorf("no %s event on %s", fallback.ReasonCapacityFallback, name)
		}
	}
	if v, ok := gauge(t, "machinist_fallback_machines", map[string]string{"namespace": w.ns, "machinedeployment": "pool"}); !ok || v != 5 {
		t.Errorf("machinist_fallback_machines = %v (found %v), want 5", v, ok)
	}
	if v, ok := gauge(t, "machinist_fallback_exhausted_marks_total", map[string]string{"namespace": w.ns, "class": "zone-1"}); !ok || v < 1 {
		t.Errorf("machinist_fallback_exhausted_marks_total of zone-1 = %v (found %v), want ≥ 1", v, ok)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := w.c.Get(w.ctx, client.ObjectKey{Name: "machinedeployments.machine.sapcloud.io"}, crd); err != nil {
		t.Fatal(err)
	}
	column := false
	for _, c := range crd.Spec.Versions[0].AdditionalPrinterColumns {
		column = column || (c.Name == "Fallback" && c.JSONPath == ".status.fallbackReplicas")
	}
	if !column {
		t.Error("the MachineDeployment CRD has no Fallback printer column")
	}

	// Rebalancing is switched on while the zone is still out: the probe is refused and deleted,
	// and nothing else moves.
	rw := machinetest.WatchMachines(t, w.c, w.ns, nil)
	rw.ArmWhen(t, "5 Running machines", func(c machinetest.Counts) bool { return c.Running >= 5 })
	before := map[string]bool{}
	for _, m := range w.machines() {
		before[m.Name] = true
	}
	d := w.getDeployment("pool")
	patch := client.MergeFrom(d.DeepCopy())
	d.Annotations[fallback.AnnotationRebalance] = "true"
	if err := w.c.Patch(w.ctx, d, patch); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, time.Minute, "a refused probe", func() bool { return w.hasEvent("pool", fallback.ReasonRebalance, "refused") })
	eventually.True(t, 30*time.Second, "the refused probe gone, the fallback machines untouched", func() bool {
		for _, m := range w.machines() {
			if m.DeletionTimestamp == nil && !before[m.Name] {
				return false
			}
		}
		on, live, _ := w.running("zone-2")
		return on == 5 && live == 5
	})
	if w.hasEvent("pool", fallback.ReasonRebalance, "is replaced by") {
		t.Fatal("a fallback machine was replaced while the primary refused the probe")
	}

	// The zone comes back: all machines move to the primary, surge first, one at a time.
	w.capacityBack("zone-1")
	w.waitRunningOn("zone-1", 5, 4*time.Minute)
	seen := rw.Stop()
	if seen.MinRunning < 5-1 {
		t.Errorf("only %d machines were Ready at one point, below replicas − maxUnavailable = 4", seen.MinRunning)
	}
	if seen.MaxLive > 6 {
		t.Errorf("%d live machines at one point: more than one surge machine at a time", seen.MaxLive)
	}
	for _, m := range w.machines() {
		if fallback.IsSurge(&m) {
			t.Errorf("machine %s still carries the surge annotation", m.Name)
		}
	}
	eventually.True(t, 30*time.Second, "status.fallbackReplicas 0", func() bool { return w.getDeployment("pool").Status.FallbackReplicas == 0 })
}

// TestBadFallbackListIsReported: every unusable entry of the list is named in the condition and
// a Warning Event; the machines are still created on the usable classes.
func TestBadFallbackListIsReported(t *testing.T) {
	w := newWorld(t)
	w.class("zone-1", "local-1", true)
	w.class("zone-2", "local-2", false)
	w.deployment("pool", "zone-1", 2, map[string]string{fallback.AnnotationClasses: "missing, other/zone-2, zone-2, zone-2, zone-1"})
	w.start(time.Minute)

	var msg string
	eventually.True(t, 30*time.Second, "condition FallbackClasses False", func() bool {
		for _, c := range w.getDeployment("pool").Status.Conditions {
			if c.Type == fallback.ConditionClasses && c.Status == v1alpha1.ConditionFalse && c.Reason == fallback.ReasonInvalidFallbackClasses {
				msg = c.Message
				return true
			}
		}
		return false
	})
	for _, want := range []string{`entry 1 "missing": MachineClass ` + w.ns + `/missing not found`, `entry 2 "other/zone-2"`, `entry 4 "zone-2": MachineClass "zone-2" is listed twice`, `entry 5 "zone-1"`, "in order: zone-1, zone-2"} {
		if !strings.Contains(msg, want) {
			t.Errorf("condition message lacks %q:\n%s", want, msg)
		}
	}
	eventually.True(t, 30*time.Second, "Warning event "+fallback.ReasonInvalidFallbackClasses, func() bool {
		for _, r := range w.events("pool") {
			if r == fallback.ReasonInvalidFallbackClasses {
				return true
			}
		}
		return false
	})
	w.waitRunningOn("zone-2", 2, time.Minute)

	// Fixing the list (creating the missing class) makes the condition True.
	w.class("missing", "local-3", false)
	d := w.getDeployment("pool")
	patch := client.MergeFrom(d.DeepCopy())
	d.Annotations[fallback.AnnotationClasses] = "missing,zone-2"
	if err := w.c.Patch(w.ctx, d, patch); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 30*time.Second, "condition FallbackClasses True", func() bool {
		for _, c := range w.getDeployment("pool").Status.Conditions {
			if c.Type == fallback.ConditionClasses {
				return c.Status == v1alpha1.ConditionTrue && strings.Contains(c.Message, "zone-1, missing, zone-2")
			}
		}
		return false
	})
}

// TestSampleLocalFallback applies kubernetes/samples/local-fallback as `kubectl apply -k` would
// (the files its kustomization lists, all in namespace default): 3 machines run on the fallback
// class local-zone-2, the deployment counts them and the events say why. The objects go to the
// test's own namespace, every reference to default moved with them, so that the test can run
// again in the same control plane (-count) without meeting the objects of its last run.
func TestSampleLocalFallback(t *testing.T) {
	w := newWorld(t)
	root, err := localcontrolplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "kubernetes", "samples", "local-fallback")
	var kust struct {
		Resources []string `json:"resources"`
	}
	raw, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, &kust); err != nil || len(kust.Resources) == 0 {
		t.Fatalf("kustomization.yaml: %v (%d resources)", err, len(kust.Resources))
	}
	for _, f := range kust.Resources {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			u := &unstructured.Unstructured{}
			if err := dec.Decode(&u.Object); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				t.Fatalf("%s: %v", f, err)
			}
			if len(u.Object) == 0 {
				continue
			}
			if u.GetNamespace() != "default" {
				t.Fatalf("%s: %s %s is not in namespace default", f, u.GetKind(), u.GetName())
			}
			moveNamespace(u.Object, "default", w.ns)
			if err := w.c.Create(w.ctx, u); err != nil {
				t.Fatalf("%s: create %s %s: %v", f, u.GetKind(), u.GetName(), err)
			}
		}
	}
	w.start(fallback.DefaultTTL)

	w.waitRunningOn("local-zone-2", 3, time.Minute)
	eventually.True(t, 30*time.Second, "status.fallbackReplicas 3", func() bool { return w.getDeployment("local-fallback").Status.FallbackReplicas == 3 })
	for _, name := range []string{"local-fallback", w.machines()[0].Name} {
		if !w.hasEvent(name, fallback.ReasonCapacityFallback, "local-zone-1") {
			t.Errorf("no %s event naming local-zone-1 on %s", fallback.ReasonCapacityFallback, name)
		}
	}
}

// moveNamespace sets every "namespace" field of obj (metadata's and references' like secretRef)
// that is from to to.
func moveNamespace(obj map[string]any, from, to string) {
	for k, v := range obj {
		switch v := v.(type) {
		case string:
			if k == "namespace" && v == from {
				obj[k] = to
			}
		case map[string]any:
			moveNamespace(v, from, to)
		case []any:
			for _, item := range v {
				if m, ok := item.(map[string]any); ok {
					moveNamespace(m, from, to)
				}
			}
		}
	}
}
