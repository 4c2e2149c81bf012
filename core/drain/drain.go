// Package drain empties a Kubernetes node before its machine is deleted, the way Gardener MCM
// does, while keeping to PodDisruptionBudgets:
//
//   - the node is cordoned; mirror pods and DaemonSet pods stay; finished pods are deleted;
//   - pods without persistent volumes are evicted in parallel through the Eviction API, so a
//     PodDisruptionBudget that allows no disruption blocks them (retried every
//     EvictRetryInterval, at most MaxEvictRetries times);
//   - pods with persistent volumes are evicted one at a time, highest priority first, and each
//     waits until its volumes have detached from the node (IDs from Drainer.VolumeIDs, i.e. the
//     driver's GetVolumeIDs) and, within PVReattachTimeout, attached elsewhere;
//   - a PodDisruptionBudget that can never allow an eviction (misconfigured) is reported at
//     once through Options.OnProblem and in the returned error, instead of after hours of retries;
//     a budget that refuses an eviction for now is reported through Options.OnBlocked;
//   - Force mode deletes every pod with a zero grace period and waits for no volume.
//
// Every wait is bounded by the caller's context and the timeouts in Options; nothing sleeps
// unboundedly. Deciding when to force (drain timeout, force-deletion label, node NotReady) and
// whether a node joined at all is the caller's job.
package drain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// Defaults of Options.
const (
	DefaultEvictRetryInterval = 20 * time.Second
	DefaultPollInterval       = 5 * time.Second
	DefaultPVDetachTimeout    = 2 * time.Minute
	DefaultPVReattachTimeout  = 90 * time.Second
	DefaultMaxEvictRetries    = 360
	DefaultParallelism        = 20
	// PodDeletionBuffer is added to a pod's grace period when waiting for it to go away.
	PodDeletionBuffer = 30 * time.Second
	// ForceDeletionWait bounds the wait for force-deleted pods to disappear.
	ForceDeletionWait = time.Minute
)

// Options tune one drain.
type Options struct {
	// Force deletes every pod with a zero grace period instead of evicting it, and does not
	// wait for volumes.
	Force bool
	// SkipCordon leaves spec.unschedulable alone: the caller keeps new pods off the node by
	// other means (machine preservation taints the node instead, so a node an operator
	// cordoned is not uncordoned when preservation ends, as in MCM).
	SkipCordon bool
	// Timeout bounds the graceful part of the drain (also bounded by the context); a pod's
	// deletion wait is min(its grace period, Timeout) + PodDeletionBuffer. Zero means no bound
	// besides the context.
	Timeout time.Duration
	// MaxEvictRetries bounds the eviction attempts of a pod refused by a PodDisruptionBudget.
	MaxEvictRetries int32
	// EvictRetryInterval is the wait between refused evictions.
	EvictRetryInterval time.Duration
	// PollInterval is how often pod deletion and volume detachment are checked.
	PollInterval time.Duration
	// PVDetachTimeout is added to a pod's grace period to bound the wait for its volumes to
	// detach from the node.
	PVDetachTimeout time.Duration
	// PVReattachTimeout bounds the wait for those volumes to attach to another node; running
	// out is not an error.
	PVReattachTimeout time.Duration
	// Parallelism bounds the pods evicted or deleted at once.
	Parallelism int
	// OnProblem, when set, is called as soon as a problem that needs a human is found (a
	// *MisconfiguredPDBError), before the drain returns.
	OnProblem func(error)
	// OnBlocked, when set, is called the first time a budget refuses the eviction of a pod (an
	// *EvictionBlockedError with Attempts 1); the drain goes on retrying. It lets the caller
	// show what the drain waits for.
	OnBlocked func(error)
	// OnPods, when set, is called once the drain knows it has pods to move (how many), before
	// the first is evicted or deleted; a node without such pods drains without the call. It
	// lets the caller record a drain that may take a while.
	OnPods func(n int)
}

func (o Options) withDefaults() Options {
	if o.MaxEvictRetries <= 0 {
		o.MaxEvictRetries = DefaultMaxEvictRetries
	}
	if o.EvictRetryInterval <= 0 {
		o.EvictRetryInterval = DefaultEvictRetryInterval
	}
	if o.PollInterval <= 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.PVDetachTimeout <= 0 {
		o.PVDetachTimeout = DefaultPVDetachTimeout
	}
	if o.PVReattachTimeout <= 0 {
		o.PVReattachTimeout = DefaultPVReattachTimeout
	}
	if o.Parallelism <= 0 {
		o.Parallelism = DefaultParallelism
	}
	return o
}

// VolumeIDsFunc maps persistent volume specs to the provider's volume IDs, skipping volumes of
// other drivers (the driver's GetVolumeIDs).
type VolumeIDsFunc func(ctx context.Context, specs []*corev1.PersistentVolumeSpec) ([]string, error)

