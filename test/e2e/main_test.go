package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/grpcbridge/autoscaler/clusterautoscaler"
	"github.com/machinist-io/machinist/grpcbridge/autoscaler/deployments"
	"github.com/machinist-io/machinist/harness/localcontrolplane"
	"github.com/machinist-io/machinist/harness/machinetest"
	"github.com/machinist-io/machinist/harness/testenv"
	"github.com/machinist-io/machinist/internal/eventually"
	"github.com/machinist-io/machinist/test/internal/machinistbin"
)

// machinistBin is bin/machinist built once for the package by TestMain.
var machinistBin string

func TestMain(m *testing.M) { machinistbin.Main(m, "e2e", &machinistBin) }

// ns is the namespace of every test object.
const ns = "default"

// world is one test's cluster: the full local control plane, `machinist run` (the controllers
// with the local provider, whose machines become the cluster's nodes) and, on request,
// `machinist autoscaler` with a Cluster Autoscaler-like client.
type world struct {
	t   *testing.T
	ctx context.Context
	env *testenv.Env
	c   client.Client
	cs  kubernetes.Interface
	// stateDir is the local provider's state dir of `machinist run`.
	stateDir string
	// metricsPort serves `machinist run`'s /metrics on 127.0.0.1.
	metricsPort int
}

// newWorld starts the control plane (kube-controller-manager watching nodes every second with
// a 5 s grace period, so a dead node is noticed quickly) and `machinist run`.
func newWorld(t *testing.T) *world {
	t.Helper()
	env := testenv.Start(t, testenv.WithKubeScheduler(),
		testenv.WithKubeControllerManager("--node-monitor-period=1s", "--node-monitor-grace-period=5s"))
	w := &world{t: t, ctx: context.Background(), env: env, c: env.Client(), cs: env.Clientset(), stateDir: t.TempDir(), metricsPort: freePort(t)}
	w.start("run", "--control-kubeconfig", env.KubeconfigPath, "--state-dir", w.stateDir,
		"--address", "127.0.0.1", "--port", strconv.Itoa(w.metricsPort),
		"--machine-creation-timeout", "2m", "--machine-drain-timeout", "2m",
		"--machine-safety-apiserver-statuscheck-period", "30s", "--machine-safety-apiserver-statuscheck-timeout", "30s")
	return w
}

// start runs `machinist <args>` until the test ends, logging to a file shown when it fails.
func (w *world) start(args ...string) {
	w.t.Helper()
	logPath := filepath.Join(w.t.TempDir(), args[0]+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		w.t.Fatal(err)
	}
	cmd := exec.Command(machinistBin, append([]string{"--v", "1"}, args...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	w.t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		logf.Close()
		if w.t.Failed() {
			b, _ := os.ReadFile(logPath)
			if len(b) > 40000 {
				b = b[len(b)-40000:]
			}
			w.t.Logf("machinist %s log (end):\n%s", args[0], b)
		}
	})
}

// startAutoscaler runs `machinist autoscaler` over mutual TLS with certificates made as
// `machinist dev` makes them, and returns a client that behaves like Cluster Autoscaler's.
func (w *world) startAutoscaler() *clusterautoscaler.Client {
	w.t.Helper()
	files, err := localcontrolplane.LocalMTLS(w.t.TempDir(), "machinist-autoscaler", "cluster-autoscaler")
	if err != nil {
		w.t.Fatal(err)
	}
	port := freePort(w.t)
	w.start("autoscaler", "--control-kubeconfig", w.env.KubeconfigPath, "--namespace", ns,
		"--listen", "127.0.0.1:"+strconv.Itoa(port), "--http-address", "127.0.0.1:"+strconv.Itoa(freePort(w.t)),
		"--cert", files.ServerCert, "--key", files.ServerKey, "--cacert", files.CA)
	scaler, err := clusterautoscaler.Dial(clusterautoscaler.CloudConfig{
		Address: "localhost:" + strconv.Itoa(port), Cert: files.ClientCert, Key: files.ClientKey, CACert: files.CA,
		GRPCTimeout: metav1.Duration{Duration: 10 * time.Second},
	}, clusterautoscaler.Current)
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { scaler.Close() })
	eventually.Explained(w.t, time.Minute, "the autoscaler server answers", func() (bool, string) {
		_, err := scaler.NodeGroups()
		return err == nil, fmt.Sprint(err)
	})
	return scaler
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func (w *world) create(obj client.Object) {
	w.t.Helper()
	if err := w.c.Create(w.ctx, obj); err != nil {
		w.t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
	}
}

