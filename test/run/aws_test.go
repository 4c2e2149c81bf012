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

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/harness/machinetest"
	"github.com/machinist-io/machinist/internal/eventually"
	"github.com/machinist-io/machinist/providers/aws"
	"github.com/machinist-io/machinist/providers/aws/fakeaws"
)

// awsWorld is a fake EC2 on loopback next to the e2e control plane: the sample classes of
// `machinist fakecloud aws` in both of its zones, their secret, and a kubelet stand-in that
// registers a Ready node for every running instance, as the instance's kubelet would (named
// after its private DNS name, with the cloud controller manager's providerID), and removes the
// node of a terminated one.
type awsWorld struct {
	*e2e
	cloud *fakeaws.Cloud
	ns    string
}

func newAWSWorld(t *testing.T) *awsWorld {
	t.Helper()
	e := newE2E(t)
	cloud := fakeaws.New(fakeaws.Options{})
	cloud.SeedDemo()
	// Instances come up pending and run a little later, so machines pass through Pending.
	cloud.SetStartDelay(200 * time.Millisecond)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := cloud.Serve(l, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	w := &awsWorld{e2e: e, cloud: cloud, ns: "shoot--aws"}
	ctx := context.Background()
	if err := e.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: w.ns}}); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "fakeaws"}, StringData: map[string]string{
		aws.KeyAccessKeyID:     fakeaws.DemoAccessKeyID,
		aws.KeySecretAccessKey: fakeaws.DemoSecretAccessKey,
		aws.KeyEC2Endpoint:     srv.URL,
		aws.KeyUserData:        fakeUserData,
	}}
	if err := e.c.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	w.class("fakeaws-a", "subnet-0demo0000000000a")
	w.class("fakeaws-b", "subnet-0demo0000000000b")
	w.standInKubelet()
	return w
}

// class creates the fakecloud sample class under name, in the subnet (and so the zone) given.
func (w *awsWorld) class(name, subnet string) {
	w.t.Helper()
	raw, err := os.ReadFile(repoPath(w.t, "kubernetes/samples/fakecloud/aws-machineclass.yaml"))
	if err != nil {
		w.t.Fatal(err)
	}
	class := &v1alpha1.MachineClass{}
	if err := yaml.UnmarshalStrict(raw, class); err != nil {
		w.t.Fatal(err)
	}
	class.ObjectMeta = metav1.ObjectMeta{Namespace: w.ns, Name: name}
	class.ProviderSpec.Raw = []byte(strings.Replace(string(class.ProviderSpec.Raw), "subnet-0demo0000000000a", subnet, 1))
	class.SecretRef = &corev1.SecretReference{Namespace: w.ns, Name: "fakeaws"}
	if err := w.c.Create(context.Background(), class); err != nil {
		w.t.Fatal(err)
	}
}

// standInKubelet keeps one Ready node per running instance until the test ends.
func (w *awsWorld) standInKubelet() {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		wait.UntilWithContext(ctx, func(ctx context.Context) {
			for _, i := range w.cloud.Instances() {
				name, pid := i.PrivateDNSName, "aws:///"+i.Zone+"/"+i.ID
				switch i.State {
				case fakeaws.StateRunning:
					w.ensureNode(ctx, name, pid)
				case fakeaws.StateTerminated:
					if name == "" {
						continue
					}
					node := &corev1.Node{}
					if err := w.c.Get(ctx, client.ObjectKey{Name: name}, node); err == nil && node.Spec.ProviderID == pid {
						_ = w.c.Delete(ctx, node)
					}
				}
			}
		}, 50*time.Millisecond)
	}()
	w.t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
}

func (w *awsWorld) ensureNode(ctx context.Context, name, providerID string) {
	node := &corev1.Node{}
	err := w.c.Get(ctx, client.ObjectKey{Name: name}, node)
	if apierrors.IsNotFound(err) {
		node = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name}}, Spec: corev1.NodeSpec{ProviderID: providerID}}
		if err := w.c.Create(ctx, node); err != nil {
			return
		}
	} else if err != nil {
		return
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			return
		}
	}
	now := metav1.Now()
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now}}
	_ = w.c.Status().Update(ctx, node)
}

// instancesByMachine maps the fake's live instances to the machines their Name tags name.
func (w *awsWorld) instancesByMachine() map[string]fakeaws.Instance {
	out := map[string]fakeaws.Instance{}
	for _, i := range w.cloud.Live() {
		out[i.Tags[aws.NameTag]] = i
	}
	return out
}

