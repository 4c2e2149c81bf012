package local

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/machinist-io/machinist/internal/kubeclient"
)

// What the node agent reports, in the words kubelet and the node lifecycle controller use.
const (
	reasonKubeletReady      = "KubeletReady"
	reasonNodeStatusUnknown = "NodeStatusUnknown"
	messageStatusUnknown    = "Kubelet stopped posting node status."
	// KubeletVersion is what local nodes report as their kubelet version.
	KubeletVersion = "v1.36.3-machinist-local"
	// statusEvery is how many heartbeats pass between full node status reports while nothing
	// changes; the Lease is the heartbeat, as with kubelet's nodeStatusReportFrequency.
	statusEvery = 6
	// beatTimeout bounds the API calls of one beat.
	beatTimeout = 15 * time.Second
)

// The taints the node lifecycle controller manages for a node whose status is unknown, and the
// one the API server's TaintNodesByCondition admission puts on every new node.
var (
	taintNotReady           = corev1.Taint{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule}
	taintUnreachable        = corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoSchedule}
	taintUnreachableExecute = corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute}
)

// agent plays kubelet for one machine's node (register, renew the Lease, report Ready) and, since
// no kube-controller-manager runs, the node lifecycle controller for it (Ready becomes Unknown
// when the heartbeat stops for longer than the grace period). The scheduler runs its beats one
// at a time; mu is held during a beat so removal can wait for a running one.
type agent struct {
	rec    *record
	client *kubeclient.Clientset
	log    *slog.Logger

	mu sync.Mutex
	// Beat state, guarded by mu.
	registered bool
	lease      *coordinationv1.Lease
	lastBeat   time.Time // last heartbeat, or when the agent started watching a silent node
	readySince time.Time
	beats      int
	unknown    bool // the lifecycle marked the node Unknown
	failing    bool // the last beat failed (log once per outage)
	// forgotten reports whether the machine's record is gone (deleted by another process), so
	// a node deleted with it is not registered again.
	forgotten func() bool

	stopped atomic.Bool // the heartbeat switch
	removed atomic.Bool

	// Scheduler fields, guarded by scheduler.mu.
	index    int
	due      time.Time
	running  bool
	runAgain time.Time
}

func newAgent(rec *record, client *kubeclient.Clientset, log *slog.Logger, stopped bool) *agent {
	a := &agent{rec: rec, client: client, log: log.With("machine", rec.Name), index: -1}
	a.stopped.Store(stopped)
	return a
}

// bootAt is when the machine's node first registers.
func (a *agent) bootAt() time.Time { return a.rec.CreatedAt.Add(a.rec.Spec.BootDelay) }

// beat does what is due now and returns when the next beat is due.
func (a *agent) beat(ctx context.Context, now time.Time) time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.removed.Load() {
		return now.Add(time.Hour)
	}
	ctx, cancel := context.WithTimeout(ctx, beatTimeout)
	defer cancel()
	interval := a.rec.Spec.HeartbeatInterval

	if !a.registered {
		if boot := a.bootAt(); now.Before(boot) {
			return boot
		}
		if a.forgotten != nil && a.forgotten() {
			return now.Add(time.Hour) // the driver's sync removes the agent
		}
		if err := a.register(ctx, now); err != nil {
			a.fail("register node", err)
			return now.Add(min(interval, 2*time.Second))
		}
		a.recovered()
		return now.Add(interval)
	}

	if a.stopped.Load() {
		// The node lifecycle controller's view: no heartbeat for the grace period.
		grace := a.rec.Spec.NodeMonitorGracePeriod
		if a.unknown {
			return now.Add(interval)
		}
		if silent := now.Sub(a.lastBeat); silent < grace {
			return now.Add(min(interval, grace-silent))
		}
		if err := a.markUnknown(ctx, now); err != nil {
			if apierrors.IsNotFound(err) {
				a.registered = false
			}
			a.fail("mark node status unknown", err)
			return now.Add(min(interval, 2*time.Second))
		}
		a.recovered()
		a.log.Info("local: node status unknown: heartbeat stopped", "grace", grace)
		return now.Add(interval)
	}

	if err := a.heartbeat(ctx, now); err != nil {
		if apierrors.IsNotFound(err) {
			// Someone deleted the node: kubelet registers it again while the machine exists.
			a.registered = false
			return now
		}
		a.fail("heartbeat", err)
		return now.Add(min(interval, 2*time.Second))
	}
	a.recovered()
	return now.Add(interval)
}

func (a *agent) fail(what string, err error) {
	if !a.failing {
		a.log.Warn("local: node agent: "+what+" failed; retrying", "error", err)
		a.failing = true
	}
}

func (a *agent) recovered() {
	if a.failing {
		a.log.Info("local: node agent recovered")
		a.failing = false
	}
}