// Drainer drains nodes of one cluster.
type Drainer struct {
	// Client of the cluster the node belongs to.
	Client kubernetes.Interface
	// VolumeIDs maps volumes to provider IDs; nil (or an error) means the volumes of a pod are
	// not tracked, so its eviction does not wait for them.
	VolumeIDs VolumeIDsFunc
	// Log receives progress; nil means slog.Default().
	Log *slog.Logger
}

// MisconfiguredPDBError reports a PodDisruptionBudget that allows no voluntary eviction even
// though every pod it covers is healthy, so draining would wait forever.
type MisconfiguredPDBError struct {
	// PDB is namespace/name of the budget.
	PDB string
	// Pods are namespace/name of the pods it blocks on this node.
	Pods []string
}

func (e *MisconfiguredPDBError) Error() string {
	return fmt.Sprintf("pod disruption budget %s is misconfigured and requires zero voluntary evictions (it blocks %s): fix its minAvailable/maxUnavailable or delete the machine with label force-deletion=True",
		e.PDB, strings.Join(e.Pods, ", "))
}

// EvictionBlockedError reports a pod whose eviction a PodDisruptionBudget kept refusing.
type EvictionBlockedError struct {
	Pod      string
	Attempts int32
	Reason   string
	// Budget is what the API server said of the budget that refused ("The disruption budget db
	// needs 2 healthy pods and has 2 currently"); empty when it named none.
	Budget string
}

func (e *EvictionBlockedError) Error() string {
	s := fmt.Sprintf("eviction of pod %s refused: %s", e.Pod, e.Reason)
	if e.Attempts > 1 {
		s = fmt.Sprintf("eviction of pod %s refused %d times: %s", e.Pod, e.Attempts, e.Reason)
	}
	if e.Budget != "" {
		s += " (" + strings.TrimSuffix(e.Budget, ".") + ")"
	}
	return s
}

// Drain empties nodeName. It returns nil when every pod that must go is gone; otherwise an
// error joining every problem (errors.As finds *MisconfiguredPDBError and
// *EvictionBlockedError). A missing node is not an error: there is nothing to drain.
func (d *Drainer) Drain(ctx context.Context, nodeName string, opts Options) error {
	if nodeName == "" {
		return errors.New("drain: no node name given")
	}
	opts = opts.withDefaults()
	if opts.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opts.Timeout)
		defer cancel()
	}
	log := d.log().With("node", nodeName, "force", opts.Force)

	if err := d.cordonUnlessSkipped(ctx, nodeName, opts.SkipCordon); err != nil {
		if apierrors.IsNotFound(err) {
			log.Info("drain: node is gone, nothing to drain")
			return nil
		}
		if !opts.Force {
			return fmt.Errorf("drain: cordon node %s: %w", nodeName, err)
		}
		log.Warn("drain: cordon failed, forcing on", "err", err)
	}

	pods, err := d.podsToDrain(ctx, nodeName)
	if err != nil {
		return err
	}
	if len(pods) == 0 {
		log.Info("drain: node is empty")
		return nil
	}
	log.Info("drain: draining", "pods", len(pods))
	if opts.OnPods != nil {
		opts.OnPods(len(pods))
	}

	if opts.Force {
		return d.forceDelete(ctx, pods, opts)
	}

	var errs drainErrors
	plain, withVolumes, err := d.sortOut(ctx, pods, opts, &errs)
	if err != nil {
		return err
	}
	d.evictInParallel(ctx, plain, opts, &errs)
	d.evictWithVolumesInTurn(ctx, nodeName, withVolumes, sharedClaims(pods), opts, &errs)
	if err := errs.join(); err != nil {
		return fmt.Errorf("drain: node %s: %w", nodeName, err)
	}
	log.Info("drain: node drained")
	return nil
}

// drainErrors collects the errors of a drain's evictions, which run in parallel.
type drainErrors struct {
	mu   sync.Mutex
	errs []error
}

func (e *drainErrors) add(err error) {
	e.mu.Lock()
	e.errs = append(e.errs, err)
	e.mu.Unlock()
}

func (e *drainErrors) join() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return errors.Join(e.errs...)
}

// sortOut reports the pods a misconfigured PodDisruptionBudget blocks (they are not evicted)
// and sorts the rest into pods without and with volumes.
func (d *Drainer) sortOut(ctx context.Context, pods []corev1.Pod, opts Options, errs *drainErrors) (plain, withVolumes []corev1.Pod, err error) {
	blocked, err := d.misconfiguredPDBs(ctx, pods)
	if err != nil {
		return nil, nil, err
	}
	for _, e := range blocked {
		if opts.OnProblem != nil {
			opts.OnProblem(e)
		}
		errs.add(e)
	}
	skip := map[types.UID]bool{}
	for _, e := range blocked {
		for _, p := range pods {
			if slices.Contains(e.Pods, p.Namespace+"/"+p.Name) {
				skip[p.UID] = true
			}
		}
	}
	for _, p := range pods {
		switch {
		case skip[p.UID]:
		case hasPVC(&p):
			withVolumes = append(withVolumes, p)
		default:
			plain = append(plain, p)
		}
	}
	return plain, withVolumes, nil
}

