package run

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/drivertest/memdriver"
	"github.com/machinist-io/machinist/core/registry"
	"github.com/machinist-io/machinist/grpcbridge"
	"github.com/machinist-io/machinist/grpcbridge/dialin"
	"github.com/machinist-io/machinist/grpcbridge/mtls"
	"github.com/machinist-io/machinist/grpcbridge/mtls/mtlstest"
	"github.com/machinist-io/machinist/harness/localcontrolplane"
	"github.com/machinist-io/machinist/harness/machinetest"
	"github.com/machinist-io/machinist/harness/testenv"
	"github.com/machinist-io/machinist/internal/eventually"
	"github.com/machinist-io/machinist/internal/logbridge"
	"github.com/machinist-io/machinist/internal/syncbuf"
	_ "github.com/machinist-io/machinist/providers/local" // vms lists the local provider's state dir
)

// e2e is one end-to-end test: a real etcd + kube-apiserver, `machinist run` (the built binary)
// with the compiled-in local provider (whose machines are real Nodes of the same API server), and
// clients to watch what happens.
type e2e struct {
	t        *testing.T
	env      *testenv.Env
	c        client.WithWatch
	stateDir string
	port     int
	logs     *syncbuf.Buffer
}

func newE2E(t *testing.T) *e2e {
	t.Helper()
	// klog's process-wide logger is installed once, by the first `machinist run`; install it
	// before this test's clients run, or that first install races with them.
	logbridge.Use(slog.Default().Handler())
	env := testenv.Start(t)
	c, err := client.NewWithWatch(env.Config, client.Options{Scheme: testenv.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	e := &e2e{t: t, env: env, c: c, stateDir: t.TempDir(), logs: &syncbuf.Buffer{}}
	t.Cleanup(func() {
		if t.Failed() {
			out := e.logs.String()
			if len(out) > 60000 {
				out = "…" + out[len(out)-60000:]
			}
			t.Logf("controller log:\n%s", out)
		}
	})
	return e
}

// startRun runs `machinist run` against the test's API server until the returned stop is called
// or the test ends. Extra flags override the test defaults.
func (e *e2e) startRun(extra ...string) (stop func()) {
	e.t.Helper()
	e.port = freeTCPPort(e.t)
	args := []string{"machinist", "--v", "1", "run",
		"--control-kubeconfig", e.env.KubeconfigPath,
		"--state-dir", e.stateDir,
		"--address", "127.0.0.1", "--port", strconv.Itoa(e.port),
		"--machine-creation-timeout", "2m",
		"--machine-safety-apiserver-statuscheck-period", "30s",
		"--machine-safety-apiserver-statuscheck-timeout", "30s",
	}
	args = append(args, extra...)
	stop = startMachinist(e.t, e.logs, args[1:]...)
	e.t.Cleanup(stop)
	return stop
}

func freeTCPPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// apply creates every object of the YAML files (or updates it when it exists).
func (e *e2e) apply(paths ...string) {
	e.t.Helper()
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			e.t.Fatal(err)
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			u := &unstructured.Unstructured{}
			if err := dec.Decode(&u.Object); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				e.t.Fatalf("%s: %v", path, err)
			}
			if len(u.Object) == 0 {
				continue
			}
			if u.GetKind() == "Kustomization" {
				continue
			}
			if ns := u.GetNamespace(); ns != "" {
				_ = e.c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
			}
			if err := e.c.Create(context.Background(), u); err != nil {
				e.t.Fatalf("%s: create %s %s: %v", path, u.GetKind(), u.GetName(), err)
			}
		}
	}
}

func (e *e2e) machines(ns string) []v1alpha1.Machine {
	e.t.Helper()
	var list v1alpha1.MachineList
	if err := e.c.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		e.t.Fatal(err)
	}
	return list.Items
}

// phases summarises machines: phase -> count, and how many Running machines have a Ready node.
func (e *e2e) phases(ns string, match func(*v1alpha1.Machine) bool) (map[v1alpha1.MachinePhase]int, int) {
	out := map[v1alpha1.MachinePhase]int{}
	running := 0
	for _, m := range e.machines(ns) {
		if match != nil && !match(&m) {
			continue
		}
		p := m.Status.CurrentStatus.Phase
		if m.DeletionTimestamp != nil {
			p = v1alpha1.MachineTerminating
		}
		out[p]++
		if p == v1alpha1.MachineRunning {
			running++
		}
	}
	return out, running
}

