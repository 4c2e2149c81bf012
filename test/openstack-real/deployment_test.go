package openstackreal

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/fallback"
	"github.com/machinist-io/machinist/core/controller/standby"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/harness/localcontrolplane"
	"github.com/machinist-io/machinist/harness/machinetest"
	"github.com/machinist-io/machinist/harness/testenv"
	"github.com/machinist-io/machinist/providers/openstack"
)

const (
	ns = "default"
	// sampleClusterKey is the cluster tag of kubernetes/samples/openstack's class.
	sampleClusterKey = "kubernetes.io-cluster-my-cluster"
	// quotaClusterKey tags the machines of the quota deployment, on either of its classes.
	quotaClusterKey = "kubernetes.io-cluster-shoot--machinist--quota"
)

// TestMachineDeployments runs the real `machinist run` on a real kube-apiserver against the real
// cloud: the repository's OpenStack sample (kubernetes/samples/openstack, adapted to this cloud)
// as a MachineDeployment of 3 reaching Running and scaling to 0 with no server, port or volume
// left; and a deployment whose class sits in a project with a quota of 2 instances, whose third
// machine Nova refuses with its quota message, so it falls back to a second class.
func TestMachineDeployments(t *testing.T) {
	need(t)
	t.Parallel()
	env := testenv.Start(t)
	c := env.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()

	applySample(t, ctx, c)
	quotaClass, fallbackClass := quotaClasses(t, ctx, c)
	sample := readSampleDeployment(t)
	create(t, ctx, c, sample)
	// The quota deployment starts at its project's quota (2) and grows to 3 once both run: three
	// creates at once race Nova's quota, and Nova may refuse all three (its conductor rechecks the
	// quota after the instances exist, and each build then counts the others: "already used 2 of
	// 2"), which falls all of them back. Growing by one makes the refusal the third's alone.
	md := machinetest.Deployment(ns, "real-quota", quotaClass, 2, machinetest.Pool("real-quota"), 1, 0)
	md.Annotations = map[string]string{fallback.AnnotationClasses: fallbackClass}
	create(t, ctx, c, md)

	startRun(t, env.KubeconfigPath)
	go standInKubelet(ctx, t, c)

	running := func(deployment string, want int) func(context.Context) (bool, string) {
		return func(ctx context.Context) (bool, string) {
			ms, err := machinesOf(ctx, c, deployment)
			if err != nil {
				return false, err.Error()
			}
			n := 0
			var states []string
			for _, m := range ms {
				if m.Status.CurrentStatus.Phase == v1alpha1.MachineRunning {
					n++
				}
				states = append(states, fmt.Sprintf("%s on %s: %s %s", m.Name, m.Spec.Class.Name, m.Status.CurrentStatus.Phase, m.Status.LastOperation.Description))
			}
			return n == want && len(ms) == want, strings.Join(states, "; ")
		}
	}
	eventually(t, 12*time.Minute, "the sample's 3 machines are Running", running(sample.Name, 3))
	eventually(t, 8*time.Minute, "the quota deployment's 2 machines are Running", running(md.Name, 2))
	scale(t, ctx, c, md.Name, 3)
	eventually(t, 8*time.Minute, "the quota deployment's 3 machines are Running", running(md.Name, 3))

	// The sample: three ACTIVE servers with the class's tags, a bound port and a root volume each.
	main := userClients(t, osr(t, "PROJECT"))
	left, err := main.leftovers(ctx, sampleClusterKey)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for _, l := range left {
		counts[strings.Fields(l)[0]]++
	}
	if counts["server"] != 3 || counts["port"] != 3 || counts["volume"] != 3 {
		t.Errorf("the sample's deployment has %v in the cloud, want 3 servers, 3 ports, 3 volumes: %v", counts, left)
	}

	// The quota deployment: two machines on the class of the small project, one on the fallback,
	// which says why with Nova's quota message.
	ms, err := machinesOf(ctx, c, md.Name)
	if err != nil {
		t.Fatal(err)
	}
	onClass := map[string]int{}
	for _, m := range ms {
		onClass[m.Spec.Class.Name]++
	}
	if onClass[quotaClass] != 2 || onClass[fallbackClass] != 1 {
		t.Errorf("machines per class %v, want 2 on %s (its project's quota) and 1 on %s", onClass, quotaClass, fallbackClass)
	}
	events := &corev1.EventList{}
	if err := c.List(ctx, events, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	quotaMsg := ""
	for _, e := range events.Items {
		if e.Reason == "CapacityFallback" && strings.Contains(e.Message, "Quota exceeded for instances") {
			quotaMsg = e.Message
		}
	}
	if quotaMsg == "" {
		t.Errorf("no CapacityFallback event carries Nova's quota message")
	} else {
		t.Logf("fallback event: %s", quotaMsg)
	}
	// The same refusal straight from the driver: ResourceExhausted with Nova's message.
	checkQuotaRefusal(t, ctx, quotaClass, c)

	// Scale both to 0: every machine goes, and with it every server, port and volume.
	for _, name := range []string{sample.Name, md.Name} {
		scale(t, ctx, c, name, 0)
	}
	eventually(t, 10*time.Minute, "every machine is gone", func(ctx context.Context) (bool, string) {
		list := &v1alpha1.MachineList{}
		if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		var names []string
		for _, m := range list.Items {
			names = append(names, m.Name+" "+string(m.Status.CurrentStatus.Phase))
		}
		return len(list.Items) == 0, strings.Join(names, ", ")
	})
	small := userClients(t, osr(t, "QUOTA_PROJECT"))
	for name, cl := range map[string]*clients{"machinist": main, "machinist-quota": small} {
		// Only this test's clusters: the other tests' machines share the projects.
		left, err := cl.leftovers(ctx, sampleClusterKey, quotaClusterKey)
		if err != nil || len(left) > 0 {
			t.Errorf("after scaling to 0 project %s holds %v (%v)", name, left, err)
		}
	}
}

// applySample creates the repository's OpenStack sample secrets and class, adapted to this
// cloud: credentials, region, zone, network, subnet, key pair and security group.
func applySample(t *testing.T, ctx context.Context, c client.Client) {
	t.Helper()
	root, err := localcontrolplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "kubernetes/samples/openstack")
	var secrets []corev1.Secret
	for _, doc := range splitYAML(t, filepath.Join(dir, "secret.yaml")) {
		s := corev1.Secret{}
		if err := yaml.UnmarshalStrict(doc, &s); err != nil {
			t.Fatal(err)
		}
		secrets = append(secrets, s)
	}
	for _, s := range secrets {
		if _, ok := s.StringData[openstack.KeyAuthURL]; ok {
			s.StringData = map[string]string{
				openstack.KeyAuthURL: authURL(t), openstack.KeyDomainName: osr(t, "DOMAIN"), openstack.KeyTenantName: osr(t, "PROJECT"),
				openstack.KeyApplicationCredentialID: osr(t, "APPCRED_ID"), openstack.KeyApplicationCredentialSecret: osr(t, "APPCRED_SECRET"),
			}
		}
		create(t, ctx, c, &s)
	}
	class := &v1alpha1.MachineClass{}
	raw, err := os.ReadFile(filepath.Join(dir, "machineclass.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(raw, class); err != nil {
		t.Fatal(err)
	}
	var cfg openstack.MachineProviderConfig
	if err := json.Unmarshal(class.ProviderSpec.Raw, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg.Spec.Region, cfg.Spec.AvailabilityZone = osr(t, "REGION"), osr(t, "ZONE")
	cfg.Spec.NetworkID, cfg.Spec.SubnetIDs = osr(t, "NETWORK_ID"), []string{osr(t, "SUBNET_ID")}
	cfg.Spec.KeyName, cfg.Spec.SecurityGroups = osr(t, "KEYPAIR"), []string{osr(t, "SECGROUP")}
	if class.ProviderSpec.Raw, err = json.Marshal(cfg); err != nil {
		t.Fatal(err)
	}
	class.NodeTemplate.Region, class.NodeTemplate.Zone = osr(t, "REGION"), osr(t, "ZONE")
	create(t, ctx, c, class)
}

func readSampleDeployment(t *testing.T) *v1alpha1.MachineDeployment {
	t.Helper()
	root, err := localcontrolplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "kubernetes/samples/openstack/machinedeployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	md := &v1alpha1.MachineDeployment{}
	if err := yaml.UnmarshalStrict(raw, md); err != nil {
		t.Fatal(err)
	}
	if md.Spec.Replicas != 3 {
		t.Fatalf("the sample deployment has %d replicas, this test expects 3", md.Spec.Replicas)
	}
	return md
}

// quotaClasses creates a class in the project whose instance quota is 2 and a fallback class in
// the main project, sharing one secret each.
func quotaClasses(t *testing.T, ctx context.Context, c client.Client) (quota, fallbackName string) {
	t.Helper()
	small := passwordSecret(t, osr(t, "QUOTA_PROJECT"))
	small.Name = "real-quota"
	create(t, ctx, c, small)
	mainSecret := passwordSecret(t, osr(t, "PROJECT"))
	mainSecret.Name = "real-fallback"
	create(t, ctx, c, mainSecret)

	spec := simpleSpec(t)
	spec.Tags = map[string]string{quotaClusterKey: "1", roleKey: "1"}
	spec.NetworkID = osr(t, "QUOTA_NETWORK_ID")
	qc := classOf(t, "real-quota", spec)
	qc.SecretRef = &corev1.SecretReference{Name: small.Name, Namespace: ns}
	create(t, ctx, c, qc)

	fspec := simpleSpec(t)
	fspec.Tags = spec.Tags
	fc := classOf(t, "real-fallback", fspec)
	fc.SecretRef = &corev1.SecretReference{Name: mainSecret.Name, Namespace: ns}
	create(t, ctx, c, fc)
	return qc.Name, fc.Name
}

// checkQuotaRefusal asks the driver for one more server in the full project.
func checkQuotaRefusal(t *testing.T, ctx context.Context, class string, c client.Client) {
	t.Helper()
	mc := &v1alpha1.MachineClass{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: class}, mc); err != nil {
		t.Fatal(err)
	}
	d, _ := newDriver(t)
	m := &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "real-quota-extra", Namespace: ns}}
	secret := passwordSecret(t, osr(t, "QUOTA_PROJECT"))
	created, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: m, MachineClass: mc, Secret: secret})
	t.Logf("CreateMachine beyond the quota: %v", err)
	if err == nil {
		// Not refused: take the server away again, so that the leak check speaks of this test only.
		m.Spec.ProviderID = created.ProviderID
		_, derr := d.DeleteMachine(ctx, &driver.DeleteMachineRequest{Machine: m, MachineClass: mc, Secret: secret})
		if derr != nil {
			t.Errorf("delete the server Nova should have refused: %v", derr)
		}
	}
	if driver.CodeOf(err) != driver.ResourceExhausted || !strings.Contains(fmt.Sprint(err), "Quota exceeded for instances") {
		t.Errorf("CreateMachine beyond the project's quota: %v; want ResourceExhausted with Nova's quota message", err)
	}
}

