package drain_test

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/machinist-io/machinist/core/drain"
)

// blockersAgree sets up pods and budgets in the states the eviction API tells apart, asks
// drain.Blockers which pods a budget holds, and asks the API server itself (a dry-run eviction of
// each pod): both must agree pod by pod.
func blockersAgree(t *testing.T, cs kubernetes.Interface) {
	ctx := testCtx(t)
	ns, node := setup(t, cs, "agree")
	unready := func(p *corev1.Pod) { p.Labels["unready"] = "true" }
	runningPod(t, cs, ns, node, "zero-0", map[string]string{"app": "zero"})
	runningPod(t, cs, ns, node, "one-0", map[string]string{"app": "one"})
	runningPod(t, cs, ns, node, "stale-0", map[string]string{"app": "stale"})
	runningPod(t, cs, ns, node, "both-0", map[string]string{"app": "one", "tier": "both"})
	runningPod(t, cs, ns, node, "sick-0", map[string]string{"app": "sick"}, unready)
	runningPod(t, cs, ns, node, "free-0", map[string]string{"app": "free"})
	setUnready(t, cs, ns, "sick-0")

	zero := createPDB(t, cs, ns, "zero", map[string]string{"app": "zero"}, 1)
	setPDBStatus(t, cs, zero, policyv1.PodDisruptionBudgetStatus{ExpectedPods: 1, CurrentHealthy: 1, DesiredHealthy: 1})
	one := createPDB(t, cs, ns, "one", map[string]string{"app": "one"}, 1)
	setPDBStatus(t, cs, one, policyv1.PodDisruptionBudgetStatus{ExpectedPods: 2, CurrentHealthy: 2, DesiredHealthy: 1, DisruptionsAllowed: 1})
	createPDB(t, cs, ns, "stale", map[string]string{"app": "stale"}, 0) // no status: not processed yet
	both := createPDB(t, cs, ns, "both", map[string]string{"tier": "both"}, 0)
	setPDBStatus(t, cs, both, policyv1.PodDisruptionBudgetStatus{ExpectedPods: 1, CurrentHealthy: 1, DisruptionsAllowed: 1})
	sick := createPDB(t, cs, ns, "sick", map[string]string{"app": "sick"}, 2)
	setPDBStatus(t, cs, sick, policyv1.PodDisruptionBudgetStatus{ExpectedPods: 2, CurrentHealthy: 1, DesiredHealthy: 2})

	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pdbs, err := cs.PolicyV1().PodDisruptionBudgets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	held := map[string]string{}
	for _, b := range drain.Blockers(pods.Items, pdbs.Items) {
		for _, p := range b.Pods {
			held[p] = b.PDB
		}
	}
	for _, p := range pods.Items {
		err := cs.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{
			ObjectMeta:    metav1.ObjectMeta{Name: p.Name, Namespace: ns},
			DeleteOptions: &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}},
		})
		refused := err != nil
		if err != nil && !apierrors.IsTooManyRequests(err) && !apierrors.IsInternalError(err) {
			t.Fatalf("dry-run eviction of %s: %v", p.Name, err)
		}
		if _, ok := held[ns+"/"+p.Name]; ok != refused {
			t.Errorf("pod %s: Blockers says held=%v (by %q), the eviction API refused=%v (%v)", p.Name, ok, held[ns+"/"+p.Name], refused, err)
		}
	}
	for pod, want := range map[string]string{"zero-0": ns + "/zero", "stale-0": ns + "/stale", "both-0": ns + "/both+" + ns + "/one"} {
		if held[ns+"/"+pod] != want {
			t.Errorf("pod %s held by %q, want %q", pod, held[ns+"/"+pod], want)
		}
	}
}

// setUnready makes a pod Running but not Ready.
func setUnready(t *testing.T, cs kubernetes.Interface, ns, name string) {
	t.Helper()
	ctx := context.Background()
	p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
	if _, err := cs.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestEvictedLeavesDaemonSetAndMirrorPods: the pods a drain moves.
func TestEvictedLeavesDaemonSetAndMirrorPods(t *testing.T) {
	yes := true
	pods := []corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Name: "web"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "ds", OwnerReferences: []metav1.OwnerReference{{Kind: "DaemonSet", Name: "a", Controller: &yes}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "static", Annotations: map[string]string{corev1.MirrorPodAnnotationKey: "x"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "done"}, Status: corev1.PodStatus{Phase: corev1.PodSucceeded}},
	}
	var names []string
	for _, p := range drain.Evicted(pods) {
		names = append(names, p.Name)
	}
	if !slices.Equal(names, []string{"web", "done"}) {
		t.Fatalf("evicted %v, want web and done", names)
	}
}

// TestBlockersRules: each rule of the eviction API on its own.
func TestBlockersRules(t *testing.T) {
	ready := corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	notReady := corev1.PodStatus{Phase: corev1.PodRunning}
	pod := func(name string, st corev1.PodStatus) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{"app": "db"}}, Status: st}
	}
	budget := func(st policyv1.PodDisruptionBudgetStatus, mutate ...func(*policyv1.PodDisruptionBudget)) policyv1.PodDisruptionBudget {
		b := policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db", Generation: 1},
			Spec: policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}}, Status: st}
		for _, m := range mutate {
			m(&b)
		}
		return b
	}
	current := policyv1.PodDisruptionBudgetStatus{ObservedGeneration: 1, ExpectedPods: 2, CurrentHealthy: 2, DesiredHealthy: 2}
	always := policyv1.AlwaysAllow
	for _, tc := range []struct {
		name string
		pod  corev1.Pod
		pdb  policyv1.PodDisruptionBudget
		held bool
	}{
		{"ready pod, no disruption allowed", pod("a", ready), budget(current), true},
		{"ready pod, one allowed", pod("a", ready), budget(policyv1.PodDisruptionBudgetStatus{ObservedGeneration: 1, DisruptionsAllowed: 1}), false},
		{"status older than the spec", pod("a", ready), budget(policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 1}), true},
		{"pending pod", pod("a", corev1.PodStatus{Phase: corev1.PodPending}), budget(current), false},
		{"finished pod", pod("a", corev1.PodStatus{Phase: corev1.PodSucceeded}), budget(current), false},
		{"unready pod, healthy budget", pod("a", notReady), budget(current), false},
		{"unready pod, unhealthy budget", pod("a", notReady), budget(policyv1.PodDisruptionBudgetStatus{ObservedGeneration: 1, CurrentHealthy: 1, DesiredHealthy: 2}), true},
		{"unready pod, AlwaysAllow", pod("a", notReady), budget(policyv1.PodDisruptionBudgetStatus{ObservedGeneration: 1, CurrentHealthy: 1, DesiredHealthy: 2},
			func(b *policyv1.PodDisruptionBudget) { b.Spec.UnhealthyPodEvictionPolicy = &always }), false},
		{"other namespace", pod("a", ready), budget(current, func(b *policyv1.PodDisruptionBudget) { b.Namespace = "other" }), false},
		{"nil selector", pod("a", ready), budget(current, func(b *policyv1.PodDisruptionBudget) { b.Spec.Selector = nil }), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := drain.Blockers([]corev1.Pod{tc.pod}, []policyv1.PodDisruptionBudget{tc.pdb})
			if (len(got) > 0) != tc.held {
				t.Fatalf("blockers %v, want held=%v", got, tc.held)
			}
			if tc.held && (got[0].PDB != tc.pdb.Namespace+"/db" || got[0].Why == "" || !slices.Equal(got[0].Pods, []string{"ns/a"})) {
				t.Fatalf("blocker %+v", got[0])
			}
		})
	}
}