// localClass creates a local MachineClass of 2 CPUs and 4Gi with a node template (for scale
// from zero) that beats every second.
func (w *world) localClass(name string) {
	w.t.Helper()
	w.create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, StringData: map[string]string{"userData": "#!/bin/sh\n"}})
	w.create(&v1alpha1.MachineClass{
		ObjectMeta:   metav1.ObjectMeta{Name: name, Namespace: ns},
		Provider:     "local",
		ProviderSpec: runtime.RawExtension{Raw: []byte(`{"cluster":"e2e","heartbeatInterval":"1s"}`)},
		SecretRef:    &corev1.SecretReference{Name: name, Namespace: ns},
		NodeTemplate: &v1alpha1.NodeTemplate{
			Capacity:     corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi")},
			InstanceType: "local", Region: "local", Zone: "local-1",
		},
	})
}

// machineDeployment creates a MachineDeployment whose nodes carry the label pool=<name>;
// with maxSize > 0 it is a node group of the autoscaler server (minSize..maxSize).
func (w *world) machineDeployment(name, class string, replicas int32, minSize, maxSize int, change func(*v1alpha1.MachineDeployment)) {
	w.t.Helper()
	md := machinetest.Deployment(ns, name, class, replicas, machinetest.Pool(name), 1, 0)
	md.Spec.Template.Spec.NodeTemplateSpec.Labels = machinetest.Pool(name)
	if maxSize > 0 {
		md.Annotations = map[string]string{deployments.AnnotationMinSize: strconv.Itoa(minSize), deployments.AnnotationMaxSize: strconv.Itoa(maxSize)}
	}
	if change != nil {
		change(md)
	}
	w.create(md)
}

// workload creates a Deployment of replicas pods on the pool's nodes, each requesting cpu,
// with a 2 s grace period, and returns its label selector.
func (w *world) workload(name, pool string, replicas int32, cpu string, change func(*appsv1.Deployment)) string {
	w.t.Helper()
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector:                  map[string]string{"pool": pool},
					TerminationGracePeriodSeconds: ptr.To[int64](2),
					Containers: []corev1.Container{{
						Name: "app", Image: "registry.k8s.io/pause:3.10",
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
							corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("128Mi"),
						}},
					}},
				},
			},
		},
	}
	if change != nil {
		change(d)
	}
	if _, err := w.cs.AppsV1().Deployments(ns).Create(w.ctx, d, metav1.CreateOptions{}); err != nil {
		w.t.Fatal(err)
	}
	return "app=" + name
}

// daemonSet creates a DaemonSet on every node (host network, tolerating every taint), as a
// node agent would run: drains leave its pods alone and scale-down ignores them.
func (w *world) daemonSet(name string) {
	w.t.Helper()
	labels := map[string]string{"app": name}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					HostNetwork: true, Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					Containers: []corev1.Container{{Name: "agent", Image: "registry.k8s.io/pause:3.10",
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m")}}}},
				},
			},
		},
	}
	if _, err := w.cs.AppsV1().DaemonSets(ns).Create(w.ctx, ds, metav1.CreateOptions{}); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) budget(name, selector string, maxUnavailable int32) {
	w.t.Helper()
	sel, err := metav1.ParseToLabelSelector(selector)
	if err != nil {
		w.t.Fatal(err)
	}
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.FromInt32(maxUnavailable)), Selector: sel},
	}
	if _, err := w.cs.PolicyV1().PodDisruptionBudgets(ns).Create(w.ctx, pdb, metav1.CreateOptions{}); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) pods(selector string) []corev1.Pod {
	w.t.Helper()
	list, err := w.cs.CoreV1().Pods(ns).List(w.ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		w.t.Fatal(err)
	}
	return list.Items
}