func (e *e2e) waitRunning(ns string, n int, timeout time.Duration, match func(*v1alpha1.Machine) bool) {
	e.t.Helper()
	eventually.Explained(e.t, timeout, fmt.Sprintf("%d Running machines in %s", n, ns), func() (bool, string) {
		ph, run := e.phases(ns, match)
		total := 0
		for _, c := range ph {
			total += c
		}
		return run == n && total == n, fmt.Sprintf("phases %v", ph)
	})
}

func (e *e2e) deployment(ns, name string) *v1alpha1.MachineDeployment {
	e.t.Helper()
	d := &v1alpha1.MachineDeployment{}
	if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, d); err != nil {
		e.t.Fatal(err)
	}
	return d
}

func (e *e2e) updateDeployment(ns, name string, change func(*v1alpha1.MachineDeployment)) {
	e.t.Helper()
	for range 20 {
		d := e.deployment(ns, name)
		change(d)
		err := e.c.Update(context.Background(), d)
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) {
			e.t.Fatal(err)
		}
	}
	e.t.Fatalf("update %s: too many conflicts", name)
}

// vms lists the local provider's VMs of a class straight from the provider's state directory,
// bypassing the controller: ProviderID -> machine name.
func (e *e2e) vms(ns, className string) map[string]string {
	e.t.Helper()
	ctx := context.Background()
	class := &v1alpha1.MachineClass{}
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: className}, class); err != nil {
		e.t.Fatal(err)
	}
	d, err := registry.Open("local", registry.Env{StateDir: e.stateDir})
	if err != nil {
		e.t.Fatal(err)
	}
	defer func() {
		if c, ok := d.(interface{ Close() error }); ok {
			_ = c.Close()
		}
	}()
	resp, err := d.ListMachines(ctx, &driver.ListMachinesRequest{MachineClass: class, Secret: &corev1.Secret{}})
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.MachineList
}

// localClass creates a MachineClass of the local provider (and its secret) in ns.
func (e *e2e) localClass(ns, name, cluster string) {
	e.t.Helper()
	_ = e.c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, StringData: map[string]string{"userData": "#cloud-config\n# <<MACHINE_NAME>>\n"}}
	if err := e.c.Create(context.Background(), secret); err != nil && !apierrors.IsAlreadyExists(err) {
		e.t.Fatal(err)
	}
	class := &v1alpha1.MachineClass{
		ObjectMeta:   metav1.ObjectMeta{Namespace: ns, Name: name},
		Provider:     "local",
		ProviderSpec: runtimeRaw(fmt.Sprintf(`{"cluster":%q}`, cluster)),
		SecretRef:    &corev1.SecretReference{Namespace: ns, Name: name},
	}
	if err := e.c.Create(context.Background(), class); err != nil {
		e.t.Fatal(err)
	}
}

func (e *e2e) newDeployment(ns, name, class string, replicas int32, surge, unavailable int) {
	e.t.Helper()
	d := machinetest.Deployment(ns, name, class, replicas, machinetest.Pool(name), int32(surge), int32(unavailable))
	if err := e.c.Create(context.Background(), d); err != nil {
		e.t.Fatal(err)
	}
}

// nodeMarks records which nodes were ever seen with the rollout taint and the Cluster
// Autoscaler annotation.
type nodeMarks struct {
	mu                 sync.Mutex
	tainted, annotated map[string]bool
}

func (n *nodeMarks) seen() (tainted, annotated map[string]bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return maps.Clone(n.tainted), maps.Clone(n.annotated)
}

func hasRolloutTaint(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == v1alpha1.TaintPreferNoSchedule && t.Effect == corev1.TaintEffectPreferNoSchedule {
			return true
		}
	}
	return false
}

func (e *e2e) watchNodeMarks() *nodeMarks {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	wi, err := e.c.Watch(ctx, &corev1.NodeList{})
	if err != nil {
		e.t.Fatal(err)
	}
	marks := &nodeMarks{tainted: map[string]bool{}, annotated: map[string]bool{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer wi.Stop()
		for ev := range wi.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			if !ok {
				continue
			}
			marks.mu.Lock()
			if hasRolloutTaint(n) {
				marks.tainted[n.Name] = true
			}
			if n.Annotations[v1alpha1.AnnotationCAScaleDownDisabled] == "true" && n.Annotations[v1alpha1.AnnotationCAScaleDownDisabledByMCM] == "true" {
				marks.annotated[n.Name] = true
			}
			marks.mu.Unlock()
		}
	}()
	e.t.Cleanup(func() { cancel(); <-done })
	return marks
}

