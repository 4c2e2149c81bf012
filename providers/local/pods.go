package local

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
)

// Tunables of the pod tracker.
const (
	// podWorkers is how many pods are worked on at once, whatever the number of nodes and pods;
	// the writes share the cluster client's rate limit with the heartbeats.
	podWorkers = 8
	// podIndexNode indexes the tracker's pods by spec.nodeName.
	podIndexNode = "node"
	// podRetryMin and podRetryMax bound the backoff of a pod whose write failed.
	podRetryMin = 50 * time.Millisecond
	podRetryMax = 30 * time.Second
	// podIPRetry is how often a pod waiting for a free IP on a full node looks again.
	podIPRetry = 30 * time.Second
)

// podTracker plays kubelet for the pods bound to the cluster's local nodes (the kwok model):
// one pod informer per cluster (pods with a spec.nodeName), a work queue keyed by pod and a
// fixed pool of workers. Each pod is dispatched to the agent of its node, which says whether
// its kubelet is up and hands out its IP; a pod whose node is not a local node of this driver
// is ignored. Per event the work is one pod: a status write or a delete when something is due,
// nothing when the pod already looks as it should.
type podTracker struct {
	cluster *cluster
	lookup  func(node string) *agent
	log     *slog.Logger

	failing atomic.Bool // a write failed other than by a conflict (warned once until one succeeds)

	mu       sync.Mutex
	started  bool
	informer cache.SharedIndexInformer
	queue    workqueue.TypedRateLimitingInterface[string]
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

func newPodTracker(c *cluster, lookup func(string) *agent, log *slog.Logger) *podTracker {
	return &podTracker{cluster: c, lookup: lookup, log: log}
}

// start starts the informer and, once it has synced (so every IP in use is known), the
// workers. It is called when the cluster gets its first agent; later calls do nothing.
func (t *podTracker) start() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.started {
		return
	}
	t.started = true
	bound := fields.OneTermNotEqualSelector("spec.nodeName", "").String()
	lw := t.cluster.core.Pods(metav1.NamespaceAll).ListWatch(func(o *metav1.ListOptions) { o.FieldSelector = bound })
	t.informer = cache.NewSharedIndexInformerWithOptions(lw, &corev1.Pod{}, cache.SharedIndexInformerOptions{
		Indexers: cache.Indexers{podIndexNode: func(obj any) ([]string, error) {
			return []string{obj.(*corev1.Pod).Spec.NodeName}, nil
		}},
	})
	// The cache keeps what the kubelet logic reads, not the managed fields.
	_ = t.informer.SetTransform(func(obj any) (any, error) {
		if p, ok := obj.(*corev1.Pod); ok {
			p.ManagedFields = nil
		}
		return obj, nil
	})
	t.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](podRetryMin, podRetryMax),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "local-pods"})
	_, _ = t.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { t.observe(obj) },
		UpdateFunc: func(_, obj any) { t.observe(obj) },
		DeleteFunc: t.forget,
	})
	ctx, cancel := context.WithCancel(context.Background())
	t.cancel = cancel
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		t.informer.RunWithContext(ctx)
	}()
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		if !cache.WaitForCacheSync(ctx.Done(), t.informer.HasSynced) {
			return
		}
		t.wg.Add(podWorkers)
		for range podWorkers {
			go func() {
				defer t.wg.Done()
				for t.next(ctx) {
				}
			}()
		}
	}()
}

// stop ends the informer and the workers and waits for them.
func (t *podTracker) stop() {
	t.mu.Lock()
	started := t.started
	t.mu.Unlock()
	if !started {
		return
	}
	t.cancel()
	t.queue.ShutDown()
	t.wg.Wait()
}

// agentOf returns the agent of the pod's node when it is a node of this tracker's cluster.
func (t *podTracker) agentOf(p *corev1.Pod) *agent {
	a := t.lookup(p.Spec.NodeName)
	if a == nil || a.cluster != t.cluster {
		return nil
	}
	return a
}

// observe records the IP a pod holds (so it is never handed out twice) and queues the pod when
// it is on one of our nodes.
func (t *podTracker) observe(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	a := t.agentOf(p)
	if a == nil {
		return
	}
	a.holdIP(p)
	key, err := cache.MetaNamespaceKeyFunc(p)
	if err == nil {
		t.queue.Add(key)
	}
}

