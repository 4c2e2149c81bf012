package machine_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/drivertest/memdriver"
	"github.com/machinist-io/machinist/harness/ctrltest"
	"github.com/machinist-io/machinist/internal/eventually"
)

func memSpec(e *ctrltest.Env) map[string]string {
	return map[string]string{"cluster": e.NS, "role": "worker"}
}

func TestCreateAndAdoptWithoutTarget(t *testing.T) {
	e := ctrltest.NewEnv(t)
	cloud := memdriver.NewCloud()
	e.Drivers.Set(memdriver.ProviderName, memdriver.New(cloud))
	e.Secret("userdata", map[string]string{"userData": "name=<<MACHINE_NAME>> enc=%3C%3CMACHINE_NAME%3E%3E"})
	e.Class("mem", "mem", memSpec(e), "userdata")
	e.StartControllers(ctrltest.FastOptions(), false, nil)

	name := e.Name("m1")
	e.Machine(name, "mem")
	m := e.WaitPhase(name, v1alpha1.MachineAvailable, 30*time.Second)

	vms := cloud.VMs()
	if len(vms) != 1 || vms[0].MachineName != name {
		t.Fatalf("cloud holds %+v, want one VM for %s", vms, name)
	}
	if m.Spec.ProviderID != vms[0].ProviderID() {
		t.Fatalf("providerID %q, want the VM's %q", m.Spec.ProviderID, vms[0].ProviderID())
	}
	if want := "name=" + name + " enc=" + name; vms[0].UserData != want {
		t.Fatalf("userData the driver got = %q, want %q", vms[0].UserData, want)
	}
	if m.Annotations[v1alpha1.AnnotationMachinePriority] != "3" {
		t.Fatalf("priority annotation = %q, want the default 3", m.Annotations[v1alpha1.AnnotationMachinePriority])
	}
	if !controllerutil.ContainsFinalizer(m, v1alpha1.FinalizerMachineControllerManager) {
		t.Fatalf("machine lacks the finalizer: %v", m.Finalizers)
	}
	if _, hasNode := m.Labels[v1alpha1.LabelNode]; hasNode {
		t.Fatalf("without a target cluster the machine must not carry a node label: %v", m.Labels)
	}
	hostname := false
	for _, a := range m.Status.Addresses {
		hostname = hostname || (a.Type == corev1.NodeHostName && a.Address == name)
	}
	if !hostname || len(m.Status.Addresses) < 2 {
		t.Fatalf("addresses = %v, want the driver's plus the hostname", m.Status.Addresses)
	}
	lo := m.Status.LastOperation
	if lo.Type != v1alpha1.MachineOperationCreate || lo.State != v1alpha1.MachineStateSuccessful || lo.ErrorCode != "" {
		t.Fatalf("lastOperation = %+v", lo)
	}
	eventually.True(t, 10*time.Second, "Created event", func() bool { return slices.Contains(e.EventReasons(name), "Created") })

	// A VM that exists already (a lost create response, a restarted controller) is adopted.
	adopt := e.Name("m2")
	existing := cloud.Add(memdriver.VM{MachineName: adopt, Cluster: e.NS, Role: "worker", ClassName: "mem"})
	creates := cloud.Calls(memdriver.MethodCreate)
	e.Machine(adopt, "mem")
	m2 := e.WaitPhase(adopt, v1alpha1.MachineAvailable, 30*time.Second)
	if m2.Spec.ProviderID != existing.ProviderID() {
		t.Fatalf("adopted providerID %q, want %q", m2.Spec.ProviderID, existing.ProviderID())
	}
	if cloud.Count(adopt) != 1 || cloud.Calls(memdriver.MethodCreate) != creates {
		t.Fatalf("adopting made a VM: %d VMs, %d creates (was %d)", cloud.Count(adopt), cloud.Calls(memdriver.MethodCreate), creates)
	}
	eventually.True(t, 10*time.Second, "Adopted event", func() bool { return slices.Contains(e.EventReasons(adopt), "Adopted") })

	e.DeleteMachine(name)
	e.WaitGone(name, 30*time.Second)
	if cloud.Count(name) != 0 {
		t.Fatalf("VM of deleted machine still exists")
	}
}