func repoPath(t *testing.T, rel string) string {
	t.Helper()
	root, err := localcontrolplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, rel)
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestRunSamplesReachRunning applies kubernetes/samples/local (a local MachineClass, its Secret
// and a MachineDeployment of 3) to a fresh control plane: three machines become Running with
// Ready nodes, the deployment reports complete, and /metrics, /healthz, /readyz and Events work.
func TestRunSamplesReachRunning(t *testing.T) {
	e := newE2E(t)
	e.startRun()
	samples := repoPath(t, "kubernetes/samples/local")
	e.apply(filepath.Join(samples, "secret.yaml"), filepath.Join(samples, "machineclass.yaml"), filepath.Join(samples, "machinedeployment.yaml"))
	e.waitRunning("default", 3, 90*time.Second, nil)

	ctx := context.Background()
	for _, m := range e.machines("default") {
		node := &corev1.Node{}
		if err := e.c.Get(ctx, client.ObjectKey{Name: m.Labels[v1alpha1.LabelNode]}, node); err != nil {
			t.Fatalf("node of %s: %v", m.Name, err)
		}
		if node.Spec.ProviderID != m.Spec.ProviderID || node.Labels["worker.gardener.cloud/pool"] != "local" {
			t.Errorf("node %s: providerID %q (machine %q), labels %v", node.Name, node.Spec.ProviderID, m.Spec.ProviderID, node.Labels)
		}
		if _, ok := m.Labels[v1alpha1.LabelMachineDeploymentName]; ok {
			t.Errorf("machine %s has label name, which the sample's template lacks (MCM adds no label either): %v", m.Name, m.Labels)
		}
	}
	eventually.Explained(e.t, 30*time.Second, "deployment status complete", func() (bool, string) {
		d := e.deployment("default", "local")
		st := d.Status
		var avail, prog string
		for _, c := range st.Conditions {
			switch c.Type {
			case v1alpha1.MachineDeploymentAvailable:
				avail = string(c.Status)
			case v1alpha1.MachineDeploymentProgressing:
				prog = c.Reason
			}
		}
		return st.ReadyReplicas == 3 && st.AvailableReplicas == 3 && st.UpdatedReplicas == 3 && avail == "True" && prog == "NewMachineSetAvailable",
			fmt.Sprintf("status %+v", st)
	})
	if vms := e.vms("default", "local"); len(vms) != 3 {
		t.Fatalf("local provider holds %d VMs, want 3: %v", len(vms), vms)
	}

	base := fmt.Sprintf("http://127.0.0.1:%d", e.port)
	if code, body := httpGet(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d %s", code, body)
	}
	eventually.Explained(e.t, 10*time.Second, "/readyz ok", func() (bool, string) {
		code, body := httpGet(t, base+"/readyz")
		return code == http.StatusOK, fmt.Sprintf("%d %s", code, body)
	})
	code, metrics := httpGet(t, base+"/metrics")
	if code != http.StatusOK || !strings.Contains(metrics, `controller_runtime_reconcile_total{controller="machinedeployment"`) {
		t.Errorf("/metrics (%d) lacks the machinedeployment controller's reconcile counter", code)
	}
	eventually.Explained(e.t, 10*time.Second, "events on the deployment and its set", func() (bool, string) {
		var evs corev1.EventList
		if err := e.c.List(ctx, &evs, client.InNamespace("default")); err != nil {
			return false, err.Error()
		}
		kinds := map[string]bool{}
		for _, ev := range evs.Items {
			kinds[ev.InvolvedObject.Kind] = true
		}
		return kinds["MachineDeployment"] && kinds["MachineSet"], fmt.Sprintf("events about %v", kinds)
	})
}

// TestRunScaleHonoursPriority scales a deployment of real local machines 3 → 5 → 1: the
// machine with the priority annotation "1" goes first and the one with the highest priority
// number stays.
func TestRunScaleHonoursPriority(t *testing.T) {
	e := newE2E(t)
	e.startRun()
	e.localClass("default", "local", "e2e")
	e.newDeployment("default", "pool", "local", 3, 1, 0)
	e.waitRunning("default", 3, 90*time.Second, nil)
	e.updateDeployment("default", "pool", func(d *v1alpha1.MachineDeployment) { d.Spec.Replicas = 5 })
	e.waitRunning("default", 5, 90*time.Second, nil)

	ms := e.machines("default")
	sort.Slice(ms, func(i, j int) bool { return ms[i].Name < ms[j].Name })
	keep, first := ms[0].Name, ms[3].Name
	annotate := func(name, prio string) {
		for range 20 {
			m := &v1alpha1.Machine{}
			if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: name}, m); err != nil {
				t.Fatal(err)
			}
			m.Annotations[v1alpha1.AnnotationMachinePriority] = prio
			if err := e.c.Update(context.Background(), m); err == nil {
				return
			} else if !apierrors.IsConflict(err) {
				t.Fatal(err)
			}
		}
		t.Fatalf("annotate %s: too many conflicts", name)
	}
	annotate(keep, "9")
	annotate(first, "1")
	w := machinetest.WatchMachines(t, e.c, "default", func(ms map[string]*v1alpha1.Machine) string {
		for name, m := range ms {
			if m.DeletionTimestamp != nil && name != first {
				return name + " deleted instead of the priority-1 machine " + first
			}
		}
		return ""
	})
	w.Arm()
	e.updateDeployment("default", "pool", func(d *v1alpha1.MachineDeployment) { d.Spec.Replicas = 4 })
	e.waitRunning("default", 4, 60*time.Second, nil)
	if v := w.Stop().Violations; len(v) > 0 {
		t.Fatal(v[0])
	}
	e.updateDeployment("default", "pool", func(d *v1alpha1.MachineDeployment) { d.Spec.Replicas = 1 })
	e.waitRunning("default", 1, 60*time.Second, nil)
	if got := e.machines("default")[0].Name; got != keep {
		t.Fatalf("survivor %s, want %s (priority 9)", got, keep)
	}
	eventually.Explained(e.t, 30*time.Second, "one VM left", func() (bool, string) {
		vms := e.vms("default", "local")
		return len(vms) == 1, fmt.Sprintf("%v", vms)
	})
}