// scaleToZero scales the deployment down and waits until no machine, no node of an instance and
// no live instance is left, and the fake holds no volume or interface either.
func (w *awsWorld) scaleToZero(deployment string) {
	w.t.Helper()
	w.updateDeployment(w.ns, deployment, func(d *v1alpha1.MachineDeployment) { d.Spec.Replicas = 0 })
	eventually.Explained(w.t, 2*time.Minute, "no machines and no live instances", func() (bool, string) {
		machines := w.machines(w.ns)
		st := w.cloud.State()
		var nodes corev1.NodeList
		if err := w.c.List(context.Background(), &nodes); err != nil {
			return false, err.Error()
		}
		awsNodes := 0
		for _, n := range nodes.Items {
			if strings.HasPrefix(n.Spec.ProviderID, "aws://") {
				awsNodes++
			}
		}
		return len(machines) == 0 && len(st.Instances) == 0 && len(st.Volumes) == 0 && len(st.NetworkInterfaces) == 0 && awsNodes == 0,
			fmt.Sprintf("%d machines, %d aws nodes, fake: %d instances, %d volumes, %d interfaces", len(machines), awsNodes, len(st.Instances), len(st.Volumes), len(st.NetworkInterfaces))
	})
}

// TestRunAWSMachineDeployment: a MachineDeployment of 3 on the fake EC2 through `machinist run`
// reaches Running, each machine recording its instance, and scales to 0 with no instance left.
func TestRunAWSMachineDeployment(t *testing.T) {
	w := newAWSWorld(t)
	w.startRun("--namespace", w.ns)
	if err := w.c.Create(context.Background(), machinetest.Deployment(w.ns, "workers", "fakeaws-a", 3, machinetest.Pool("workers"), 1, 0)); err != nil {
		t.Fatal(err)
	}
	w.waitRunning(w.ns, 3, 2*time.Minute, nil)

	byMachine := w.instancesByMachine()
	if len(byMachine) != 3 {
		t.Fatalf("live instances by machine: %v", byMachine)
	}
	for _, m := range w.machines(w.ns) {
		i, ok := byMachine[m.Name]
		// Gardener's form on the machine; the node stand-in writes the zone form, as the cloud
		// controller manager does, and the two match by instance ID.
		if !ok || m.Spec.ProviderID != "aws:///eu-west-1/"+i.ID || m.Labels[v1alpha1.LabelNode] != i.PrivateDNSName {
			t.Errorf("machine %s (providerID %s, node %s) and its instance %+v", m.Name, m.Spec.ProviderID, m.Labels[v1alpha1.LabelNode], i)
		}
	}
	if n := len(w.cloud.Requests.For("RunInstances")); n != 3 {
		t.Errorf("%d RunInstances requests for 3 machines", n)
	}
	w.scaleToZero("workers")
}

// TestRunAWSCapacityFallback: the primary class's zone (eu-west-1a) is out of capacity, so the
// machines of a deployment with machinist.io/fallback-classes are created on the fallback class
// in eu-west-1b at once, and nothing is left in eu-west-1a.
func TestRunAWSCapacityFallback(t *testing.T) {
	w := newAWSWorld(t)
	w.cloud.Capacity.SetZoneCapacity("eu-west-1a", 0)
	w.startRun("--namespace", w.ns)
	d := machinetest.Deployment(w.ns, "workers", "fakeaws-a", 3, machinetest.Pool("workers"), 1, 0)
	d.Annotations = map[string]string{"machinist.io/fallback-classes": "fakeaws-b"}
	if err := w.c.Create(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	// Well within --resource-exhausted-retry (10m): the fallback acts at once.
	w.waitRunning(w.ns, 3, 2*time.Minute, nil)

	var zones []string
	for _, i := range w.cloud.Live() {
		zones = append(zones, i.Zone)
	}
	sort.Strings(zones)
	if strings.Join(zones, ",") != "eu-west-1b,eu-west-1b,eu-west-1b" {
		t.Fatalf("live instances in zones %v, want 3 in eu-west-1b", zones)
	}
	refused := 0
	for _, r := range w.cloud.Requests.For("RunInstances") {
		if r.Code == "InsufficientInstanceCapacity" {
			refused++
		}
	}
	if refused == 0 {
		t.Error("no launch was refused in eu-west-1a: the fallback was not exercised")
	}
	byMachine := w.instancesByMachine()
	for _, m := range w.machines(w.ns) {
		if i, ok := byMachine[m.Name]; !ok || i.Zone != "eu-west-1b" || m.Spec.ProviderID != "aws:///eu-west-1/"+i.ID {
			t.Errorf("machine %s runs %s, its instance %+v", m.Name, m.Spec.ProviderID, i)
		}
	}
	w.scaleToZero("workers")
}

// fakeUserData is the user data of the fake clouds' Secrets, as `machinist fakecloud` writes it:
// the fakes boot nothing.
const fakeUserData = "#cloud-config\n# machines of a fake cloud boot nothing\n"
