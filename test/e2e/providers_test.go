package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/fallback"
	"github.com/machinist-io/machinist/grpcbridge/autoscaler/clusterautoscaler"
	"github.com/machinist-io/machinist/harness/localcontrolplane"
	"github.com/machinist-io/machinist/internal/eventually"
	"github.com/machinist-io/machinist/providers/azure"
	"github.com/machinist-io/machinist/providers/azure/fakeazure"
	"github.com/machinist-io/machinist/providers/kit/fakekit"
	"github.com/machinist-io/machinist/providers/openstack"
	"github.com/machinist-io/machinist/providers/openstack/fakeopenstack"
)

// fakeUserData is the user data of the fake clouds' Secrets, as `machinist fakecloud` writes it.
const fakeUserData = "#cloud-config\n# machines of a fake cloud boot nothing\n"

// clouds are a fake OpenStack and a fake Azure on loopback next to the e2e cluster, each with
// the Secret and the sample MachineClass of `machinist fakecloud`, and a kubelet stand-in that
// registers a Ready node for every machine whose VM the cloud holds (under the name and
// providerID the provider gave the machine) — what the VM's kubelet would do.
type clouds struct {
	w         *world
	openstack *fakeopenstack.Cloud
	azure     *fakeazure.Cloud
}

func newClouds(w *world) *clouds {
	w.t.Helper()
	cl := &clouds{w: w, openstack: fakeopenstack.New(fakeopenstack.Options{}), azure: fakeazure.New(fakeazure.Options{})}
	fakekit.Start(w.t, cl.openstack)
	cl.azure.SeedDemo()
	cl.azure.SetLROPolls(0) // operations complete at once: the driver polls every few seconds
	srv := fakekit.Start(w.t, cl.azure)

	osData := map[string]string{openstack.KeyUserData: fakeUserData}
	for k, v := range cl.openstack.PasswordSecret() {
		osData[k] = string(v)
	}
	w.create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "fakeopenstack", Namespace: ns}, StringData: osData})
	w.create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "fakeazure", Namespace: ns}, StringData: map[string]string{
		azure.KeyClientID: fakeazure.DemoClientID, azure.KeyClientSecret: fakeazure.DemoClientSecret,
		azure.KeyTenantID: cl.azure.TenantID(), azure.KeySubscriptionID: cl.azure.SubscriptionID(),
		azure.KeyActiveDirectoryAuthorityHost: srv.URL, azure.KeyResourceManagerEndpoint: srv.URL,
		azure.KeyCACert: string(srv.CACert), azure.KeyUserData: fakeUserData,
	}})
	cl.standInKubelet()
	return cl
}

// sampleClass creates kubernetes/samples/fakecloud/<provider>-machineclass.yaml as class name,
// with the node template and price given.
func (cl *clouds) sampleClass(provider, name, price string, cpu, memory string) {
	w := cl.w
	w.t.Helper()
	root, err := localcontrolplane.RepoRoot()
	if err != nil {
		w.t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "kubernetes/samples/fakecloud", provider+"-machineclass.yaml"))
	if err != nil {
		w.t.Fatal(err)
	}
	class := &v1alpha1.MachineClass{}
	if err := yaml.UnmarshalStrict(raw, class); err != nil {
		w.t.Fatal(err)
	}
	class.ObjectMeta = metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: map[string]string{fallback.AnnotationPricePerHour: price}}
	class.SecretRef = &corev1.SecretReference{Name: "fake" + provider, Namespace: ns}
	class.NodeTemplate = &v1alpha1.NodeTemplate{
		Capacity:     corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(memory)},
		InstanceType: provider + "-type", Region: provider + "-region", Zone: provider + "-zone",
	}
	w.create(class)
}

// vmExists reports whether the cloud of a providerID holds its VM (running, not being deleted).
func (cl *clouds) vmExists(providerID string) (known, exists bool) {
	switch {
	case strings.HasPrefix(providerID, "openstack:///"):
		id := providerID[strings.LastIndexByte(providerID, '/')+1:]
		for _, s := range cl.openstack.Servers() {
			if s.ID == id {
				return true, s.Status == "ACTIVE" && s.TaskState != "deleting"
			}
		}
		return true, false
	case strings.HasPrefix(providerID, "azure:///"):
		_, ok := cl.azure.VM("machinist-demo", providerID[strings.LastIndexByte(providerID, '/')+1:])
		return true, ok
	}
	return false, false
}