// TestRunRollingUpdateOnClassChange switches a deployment of real local machines to another
// class and watches every machine event: never more than replicas+maxSurge machines, never fewer
// than replicas-maxUnavailable Running. Midway the controller is stopped and started again; the
// rollout resumes and ends with exactly one VM per machine.
func TestRunRollingUpdateOnClassChange(t *testing.T) {
	e := newE2E(t)
	stop := e.startRun()
	e.localClass("default", "class-a", "e2e")
	e.localClass("default", "class-b", "e2e")
	const replicas, surge, unavailable = 4, 1, 1
	e.newDeployment("default", "pool", "class-a", replicas, surge, unavailable)
	e.waitRunning("default", replicas, 90*time.Second, nil)

	w := machinetest.WatchMachines(t, e.c, "default", func(ms map[string]*v1alpha1.Machine) string {
		c := machinetest.Count(ms)
		switch {
		case c.All > replicas+surge:
			return fmt.Sprintf("%d machines > replicas+maxSurge", c.All)
		case c.Running < replicas-unavailable:
			return fmt.Sprintf("%d Running < replicas-maxUnavailable: %s", c.Running, machinetest.Describe(ms))
		}
		return ""
	})
	w.Arm()
	oldNodes := map[string]bool{}
	for _, m := range e.machines("default") {
		oldNodes[m.Labels[v1alpha1.LabelNode]] = true
	}
	marks := e.watchNodeMarks()
	e.updateDeployment("default", "pool", func(d *v1alpha1.MachineDeployment) { d.Spec.Template.Spec.Class.Name = "class-b" })
	onB := func(m *v1alpha1.Machine) bool { return m.Spec.Class.Name == "class-b" }
	eventually.Explained(e.t, 60*time.Second, "the rollout under way", func() (bool, string) {
		ph, _ := e.phases("default", onB)
		return ph[v1alpha1.MachineRunning] >= 1, fmt.Sprintf("class-b phases %v", ph)
	})
	stop()
	e.startRun()
	e.waitRunning("default", replicas, 120*time.Second, onB)
	e.waitRunning("default", replicas, 60*time.Second, nil)
	r := w.Stop()
	if len(r.Violations) > 0 {
		t.Fatalf("bounds violated %d times, first: %s", len(r.Violations), r.Violations[0])
	}
	t.Logf("rollout: at most %d machines (limit %d), at least %d Running (limit %d)", r.MaxAll, replicas+surge, r.MinRunning, replicas-unavailable)

	// During the rollout old nodes were tainted PreferNoSchedule and every node of the deployment
	// had Cluster Autoscaler's scale-down-disabled annotation; afterwards no node has either.
	tainted, annotated := marks.seen()
	var oldTainted, newTainted, annotatedNew int
	for n := range tainted {
		if oldNodes[n] {
			oldTainted++
		} else {
			newTainted++
		}
	}
	for n := range annotated {
		if !oldNodes[n] {
			annotatedNew++
		}
	}
	if oldTainted == 0 || newTainted > 0 || annotatedNew == 0 {
		t.Errorf("node marks during the rollout: %d old nodes tainted (want >0), %d new nodes tainted (want 0), %d new nodes annotated (want >0)", oldTainted, newTainted, annotatedNew)
	}
	eventually.Explained(e.t, 30*time.Second, "node marks removed", func() (bool, string) {
		var nodes corev1.NodeList
		if err := e.c.List(context.Background(), &nodes); err != nil {
			return false, err.Error()
		}
		for _, n := range nodes.Items {
			if _, ok := n.Annotations[v1alpha1.AnnotationCAScaleDownDisabledByMCM]; ok || hasRolloutTaint(&n) {
				return false, "node " + n.Name + " still marked"
			}
		}
		return true, ""
	})

	// One VM per machine, no leftovers from before the restart.
	machines := map[string]string{}
	for _, m := range e.machines("default") {
		machines[m.Spec.ProviderID] = m.Name
	}
	eventually.Explained(e.t, 30*time.Second, "VMs equal machines", func() (bool, string) {
		a, b := e.vms("default", "class-a"), e.vms("default", "class-b")
		// Both classes share cluster e2e, so each lists all VMs of the cluster.
		return fmt.Sprint(a) == fmt.Sprint(machines) && fmt.Sprint(b) == fmt.Sprint(machines), fmt.Sprintf("vms %v, machines %v", b, machines)
	})
}

