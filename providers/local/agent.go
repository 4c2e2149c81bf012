package local

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// What the node agent reports, in the words kubelet and the node lifecycle controller use.
const (
	reasonKubeletReady      = "KubeletReady"
	reasonKubeletNotReady   = "KubeletNotReady"
	messageNotReady         = "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized"
	reasonNodeStatusUnknown = "NodeStatusUnknown"
	messageStatusUnknown    = "Kubelet stopped posting node status."
	// annotationControllerManagedAttach is the annotation kubelet registers with by default:
	// the attach/detach controller, not kubelet, attaches the node's volumes.
	annotationControllerManagedAttach = "volumes.kubernetes.io/controller-managed-attach-detach"
	// KubeletVersion is what local nodes report as their kubelet version.
	KubeletVersion = "v1.36.3-machinist-local"
	// statusEvery is how many heartbeats pass between full node status reports while nothing
	// changes: with the default 10 s heartbeat every 5 minutes, kubelet's default
	// nodeStatusReportFrequency. The Lease is the heartbeat, as with kubelet.
	statusEvery = 30
	// beatTimeout bounds the API calls of one beat.
	beatTimeout = 15 * time.Second
)

// The taints the node lifecycle controller manages for a node that is not ready or whose
// status is unknown; the API server's TaintNodesByCondition admission puts the first on every
// new node.
var (
	taintNotReady           = corev1.Taint{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule}
	taintUnreachable        = corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoSchedule}
	taintUnreachableExecute = corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute}
)

// Node states as the lifecycle taints see them.
const (
	stateReady    = "ready"
	stateNotReady = "not-ready"
	stateUnknown  = "unknown"
)

// agent plays kubelet for one machine's node: it registers the node complete (labels, taints,
// capacity, pod CIDR), renews its Lease, reports its status, and lets the cluster's pod tracker
// run the pods bound to it while it is up. Where no kube-controller-manager runs, it also plays
// the node lifecycle controller for its node (Unknown after the grace period, the not-ready and
// unreachable taints). The scheduler runs its beats one at a time; mu is held during a beat so
// removal can wait for a running one.
type agent struct {
	rec     *record
	shape   nodeShape
	cluster *cluster // nil when the machine has no target cluster
	log     *slog.Logger
	ips     *ipPool // nil without a pod CIDR

	mu sync.Mutex
	// Beat state, guarded by mu.
	registered bool
	lease      *coordinationv1.Lease
	lastBeat   time.Time // last heartbeat, or when the agent started watching a silent node
	reported   corev1.ConditionStatus
	beats      int
	silent     bool   // the heartbeat was stopped since the last status report
	unknown    bool   // the emulated lifecycle marked the node Unknown
	taints     string // lifecycle state the node's taints were last set for ("" = not yet)
	failing    bool   // the last beat failed (log once per outage)
	// restored is set for an agent restarted from the state dir until it has registered: its
	// node and Lease most likely exist, so it reads them instead of trying to create them.
	restored bool
	// leaseFirst is set for a restored agent until its first beat has renewed its Lease alone:
	// after a restart of the provider every node's Lease is renewed before any node registers
	// (one request each), so none gets older than a node lifecycle controller's grace period
	// while thousands of registrations queue behind one client's rate limit.
	leaseFirst bool
	// forgotten reports whether the machine's record is gone (deleted by another process), so
	// a node deleted with it is not registered again.
	forgotten func() bool

	stopped  atomic.Bool // the heartbeat switch
	removed  atomic.Bool
	updating atomic.Bool // an in-place update of the node runs (update.go)
	// What the pod tracker reads: the kubelet is up (registered and beating), and the node is
	// Ready (pods get their network; until then only host-network pods start).
	up       atomic.Bool
	netReady atomic.Bool

	// Scheduler fields, guarded by scheduler.mu.
	index    int
	due      time.Time
	running  bool
	runAgain time.Time
}

func newAgent(rec *record, c *cluster, log *slog.Logger, stopped bool) *agent {
	a := &agent{rec: rec, shape: rec.shape(), cluster: c, log: log.With("machine", rec.Name), index: -1, ips: newIPPool(rec.PodCIDR)}
	a.stopped.Store(stopped)
	return a
}

