package local

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/registry"
	"github.com/machinist-io/machinist/harness/testenv"
	"github.com/machinist-io/machinist/internal/eventually"
)

// A stopped local machine has no node and no heartbeat, and keeps its identity; starting it
// registers the same node again, also after the provider restarted in between; a start that
// startError fails changes nothing.
func TestStopAndStartOnRealAPIServer(t *testing.T) {
	env := testenv.Start(t)
	cs := env.Clientset()
	ctx := context.Background()
	dir := t.TempDir()
	d := open(t, registry.Env{Target: env.Config, StateDir: dir})
	c := class(t, "small", fast(t, map[string]any{"startError": map[string]any{"code": "ResourceExhausted", "times": 1}}))
	m := machine("pw-1")
	created, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: m, MachineClass: c})
	if err != nil {
		t.Fatal(err)
	}
	waitReady(t, cs, "pw-1", corev1.ConditionTrue, 10*time.Second)
	m.Spec.ProviderID = created.ProviderID

	if _, err := d.StopMachine(ctx, &driver.StopMachineRequest{Machine: m, MachineClass: c}); err != nil {
		t.Fatal(err)
	}
	nodeGone(t, "pw-1", env)
	if !d.Stopped("pw-1") {
		t.Fatal("the machine does not read as stopped")
	}
	if st, err := d.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: m, MachineClass: c}); err != nil || st.ProviderID != created.ProviderID {
		t.Fatalf("GetMachineStatus of the stopped machine = %+v, %v; want its VM", st, err)
	}

	// The provider restarts: the stopped machine stays stopped, with no node.
	d.Close()
	d = open(t, registry.Env{Target: env.Config, StateDir: dir})
	d.fleet.sync() // what the host does every second, done now: it runs the agents it adopts
	if !d.IsHost() || d.fleet.agent("pw-1") != nil {
		t.Fatalf("after a restart: host %v, agent of the stopped machine %v; want host and no agent", d.IsHost(), d.fleet.agent("pw-1"))
	}
	if _, err := cs.CoreV1().Nodes().Get(ctx, "pw-1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("after a restart the stopped machine's node = %v; want none", err)
	}

	_, err = d.StartMachine(ctx, &driver.StartMachineRequest{Machine: m, MachineClass: c})
	if !driver.IsCode(err, driver.ResourceExhausted) {
		t.Fatalf("the first StartMachine = %v; want the injected ResourceExhausted", err)
	}
	if !d.Stopped("pw-1") {
		t.Fatal("a failed start started the machine")
	}
	started, err := d.StartMachine(ctx, &driver.StartMachineRequest{Machine: m, MachineClass: c})
	if err != nil || started.ProviderID != created.ProviderID || started.NodeName != "pw-1" {
		t.Fatalf("StartMachine = %+v, %v; want the same machine", started, err)
	}
	// startDelay 0: registered before StartMachine returned.
	if _, err := cs.CoreV1().Nodes().Get(ctx, "pw-1", metav1.GetOptions{}); err != nil {
		t.Fatalf("no node when StartMachine returned: %v", err)
	}
	node := waitReady(t, cs, "pw-1", corev1.ConditionTrue, 10*time.Second)
	if node.Spec.ProviderID != created.ProviderID || node.Spec.PodCIDR == "" {
		t.Fatalf("the started node has providerID %q, podCIDR %q", node.Spec.ProviderID, node.Spec.PodCIDR)
	}
	if _, err := d.DeleteMachine(ctx, &driver.DeleteMachineRequest{Machine: m, MachineClass: c}); err != nil {
		t.Fatal(err)
	}
	nodeGone(t, "pw-1", env)
}

// A start with startDelay registers the node that long after the call.
func TestStartDelay(t *testing.T) {
	env := testenv.Start(t)
	cs := env.Clientset()
	ctx := context.Background()
	d := open(t, registry.Env{Target: env.Config, StateDir: t.TempDir()})
	c := class(t, "slow-start", fast(t, map[string]any{"startDelay": "1s"}))
	m := machine("pw-2")
	if _, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: m, MachineClass: c}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.StopMachine(ctx, &driver.StopMachineRequest{Machine: m, MachineClass: c}); err != nil {
		t.Fatal(err)
	}
	nodeGone(t, "pw-2", env)
	if _, err := d.StartMachine(ctx, &driver.StartMachineRequest{Machine: m, MachineClass: c}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Nodes().Get(ctx, "pw-2", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the node exists right after a start with startDelay 1s: %v", err)
	}
	waitReady(t, cs, "pw-2", corev1.ConditionTrue, 10*time.Second)
}

func nodeGone(t *testing.T, name string, env *testenv.Env) {
	t.Helper()
	eventually.Explained(t, 10*time.Second, "node "+name+" gone", func() (bool, string) {
		_, err := env.Clientset().CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), "node still there"
	})
}