// standInKubelet keeps a Ready node for every machine of the fake clouds whose VM exists, until
// the test ends. The Machine controller deletes the node of a deleted machine; the stand-in never
// brings back the node of a machine being deleted or of a VM that is gone.
func (cl *clouds) standInKubelet() {
	w := cl.w
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		wait.UntilWithContext(ctx, func(ctx context.Context) {
			var machines v1alpha1.MachineList
			if err := w.c.List(ctx, &machines, client.InNamespace(ns)); err != nil {
				return
			}
			for _, m := range machines.Items {
				name := m.Labels[v1alpha1.LabelNode]
				if m.DeletionTimestamp != nil || name == "" {
					continue
				}
				if known, exists := cl.vmExists(m.Spec.ProviderID); known && exists {
					ensureReadyNode(ctx, w.c, name, m.Spec.ProviderID)
				}
			}
		}, 100*time.Millisecond)
	}()
	w.t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
}

// ensureReadyNode creates the node (labelled with its hostname) unless it exists, and reports
// it Ready.
func ensureReadyNode(ctx context.Context, c client.Client, name, providerID string) {
	node := &corev1.Node{}
	err := c.Get(ctx, client.ObjectKey{Name: name}, node)
	if apierrors.IsNotFound(err) {
		node = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name}}, Spec: corev1.NodeSpec{ProviderID: providerID}}
		if err := c.Create(ctx, node); err != nil {
			return
		}
	} else if err != nil {
		return
	}
	for _, cond := range node.Status.Conditions {
		if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
			return
		}
	}
	now := metav1.Now()
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now}}
	_ = c.Status().Update(ctx, node)
}