// evictInParallel evicts pods without volumes, opts.Parallelism at a time, each waiting until
// its pod is gone.
func (d *Drainer) evictInParallel(ctx context.Context, pods []corev1.Pod, opts Options, errs *drainErrors) {
	sem := make(chan struct{}, opts.Parallelism)
	var wg sync.WaitGroup
	for i := range pods {
		p := pods[i]
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := d.evictAndWait(ctx, &p, opts); err != nil {
				errs.add(err)
			}
		}()
	}
	wg.Wait()
}

// evictWithVolumesInTurn evicts pods with volumes one at a time, highest priority first, each
// waiting for its volumes to detach.
func (d *Drainer) evictWithVolumesInTurn(ctx context.Context, nodeName string, pods []corev1.Pod, shared map[string]bool, opts Options, errs *drainErrors) {
	sort.SliceStable(pods, func(i, j int) bool { return podPriority(&pods[i]) > podPriority(&pods[j]) })
	for i := range pods {
		if ctx.Err() != nil {
			errs.add(fmt.Errorf("drain: %d pods with volumes left when the drain ran out of time: %w", len(pods)-i, ctx.Err()))
			return
		}
		if err := d.evictWithVolumes(ctx, nodeName, &pods[i], shared, opts); err != nil {
			errs.add(err)
		}
	}
}

func (d *Drainer) log() *slog.Logger {
	if d.Log != nil {
		return d.Log
	}
	return slog.Default()
}

// cordonUnlessSkipped cordons the node, or with skip only makes sure it exists (a missing node
// has nothing to drain).
func (d *Drainer) cordonUnlessSkipped(ctx context.Context, nodeName string, skip bool) error {
	if skip {
		_, err := d.Client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		return err
	}
	return d.cordon(ctx, nodeName)
}

func (d *Drainer) cordon(ctx context.Context, nodeName string) error {
	node, err := d.Client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if node.Spec.Unschedulable {
		return nil
	}
	patch := []byte(`{"spec":{"unschedulable":true}}`)
	_, err = d.Client.CoreV1().Nodes().Patch(ctx, nodeName, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	return err
}

// podsToDrain lists the pods that must leave the node: everything except mirror pods and
// DaemonSet pods. Finished pods are included; deleting them is always allowed.
func (d *Drainer) podsToDrain(ctx context.Context, nodeName string) ([]corev1.Pod, error) {
	list, err := d.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", nodeName).String(),
	})
	if err != nil {
		return nil, fmt.Errorf("drain: list pods of node %s: %w", nodeName, err)
	}
	return Evicted(list.Items), nil
}

func isMirrorPod(p *corev1.Pod) bool {
	_, ok := p.Annotations[corev1.MirrorPodAnnotationKey]
	return ok
}

func isDaemonSetPod(p *corev1.Pod) bool {
	if c := metav1.GetControllerOf(p); c != nil && c.Kind == "DaemonSet" {
		return true
	}
	return false
}

func isFinished(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

func hasPVC(p *corev1.Pod) bool {
	for _, v := range p.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			return true
		}
	}
	return false
}

func podPriority(p *corev1.Pod) int32 {
	if p.Spec.Priority != nil {
		return *p.Spec.Priority
	}
	return 0
}

// sharedClaims returns the claims (namespace/name) mounted by more than one pod of the node;
// their volumes stay attached until the last pod leaves, so no single eviction waits for them.
func sharedClaims(pods []corev1.Pod) map[string]bool {
	count := map[string]int{}
	for _, p := range pods {
		seen := map[string]bool{}
		for _, v := range p.Spec.Volumes {
			if v.PersistentVolumeClaim != nil {
				k := p.Namespace + "/" + v.PersistentVolumeClaim.ClaimName
				if !seen[k] {
					seen[k] = true
					count[k]++
				}
			}
		}
	}
	out := map[string]bool{}
	for k, n := range count {
		if n > 1 {
			out[k] = true
		}
	}
	return out
}

func gracePeriod(p *corev1.Pod) time.Duration {
	if p.Spec.TerminationGracePeriodSeconds != nil {
		return time.Duration(*p.Spec.TerminationGracePeriodSeconds) * time.Second
	}
	return time.Duration(corev1.DefaultTerminationGracePeriodSeconds) * time.Second
}

// deletionWait is how long to wait for a pod to go away after its eviction.
func deletionWait(p *corev1.Pod, opts Options) time.Duration {
	g := gracePeriod(p)
	if opts.Timeout > 0 && opts.Timeout < g {
		g = opts.Timeout
	}
	return g + PodDeletionBuffer
}