// register creates the node (or adopts an existing one after a restart) and, unless the
// heartbeat is stopped, reports it Ready and clears the taints a Ready node does not carry.
func (a *agent) register(ctx context.Context, now time.Time) error {
	nodes := a.client.CoreV1().Nodes()
	node, err := nodes.Create(ctx, a.newNode(now), metav1.CreateOptions{})
	created := err == nil
	if apierrors.IsAlreadyExists(err) {
		node, err = nodes.Get(ctx, a.rec.Name, metav1.GetOptions{})
	}
	if err != nil {
		return err
	}
	if node.Spec.ProviderID != a.rec.ProviderID {
		return fmt.Errorf("node %s exists with providerID %q, not %q: delete that node", node.Name, node.Spec.ProviderID, a.rec.ProviderID)
	}
	a.readySince = now
	a.unknown = false
	if c := findCondition(node.Status.Conditions, corev1.NodeReady); c != nil {
		if c.Status == corev1.ConditionTrue {
			a.readySince = c.LastTransitionTime.Time
		}
		a.unknown = c.Status == corev1.ConditionUnknown
	}
	// A silent node is watched from now on, as the lifecycle controller does after a restart.
	a.lastBeat = now
	if a.stopped.Load() && !created {
		a.registered = true
		return nil
	}
	if !created {
		if err := a.postStatus(ctx, now); err != nil {
			return err
		}
	}
	if err := a.setTaints(ctx, nil, []corev1.Taint{taintNotReady, taintUnreachable, taintUnreachableExecute}); err != nil {
		return err
	}
	a.unknown = false
	if err := a.renewLease(ctx, now, node.UID); err != nil {
		return err
	}
	a.registered = true
	return nil
}

// heartbeat renews the Lease and, every statusEvery beats or after an outage, reports Ready.
func (a *agent) heartbeat(ctx context.Context, now time.Time) error {
	if err := a.renewLease(ctx, now, ""); err != nil {
		return err
	}
	a.lastBeat = now
	a.beats++
	if !a.unknown && a.beats%statusEvery != 0 {
		return nil
	}
	if err := a.postStatus(ctx, now); err != nil {
		return err
	}
	if a.unknown {
		if err := a.setTaints(ctx, nil, []corev1.Taint{taintUnreachable, taintUnreachableExecute, taintNotReady}); err != nil {
			return err
		}
		a.unknown = false
		a.log.Info("local: node ready again: heartbeat resumed")
	}
	return nil
}

// postStatus reports Ready and no pressure, keeping the Ready transition time.
func (a *agent) postStatus(ctx context.Context, now time.Time) error {
	if a.unknown {
		a.readySince = now
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := a.client.CoreV1().Nodes().Get(ctx, a.rec.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		node.Status.Conditions = a.conditions(now, corev1.ConditionTrue, node.Status.Conditions)
		_, err = a.client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
		return err
	})
}

// kubeletConditions are the conditions kubelet posts and the node lifecycle controller turns
// Unknown when kubelet falls silent.
var kubeletConditions = []corev1.NodeConditionType{corev1.NodeReady, corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure}

// markUnknown does what the node lifecycle controller does when a node stops posting status:
// kubelet's conditions become Unknown (reason NodeStatusUnknown) and the node is tainted
// unreachable.
func (a *agent) markUnknown(ctx context.Context, now time.Time) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := a.client.CoreV1().Nodes().Get(ctx, a.rec.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for i := range node.Status.Conditions {
			c := &node.Status.Conditions[i]
			if !slices.Contains(kubeletConditions, c.Type) {
				continue // conditions of others (e.g. a node problem detector) stay
			}
			if c.Status != corev1.ConditionUnknown {
				c.Status = corev1.ConditionUnknown
				c.LastTransitionTime = metav1.NewTime(now)
			}
			c.Reason = reasonNodeStatusUnknown
			c.Message = messageStatusUnknown
		}
		_, err = a.client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return err
	}
	added := metav1.NewTime(now)
	execute := taintUnreachableExecute
	execute.TimeAdded = &added
	if err := a.setTaints(ctx, []corev1.Taint{taintUnreachable, execute}, []corev1.Taint{taintNotReady}); err != nil {
		return err
	}
	a.unknown = true
	return nil
}

// setTaints adds and removes taints (matched by key and effect), leaving taints of others alone.
func (a *agent) setTaints(ctx context.Context, add, remove []corev1.Taint) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := a.client.CoreV1().Nodes().Get(ctx, a.rec.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		matches := func(t corev1.Taint) func(corev1.Taint) bool {
			return func(o corev1.Taint) bool { return t.MatchTaint(&o) }
		}
		taints := slices.DeleteFunc(slices.Clone(node.Spec.Taints), func(t corev1.Taint) bool {
			return slices.ContainsFunc(remove, matches(t)) || slices.ContainsFunc(add, matches(t))
		})
		taints = append(taints, add...)
		if equalTaints(taints, node.Spec.Taints) {
			return nil
		}
		node.Spec.Taints = taints
		_, err = a.client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
		return err
	})
}

func equalTaints(a, b []corev1.Taint) bool {
	return slices.EqualFunc(a, b, func(x, y corev1.Taint) bool { return x.MatchTaint(&y) })
}

