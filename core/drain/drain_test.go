package drain_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/machinist-io/machinist/core/drain"
	"github.com/machinist-io/machinist/harness/testenv"
	"github.com/machinist-io/machinist/internal/eventually"
)

const csiDriver = "mem.csi.machinist.io"

// fast keeps every wait of a drain short so the tests take seconds.
func fast() drain.Options {
	return drain.Options{
		MaxEvictRetries:    1000,
		EvictRetryInterval: 100 * time.Millisecond,
		PollInterval:       50 * time.Millisecond,
		PVDetachTimeout:    10 * time.Second,
		PVReattachTimeout:  300 * time.Millisecond,
	}
}

func TestDrain(t *testing.T) {
	env := testenv.Start(t)
	cs := env.Clientset()

	t.Run("SkipsDaemonSetAndMirrorPodsAndEvictsTheRest", func(t *testing.T) {
		ctx := testCtx(t)
		ns, node := setup(t, cs, "plain")
		for i := range 5 {
			runningPod(t, cs, ns, node, "web-"+itoa(i), map[string]string{"app": "web"})
		}
		ds := runningPod(t, cs, ns, node, "ds", nil, func(p *corev1.Pod) {
			yes := true
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "agent", UID: "1234", Controller: &yes}}
		})
		mirror := runningPod(t, cs, ns, node, "static", nil, func(p *corev1.Pod) {
			p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "x"}
		})
		d := &drain.Drainer{Client: cs}
		if err := d.Drain(ctx, node, fast()); err != nil {
			t.Fatalf("drain: %v", err)
		}
		left := podNames(t, cs, ns)
		if want := []string{ds.Name, mirror.Name}; strings.Join(left, ",") != strings.Join(want, ",") {
			t.Fatalf("pods left on node = %v, want only %v", left, want)
		}
		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil || !n.Spec.Unschedulable {
			t.Fatalf("node not cordoned: unschedulable=%v err=%v", n != nil && n.Spec.Unschedulable, err)
		}
	})

	t.Run("RespectsPodDisruptionBudget", func(t *testing.T) {
		ctx := testCtx(t)
		ns, node := setup(t, cs, "pdb")
		runningPod(t, cs, ns, node, "db-0", map[string]string{"app": "db"})
		runningPod(t, cs, ns, node, "db-1", map[string]string{"app": "db"})
		runningPod(t, cs, ns, node, "free", map[string]string{"app": "free"})
		// One of three db replicas is unhealthy elsewhere: the budget (minAvailable 2) allows
		// nothing now but is not misconfigured.
		pdb := createPDB(t, cs, ns, "db", map[string]string{"app": "db"}, 2)
		setPDBStatus(t, cs, pdb, policyv1.PodDisruptionBudgetStatus{ExpectedPods: 3, CurrentHealthy: 2, DesiredHealthy: 2, DisruptionsAllowed: 0})

		d := &drain.Drainer{Client: cs}
		var problems, blockedReports atomic.Int32
		opts := fast()
		opts.OnProblem = func(error) { problems.Add(1) }
		opts.OnBlocked = func(err error) {
			var b *drain.EvictionBlockedError
			if errors.As(err, &b) && strings.HasPrefix(b.Pod, ns+"/db-") {
				blockedReports.Add(1)
			}
		}
		done := make(chan error, 1)
		go func() { done <- d.Drain(ctx, node, opts) }()

		// The free pod goes; the db pods stay while the budget allows no disruption.
		eventually.True(t, 20*time.Second, "free pod evicted", func() bool { return !slices.Contains(podNames(t, cs, ns), "free") })
		for range 10 {
			select {
			case err := <-done:
				t.Fatalf("drain finished while the budget allowed no eviction: %v", err)
			case <-time.After(100 * time.Millisecond):
			}
			if left := podNames(t, cs, ns); !slices.Contains(left, "db-0") || !slices.Contains(left, "db-1") {
				t.Fatalf("a db pod was removed while the budget allowed no disruption: left %v", left)
			}
		}
		// The unhealthy replica recovers: two disruptions allowed.
		setPDBStatus(t, cs, pdb, policyv1.PodDisruptionBudgetStatus{ExpectedPods: 3, CurrentHealthy: 3, DesiredHealthy: 2, DisruptionsAllowed: 2})
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("drain: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("drain did not finish after the budget allowed the evictions")
		}
		if left := podNames(t, cs, ns); len(left) != 0 {
			t.Fatalf("pods left: %v", left)
		}
		if problems.Load() != 0 {
			t.Fatalf("a healthy budget was reported as a problem %d times", problems.Load())
		}
		if blockedReports.Load() != 2 {
			t.Fatalf("blocked evictions reported %d times, want once per db pod", blockedReports.Load())
		}
	})

	t.Run("ReportsMisconfiguredBudgetAtOnce", func(t *testing.T) {
		ctx := testCtx(t)
		ns, node := setup(t, cs, "misconf")
		runningPod(t, cs, ns, node, "db-0", map[string]string{"app": "db"})
		runningPod(t, cs, ns, node, "other", map[string]string{"app": "other"})
		pdb := createPDB(t, cs, ns, "db", map[string]string{"app": "db"}, 1)
		// Every covered pod is healthy and still no disruption is allowed: misconfigured.
		setPDBStatus(t, cs, pdb, policyv1.PodDisruptionBudgetStatus{ExpectedPods: 1, CurrentHealthy: 1, DesiredHealthy: 1, DisruptionsAllowed: 0})

		var reported []error
		var mu sync.Mutex
		opts := fast()
		opts.OnProblem = func(err error) { mu.Lock(); reported = append(reported, err); mu.Unlock() }
		start := time.Now()
		err := (&drain.Drainer{Client: cs}).Drain(ctx, node, opts)
		var mis *drain.MisconfiguredPDBError
		if !errors.As(err, &mis) {
			t.Fatalf("drain error = %v, want a MisconfiguredPDBError", err)
		}
		if mis.PDB != ns+"/db" || len(mis.Pods) != 1 || mis.Pods[0] != ns+"/db-0" {
			t.Fatalf("misconfigured budget report = %+v", mis)
		}
		if !strings.Contains(err.Error(), "misconfigured and requires zero voluntary evictions") {
			t.Fatalf("message lacks MCM's wording: %v", err)
		}
		// Reported without spending the eviction retries (1000 × 100ms).
		if took := time.Since(start); took > 20*time.Second {
			t.Fatalf("misconfigured budget took %s to report", took)
		}
		mu.Lock()
		if len(reported) != 1 {
			t.Fatalf("OnProblem called %d times, want 1", len(reported))
		}
		mu.Unlock()
		if left := podNames(t, cs, ns); len(left) != 1 || left[0] != "db-0" {
			t.Fatalf("pods left = %v, want only the blocked db-0", left)
		}
	})

	t.Run("ForceDeletesDespiteBudget", func(t *testing.T) {
		ctx := testCtx(t)
		ns, node := setup(t, cs, "force")
		runningPod(t, cs, ns, node, "db-0", map[string]string{"app": "db"})
		runningPod(t, cs, ns, node, "slow", nil, func(p *corev1.Pod) {
			g := int64(3600)
			p.Spec.TerminationGracePeriodSeconds = &g
		})
		pdb := createPDB(t, cs, ns, "db", map[string]string{"app": "db"}, 5)
		setPDBStatus(t, cs, pdb, policyv1.PodDisruptionBudgetStatus{ExpectedPods: 5, CurrentHealthy: 1, DesiredHealthy: 5})
		opts := fast()
		opts.Force = true
		if err := (&drain.Drainer{Client: cs}).Drain(ctx, node, opts); err != nil {
			t.Fatalf("force drain: %v", err)
		}
		if left := podNames(t, cs, ns); len(left) != 0 {
			t.Fatalf("pods left after force drain: %v", left)
		}
	})

	t.Run("BlockedEvictionEndsWithTheTimeout", func(t *testing.T) {
		ctx := testCtx(t)
		ns, node := setup(t, cs, "timeout")
		runningPod(t, cs, ns, node, "db-0", map[string]string{"app": "db"})
		pdb := createPDB(t, cs, ns, "db", map[string]string{"app": "db"}, 2)
		setPDBStatus(t, cs, pdb, policyv1.PodDisruptionBudgetStatus{ExpectedPods: 2, CurrentHealthy: 1, DesiredHealthy: 2})
		opts := fast()
		opts.Timeout = 3 * time.Second // room for the cordon and list on a busy machine
		start := time.Now()
		err := (&drain.Drainer{Client: cs}).Drain(ctx, node, opts)
		var blocked *drain.EvictionBlockedError
		if !errors.As(err, &blocked) || blocked.Pod != ns+"/db-0" {
			t.Fatalf("drain error = %v, want an EvictionBlockedError for db-0", err)
		}
		if took := time.Since(start); took > 20*time.Second {
			t.Fatalf("drain bounded by a 3s timeout took %s", took)
		}
	})

	t.Run("RefusalNamesTheBudget", func(t *testing.T) {
		ctx := testCtx(t)
		ns, node := setup(t, cs, "names")
		runningPod(t, cs, ns, node, "db-0", map[string]string{"app": "db"})
		pdb := createPDB(t, cs, ns, "db", map[string]string{"app": "db"}, 1)
		setPDBStatus(t, cs, pdb, policyv1.PodDisruptionBudgetStatus{ExpectedPods: 2, CurrentHealthy: 1, DesiredHealthy: 1})
		opts := fast()
		opts.MaxEvictRetries = 1
		var seen atomic.Value
		opts.OnBlocked = func(err error) { seen.Store(err.Error()) }
		err := (&drain.Drainer{Client: cs}).Drain(ctx, node, opts)
		var blocked *drain.EvictionBlockedError
		if !errors.As(err, &blocked) || !strings.Contains(blocked.Budget, "disruption budget db") {
			t.Fatalf("drain error = %v, want the refusal to name budget db", err)
		}
		if msg, _ := seen.Load().(string); !strings.Contains(msg, "(The disruption budget db needs 1 healthy pods and has 1 currently)") {
			t.Fatalf("OnBlocked saw %q, want the budget named", msg)
		}
	})

	t.Run("BlockersAgreeWithTheEvictionAPI", func(t *testing.T) {
		blockersAgree(t, cs)
	})

	t.Run("PodsWithVolumesOneAtATimeWaitingForDetach", func(t *testing.T) {
		ctx := testCtx(t)
		ns, node := setup(t, cs, "volumes")
		for name, value := range map[string]int32{"high": 1000, "low": 10} {
			pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}
			if _, err := cs.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		for i, vol := range []string{"vol-a", "vol-b"} {
			claim := volume(t, cs, ns, vol)
			runningPod(t, cs, ns, node, "sts-"+itoa(i), nil, func(p *corev1.Pod) {
				p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
					PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}
				p.Spec.PriorityClassName = []string{"high", "low"}[i] // sts-0 first
			})
		}
		attachVolumes(t, cs, node, "vol-a", "vol-b")

		var calls atomic.Int32
		d := &drain.Drainer{Client: cs, VolumeIDs: func(_ context.Context, specs []*corev1.PersistentVolumeSpec) ([]string, error) {
			calls.Add(1)
			var ids []string
			for _, s := range specs {
				if s.CSI != nil && s.CSI.Driver == csiDriver {
					ids = append(ids, s.CSI.VolumeHandle)
				}
			}
			return ids, nil
		}}
		done := make(chan error, 1)
		go func() { done <- d.Drain(ctx, node, fast()) }()

		eventually.True(t, 20*time.Second, "sts-0 evicted", func() bool { return !slices.Contains(podNames(t, cs, ns), "sts-0") })
		// vol-a is still attached: sts-1 must wait.
		for range 8 {
			time.Sleep(100 * time.Millisecond)
			if !slices.Contains(podNames(t, cs, ns), "sts-1") {
				t.Fatal("sts-1 was evicted while the volume of sts-0 was still attached")
			}
		}
		attachVolumes(t, cs, node, "vol-b") // vol-a detached
		eventually.True(t, 20*time.Second, "sts-1 evicted", func() bool { return !slices.Contains(podNames(t, cs, ns), "sts-1") })
		attachVolumes(t, cs, node)
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("drain: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("drain did not finish after the volumes detached")
		}
		if calls.Load() != 2 {
			t.Fatalf("VolumeIDs called %d times, want once per pod", calls.Load())
		}
	})

	t.Run("MissingNodeIsNothingToDrain", func(t *testing.T) {
		if err := (&drain.Drainer{Client: cs}).Drain(testCtx(t), "no-such-node", fast()); err != nil {
			t.Fatalf("drain of a missing node: %v", err)
		}
	})

	t.Run("CancelledContextReturnsPromptly", func(t *testing.T) {
		ns, node := setup(t, cs, "cancel")
		runningPod(t, cs, ns, node, "db-0", map[string]string{"app": "db"})
		pdb := createPDB(t, cs, ns, "db", map[string]string{"app": "db"}, 2)
		setPDBStatus(t, cs, pdb, policyv1.PodDisruptionBudgetStatus{ExpectedPods: 2, CurrentHealthy: 1, DesiredHealthy: 2})
		ctx, cancel := context.WithCancel(testCtx(t))
		opts := fast()
		opts.EvictRetryInterval = time.Hour
		go func() { time.Sleep(300 * time.Millisecond); cancel() }()
		start := time.Now()
		if err := (&drain.Drainer{Client: cs}).Drain(ctx, node, opts); err == nil {
			t.Fatal("a cancelled drain reported success")
		}
		if took := time.Since(start); took > 10*time.Second {
			t.Fatalf("cancelled drain took %s", took)
		}
	})
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func setup(t *testing.T, cs kubernetes.Interface, name string) (ns, node string) {
	t.Helper()
	ctx := context.Background()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-" + name}}
	if _, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return name, n.Name
}