// TestRunTriggerDeletion plays Cluster Autoscaler on real machines: one update names two
// machines in the trigger-deletion annotation and lowers replicas by two; exactly those go.
func TestRunTriggerDeletion(t *testing.T) {
	e := newE2E(t)
	e.startRun()
	e.localClass("default", "local", "e2e")
	e.newDeployment("default", "pool", "local", 4, 1, 0)
	e.waitRunning("default", 4, 90*time.Second, nil)
	ms := e.machines("default")
	sort.Slice(ms, func(i, j int) bool { return ms[i].Name < ms[j].Name })
	victims := map[string]bool{ms[0].Name: true, ms[2].Name: true}
	before := map[string]bool{}
	for _, m := range ms {
		before[m.Name] = true
	}
	w := machinetest.WatchMachines(t, e.c, "default", func(ms map[string]*v1alpha1.Machine) string {
		for name, m := range ms {
			if !before[name] {
				return "machine " + name + " was created"
			}
			if m.DeletionTimestamp != nil && !victims[name] {
				return "machine " + name + " was deleted but not named"
			}
		}
		return ""
	})
	w.Arm()
	now := time.Now().UTC().Format(time.RFC3339)
	e.updateDeployment("default", "pool", func(d *v1alpha1.MachineDeployment) {
		if d.Annotations == nil {
			d.Annotations = map[string]string{}
		}
		d.Annotations[v1alpha1.AnnotationTriggerDeletionByMCM] = ms[0].Name + "~" + now + "," + ms[2].Name + "~" + now
		d.Spec.Replicas = 2
	})
	e.waitRunning("default", 2, 60*time.Second, nil)
	for _, m := range e.machines("default") {
		if victims[m.Name] {
			t.Fatalf("named machine %s survived", m.Name)
		}
	}
	eventually.Explained(e.t, 20*time.Second, "annotation pruned", func() (bool, string) {
		v, ok := e.deployment("default", "pool").Annotations[v1alpha1.AnnotationTriggerDeletionByMCM]
		return !ok, v
	})
	if v := w.Stop().Violations; len(v) > 0 {
		t.Fatal(v[0])
	}
}

