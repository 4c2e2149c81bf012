package drain

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// What a drain would meet, decided without a client: the pods a drain moves (Evicted) and the
// PodDisruptionBudgets that would refuse their eviction now (Blockers), by the rules the API
// server's eviction subresource applies (kubernetes v1.36.3
// pkg/registry/core/pod/storage/eviction.go; docs/machine-controller.md, "Drain"). The Drainer
// moves the same pods; `machinist plan` and `machinist explain` use Blockers to say which budget
// a drain waits for.

// Evicted returns the pods a drain moves off their node: every pod but mirror pods and DaemonSet
// pods (finished pods included: deleting them is always allowed).
func Evicted(pods []corev1.Pod) []corev1.Pod {
	var out []corev1.Pod
	for _, p := range pods {
		if isMirrorPod(&p) || isDaemonSetPod(&p) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// Blocker is a PodDisruptionBudget that would refuse the eviction of some pods now.
type Blocker struct {
	// PDB is namespace/name of the budget.
	PDB string `json:"pdb"`
	// Pods are namespace/name of the pods it protects, sorted.
	Pods []string `json:"pods"`
	// Why says why it refuses, in the eviction API's words where it has them.
	Why string `json:"why"`
	// Misconfigured: the budget allows no eviction although every pod it covers is healthy, so
	// waiting does not help (MCM's rule, see misconfiguredPDBs).
	Misconfigured bool `json:"misconfigured,omitempty"`
}

func (b Blocker) String() string {
	return fmt.Sprintf("PodDisruptionBudget %s (%s; pods %s)", b.PDB, b.Why, strings.Join(b.Pods, ", "))
}

// Blockers lists the budgets that would refuse evicting pods now, as the eviction API decides:
// a pod that is finished, Pending or being deleted is never held; a pod covered by more than one
// budget cannot be evicted at all; an unready pod is let go when its budget says AlwaysAllow or
// is healthy enough (IfHealthyBudget, the default); otherwise the budget refuses while its status
// is older than its spec or it allows no disruption. Pods and budgets of every namespace may be
// passed; a budget only covers pods of its own namespace.
func Blockers(pods []corev1.Pod, pdbs []policyv1.PodDisruptionBudget) []Blocker {
	byPDB := map[string]*Blocker{}
	for i := range pods {
		p := &pods[i]
		if canIgnorePDB(p) {
			continue
		}
		covering := coveringBudgets(p, pdbs)
		if len(covering) > 1 {
			names := make([]string, len(covering))
			for i, b := range covering {
				names[i] = b.Namespace + "/" + b.Name
			}
			sort.Strings(names)
			addBlocked(byPDB, strings.Join(names, "+"), p, "the pod is covered by more than one PodDisruptionBudget, which the eviction API does not support", false)
			continue
		}
		if len(covering) == 0 {
			continue
		}
		b := covering[0]
		if why, blocks := refuses(b, podReady(p)); blocks {
			addBlocked(byPDB, b.Namespace+"/"+b.Name, p, why, isMisconfigured(b))
		}
	}
	out := make([]Blocker, 0, len(byPDB))
	for _, b := range byPDB {
		sort.Strings(b.Pods)
		out = append(out, *b)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PDB < out[j].PDB })
	return out
}

func addBlocked(by map[string]*Blocker, name string, p *corev1.Pod, why string, misconfigured bool) {
	b := by[name]
	if b == nil {
		b = &Blocker{PDB: name, Why: why, Misconfigured: misconfigured}
		by[name] = b
	}
	b.Pods = append(b.Pods, p.Namespace+"/"+p.Name)
}

// canIgnorePDB: the eviction API lets these pods go whatever their budget says.
func canIgnorePDB(p *corev1.Pod) bool {
	switch p.Status.Phase {
	case corev1.PodSucceeded, corev1.PodFailed, corev1.PodPending:
		return true
	}
	return p.DeletionTimestamp != nil
}

// coveringBudgets are the budgets of the pod's namespace whose selector matches it (a nil
// selector matches nothing, an empty one everything, as the eviction API reads them).
func coveringBudgets(p *corev1.Pod, pdbs []policyv1.PodDisruptionBudget) []*policyv1.PodDisruptionBudget {
	var out []*policyv1.PodDisruptionBudget
	for i := range pdbs {
		b := &pdbs[i]
		if b.Namespace != p.Namespace || b.Spec.Selector == nil {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
		if err != nil || !sel.Matches(labels.Set(p.Labels)) {
			continue
		}
		out = append(out, b)
	}
	return out
}

// refuses decides whether budget b refuses evicting a pod (ready or not) now, and why.
func refuses(b *policyv1.PodDisruptionBudget, ready bool) (string, bool) {
	s := b.Status
	if !ready {
		if p := b.Spec.UnhealthyPodEvictionPolicy; p != nil && *p == policyv1.AlwaysAllow {
			return "", false
		}
		if s.CurrentHealthy >= s.DesiredHealthy && s.DesiredHealthy > 0 {
			return "", false
		}
	}
	switch {
	case s.ObservedGeneration < b.Generation:
		return "its status is not current yet (the disruption controller has not processed it)", true
	case s.DisruptionsAllowed <= 0:
		return fmt.Sprintf("it allows no disruption: it needs %d healthy pods and has %d", s.DesiredHealthy, s.CurrentHealthy), true
	}
	return "", false
}

// podReady is the eviction API's "healthy": the pod's Ready condition is True.
func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// budgetOfRefusal names the budget an eviction refusal (HTTP 429) cites in its details, with its
// message ("" when the server named none).
func budgetOfRefusal(err error) string {
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		return ""
	}
	d := st.Status().Details
	if d == nil {
		return ""
	}
	for _, c := range d.Causes {
		if c.Type == policyv1.DisruptionBudgetCause && c.Message != "" {
			return c.Message
		}
	}
	return ""
}