func TestJoinWithBootstrapTokenAndDelete(t *testing.T) {
	e := ctrltest.NewEnv(t)
	ctx := context.Background()
	cloud := memdriver.NewCloud()
	e.Drivers.Set(memdriver.ProviderName, memdriver.New(cloud))
	e.Secret("userdata", map[string]string{"userData": "token=<<BOOTSTRAP_TOKEN>> url=%3C%3CBOOTSTRAP_TOKEN%3E%3E name=<<MACHINE_NAME>>"})
	e.Class("mem", "mem", memSpec(e), "userdata")
	opts := ctrltest.FastOptions()
	opts.BootstrapTokenAuthExtraGroups = "system:bootstrappers:machinist"
	e.StartControllers(opts, true, nil)

	name := e.Name("join")
	e.Machine(name, "mem", func(m *v1alpha1.Machine) {
		m.Annotations = map[string]string{v1alpha1.AnnotationEffectiveCreationTimeout: "45m"}
		m.Spec.NodeTemplateSpec.Labels = map[string]string{"pool": "a"}
		m.Spec.NodeTemplateSpec.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "x", Effect: corev1.TaintEffectNoSchedule}}
	})
	m := e.WaitPhase(name, v1alpha1.MachinePending, 30*time.Second)
	if m.Labels[v1alpha1.LabelNode] != name || !m.Status.CurrentStatus.TimeoutActive {
		t.Fatalf("pending machine: %s", ctrltest.Describe(m))
	}

	// The token: kube-system/bootstrap-token-<id>, expiring with the effective creation timeout.
	id := tokenID(name)
	tok, err := e.CS.CoreV1().Secrets("kube-system").Get(ctx, "bootstrap-token-"+id, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("bootstrap token secret: %v", err)
	}
	if tok.Type != "bootstrap.kubernetes.io/token" || string(tok.Data["token-id"]) != id || len(tok.Data["token-secret"]) != 16 {
		t.Fatalf("token secret %s: type %s data keys %v", tok.Name, tok.Type, keys(tok.Data))
	}
	if string(tok.Data["auth-extra-groups"]) != "system:bootstrappers:machinist" {
		t.Fatalf("auth-extra-groups = %q", tok.Data["auth-extra-groups"])
	}
	exp, err := time.Parse(time.RFC3339, string(tok.Data["expiration"]))
	if err != nil {
		t.Fatal(err)
	}
	if want := m.CreationTimestamp.Add(45 * time.Minute); exp.Sub(want).Abs() > time.Second {
		t.Fatalf("token expires %s, want creation + 45m = %s", exp, want)
	}
	token := id + "." + string(tok.Data["token-secret"])
	vms := cloud.VMs()
	if want := "token=" + token + " url=" + token + " name=" + name; len(vms) != 1 || vms[0].UserData != want {
		t.Fatalf("userData = %q, want %q", vms[0].UserData, want)
	}

	// The node joins: Running, token gone, node synced.
	e.ReadyNode(name, m.Spec.ProviderID, corev1.ConditionTrue)
	m = e.WaitPhase(name, v1alpha1.MachineRunning, 30*time.Second)
	if !strings.Contains(m.Status.LastOperation.Description, "successfully joined the cluster") || m.Status.CurrentStatus.TimeoutActive {
		t.Fatalf("running machine: %s", ctrltest.Describe(m))
	}
	if m.Annotations[v1alpha1.AnnotationMachineJoinDuration] == "" {
		t.Fatalf("no join duration annotation: %v", m.Annotations)
	}
	eventually.True(t, 10*time.Second, "token deleted", func() bool {
		_, err := e.CS.CoreV1().Secrets("kube-system").Get(ctx, "bootstrap-token-"+id, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	node := waitNode(t, e, name, func(n *corev1.Node) bool {
		return n.Labels[v1alpha1.LabelNodeMachineName] == name && n.Labels["pool"] == "a" && hasTaint(n, "dedicated") &&
			controllerutil.ContainsFinalizer(n, v1alpha1.FinalizerNode)
	})
	if n := len(node.Status.Conditions); n == 0 || len(m.Status.Conditions) != n {
		t.Fatalf("node conditions not copied to the machine: %v", m.Status.Conditions)
	}

	// A template change is synced, a removed entry removed, other entries kept.
	patchNode(t, e, name, func(n *corev1.Node) { n.Labels["someone-else"] = "keep" })
	// The controller writes the machine's status meanwhile: retry on a conflict, as kubectl
	// edit does.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := e.Get(name)
		cur.Spec.NodeTemplateSpec.Labels = map[string]string{"pool": "b"}
		cur.Spec.NodeTemplateSpec.Spec.Taints = nil
		return e.C.Update(ctx, cur)
	}); err != nil {
		t.Fatal(err)
	}
	waitNode(t, e, name, func(n *corev1.Node) bool {
		return n.Labels["pool"] == "b" && !hasTaint(n, "dedicated") && hasTaint(n, "node.kubernetes.io/not-ready") && n.Labels["someone-else"] == "keep"
	})

	// Delete: node drained (empty), VM, node and machine gone.
	e.DeleteMachine(name)
	e.WaitGone(name, 30*time.Second)
	if cloud.Count(name) != 0 {
		t.Fatal("VM left behind")
	}
	eventually.True(t, 10*time.Second, "node deleted", func() bool {
		_, err := e.CS.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}

func TestClassAndSecretFinalizers(t *testing.T) {
	e := ctrltest.NewEnv(t)
	ctx := context.Background()
	cloud := memdriver.NewCloud()
	e.Drivers.Set(memdriver.ProviderName, memdriver.New(cloud))
	e.Secret("creds", map[string]string{"userData": "x"})
	e.Class("mem", "mem", memSpec(e), "creds")
	e.StartControllers(ctrltest.FastOptions(), false, nil)
	name := e.Name("m")
	e.Machine(name, "mem")
	e.WaitPhase(name, v1alpha1.MachineAvailable, 30*time.Second)

	class := &v1alpha1.MachineClass{}
	key := client.ObjectKey{Namespace: e.NS, Name: "mem"}
	eventually.True(t, 10*time.Second, "class and secret finalizers", func() bool {
		s := &corev1.Secret{}
		return e.C.Get(ctx, key, class) == nil && controllerutil.ContainsFinalizer(class, v1alpha1.FinalizerMachineControllerManager) &&
			e.C.Get(ctx, client.ObjectKey{Namespace: e.NS, Name: "creds"}, s) == nil && controllerutil.ContainsFinalizer(s, v1alpha1.FinalizerSecret)
	})
	// Deleting the class waits for its machine.
	if err := e.C.Delete(ctx, class); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if err := e.C.Get(ctx, key, class); err != nil {
		t.Fatalf("class in use was deleted: %v", err)
	}
	e.DeleteMachine(name)
	e.WaitGone(name, 30*time.Second)
	eventually.True(t, 10*time.Second, "class gone", func() bool { return apierrors.IsNotFound(e.C.Get(ctx, key, class)) })
	eventually.True(t, 10*time.Second, "secret finalizer removed", func() bool {
		s := &corev1.Secret{}
		return e.C.Get(ctx, client.ObjectKey{Namespace: e.NS, Name: "creds"}, s) == nil && !controllerutil.ContainsFinalizer(s, v1alpha1.FinalizerSecret)
	})
}

func tokenID(machineName string) string {
	const hexdigits = "0123456789abcdef"
	b := []byte(machineName)
	b = b[len(b)-5:]
	out := make([]byte, 0, 10)
	for _, c := range b {
		out = append(out, hexdigits[c>>4], hexdigits[c&15])
	}
	return string(out[:6])
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func waitNode(t *testing.T, e *ctrltest.Env, name string, cond func(*corev1.Node) bool) *corev1.Node {
	t.Helper()
	var n *corev1.Node
	eventually.Explained(t, 20*time.Second, "node "+name+" in the expected state", func() (bool, string) {
		var err error
		n, err = e.CS.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return cond(n), fmt.Sprintf("labels %v, annotations %v, taints %v, finalizers %v", n.Labels, n.Annotations, n.Spec.Taints, n.Finalizers)
	})
	return n
}

func patchNode(t *testing.T, e *ctrltest.Env, name string, mutate func(*corev1.Node)) {
	t.Helper()
	for range 10 {
		n, err := e.CS.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		mutate(n)
		if _, err = e.CS.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err == nil {
			return
		} else if !apierrors.IsConflict(err) {
			t.Fatal(err)
		}
	}
	t.Fatal("could not update node")
}

func hasTaint(n *corev1.Node, key string) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}