// TestRunGardenerManifests applies manifests written for Gardener's MCM — a generic MachineClass
// with credentialsSecretRef and nodeTemplate, a MachineDeployment, a standalone MachineSet and a
// standalone Machine, shaped and named as Gardener writes them — and checks every one
// reconciles to Running machines.
func TestRunGardenerManifests(t *testing.T) {
	e := newE2E(t)
	const ns = "shoot--core--prod"
	e.startRun("--namespace", ns)
	e.apply(filepath.Join("testdata", "gardener-mcm.yaml"))
	e.waitRunning(ns, 2+2+1, 120*time.Second, nil)
	byOwner := map[string]int{}
	for _, m := range e.machines(ns) {
		owner := "none"
		if ref := metav1.GetControllerOf(&m); ref != nil {
			owner = ref.Kind
			if ref.Kind == "MachineSet" && strings.HasPrefix(ref.Name, "shoot--core--prod-worker-a-z1-") {
				owner = "deployment"
			}
		}
		byOwner[owner]++
		if m.Annotations[v1alpha1.AnnotationEffectiveCreationTimeout] == "" && owner == "deployment" {
			t.Errorf("machine %s of the deployment lacks the effective-creation-timeout annotation", m.Name)
		}
	}
	if byOwner["deployment"] != 2 || byOwner["MachineSet"] != 2 || byOwner["none"] != 1 {
		t.Fatalf("machines by owner %v, want 2 of the deployment, 2 of the set, 1 standalone", byOwner)
	}
}

func runtimeRaw(s string) runtime.RawExtension { return runtime.RawExtension{Raw: []byte(s)} }

// TestDevRunsSamplesAndCleansUp is `make run` without make: `machinist dev` starts a control
// plane (with kube-scheduler and kube-controller-manager), the controllers and the samples,
// reports the three machines and then the sample workload Running on them, prints how to point
// a Cluster Autoscaler at the cluster, and on cancellation (Ctrl-C) stops everything and removes
// its temporary directory.
func TestDevRunsSamplesAndCleansUp(t *testing.T) {
	out := &syncbuf.Buffer{}
	args := []string{"dev", "--port", "-1", "--timeout", "3m"}
	if d := os.Getenv("KUBEBUILDER_ASSETS"); d != "" {
		args = append(args, "--bin-dir", d)
	}
	stop := startMachinist(t, out, args...)
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 4*time.Minute, true, func(context.Context) (bool, error) {
		return strings.Contains(out.String(), "running; press Ctrl-C"), nil
	})
	if err != nil {
		t.Fatalf("machines and workload not Running:\n%s", out.String())
	}
	text := out.String()
	for _, want := range []string{"kube-scheduler, kube-controller-manager", "control plane ready", "applied", "export KUBECONFIG=", "get machines -w",
		"all 3 machines Running", "deployment hello: 3/3 pods Running on local-", "daemonset node-agent: 3/3 pods Running",
		"autoscaler --control-kubeconfig", "--cloud-provider=externalgrpc --cloud-config="} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	first := strings.SplitN(text, "\n", 2)[0]
	dir := first[strings.LastIndex(first, " ")+1:]
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("working directory %q from %q: %v", dir, first, err)
	}
	stop() // Ctrl-C
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("%s left behind (stat: %v)", dir, err)
	}
}

// TestRunLeaderElection starts two controllers on one cluster: one holds the Lease, the other
// waits with warm caches (ready); when the leader stops it hands the Lease over at once.
func TestRunLeaderElection(t *testing.T) {
	e := newE2E(t)
	flags := []string{"--target-kubeconfig", "none", "--leader-elect-resource-name", "mcm-test"}
	stopA := e.startRun(flags...)
	holder := func() string {
		l := &coordinationv1.Lease{}
		if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: "mcm-test"}, l); err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}
	eventually.Explained(e.t, 30*time.Second, "a leader", func() (bool, string) { return holder() != "", "no holder" })
	first := holder()
	e.startRun(flags...)
	standby := e.port
	eventually.Explained(e.t, 30*time.Second, "the standby ready", func() (bool, string) {
		code, body := httpGet(t, fmt.Sprintf("http://127.0.0.1:%d/readyz", standby))
		return code == http.StatusOK, fmt.Sprintf("%d %s", code, body)
	})
	if h := holder(); h != first {
		t.Fatalf("the lease moved to %q while %q was running", h, first)
	}
	stopA()
	// Released on stop, so the standby takes over within its retry period (2s), not the lease
	// duration (15s).
	eventually.Explained(e.t, 8*time.Second, "the standby leading", func() (bool, string) {
		h := holder()
		return h != "" && h != first, "holder " + h
	})
}