// runningPod creates a Ready pod bound to node with a zero grace period (there is no kubelet to
// finish a graceful deletion) unless mutate says otherwise.
func runningPod(t *testing.T, cs kubernetes.Interface, ns, node, name string, labels map[string]string, mutate ...func(*corev1.Pod)) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	zero := int64(0)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			TerminationGracePeriodSeconds: &zero,
			Containers:                    []corev1.Container{{Name: "c", Image: "busybox"}},
		},
	}
	for _, m := range mutate {
		m(p)
	}
	p, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Pending pods bypass budgets; make it a running, ready pod like a kubelet would.
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	p, err = cs.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func createPDB(t *testing.T, cs kubernetes.Interface, ns, name string, sel map[string]string, minAvailable int) *policyv1.PodDisruptionBudget {
	t.Helper()
	mina := intstr.FromInt(minAvailable)
	pdb, err := cs.PolicyV1().PodDisruptionBudgets(ns).Create(context.Background(), &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: &mina, Selector: &metav1.LabelSelector{MatchLabels: sel}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pdb
}

// setPDBStatus plays the disruption controller, which this control plane does not run.
func setPDBStatus(t *testing.T, cs kubernetes.Interface, pdb *policyv1.PodDisruptionBudget, st policyv1.PodDisruptionBudgetStatus) {
	t.Helper()
	ctx := context.Background()
	for range 10 {
		cur, err := cs.PolicyV1().PodDisruptionBudgets(pdb.Namespace).Get(ctx, pdb.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		st.ObservedGeneration = cur.Generation
		cur.Status = st
		if _, err = cs.PolicyV1().PodDisruptionBudgets(pdb.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err == nil {
			return
		} else if !apierrors.IsConflict(err) {
			t.Fatal(err)
		}
	}
	t.Fatal("could not set the budget's status")
}

// volume creates a bound claim and CSI persistent volume whose handle is id.
func volume(t *testing.T, cs kubernetes.Interface, ns, id string) string {
	t.Helper()
	ctx := context.Background()
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + id},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: csiDriver, VolumeHandle: id}},
		},
	}
	if _, err := cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: id, Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			VolumeName:  pv.Name,
		},
	}
	if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return pvc.Name
}

// attachVolumes sets node.status.volumesAttached to exactly the given volume handles, playing
// the attach/detach controller.
func attachVolumes(t *testing.T, cs kubernetes.Interface, node string, ids ...string) {
	t.Helper()
	ctx := context.Background()
	for range 10 {
		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Status.VolumesAttached = nil
		for _, id := range ids {
			n.Status.VolumesAttached = append(n.Status.VolumesAttached, corev1.AttachedVolume{
				Name: corev1.UniqueVolumeName("kubernetes.io/csi/" + csiDriver + "^" + id), DevicePath: "/dev/x"})
		}
		if _, err = cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err == nil {
			return
		} else if !apierrors.IsConflict(err) {
			t.Fatal(err)
		}
	}
	t.Fatal("could not set the node's attached volumes")
}

func podNames(t *testing.T, cs kubernetes.Interface, ns string) []string {
	t.Helper()
	list, err := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range list.Items {
		out = append(out, p.Name)
	}
	return out
}

func itoa(i int) string { return string(rune('0' + i)) }