// renewLease renews the node's Lease in kube-node-lease, creating it when missing.
func (a *agent) renewLease(ctx context.Context, now time.Time, nodeUID types.UID) error {
	leases := a.client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	renew := metav1.NewMicroTime(now)
	if a.lease != nil {
		l := a.lease.DeepCopy()
		l.Spec.RenewTime = &renew
		updated, err := leases.Update(ctx, l, metav1.UpdateOptions{})
		if err == nil {
			a.lease = updated
			return nil
		}
		a.lease = nil
		if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			return err
		}
	}
	cur, err := leases.Get(ctx, a.rec.Name, metav1.GetOptions{})
	switch {
	case err == nil:
		cur.Spec.RenewTime = &renew
		cur.Spec.HolderIdentity = ptr.To(a.rec.Name)
		cur.Spec.LeaseDurationSeconds = ptr.To(int32(a.rec.Spec.NodeMonitorGracePeriod / time.Second))
		a.lease, err = leases.Update(ctx, cur, metav1.UpdateOptions{})
		return err
	case !apierrors.IsNotFound(err):
		return err
	}
	if nodeUID == "" {
		node, err := a.client.CoreV1().Nodes().Get(ctx, a.rec.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		nodeUID = node.UID
	}
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name:      a.rec.Name,
			Namespace: corev1.NamespaceNodeLease,
			// As kubelet does, so the lease goes with its node where a garbage collector runs.
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: a.rec.Name, UID: nodeUID}},
		},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(a.rec.Name),
			LeaseDurationSeconds: ptr.To(max(int32(a.rec.Spec.NodeMonitorGracePeriod/time.Second), 1)),
			RenewTime:            &renew,
		},
	}
	a.lease, err = leases.Create(ctx, lease, metav1.CreateOptions{})
	return err
}

// newNode is the Node kubelet would register for the machine.
func (a *agent) newNode(now time.Time) *corev1.Node {
	s := a.rec.Spec
	labels := map[string]string{}
	for k, v := range s.Labels {
		labels[k] = v
	}
	labels[corev1.LabelHostname] = a.rec.Name
	labels[corev1.LabelOSStable] = "linux"
	labels[corev1.LabelArchStable] = runtime.GOARCH
	labels[corev1.LabelInstanceTypeStable] = s.InstanceType
	labels[corev1.LabelTopologyZone] = s.Zone
	labels[corev1.LabelTopologyRegion] = "local"
	resources := corev1.ResourceList{
		corev1.ResourceCPU:    s.CPU,
		corev1.ResourceMemory: s.Memory,
		corev1.ResourcePods:   *resource.NewQuantity(int64(s.Pods), resource.DecimalSI),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: a.rec.Name, Labels: labels},
		Spec:       corev1.NodeSpec{ProviderID: a.rec.ProviderID},
		Status: corev1.NodeStatus{
			Capacity:    resources,
			Allocatable: resources.DeepCopy(),
			Conditions:  a.conditions(now, corev1.ConditionTrue, nil),
			Addresses:   addresses(a.rec),
			NodeInfo: corev1.NodeSystemInfo{
				MachineID:               a.rec.Name,
				SystemUUID:              a.rec.Name,
				BootID:                  a.rec.CreatedAt.UTC().Format(time.RFC3339Nano),
				KernelVersion:           "local",
				OSImage:                 "machinist local node",
				ContainerRuntimeVersion: "local://1",
				KubeletVersion:          KubeletVersion,
				OperatingSystem:         "linux",
				Architecture:            runtime.GOARCH,
			},
		},
	}
}

// conditions returns the node conditions kubelet reports: Ready and the pressure conditions.
func (a *agent) conditions(now time.Time, ready corev1.ConditionStatus, old []corev1.NodeCondition) []corev1.NodeCondition {
	hb := metav1.NewTime(now)
	since := metav1.NewTime(a.readySince)
	if a.readySince.IsZero() {
		since = hb
	}
	out := []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: ready, Reason: reasonKubeletReady,
		Message: "kubelet is posting ready status", LastHeartbeatTime: hb, LastTransitionTime: since,
	}}
	for _, p := range []struct {
		t               corev1.NodeConditionType
		reason, message string
	}{
		{corev1.NodeMemoryPressure, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"},
		{corev1.NodeDiskPressure, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"},
		{corev1.NodePIDPressure, "KubeletHasSufficientPID", "kubelet has sufficient PID available"},
	} {
		transition := hb
		if c := findCondition(old, p.t); c != nil && c.Status == corev1.ConditionFalse {
			transition = c.LastTransitionTime
		}
		out = append(out, corev1.NodeCondition{
			Type: p.t, Status: corev1.ConditionFalse, Reason: p.reason,
			Message: p.message, LastHeartbeatTime: hb, LastTransitionTime: transition,
		})
	}
	// Keep conditions others set (e.g. a node problem detector).
	for _, c := range old {
		if findCondition(out, c.Type) == nil {
			out = append(out, c)
		}
	}
	return out
}

func findCondition(conds []corev1.NodeCondition, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}