// bootAt is when the machine's node first registers: after its creation, or after its last
// start when it was stopped.
func (a *agent) bootAt() time.Time {
	if !a.rec.RestartAt.IsZero() {
		return a.rec.RestartAt
	}
	return a.rec.CreatedAt.Add(a.rec.Spec.BootDelay)
}

// readyAt is when the node becomes Ready (zero: never).
func (a *agent) readyAt() time.Time {
	if a.rec.Spec.NeverReady {
		return time.Time{}
	}
	return a.bootAt().Add(a.rec.Spec.ReadyDelay)
}

// readyStatus is the Ready status kubelet reports at now.
func (a *agent) readyStatus(now time.Time) corev1.ConditionStatus {
	if at := a.readyAt(); !at.IsZero() && !now.Before(at) {
		return corev1.ConditionTrue
	}
	return corev1.ConditionFalse
}

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
	retryAt := now.Add(min(interval, 2*time.Second))

	if !a.registered {
		if boot := a.bootAt(); now.Before(boot) {
			return boot
		}
		if a.forgotten != nil && a.forgotten() {
			return now.Add(time.Hour) // the driver's sync removes the agent
		}
		if a.leaseFirst && !a.stopped.Load() {
			err := a.patchLease(ctx, now)
			switch {
			case err == nil:
				a.leaseFirst = false
				a.lastBeat = now
				// Register within the next interval, spread like the restored heartbeats.
				return now.Add(rand.N(interval) + 1)
			case !apierrors.IsNotFound(err):
				a.fail("renew lease", err)
				return retryAt
			}
			a.leaseFirst = false // no Lease (or node) any more: register creates them
		}
		if err := a.register(ctx, now); err != nil {
			a.fail("register node", err)
			return retryAt
		}
		a.recovered()
		a.setUp(!a.stopped.Load(), a.reported == corev1.ConditionTrue)
		return a.next(now)
	}

	if a.stopped.Load() {
		a.setUp(false, false)
		a.silent = true
		if a.unknown || !a.cluster.emulatesLifecycle(ctx, now) {
			return now.Add(interval)
		}
		// The node lifecycle controller's view: no heartbeat for the grace period.
		grace := a.rec.Spec.NodeMonitorGracePeriod
		if silent := now.Sub(a.lastBeat); silent < grace {
			return now.Add(min(interval, grace-silent))
		}
		if err := a.markUnknown(ctx, now); err != nil {
			if apierrors.IsNotFound(err) {
				a.registered = false
			}
			a.fail("mark node status unknown", err)
			return retryAt
		}
		a.recovered()
		a.log.Info("local: node status unknown: heartbeat stopped", "grace", grace)
		return now.Add(interval)
	}

	if err := a.heartbeat(ctx, now); err != nil {
		if apierrors.IsNotFound(err) {
			// Someone deleted the node: kubelet registers it again while the machine exists.
			a.registered = false
			a.setUp(false, false)
			return now
		}
		a.fail("heartbeat", err)
		return retryAt
	}
	a.recovered()
	a.setUp(true, a.reported == corev1.ConditionTrue)
	return a.next(now)
}

// next is when the next beat is due: one interval on, or earlier when the node turns Ready.
func (a *agent) next(now time.Time) time.Time {
	next := now.Add(a.rec.Spec.HeartbeatInterval)
	if at := a.readyAt(); a.reported != corev1.ConditionTrue && !at.IsZero() && at.Before(next) {
		next = at
	}
	return next
}

