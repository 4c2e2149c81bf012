package drain

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"

	"github.com/machinist-io/machinist/internal/waitctx"
)

// evictAndWait evicts p (or deletes it when it has finished) and waits for it to go away.
func (d *Drainer) evictAndWait(ctx context.Context, p *corev1.Pod, opts Options) error {
	if err := d.evict(ctx, p, opts); err != nil {
		return err
	}
	return d.waitGone(ctx, p, deletionWait(p, opts), opts)
}

// evict removes p through the Eviction API, so PodDisruptionBudgets are honoured. A refusal
// (HTTP 429) is retried every EvictRetryInterval up to MaxEvictRetries times; a budget found to
// be misconfigured on the way ends the retries at once.
func (d *Drainer) evict(ctx context.Context, p *corev1.Pod, opts Options) error {
	name := p.Namespace + "/" + p.Name
	if isFinished(p) {
		// A finished pod holds nothing a budget protects.
		return d.deletePod(ctx, p, nil)
	}
	var attempts int32
	var refused error // the last refusal by a budget, so running out of time still says why
	for {
		attempts++
		err := d.Client.PolicyV1().Evictions(p.Namespace).Evict(ctx, &policyv1.Eviction{
			ObjectMeta:    metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
			DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}},
		})
		switch {
		case err == nil:
			d.log().Debug("drain: evicted pod", "pod", name)
			return nil
		case apierrors.IsNotFound(err), isUIDMismatch(err):
			return nil // already gone, or replaced by a new pod of the same name
		case apierrors.IsTooManyRequests(err):
			refused = err
			if blocked, perr := d.misconfiguredPDBs(ctx, []corev1.Pod{*p}); perr == nil && len(blocked) > 0 {
				if opts.OnProblem != nil {
					opts.OnProblem(blocked[0])
				}
				return blocked[0]
			}
			if attempts == 1 && opts.OnBlocked != nil {
				opts.OnBlocked(&EvictionBlockedError{Pod: name, Attempts: 1, Reason: err.Error(), Budget: budgetOfRefusal(err)})
			}
		default:
			if ctx.Err() != nil {
				if refused != nil {
					// The time ran out during a retry of an eviction a budget kept refusing: the
					// budget, not the clock, is what the caller must hear about.
					return &EvictionBlockedError{Pod: name, Attempts: attempts - 1, Reason: refused.Error() + " (the drain ran out of time)", Budget: budgetOfRefusal(refused)}
				}
				return fmt.Errorf("drain: evict pod %s: %w", name, ctx.Err())
			}
			d.log().Warn("drain: eviction failed, will retry", "pod", name, "err", err)
		}
		if attempts >= opts.MaxEvictRetries {
			return &EvictionBlockedError{Pod: name, Attempts: attempts, Reason: err.Error(), Budget: budgetOfRefusal(err)}
		}
		if serr := waitctx.Sleep(ctx, clock.RealClock{}, opts.EvictRetryInterval); serr != nil {
			return &EvictionBlockedError{Pod: name, Attempts: attempts, Reason: err.Error() + " (the drain ran out of time)", Budget: budgetOfRefusal(err)}
		}
	}
}

func isUIDMismatch(err error) bool {
	return apierrors.IsConflict(err) && strings.Contains(err.Error(), "UID")
}

func (d *Drainer) deletePod(ctx context.Context, p *corev1.Pod, grace *int64) error {
	err := d.Client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
		GracePeriodSeconds: grace,
		Preconditions:      &metav1.Preconditions{UID: &p.UID},
	})
	if err == nil || apierrors.IsNotFound(err) || isUIDMismatch(err) {
		return nil
	}
	return fmt.Errorf("drain: delete pod %s/%s: %w", p.Namespace, p.Name, err)
}

// waitGone waits up to timeout for p to disappear (or be replaced by a pod with another UID).
func (d *Drainer) waitGone(ctx context.Context, p *corev1.Pod, timeout time.Duration, opts Options) error {
	err := wait.PollUntilContextTimeout(ctx, opts.PollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		cur, err := d.Client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return false, nil
			}
			d.log().Warn("drain: check pod deletion", "pod", p.Namespace+"/"+p.Name, "err", err)
			return false, nil
		}
		return cur.UID != p.UID, nil
	})
	if err != nil { // the condition returns no errors: the time (or ctx) ran out
		return fmt.Errorf("drain: pod %s/%s still exists %s after its eviction", p.Namespace, p.Name, timeout)
	}
	return nil
}

// forceDelete deletes every pod at once with a zero grace period and waits briefly for them.
func (d *Drainer) forceDelete(ctx context.Context, pods []corev1.Pod, opts Options) error {
	zero := int64(0)
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	sem := make(chan struct{}, opts.Parallelism)
	for i := range pods {
		p := &pods[i]
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			err := d.deletePod(ctx, p, &zero)
			if err == nil {
				err = d.waitGone(ctx, p, ForceDeletionWait, opts)
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return fmt.Errorf("drain: force: %w", errors.Join(errs...))
	}
	d.log().Info("drain: node drained forcefully", "pods", len(pods))
	return nil
}

// misconfiguredPDBs finds the PodDisruptionBudgets covering pods that can never allow an
// eviction although every pod they cover is healthy (MCM's rule: the budget's status is
// current, it expects pods, all are healthy, none is being disrupted, and it allows zero
// disruptions). Waiting on such a budget would only end at the drain timeout.
func (d *Drainer) misconfiguredPDBs(ctx context.Context, pods []corev1.Pod) ([]*MisconfiguredPDBError, error) {
	byNS := map[string][]corev1.Pod{}
	for _, p := range pods {
		if !isFinished(&p) {
			byNS[p.Namespace] = append(byNS[p.Namespace], p)
		}
	}
	var out []*MisconfiguredPDBError
	namespaces := make([]string, 0, len(byNS))
	for ns := range byNS {
		namespaces = append(namespaces, ns)
	}
	sort.Strings(namespaces)
	for _, ns := range namespaces {
		list, err := d.Client.PolicyV1().PodDisruptionBudgets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("drain: list pod disruption budgets in %s: %w", ns, err)
		}
		for i := range list.Items {
			pdb := &list.Items[i]
			if !isMisconfigured(pdb) || pdb.Spec.Selector == nil {
				continue
			}
			sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
			if err != nil {
				continue
			}
			var blocked []string
			for _, p := range byNS[ns] {
				if sel.Matches(labels.Set(p.Labels)) {
					blocked = append(blocked, p.Namespace+"/"+p.Name)
				}
			}
			if len(blocked) > 0 {
				out = append(out, &MisconfiguredPDBError{PDB: ns + "/" + pdb.Name, Pods: blocked})
			}
		}
	}
	return out, nil
}

func isMisconfigured(pdb *policyv1.PodDisruptionBudget) bool {
	s := pdb.Status
	return pdb.Generation == s.ObservedGeneration &&
		s.ExpectedPods > 0 &&
		s.CurrentHealthy >= s.ExpectedPods &&
		len(s.DisruptedPods) == 0 &&
		s.DisruptionsAllowed == 0
}

func isNotFound(err error) bool { return apierrors.IsNotFound(err) }