// scale sets a deployment's replicas, reading it again when its update conflicts with the
// controllers' status writes.
func scale(t *testing.T, ctx context.Context, c client.Client, name string, replicas int32) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d := &v1alpha1.MachineDeployment{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, d); err != nil {
			return err
		}
		d.Spec.Replicas = replicas
		return c.Update(ctx, d)
	})
	if err != nil {
		t.Fatalf("scale MachineDeployment %s to %d: %v", name, replicas, err)
	}
}

func splitYAML(t *testing.T, path string) [][]byte {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, doc := range strings.Split(string(raw), "\n---") {
		if strings.TrimSpace(doc) != "" {
			out = append(out, []byte(doc))
		}
	}
	return out
}

func create(t *testing.T, ctx context.Context, c client.Client, obj client.Object) {
	t.Helper()
	if err := c.Create(ctx, obj); err != nil {
		t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
	}
}

// machinesOf lists the machines of a deployment (by its pool label), sorted by name.
func machinesOf(ctx context.Context, c client.Client, deployment string) ([]v1alpha1.Machine, error) {
	md := &v1alpha1.MachineDeployment{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: deployment}, md); err != nil {
		return nil, err
	}
	list := &v1alpha1.MachineList{}
	if err := c.List(ctx, list, client.InNamespace(ns), client.MatchingLabels(md.Spec.Selector.MatchLabels)); err != nil {
		return nil, err
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	return list.Items, nil
}

