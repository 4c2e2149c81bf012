//go:build !slim

package run

import (
	"context"
	"fmt"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	compute "google.golang.org/api/compute/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/harness/machinetest"
	"github.com/machinist-io/machinist/internal/eventually"
	"github.com/machinist-io/machinist/providers/gcp"
	"github.com/machinist-io/machinist/providers/gcp/fakegcp"
)

// TestRunGCPMachineDeployment: a MachineDeployment of three machines of the fake cloud's sample
// class (kubernetes/samples/fakecloud/gcp-machineclass.yaml) through the real `machinist run`
// and the compiled-in GCP provider, against the fake Compute Engine over HTTPS, reaches three
// Running machines (each instance's kubelet, played by the test, registers its node once the
// machine has recorded the instance); the orphan collector deletes an instance of the class no
// machine owns and leaves a same-named instance without the class's tags alone, listing the zone
// without a tag filter (the fake refuses one as Compute Engine does); and scaled to zero leaves
// nothing of the deployment: no machine, node, instance or disk. Every request and answer kept
// to the Compute contract.
func TestRunGCPMachineDeployment(t *testing.T) {
	e := newE2E(t)
	cloud := fakegcp.New(fakegcp.Options{})
	if err := cloud.ContractError(); err != nil {
		t.Fatalf("the fake cannot check requests against the Compute contract: %v", err)
	}
	cloud.SetOperationDelay(50 * time.Millisecond)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := cloud.Serve(l, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	key := cloud.SeedDemo(fakegcp.TokenURL(srv.URL))
	e.startRun("--machine-safety-orphan-vms-period", "1s", "--machine-safety-orphan-vms-grace-period", "1s")

	ctx := context.Background()
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "fakegcp"},
		Data: map[string][]byte{
			gcp.KeyServiceAccountJSON: key,
			gcp.KeyComputeEndpoint:    []byte(fakegcp.ComputeEndpoint(srv.URL)),
			gcp.KeyCACert:             srv.CACert,
			gcp.KeyUserData:           []byte(fakeUserData),
		},
	}
	if err := e.c.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(repoPath(t, "kubernetes/samples/fakecloud/gcp-machineclass.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	class := &v1alpha1.MachineClass{}
	if err := yaml.UnmarshalStrict(raw, class); err != nil {
		t.Fatal(err)
	}
	class.SecretRef = &corev1.SecretReference{Namespace: "default", Name: secret.Name}
	if err := e.c.Create(ctx, class); err != nil {
		t.Fatal(err)
	}
	kubelets := e.gceKubelets(cloud)
	d := machinetest.Deployment("default", "gcp", class.Name, 3, machinetest.Pool("gcp"), 1, 0)
	if err := e.c.Create(ctx, d); err != nil {
		t.Fatal(err)
	}
	e.waitRunning("default", 3, 2*time.Minute, nil)

	var names []string
	for _, m := range e.machines("default") {
		in, ok := cloud.Instance(fakegcp.DemoZone, m.Name)
		if !ok || in.Status != "RUNNING" {
			t.Errorf("machine %s: instance %+v", m.Name, in)
			continue
		}
		if want := "gce:///" + fakegcp.DefaultProject + "/" + fakegcp.DemoZone + "/" + m.Name; m.Spec.ProviderID != want {
			t.Errorf("machine %s: providerID %q, want %q", m.Name, m.Spec.ProviderID, want)
		}
		if got := *in.Metadata.Items[0].Value; in.Metadata.Items[0].Key != "user-data" || got != fakeUserData {
			t.Errorf("instance %s: metadata %s=%q, want the secret's userData", m.Name, in.Metadata.Items[0].Key, got)
		}
		names = append(names, m.Name)
	}
	if n := len(cloud.Instances()); n != 3 {
		t.Errorf("the fake holds %d instances, want 3", n)
	}
	if n := len(cloud.Requests.For(fakegcp.OpToken)); n != 1 {
		t.Errorf("%d token requests for the whole rollout, want 1: the client is reused", n)
	}

	// An instance of the class without a machine is an orphan; one without the class's tags is
	// someone else's.
	tags := []string{"demo", "kubernetes-io-cluster-demo", "kubernetes-io-role-node"}
	cloud.PutInstance(fakegcp.DemoZone, &compute.Instance{Name: "gcp-orphan", Tags: &compute.Tags{Items: tags}})
	cloud.PutInstance(fakegcp.DemoZone, &compute.Instance{Name: "gcp-stranger"})
	eventually.Explained(e.t, time.Minute, "the orphan collected", func() (bool, string) {
		_, ok := cloud.Instance(fakegcp.DemoZone, "gcp-orphan")
		return !ok, "gcp-orphan still exists"
	})
	lists := cloud.Requests.For(fakegcp.OpListInstances)
	for _, r := range lists {
		if strings.Contains(r.Query, "filter") || r.Status != 200 {
			t.Errorf("list request ?%s answered %d, want 200 and no filter", r.Query, r.Status)
		}
	}
	if len(lists) == 0 {
		t.Error("the orphan collector listed nothing")
	}

	e.updateDeployment("default", "gcp", func(d *v1alpha1.MachineDeployment) { d.Spec.Replicas = 0 })
	eventually.Explained(e.t, 2*time.Minute, "nothing left", func() (bool, string) {
		var nodes corev1.NodeList
		if err := e.c.List(ctx, &nodes); err != nil {
			return false, err.Error()
		}
		left := len(e.machines("default")) + len(nodes.Items) + len(cloud.Instances()) - 1 + len(cloud.Disks())
		return left == 0, fmt.Sprintf("machines %d, nodes %d, instances %d (one is gcp-stranger), disks %d",
			len(e.machines("default")), len(nodes.Items), len(cloud.Instances()), len(cloud.Disks()))
	})
	if _, ok := cloud.Instance(fakegcp.DemoZone, "gcp-stranger"); !ok {
		t.Error("the instance without the class's tags was deleted")
	}
	if v := cloud.ContractViolations(); len(v) > 0 {
		t.Errorf("fakegcp broke the Compute contract: %v", v)
	}
	sort.Strings(names)
	if registered := kubelets.registered(); strings.Join(registered, ",") != strings.Join(names, ",") {
		t.Errorf("nodes registered for %v, machines were %v", registered, names)
	}
}

// gceKubelets plays the kubelet of each instance of the fake: once a machine has recorded its
// instance (spec.providerID) and the instance runs, it registers the instance's node, Ready, with
// the ProviderID the GCE cloud provider gives nodes (gce://project/zone/name). It registers each
// node once, so a node the controller deletes stays deleted.
type gceKubelets struct {
	mu   sync.Mutex
	done map[string]bool
}

func (k *gceKubelets) registered() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []string
	for n := range k.done {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func (e *e2e) gceKubelets(cloud *fakegcp.Cloud) *gceKubelets {
	k := &gceKubelets{done: map[string]bool{}}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		_ = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			var list v1alpha1.MachineList
			if err := e.c.List(ctx, &list, client.InNamespace("default")); err != nil {
				return false, nil
			}
			for _, m := range list.Items {
				if m.Spec.ProviderID == "" || k.isDone(m.Name) {
					continue
				}
				in, ok := cloud.Instance(fakegcp.DemoZone, m.Name)
				if !ok || in.Status != "RUNNING" {
					continue
				}
				node := &corev1.Node{
					ObjectMeta: metav1.ObjectMeta{Name: in.Name},
					Spec:       corev1.NodeSpec{ProviderID: "gce://" + fakegcp.DefaultProject + "/" + fakegcp.DemoZone + "/" + in.Name},
				}
				err := e.c.Create(ctx, node)
				if apierrors.IsAlreadyExists(err) {
					err = e.c.Get(ctx, client.ObjectKeyFromObject(node), node)
				}
				if err != nil {
					continue
				}
				now := metav1.Now()
				node.Status = corev1.NodeStatus{
					Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now}},
					Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: in.NetworkInterfaces[0].NetworkIP}, {Type: corev1.NodeHostName, Address: in.Name}},
				}
				if err := e.c.Status().Update(ctx, node); err != nil {
					continue
				}
				k.mu.Lock()
				k.done[m.Name] = true
				k.mu.Unlock()
			}
			return false, nil
		})
	}()
	e.t.Cleanup(func() { cancel(); <-stopped })
	return k
}

func (k *gceKubelets) isDone(name string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.done[name]
}
