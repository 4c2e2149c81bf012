package local

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/registry"
	"github.com/machinist-io/machinist/harness/testenv"
	"github.com/machinist-io/machinist/internal/eventually"
)

// bindPod creates a pod already bound to node (as the scheduler would bind it).
func bindPod(t *testing.T, cs kubernetes.Interface, name, node string, change func(*corev1.Pod)) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
	if change != nil {
		change(p)
	}
	p, err := cs.CoreV1().Pods("default").Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func getPod(cs kubernetes.Interface, name string) (*corev1.Pod, error) {
	return cs.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
}

func podReady(p *corev1.Pod) bool {
	c := podCondition(p.Status.Conditions, corev1.PodReady)
	return p.Status.Phase == corev1.PodRunning && c != nil && c.Status == corev1.ConditionTrue
}

func describePod(p *corev1.Pod, err error) string {
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("phase=%s ip=%s deleting=%v conditions=%v", p.Status.Phase, p.Status.PodIP, p.DeletionTimestamp != nil, p.Status.Conditions)
}

func waitPod(t *testing.T, cs kubernetes.Interface, name, what string, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var got *corev1.Pod
	eventually.Explained(t, 20*time.Second, "pod "+name+" "+what, func() (bool, string) {
		p, err := getPod(cs, name)
		got = p
		return err == nil && cond(p), describePod(p, err)
	})
	return got
}

func waitPodGone(t *testing.T, cs kubernetes.Interface, name string) time.Time {
	t.Helper()
	eventually.Explained(t, 20*time.Second, "pod "+name+" deleted", func() (bool, string) {
		p, err := getPod(cs, name)
		return apierrors.IsNotFound(err), describePod(p, err)
	})
	return time.Now()
}