// TestRunDialInProvider: `machinist run --dialin-listen` with mutual TLS serves a provider that
// is not compiled in from a process that dialled in (here the reference mem driver behind a
// dial-in Provider whose certificate authorizes "mem"), and a MachineDeployment of that
// provider's class reaches Available machines (no target cluster) with exactly one VM each in
// the provider's cloud. A provider whose certificate authorizes another name is refused.
func TestRunDialInProvider(t *testing.T) {
	e := newE2E(t)
	port := freeTCPPort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	ca := mtlstest.NewCA(t, "machinist test CA")
	server := ca.IssueFiles(t, mtlstest.Leaf{CommonName: "machinist-controller"}, ca.PEM)
	e.startRun("--target-kubeconfig", "none", "--dialin-listen", addr, "--driver-cert", server.Cert, "--driver-key", server.Key, "--driver-cacert", server.CA)

	connect := func(authorizes string) (*dialin.Connector, *memdriver.Cloud) {
		files := ca.IssueFiles(t, mtlstest.Leaf{CommonName: "provider-" + authorizes, URIs: []string{mtls.ProviderURI(authorizes).String()}}, ca.PEM)
		cfg, err := mtls.ClientConfig(files, "localhost")
		if err != nil {
			t.Fatal(err)
		}
		cloud := memdriver.NewCloud()
		p, err := dialin.NewConnector(dialin.ConnectorOptions{
			Controller: addr,
			Transport:  grpcbridge.Transport{TLS: cfg},
			Drivers:    map[string]driver.Driver{memdriver.ProviderName: memdriver.New(cloud)},
			Log:        slog.New(slog.NewTextHandler(e.logs, nil)),
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = p.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done; _ = p.Close() })
		return p, cloud
	}
	intruder, intruderCloud := connect("other")
	p, cloud := connect(memdriver.ProviderName)
	eventually.Explained(e.t, 30*time.Second, "the provider connected", func() (bool, string) { return p.Connected(), "not connected" })

	if err := e.c.Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "mem"}, StringData: map[string]string{"userData": "x"}}); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Create(context.Background(), &v1alpha1.MachineClass{
		ObjectMeta:   metav1.ObjectMeta{Namespace: "default", Name: "mem"},
		Provider:     memdriver.ProviderName,
		ProviderSpec: runtimeRaw(`{"cluster":"e2e","role":"worker"}`),
		SecretRef:    &corev1.SecretReference{Namespace: "default", Name: "mem"},
	}); err != nil {
		t.Fatal(err)
	}
	e.newDeployment("default", "remote", "mem", 2, 1, 0)
	eventually.Explained(e.t, 60*time.Second, "2 Available machines", func() (bool, string) {
		ph, _ := e.phases("default", nil)
		return ph[v1alpha1.MachineAvailable] == 2 && len(e.machines("default")) == 2, fmt.Sprintf("phases %v", ph)
	})
	for _, m := range e.machines("default") {
		if n := cloud.Count(m.Name); n != 1 {
			t.Errorf("machine %s has %d VMs in the provider's cloud, want 1", m.Name, n)
		}
	}
	if n := len(cloud.VMs()); n != 2 {
		t.Errorf("the provider's cloud holds %d VMs, want 2", n)
	}
	eventually.Explained(e.t, 30*time.Second, "the deployment available", func() (bool, string) {
		st := e.deployment("default", "remote").Status
		return st.AvailableReplicas == 2 && st.UpdatedReplicas == 2, fmt.Sprintf("%+v", st)
	})
	if intruder.Connected() || len(intruderCloud.VMs()) > 0 {
		t.Errorf("a provider authorized only for \"other\" registered mem (connected %v, %d VMs)", intruder.Connected(), len(intruderCloud.VMs()))
	}
}