// TestAutoscalerServesSeveralProviders: one `machinist autoscaler` serves MachineDeployments of
// the local provider, of OpenStack (the fake Nova) and of Azure (the fake Resource Manager) as
// node groups of one Cluster Autoscaler, through the providers' real SDK code paths. Each group
// scales up and down through the autoscaler; each node resolves to its own group and is priced by
// its own class; a node of another cloud and a node of a MachineDeployment that is no group
// belong to no group (an empty id, Cluster Autoscaler's answer for nodes it must leave alone).
func TestAutoscalerServesSeveralProviders(t *testing.T) {
	w := newWorld(t)
	cl := newClouds(w)
	w.localClass("small")
	w.annotateClass("small", fallback.AnnotationPricePerHour, "0.02")
	cl.sampleClass("openstack", "os-small", "0.05", "1", "2Gi")
	cl.sampleClass("azure", "az-d2s", "0.096", "2", "8Gi")
	groups := map[string]string{ns + ".local-pool": "small", ns + ".os-pool": "os-small", ns + ".az-pool": "az-d2s"}
	for id, class := range groups {
		w.machineDeployment(strings.TrimPrefix(id, ns+"."), class, 0, 0, 2, nil)
	}
	// A deployment that is no node group: its node belongs to none.
	w.machineDeployment("static-pool", "small", 1, 0, 0, nil)
	w.waitMachinesRunning("static-pool", 1, 3*time.Minute)
	scaler := w.startAutoscaler()

	got, err := scaler.NodeGroups()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, g := range got {
		ids = append(ids, g.GetId())
	}
	sort.Strings(ids)
	if want := []string{ns + ".az-pool", ns + ".local-pool", ns + ".os-pool"}; strings.Join(ids, " ") != strings.Join(want, " ") {
		t.Fatalf("node groups %v, want %v", ids, want)
	}

	// Scale every group up by one, at once.
	for id := range groups {
		if err := scaler.IncreaseSize(id, 1); err != nil {
			t.Fatalf("IncreaseSize %s: %v", id, err)
		}
	}
	nodes := map[string]*corev1.Node{} // group -> its node
	for id := range groups {
		pool := strings.TrimPrefix(id, ns+".")
		m := w.waitMachinesRunning(pool, 1, 3*time.Minute)[0]
		eventually.Explained(t, time.Minute, "a Running instance of "+id+" with the node's providerID", func() (bool, string) {
			in, err := scaler.Nodes(id)
			return err == nil && len(in) == 1 && in[0].ID == m.Spec.ProviderID && in[0].Status != nil && in[0].Status.State == clusterautoscaler.InstanceRunning,
				fmt.Sprintf("%+v %v", in, err)
		})
		node, err := w.cs.CoreV1().Nodes().Get(w.ctx, m.Labels[v1alpha1.LabelNode], metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		nodes[id] = node
	}
	if err := scaler.Refresh(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	wantPrice := map[string]float64{ns + ".local-pool": 0.02, ns + ".os-pool": 0.05, ns + ".az-pool": 0.096}
	for id, node := range nodes {
		g, err := scaler.NodeGroupForNode(node)
		if err != nil || g.GetId() != id {
			t.Errorf("node %s (%s) resolved to %v, %v; want group %s", node.Name, node.Spec.ProviderID, g, err, id)
		}
		if p, err := scaler.NodePrice(node, start, start.Add(time.Hour)); err != nil || math.Abs(p-wantPrice[id]) > 1e-9 {
			t.Errorf("price of node %s: %v, %v; want its class's %v", node.Name, p, err, wantPrice[id])
		}
	}
	if !strings.HasPrefix(nodes[ns+".os-pool"].Spec.ProviderID, "openstack:///") || !strings.HasPrefix(nodes[ns+".az-pool"].Spec.ProviderID, "azure:///") {
		t.Fatalf("the clouds' nodes: %s, %s", nodes[ns+".os-pool"].Spec.ProviderID, nodes[ns+".az-pool"].Spec.ProviderID)
	}

	// Nodes the server must leave alone: another cloud's, and one of a deployment that is no group.
	foreign := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gke-node-1", Labels: map[string]string{corev1.LabelHostname: "gke-node-1"}},
		Spec: corev1.NodeSpec{ProviderID: "gce://project/europe-west1-b/gke-node-1"}}
	w.create(foreign)
	static := w.waitMachinesRunning("static-pool", 1, time.Minute)[0]
	staticNode, err := w.cs.CoreV1().Nodes().Get(w.ctx, static.Labels[v1alpha1.LabelNode], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []*corev1.Node{foreign, staticNode} {
		if g, err := scaler.NodeGroupForNode(n); err != nil || g != nil {
			t.Errorf("node %s (%s) resolved to %v, %v; want no group", n.Name, n.Spec.ProviderID, g, err)
		}
		if err := scaler.DeleteNodes(ns+".local-pool", n); err == nil {
			t.Errorf("deleting node %s through a group it is not in succeeded", n.Name)
		}
	}

	// Scale every group down: exactly its node goes, its VM with it.
	for id, node := range nodes {
		if err := scaler.DeleteNodes(id, node); err != nil {
			t.Fatalf("DeleteNodes %s %s: %v", id, node.Name, err)
		}
	}
	for id, node := range nodes {
		pool := strings.TrimPrefix(id, ns+".")
		eventually.Explained(t, 3*time.Minute, "group "+id+" scaled down", func() (bool, string) {
			size, err := scaler.TargetSize(id)
			in, _ := scaler.Nodes(id)
			_, vm := cl.vmExists(node.Spec.ProviderID)
			if err != nil {
				return false, err.Error()
			}
			gone := w.nodeGone(node.Name)
			return size == 0 && len(w.machines(pool)) == 0 && len(in) == 0 && gone && !vm,
				fmt.Sprintf("target %d, machines %d, instances %d, node gone %v, VM %v", size, len(w.machines(pool)), len(in), gone, vm)
		})
	}
	if n := len(w.machines("static-pool")); n != 1 {
		t.Errorf("the deployment that is no group has %d machines, want its 1 untouched", n)
	}
	if _, err := w.cs.CoreV1().Nodes().Get(w.ctx, foreign.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("the foreign node: %v", err)
	}
	if _, err := scaler.NodePrice(foreign, start, start.Add(time.Hour)); err == nil || errors.Is(err, clusterautoscaler.ErrNotImplemented) {
		t.Errorf("price of the foreign node: %v, want NotFound", err)
	}
}

// annotateClass sets an annotation on a MachineClass of the namespace (a merge patch: the
// controllers write the class too).
func (w *world) annotateClass(name, key, value string) {
	w.t.Helper()
	raw, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{key: value}}})
	if err != nil {
		w.t.Fatal(err)
	}
	c := &v1alpha1.MachineClass{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := w.c.Patch(w.ctx, c, client.RawPatch(types.MergePatchType, raw)); err != nil {
		w.t.Fatal(err)
	}
}
