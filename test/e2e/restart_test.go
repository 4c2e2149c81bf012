package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/registry"
	"github.com/machinist-io/machinist/harness/testenv"
	"github.com/machinist-io/machinist/internal/eventually"
)

// TestRestartDuringScaleDownKeepsNodesReady: `machinist run` — the controllers with the
// compiled-in local provider, so the process also hosts the node agents — is killed in the middle
// of a scale-down while another process without a target cluster (here the test, listing VMs)
// has the provider's state dir open and takes the free host lock. The restarted controller gets
// the node agents back: every remaining node renews its Lease again, and no machine that was
// Running goes Unknown (kube-controller-manager marks a node whose Lease is older than its 20 s
// grace period Unknown, and the Machine controller its machine after it). Before the fix the
// lister kept the lock and the remaining nodes went Unknown.
func TestRestartDuringScaleDownKeepsNodesReady(t *testing.T) {
	env := testenv.Start(t, testenv.WithKubeControllerManager("--node-monitor-period=1s", "--node-monitor-grace-period=20s"))
	w := &world{t: t, ctx: context.Background(), env: env, c: env.Client(), cs: env.Clientset(), stateDir: t.TempDir(), metricsPort: freePort(t)}
	args := []string{"run", "--control-kubeconfig", env.KubeconfigPath, "--state-dir", w.stateDir,
		"--address", "127.0.0.1", "--port", strconv.Itoa(w.metricsPort), "--leader-elect=false"}
	run := w.startKillable(args...)
	w.localClass("small")
	w.machineDeployment("pool", "small", 6, 0, 0, nil)
	w.waitMachinesRunning("pool", 6, 3*time.Minute)
	unknown := w.watchUnknown()

	lister, err := registry.Open("local", registry.Env{StateDir: w.stateDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lister.(interface{ Close() error }).Close() })
	isHost := lister.(interface{ IsHost() bool }).IsHost

	w.updateMachineDeployment("pool", func(md *v1alpha1.MachineDeployment) { md.Spec.Replicas = 3 })
	run.kill()
	eventually.Explained(w.t, 30*time.Second, "the lister takes the free host lock", func() (bool, string) { return isHost(), "not host" })
	restarted := time.Now()
	w.startKillable(args...)

	eventually.Explained(w.t, 3*time.Minute, "3 machines Running, the others gone, every remaining node renewing its Lease from the restarted controller", func() (bool, string) {
		var states []string
		running := 0
		renewed := true
		ms := w.machines("pool")
		for _, m := range ms {
			if m.DeletionTimestamp == nil && m.Status.CurrentStatus.Phase == v1alpha1.MachineRunning {
				running++
			}
			l, err := w.cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(w.ctx, m.Name, metav1.GetOptions{})
			if err != nil || l.Spec.RenewTime == nil || !l.Spec.RenewTime.After(restarted) {
				renewed = false
			}
			states = append(states, fmt.Sprintf("%s:%s", m.Name, m.Status.CurrentStatus.Phase))
		}
		nodes, err := w.cs.CoreV1().Nodes().List(w.ctx, metav1.ListOptions{LabelSelector: "pool=pool"})
		if err != nil {
			return false, err.Error()
		}
		return len(ms) == 3 && running == 3 && len(nodes.Items) == 3 && renewed && !isHost(),
			fmt.Sprintf("machines %s, nodes %d, leases renewed %v, lister hosts %v", strings.Join(states, " "), len(nodes.Items), renewed, isHost())
	})
	if seen := unknown.stop(); len(seen) > 0 {
		t.Fatalf("machines went Unknown across the restart: %v", seen)
	}
}

// killable is a `machinist` process the test can kill like a crash.
type killable struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// startKillable runs `machinist <args>` until it is killed or the test ends, logging to a file
// shown when the test fails.
func (w *world) startKillable(args ...string) *killable {
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
	k := &killable{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(k.done) }()
	w.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-k.done
		logf.Close()
		if w.t.Failed() {
			b, _ := os.ReadFile(logPath)
			if len(b) > 20000 {
				b = b[len(b)-20000:]
			}
			w.t.Logf("machinist %s (pid %d) log (end):\n%s", args[0], cmd.Process.Pid, b)
		}
	})
	return k
}

// kill kills the process at once (SIGKILL: no shutdown) and waits until it is gone.
func (k *killable) kill() {
	_ = k.cmd.Process.Kill()
	<-k.done
}

// unknownWatch records the machines seen Unknown.
type unknownWatch struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	seen   []string
}

// watchUnknown watches the namespace's machines until stop; a watch that ends early fails the
// test (an Unknown machine could go unseen).
func (w *world) watchUnknown() *unknownWatch {
	w.t.Helper()
	c, err := client.NewWithWatch(w.env.Config, client.Options{Scheme: testenv.Scheme})
	if err != nil {
		w.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(w.ctx)
	wi, err := c.Watch(ctx, &v1alpha1.MachineList{}, client.InNamespace(ns))
	if err != nil {
		w.t.Fatal(err)
	}
	u := &unknownWatch{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(u.done)
		defer wi.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-wi.ResultChan():
				if !ok {
					w.t.Errorf("the machine watch ended early")
					return
				}
				if m, ok := ev.Object.(*v1alpha1.Machine); ok && ev.Type != watch.Deleted && m.Status.CurrentStatus.Phase == v1alpha1.MachineUnknown {
					u.mu.Lock()
					if !slices.Contains(u.seen, m.Name) {
						u.seen = append(u.seen, m.Name)
					}
					u.mu.Unlock()
				}
			}
		}
	}()
	w.t.Cleanup(func() { u.stop() })
	return u
}

func (u *unknownWatch) stop() []string {
	u.cancel()
	<-u.done
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.seen
}