// TestRunDriverExec: `machinist run --driver-exec local=PATH` runs a slim local-provider binary
// as a child process and resolves the local class to it (before the compiled-in driver): the
// machines' VMs live in the child's state directory, none in the controller's, and the child is
// gone once the controller stops.
func TestRunDriverExec(t *testing.T) {
	e := newE2E(t)
	root := repoPath(t, "")
	slim := filepath.Join(t.TempDir(), "machinist-local")
	build := exec.Command("go", "build", "-tags", "slim,provider_local", "-o", slim, "./cmd/machinist")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the slim local binary: %v\n%s", err, out)
	}
	childState := t.TempDir()
	// The child inherits the environment: serve reads its target cluster and state dir from it.
	t.Setenv("TARGET_KUBECONFIG", e.env.KubeconfigPath)
	t.Setenv("MACHINIST_STATE_DIR", childState)
	stop := e.startRun("--driver-exec", "local="+slim)
	e.localClass("default", "local", "e2e")
	e.newDeployment("default", "pool", "local", 2, 1, 0)
	e.waitRunning("default", 2, 90*time.Second, nil)

	controllerState := e.stateDir
	e.stateDir = childState
	if vms := e.vms("default", "local"); len(vms) != 2 {
		t.Errorf("the child's state holds %d VMs, want 2: %v", len(vms), vms)
	}
	e.stateDir = controllerState
	if vms := e.vms("default", "local"); len(vms) != 0 {
		t.Errorf("the compiled-in driver made VMs although --driver-exec serves local: %v", vms)
	}
	if n := len(processesOf(t, slim)); n != 1 {
		t.Fatalf("%d processes of the slim binary while the controller runs, want 1", n)
	}
	stop()
	eventually.Explained(e.t, 10*time.Second, "the child gone", func() (bool, string) {
		pids := processesOf(t, slim)
		return len(pids) == 0, fmt.Sprintf("pids %v", pids)
	})
}

// processesOf lists the pids of processes running the executable at path.
func processesOf(t *testing.T, path string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	var pids []int
	for _, en := range entries {
		pid, err := strconv.Atoi(en.Name())
		if err != nil {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", en.Name(), "exe"))
		if err == nil && (exe == path || exe == path+" (deleted)") {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestRunStrictProviderSpecs: by default a class with a mis-cased field works and says so on
// its ProviderSpecValid condition; `machinist run --strict-provider-specs` refuses it (condition
// False, the machine's create InvalidArgument naming the field) as machinist did before.
func TestRunStrictProviderSpecs(t *testing.T) {
	e := newE2E(t)
	const ns = "strict-specs"
	e.localClass(ns, "loose", "strict")
	class := &v1alpha1.MachineClass{}
	key := client.ObjectKey{Namespace: ns, Name: "loose"}
	if err := e.c.Get(context.Background(), key, class); err != nil {
		t.Fatal(err)
	}
	class.ProviderSpec = runtimeRaw(`{"cluster":"strict","Zone":"z9"}`)
	if err := e.c.Update(context.Background(), class); err != nil {
		t.Fatal(err)
	}
	condition := func() *metav1.Condition {
		c := &v1alpha1.MachineClass{}
		if err := e.c.Get(context.Background(), key, c); err != nil {
			t.Fatal(err)
		}
		return apimeta.FindStatusCondition(c.Status.Conditions, v1alpha1.ClassConditionProviderSpecValid)
	}

	stop := e.startRun("--namespace", ns, "--strict-provider-specs")
	if err := e.c.Create(context.Background(), &v1alpha1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "loose-1"},
		Spec:       v1alpha1.MachineSpec{Class: v1alpha1.ClassSpec{Kind: "MachineClass", Name: "loose"}},
	}); err != nil {
		t.Fatal(err)
	}
	eventually.Explained(e.t, 60*time.Second, "strict: condition and machine refused", func() (bool, string) {
		cond := condition()
		m := &v1alpha1.Machine{}
		_ = e.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "loose-1"}, m)
		lo := m.Status.LastOperation
		ok := cond != nil && cond.Status == metav1.ConditionFalse && cond.Reason == v1alpha1.ReasonProviderSpecInvalid &&
			strings.Contains(cond.Message, "providerSpec.Zone") &&
			lo.ErrorCode == "InvalidArgument" && strings.Contains(lo.Description, "providerSpec.Zone")
		return ok, fmt.Sprintf("condition %+v, last operation %+v", cond, lo)
	})
	stop()

	e.startRun("--namespace", ns)
	e.waitRunning(ns, 1, 120*time.Second, nil)
	cond := condition()
	if cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != v1alpha1.ReasonProviderSpecFieldWarnings ||
		!strings.Contains(cond.Message, "providerSpec.Zone: unknown field: ignored (field names are case-sensitive: write zone)") {
		t.Fatalf("lenient condition %+v", cond)
	}
}