func podReady(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitPodsReady waits until n pods of the selector are Running and Ready (none deleting) and
// returns them.
func (w *world) waitPodsReady(selector string, n int, timeout time.Duration) []corev1.Pod {
	w.t.Helper()
	var ready []corev1.Pod
	eventually.Explained(w.t, timeout, fmt.Sprintf("%d Ready pods %s", n, selector), func() (bool, string) {
		ready = ready[:0]
		var states []string
		for _, p := range w.pods(selector) {
			if podReady(&p) {
				ready = append(ready, p)
			}
			states = append(states, fmt.Sprintf("%s:%s@%s", p.Name, p.Status.Phase, p.Spec.NodeName))
		}
		return len(ready) == n && len(states) == n, strings.Join(states, " ")
	})
	return ready
}

// machines returns the machines of a pool.
func (w *world) machines(pool string) []v1alpha1.Machine {
	w.t.Helper()
	var list v1alpha1.MachineList
	if err := w.c.List(w.ctx, &list, client.InNamespace(ns), client.MatchingLabels{"pool": pool}); err != nil {
		w.t.Fatal(err)
	}
	return list.Items
}

// waitMachinesRunning waits until the pool has exactly n machines, all Running, and returns them.
func (w *world) waitMachinesRunning(pool string, n int, timeout time.Duration) []v1alpha1.Machine {
	w.t.Helper()
	var ms []v1alpha1.Machine
	eventually.Explained(w.t, timeout, fmt.Sprintf("%d Running machines in pool %s", n, pool), func() (bool, string) {
		ms = w.machines(pool)
		running := 0
		var states []string
		for _, m := range ms {
			if m.DeletionTimestamp == nil && m.Status.CurrentStatus.Phase == v1alpha1.MachineRunning {
				running++
			}
			states = append(states, fmt.Sprintf("%s:%s", m.Name, m.Status.CurrentStatus.Phase))
		}
		return running == n && len(ms) == n, strings.Join(states, " ")
	})
	return ms
}

// machineEvents returns the reasons of the events about a machine.
func (w *world) machineEvents(name string) []string {
	w.t.Helper()
	list, err := w.cs.CoreV1().Events(ns).List(w.ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Machine,involvedObject.name=" + name})
	if err != nil {
		w.t.Fatal(err)
	}
	var reasons []string
	for _, e := range list.Items {
		reasons = append(reasons, e.Reason)
	}
	return reasons
}

// assertDrainedGracefully fails unless each machine's node was drained without force.
func (w *world) assertDrainedGracefully(machines []string) {
	w.t.Helper()
	for _, m := range machines {
		var reasons []string
		eventually.Explained(w.t, 30*time.Second, "drain event of "+m, func() (bool, string) {
			reasons = w.machineEvents(m)
			return slices.Contains(reasons, "Drained") || slices.Contains(reasons, "ForceDrain"), strings.Join(reasons, ",")
		})
		if slices.Contains(reasons, "ForceDrain") || slices.Contains(reasons, "ForceDrainIncomplete") || !slices.Contains(reasons, "Drained") {
			w.t.Errorf("machine %s was not drained gracefully: events %v", m, reasons)
		}
	}
}

func clientKey(name string) client.ObjectKey { return client.ObjectKey{Namespace: ns, Name: name} }

func (w *world) nodeGone(name string) bool {
	_, err := w.cs.CoreV1().Nodes().Get(w.ctx, name, metav1.GetOptions{})
	return apierrors.IsNotFound(err)
}