// forget frees the IP of a deleted pod.
func (t *podTracker) forget(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	if a := t.agentOf(p); a != nil && a.ips != nil {
		a.ips.release(p.UID)
	}
}

// requeueNode has the tracker look at every pod of a node again (its kubelet came back or its
// network became ready). The IPs its pods hold are recorded first, so none is handed out twice
// whatever order the pods are worked on.
func (t *podTracker) requeueNode(node string) {
	t.mu.Lock()
	started := t.started
	t.mu.Unlock()
	if !started {
		return
	}
	objs, err := t.informer.GetIndexer().ByIndex(podIndexNode, node)
	if err != nil {
		return
	}
	for _, obj := range objs {
		p := obj.(*corev1.Pod)
		if a := t.agentOf(p); a != nil {
			a.holdIP(p)
		}
	}
	for _, obj := range objs {
		if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
			t.queue.Add(key)
		}
	}
}

// holdIP records the IP a pod's status shows, or frees it once the pod has finished.
func (a *agent) holdIP(p *corev1.Pod) {
	if a.ips == nil || p.Spec.HostNetwork {
		return
	}
	if podFinished(p) {
		a.ips.release(p.UID)
		return
	}
	if p.Status.PodIP != "" {
		a.ips.reserve(p.UID, p.Status.PodIP)
	}
}

func (t *podTracker) next(ctx context.Context) bool {
	key, quit := t.queue.Get()
	if quit {
		return false
	}
	defer t.queue.Done(key)
	after, err := t.sync(ctx, key)
	switch {
	case err != nil:
		if !apierrors.IsConflict(err) && !t.failing.Swap(true) {
			t.log.Warn("local: pods: writing a pod failed; retrying with backoff", "pod", key, "error", err)
		} else {
			t.log.Debug("local: pod: retrying", "pod", key, "error", err)
		}
		t.queue.AddRateLimited(key)
	case after > 0:
		t.queue.Forget(key)
		t.queue.AddAfter(key, after)
	default:
		t.queue.Forget(key)
	}
	if err == nil && t.failing.Swap(false) {
		t.log.Info("local: pods: writes work again")
	}
	return true
}

// sync does what kubelet would do for the pod now, and says when to look again (0: when it
// changes).
func (t *podTracker) sync(ctx context.Context, key string) (time.Duration, error) {
	obj, exists, err := t.informer.GetIndexer().GetByKey(key)
	if err != nil || !exists {
		return 0, err
	}
	p := obj.(*corev1.Pod)
	a := t.agentOf(p)
	if a == nil || !a.up.Load() {
		// Not ours, or its kubelet is down: the pod stays as it is (the node's controllers
		// decide about it); the agent requeues its pods when it comes back.
		return 0, nil
	}
	now := time.Now()
	if p.DeletionTimestamp != nil {
		// The API server set the deletion timestamp to the end of the grace period; the
		// containers run until then (a finished pod has none left), then the pod is removed.
		if wait := p.DeletionTimestamp.Sub(now); wait > 0 && !podFinished(p) {
			return wait, nil
		}
		err := t.cluster.core.Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
			GracePeriodSeconds: ptr.To[int64](0),
			Preconditions:      &metav1.Preconditions{UID: &p.UID},
		})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return 0, err
		}
		if a.ips != nil {
			a.ips.release(p.UID)
		}
		return 0, nil
	}
	if podFinished(p) {
		return 0, nil
	}
	ip := a.rec.InternalIP
	if !p.Spec.HostNetwork {
		if !a.netReady.Load() {
			return 0, nil // started when the node's network is ready
		}
		if a.ips == nil {
			return 0, nil
		}
		var ok bool
		if ip, ok = a.ips.allocate(p.UID); !ok {
			t.log.Warn("local: pod waits for an IP: the node's pod CIDR is full", "pod", key, "node", a.rec.Name, "cidr", a.rec.PodCIDR)
			return podIPRetry, nil
		}
	}
	status, after := kubeletStatus(p, a.rec.InternalIP, ip, now)
	if status == nil {
		return after, nil
	}
	updated := p.DeepCopy()
	updated.Status = *status
	if _, err := t.cluster.core.Pods(p.Namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return 0, nil
		}
		return 0, err // a conflict: the newer pod is queued already; look again after a backoff
	}
	if podFinished(updated) && a.ips != nil {
		a.ips.release(p.UID)
	}
	return after, nil
}