// setUp publishes the kubelet's state to the pod tracker, and has it look at the node's pods
// again when they can progress (the kubelet came back, or the network became ready).
func (a *agent) setUp(up, netReady bool) {
	wasUp := a.up.Swap(up)
	wasReady := a.netReady.Swap(netReady)
	if up && (!wasUp || (netReady && !wasReady)) {
		a.cluster.pods.requeueNode(a.rec.Name)
	}
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
// heartbeat is stopped, reports its status and renews its Lease. An agent restored from the
// state dir starts from reading its node and Lease: after a provider restart thousands of agents
// register at once, and each create that finds its object there already is a wasted request.
func (a *agent) register(ctx context.Context, now time.Time) error {
	nodes := a.cluster.core.Nodes()
	var node *corev1.Node
	var err error
	created := false
	if a.restored {
		node, err = nodes.Get(ctx, a.rec.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			node, err = nodes.Create(ctx, a.newNode(now), metav1.CreateOptions{})
			created = err == nil
		}
	} else {
		node, err = nodes.Create(ctx, a.newNode(now), metav1.CreateOptions{})
		created = err == nil
		if apierrors.IsAlreadyExists(err) {
			node, err = nodes.Get(ctx, a.rec.Name, metav1.GetOptions{})
		}
	}
	if err != nil {
		return err
	}
	if node.Spec.ProviderID != a.rec.ProviderID {
		return fmt.Errorf("node %s exists with providerID %q, not %q: delete that node", node.Name, node.Spec.ProviderID, a.rec.ProviderID)
	}
	a.taints = ""
	a.unknown = false
	a.reported = ""
	if c := findCondition(node.Status.Conditions, corev1.NodeReady); c != nil {
		a.reported = c.Status
		a.unknown = c.Status == corev1.ConditionUnknown
	}
	// A silent node is watched from now on, as the lifecycle controller does after a restart.
	a.lastBeat = now
	if a.stopped.Load() && !created {
		a.registered = true
		a.silent = true
		return nil
	}
	known := node // the node as created, read or written: the first taint update needs no GET
	if !created {
		if known, err = a.postStatusFrom(ctx, now, node); err != nil {
			return err
		}
	}
	if err := a.syncTaintsOf(ctx, now, known); err != nil {
		return err
	}
	if err := a.renewLease(ctx, now, node.UID); err != nil {
		return err
	}
	a.registered = true
	a.restored = false
	a.silent = false
	return nil
}

// heartbeat renews the Lease and reports the node status every statusEvery beats, or at once
// when it changes (turning Ready, back from silence).
func (a *agent) heartbeat(ctx context.Context, now time.Time) error {
	if err := a.renewLease(ctx, now, ""); err != nil {
		return err
	}
	a.lastBeat = now
	a.beats++
	if !a.silent && a.reported == a.readyStatus(now) && a.beats%statusEvery != 0 {
		return a.syncTaints(ctx, now)
	}
	wasSilent := a.silent || a.unknown
	if err := a.postStatus(ctx, now); err != nil {
		return err
	}
	a.silent = false
	if err := a.syncTaints(ctx, now); err != nil {
		return err
	}
	if wasSilent {
		a.log.Info("local: node reporting again: heartbeat resumed")
	}
	return nil
}

// postStatus reports kubelet's conditions: Ready (or NotReady before readyAt) and no pressure.
func (a *agent) postStatus(ctx context.Context, now time.Time) error {
	_, err := a.postStatusFrom(ctx, now, nil)
	return err
}

// postStatusFrom is postStatus starting from node when the agent has just read it (nil: read
// it); a conflict reads it again. It returns the node as written.
func (a *agent) postStatusFrom(ctx context.Context, now time.Time, node *corev1.Node) (*corev1.Node, error) {
	ready := a.readyStatus(now)
	var written *corev1.Node
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := node
		node = nil
		if cur == nil {
			var err error
			if cur, err = a.cluster.core.Nodes().Get(ctx, a.rec.Name, metav1.GetOptions{}); err != nil {
				return err
			}
		} else {
			cur = cur.DeepCopy()
		}
		cur.Status.Conditions = a.conditions(now, ready, cur.Status.Conditions)
		var err error
		written, err = a.cluster.core.Nodes().UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return nil, err
	}
	a.reported = ready
	a.unknown = false
	return written, nil
}

// syncTaints sets the lifecycle taints for the reported state, where the agents emulate the
// node lifecycle controller and only when the state changed since the last time.
func (a *agent) syncTaints(ctx context.Context, now time.Time) error {
	return a.syncTaintsOf(ctx, now, nil)
}