// startRun runs `machinist run` (this provider compiled in) until the test ends.
func startRun(t *testing.T, kubeconfig string) {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "run.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	cmd := exec.Command(machinistBin, "--v", "1", "run", "--control-kubeconfig", kubeconfig,
		"--state-dir", t.TempDir(), "--address", "127.0.0.1", "--port", strconv.Itoa(port),
		"--machine-creation-timeout", "10m", "--machine-drain-timeout", "1m",
		"--machine-safety-apiserver-statuscheck-period", "30s", "--machine-safety-apiserver-statuscheck-timeout", "30s")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-exited:
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			if len(b) > 60000 {
				b = b[len(b)-60000:]
			}
			t.Logf("machinist run log (end):\n%s", b)
		}
	})
}

// standInKubelet registers a Ready Node for every machine whose server exists (the fake virt
// driver boots nothing a kubelet could run in), as the kubelet of a booted server would: named
// after the machine, with the server's provider ID. A standby machine whose server is stopping
// or stopped gets none (the controller deleted its node, and a stopped server runs no kubelet
// to bring it back). A node whose Ready status could not be
// written (machinist labels new nodes, so the write can conflict) is written again on the next
// pass. It stops when ctx ends.
func standInKubelet(ctx context.Context, t *testing.T, c client.Client) {
	_ = wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		list := &v1alpha1.MachineList{}
		if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
			return false, nil
		}
		for _, m := range list.Items {
			name := m.Labels[v1alpha1.LabelNode]
			st := standby.State(m.Annotations[standby.AnnotationState])
			if name == "" || m.Spec.ProviderID == "" || m.DeletionTimestamp != nil || st == standby.Stopping || st == standby.Stopped {
				continue
			}
			node := &corev1.Node{}
			err := c.Get(ctx, client.ObjectKey{Name: name}, node)
			if apierrors.IsNotFound(err) {
				node = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{ProviderID: m.Spec.ProviderID}}
				err = c.Create(ctx, node)
			}
			if err != nil || node.DeletionTimestamp != nil || machinetest.NodeReady(node) {
				continue
			}
			node.Status.Conditions = []corev1.NodeCondition{{
				Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
				LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(),
			}}
			if err := c.Status().Update(ctx, node); err != nil && !apierrors.IsConflict(err) {
				t.Logf("stand-in kubelet: node %s status: %v", name, err)
			}
		}
		return false, nil
	})
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