// TestPodsOnRealAPIServer: the node agents play kubelet for the pods bound to their nodes.
func TestPodsOnRealAPIServer(t *testing.T) {
	env := testenv.Start(t)
	cs := env.Clientset()
	ctx := context.Background()
	dir := t.TempDir()
	d := open(t, registry.Env{Target: env.Config, StateDir: dir})
	c := class(t, "small", fast(t, nil))
	for _, m := range []string{"pods-1", "pods-2"} {
		if _, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine(m), MachineClass: c}); err != nil {
			t.Fatal(err)
		}
	}
	node := waitReady(t, cs, "pods-1", corev1.ConditionTrue, 10*time.Second)
	cidr := netip.MustParsePrefix(node.Spec.PodCIDR)
	nodeIP := internalIP("pods-1")

	t.Run("running and ready with an IP of the node's pod CIDR", func(t *testing.T) {
		p := bindPod(t, cs, "web", "pods-1", func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{
				{Name: "setup", Image: "busybox"},
				{Name: "proxy", Image: "envoy", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)},
			}
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "side", Image: "busybox"})
		})
		p = waitPod(t, cs, p.Name, "Ready", podReady)
		if ip, err := netip.ParseAddr(p.Status.PodIP); err != nil || !cidr.Contains(ip) {
			t.Fatalf("pod IP %q not in the node's pod CIDR %s", p.Status.PodIP, cidr)
		}
		if p.Status.HostIP != nodeIP || p.Status.StartTime == nil {
			t.Fatalf("hostIP %q (want %q), startTime %v", p.Status.HostIP, nodeIP, p.Status.StartTime)
		}
		if len(p.Status.ContainerStatuses) != 2 {
			t.Fatalf("container statuses %+v", p.Status.ContainerStatuses)
		}
		for _, s := range p.Status.ContainerStatuses {
			if !s.Ready || s.State.Running == nil || s.Started == nil || !*s.Started {
				t.Fatalf("container %s: %+v", s.Name, s)
			}
		}
		init := p.Status.InitContainerStatuses
		if len(init) != 2 || init[0].State.Terminated == nil || init[0].State.Terminated.Reason != "Completed" || init[1].State.Running == nil {
			t.Fatalf("init containers (setup completed, proxy sidecar running): %+v", init)
		}
		for _, ct := range []corev1.PodConditionType{corev1.PodInitialized, corev1.ContainersReady, corev1.PodReadyToStartContainers} {
			if c := podCondition(p.Status.Conditions, ct); c == nil || c.Status != corev1.ConditionTrue {
				t.Fatalf("condition %s: %+v", ct, c)
			}
		}

		// A second pod gets another IP; a host-network pod the node's.
		other := waitPod(t, cs, bindPod(t, cs, "web-2", "pods-1", nil).Name, "Ready", podReady)
		if other.Status.PodIP == p.Status.PodIP {
			t.Fatalf("two pods share IP %s", p.Status.PodIP)
		}
		host := waitPod(t, cs, bindPod(t, cs, "agent", "pods-1", func(p *corev1.Pod) { p.Spec.HostNetwork = true }).Name, "Ready", podReady)
		if host.Status.PodIP != nodeIP {
			t.Fatalf("host-network pod IP %q, want the node's %q", host.Status.PodIP, nodeIP)
		}

		// A pod that looks right is not written again: its resourceVersion holds over several
		// node status reports (every 30th heartbeat).
		rv := p.ResourceVersion
		beats := 0
		var last time.Time
		eventually.Explained(t, 60*time.Second, "three node status reports", func() (bool, string) {
			n, _, state := nodeState(cs, "pods-1")
			if hb := findCondition(n.Status.Conditions, corev1.NodeReady).LastHeartbeatTime.Time; hb.After(last) {
				last = hb
				beats++
			}
			return beats > 3, state
		})
		if now, err := getPod(cs, p.Name); err != nil || now.ResourceVersion != rv {
			t.Fatalf("pod written again while nothing changed: rv %s -> %s (%v)", rv, now.ResourceVersion, err)
		}
	})

	t.Run("deletion honours the grace period", func(t *testing.T) {
		p := waitPod(t, cs, bindPod(t, cs, "graceful", "pods-1", func(p *corev1.Pod) {
			p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](2)
		}).Name, "Ready", podReady)
		if err := cs.CoreV1().Pods("default").Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		deleting := waitPod(t, cs, p.Name, "terminating", func(p *corev1.Pod) bool { return p.DeletionTimestamp != nil })
		gone := waitPodGone(t, cs, p.Name)
		// The API's times have a resolution of a second.
		if end := deleting.DeletionTimestamp.Time; gone.Before(end.Add(-time.Second)) {
			t.Fatalf("pod removed at %s, before its grace period ended at %s", gone, end)
		}
	})

	t.Run("pods of a Job complete", func(t *testing.T) {
		job := func(code string) func(p *corev1.Pod) {
			return func(p *corev1.Pod) {
				p.Spec.RestartPolicy = corev1.RestartPolicyNever
				p.Annotations = map[string]string{AnnotationRunTime: "1s", AnnotationExitCode: code}
				p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "work", UID: "job-uid", Controller: ptr.To(true)}}
			}
		}
		ok := waitPod(t, cs, bindPod(t, cs, "job-ok", "pods-2", job("0")).Name, "Succeeded", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
		if s := ok.Status.ContainerStatuses; len(s) != 1 || s[0].State.Terminated == nil || s[0].State.Terminated.ExitCode != 0 || s[0].Ready {
			t.Fatalf("succeeded pod's container: %+v", s)
		}
		if c := podCondition(ok.Status.Conditions, corev1.PodReady); c == nil || c.Status != corev1.ConditionFalse || c.Reason != "PodCompleted" {
			t.Fatalf("Ready of a completed pod: %+v", c)
		}
		failed := waitPod(t, cs, bindPod(t, cs, "job-fail", "pods-2", job("3")).Name, "Failed", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
		if s := failed.Status.ContainerStatuses; s[0].State.Terminated == nil || s[0].State.Terminated.ExitCode != 3 || s[0].State.Terminated.Reason != "Error" {
			t.Fatalf("failed pod's container: %+v", s)
		}
	})

	t.Run("a dead kubelet leaves its pods alone", func(t *testing.T) {
		running := waitPod(t, cs, bindPod(t, cs, "stranded", "pods-2", func(p *corev1.Pod) {
			p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](1)
		}).Name, "Ready", podReady)
		if err := d.SetHeartbeat(ctx, "pods-2", false); err != nil {
			t.Fatal(err)
		}
		waitReady(t, cs, "pods-2", corev1.ConditionUnknown, 20*time.Second)
		pending := bindPod(t, cs, "late", "pods-2", nil)
		if err := cs.CoreV1().Pods("default").Delete(ctx, running.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		deleting := waitPod(t, cs, running.Name, "terminating", func(p *corev1.Pod) bool { return p.DeletionTimestamp != nil })
		// Past the grace period, and after a pod created later on a live node runs (so the
		// tracker has seen the dead node's events), nothing has happened to them.
		for time.Now().Before(deleting.DeletionTimestamp.Add(1500 * time.Millisecond)) {
			time.Sleep(100 * time.Millisecond)
		}
		waitPod(t, cs, bindPod(t, cs, "witness", "pods-1", nil).Name, "Ready", podReady)
		if p, err := getPod(cs, pending.Name); err != nil || p.Status.Phase != corev1.PodPending || p.Status.PodIP != "" {
			t.Fatalf("pod on a dead node started: %s", describePod(p, err))
		}
		if p, err := getPod(cs, running.Name); err != nil || p.DeletionTimestamp == nil || !podReady(p) {
			t.Fatalf("a dead node's kubelet finished a pod: %s", describePod(p, err))
		}
		// Back: the kubelet starts the new pod and finishes the deleted one.
		if err := d.SetHeartbeat(ctx, "pods-2", true); err != nil {
			t.Fatal(err)
		}
		waitPod(t, cs, pending.Name, "Ready", podReady)
		waitPodGone(t, cs, running.Name)
	})

	t.Run("pods wait for the network of a node that is not Ready", func(t *testing.T) {
		never := class(t, "never", fast(t, map[string]any{"neverReady": true}))
		if _, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine("pods-nr"), MachineClass: never}); err != nil {
			t.Fatal(err)
		}
		p := bindPod(t, cs, "needs-network", "pods-nr", nil)
		waitPod(t, cs, bindPod(t, cs, "host-agent", "pods-nr", func(p *corev1.Pod) { p.Spec.HostNetwork = true }).Name, "Ready", podReady)
		waitPod(t, cs, bindPod(t, cs, "witness-2", "pods-1", nil).Name, "Ready", podReady)
		if got, err := getPod(cs, p.Name); err != nil || got.Status.Phase != corev1.PodPending {
			t.Fatalf("a pod started on a node without network: %s", describePod(got, err))
		}
	})

	t.Run("a restarted host keeps every IP", func(t *testing.T) {
		before := map[string]string{}
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=pods-1"})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			if !p.Spec.HostNetwork && p.Status.PodIP != "" {
				before[p.Status.PodIP] = p.Name
			}
		}
		d.Close()
		d2 := open(t, registry.Env{Target: env.Config, StateDir: dir})
		_ = d2
		for i := range 3 {
			p := waitPod(t, cs, bindPod(t, cs, fmt.Sprintf("after-restart-%d", i), "pods-1", nil).Name, "Ready", podReady)
			if owner, taken := before[p.Status.PodIP]; taken {
				t.Fatalf("pod %s got IP %s of pod %s after the restart", p.Name, p.Status.PodIP, owner)
			}
			before[p.Status.PodIP] = p.Name
		}
	})
}