// syncTaintsOf is syncTaints starting from node when the agent holds a current copy (nil: read
// it).
func (a *agent) syncTaintsOf(ctx context.Context, now time.Time, node *corev1.Node) error {
	state := stateNotReady
	switch {
	case a.unknown:
		state = stateUnknown
	case a.reported == corev1.ConditionTrue:
		state = stateReady
	}
	if a.taints == state || !a.cluster.emulatesLifecycle(ctx, now) {
		return nil
	}
	var add, remove []corev1.Taint
	switch state {
	case stateReady:
		remove = []corev1.Taint{taintNotReady, taintUnreachable, taintUnreachableExecute}
	case stateNotReady:
		add, remove = []corev1.Taint{taintNotReady}, []corev1.Taint{taintUnreachable, taintUnreachableExecute}
	case stateUnknown:
		added := metav1.NewTime(now)
		execute := taintUnreachableExecute
		execute.TimeAdded = &added
		add, remove = []corev1.Taint{taintUnreachable, execute}, []corev1.Taint{taintNotReady}
	}
	if err := a.setTaints(ctx, node, add, remove); err != nil {
		return err
	}
	a.taints = state
	return nil
}

// kubeletConditions are the conditions kubelet posts and the node lifecycle controller turns
// Unknown when kubelet falls silent.
var kubeletConditions = []corev1.NodeConditionType{corev1.NodeReady, corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure}

// markUnknown does what the node lifecycle controller does when a node stops posting status:
// kubelet's conditions become Unknown (reason NodeStatusUnknown) and the node is tainted
// unreachable.
func (a *agent) markUnknown(ctx context.Context, now time.Time) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := a.cluster.core.Nodes().Get(ctx, a.rec.Name, metav1.GetOptions{})
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
		_, err = a.cluster.core.Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return err
	}
	a.unknown = true
	a.reported = corev1.ConditionUnknown
	return a.syncTaints(ctx, now)
}

// setTaints adds and removes taints (matched by key and effect), leaving taints of others alone.
// It starts from known when given (the node just created), else from a fresh read; a conflict
// reads it again.
func (a *agent) setTaints(ctx context.Context, known *corev1.Node, add, remove []corev1.Taint) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node := known
		known = nil
		if node == nil {
			var err error
			if node, err = a.cluster.core.Nodes().Get(ctx, a.rec.Name, metav1.GetOptions{}); err != nil {
				return err
			}
		} else {
			node = node.DeepCopy()
		}
		matches := func(t corev1.Taint) func(corev1.Taint) bool {
			return func(o corev1.Taint) bool { return t.MatchTaint(&o) }
		}
		taints := slices.DeleteFunc(slices.Clone(node.Spec.Taints), func(t corev1.Taint) bool {
			return slices.ContainsFunc(remove, matches(t)) || slices.ContainsFunc(add, matches(t))
		})
		for _, t := range add {
			// An existing taint keeps its TimeAdded, as the lifecycle controller's does.
			if i := slices.IndexFunc(node.Spec.Taints, matches(t)); i >= 0 {
				t = node.Spec.Taints[i]
			}
			taints = append(taints, t)
		}
		if equalTaints(taints, node.Spec.Taints) {
			return nil
		}
		node.Spec.Taints = taints
		_, err := a.cluster.core.Nodes().Update(ctx, node, metav1.UpdateOptions{})
		return err
	})
}

func equalTaints(a, b []corev1.Taint) bool {
	return slices.EqualFunc(a, b, func(x, y corev1.Taint) bool { return x.MatchTaint(&y) })
}

// renewLease renews the node's Lease in kube-node-lease, creating it when missing. At
// registration (nodeUID given) it creates the Lease first: a new node has none, so the usual
// case costs one request.
func (a *agent) renewLease(ctx context.Context, now time.Time, nodeUID types.UID) error {
	leases := a.cluster.coord.Leases(corev1.NamespaceNodeLease)
	renew := metav1.NewMicroTime(now)
	if a.lease == nil && nodeUID != "" && !a.restored {
		created, err := leases.Create(ctx, a.newLease(nodeUID, renew), metav1.CreateOptions{})
		if err == nil {
			a.lease = created
			return nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
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
		node, err := a.cluster.core.Nodes().Get(ctx, a.rec.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		nodeUID = node.UID
	}
	a.lease, err = leases.Create(ctx, a.newLease(nodeUID, renew), metav1.CreateOptions{})
	return err
}

// patchLease renews the node's Lease with one merge patch of its renew time, reading nothing
// first; the agent keeps the patched Lease for its next renewal.
func (a *agent) patchLease(ctx context.Context, now time.Time) error {
	renew, err := metav1.NewMicroTime(now).MarshalJSON()
	if err != nil {
		return err
	}
	patch := append(append([]byte(`{"spec":{"renewTime":`), renew...), `}}`...)
	l, err := a.cluster.coord.Leases(corev1.NamespaceNodeLease).Patch(ctx, a.rec.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return err
	}
	a.lease = l
	return nil
}

// newLease is the node's Lease as kubelet creates it.
func (a *agent) newLease(nodeUID types.UID, renew metav1.MicroTime) *coordinationv1.Lease {
	return &coordinationv1.Lease{
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
}

// newNode is the Node kubelet registers for the machine (with --node-labels and
// --register-with-taints): complete with labels, annotations, taints, capacity and pod CIDR in
// its first create, so nobody ever sees the node without them.
func (a *agent) newNode(now time.Time) *corev1.Node {
	s := a.shape
	annotations := map[string]string{annotationControllerManagedAttach: "true"}
	for k, v := range s.Annotations {
		annotations[k] = v
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: a.rec.Name, Labels: copyMap(s.Labels), Annotations: annotations},
		Spec:       corev1.NodeSpec{ProviderID: a.rec.ProviderID, Taints: slices.Clone(s.Taints)},
		Status: corev1.NodeStatus{
			Capacity:    s.Capacity.DeepCopy(),
			Allocatable: s.Capacity.DeepCopy(),
			Conditions:  a.conditions(now, a.readyStatus(now), nil),
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
				Architecture:            s.Arch,
			},
		},
	}
	if a.rec.PodCIDR != "" {
		node.Spec.PodCIDR = a.rec.PodCIDR
		node.Spec.PodCIDRs = []string{a.rec.PodCIDR}
	}
	return node
}

func copyMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// conditions returns the node conditions kubelet reports: Ready (True, or False while the
// network is not ready) and the pressure conditions, keeping transition times that did not
// change and the conditions others set.
func (a *agent) conditions(now time.Time, ready corev1.ConditionStatus, old []corev1.NodeCondition) []corev1.NodeCondition {
	hb := metav1.NewTime(now)
	transition := func(t corev1.NodeConditionType, status corev1.ConditionStatus) metav1.Time {
		if c := findCondition(old, t); c != nil && c.Status == status {
			return c.LastTransitionTime
		}
		return hb
	}
	readyCond := corev1.NodeCondition{
		Type: corev1.NodeReady, Status: ready, Reason: reasonKubeletReady, Message: "kubelet is posting ready status",
		LastHeartbeatTime: hb, LastTransitionTime: transition(corev1.NodeReady, ready),
	}
	if ready != corev1.ConditionTrue {
		readyCond.Reason, readyCond.Message = reasonKubeletNotReady, messageNotReady
	}
	out := []corev1.NodeCondition{readyCond}
	for _, p := range []struct {
		t               corev1.NodeConditionType
		reason, message string
	}{
		{corev1.NodeMemoryPressure, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"},
		{corev1.NodeDiskPressure, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"},
		{corev1.NodePIDPressure, "KubeletHasSufficientPID", "kubelet has sufficient PID available"},
	} {
		out = append(out, corev1.NodeCondition{
			Type: p.t, Status: corev1.ConditionFalse, Reason: p.reason,
			Message: p.message, LastHeartbeatTime: hb, LastTransitionTime: transition(p.t, corev1.ConditionFalse),
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
