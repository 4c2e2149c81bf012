package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/internal/waitctx"
)

// The node agent as the in-place update agent (the part of gardener-node-agent that GEP-31 adds):
// when the machine controller has drained a node and set its condition InPlaceUpdate to
// ReadyForUpdate, the agent updates the "machine" and reports with the node's update-result
// label, as gardener-node-agent does (successful; or failed with the update-failed-reason
// annotation).
//
// What it updates to: gardener-node-agent learns its target from the OperatingSystemConfig
// Gardener publishes for the worker pool. A local machine's configuration is its MachineClass,
// so the agent asks registry.Env.UpdateTargets (the controllers of the same process) which class
// the machine's MachineDeployment names now, and applies that class's providerSpec: the node's
// providerSpec labels (added, changed, dropped), zone, instance type, region and capacity. The
// machine keeps its name, VM (record, provider ID, IP, pod CIDR) and node. Without
// UpdateTargets (a driver served by `machinist serve`) the update changes nothing but the boot
// ID, like an update of something the simulation does not model.
//
// The target class's updateDelay is how long the update takes; its updateError makes it fail.
// A class of another provider or another cluster cannot be updated to in place: the update
// fails saying so. After an update the agent deletes the pods left on the node (DaemonSet pods:
// their controllers recreate them), as gardener-node-agent does, and once the MachineDeployment
// controller has finished the node it removes the critical-components-not-ready taint, as
// Gardener's resource manager does when the node's critical pods are ready.

const (
	// updateResync re-offers nodes that are ReadyForUpdate, so an update whose target could not
	// be read (the controllers' cache not ready yet) is tried again.
	updateResync = 30 * time.Second
	// criticalTaintWait bounds how long after an update the agent waits for the
	// MachineDeployment controller to finish the node before it stops looking.
	criticalTaintWait = time.Hour
	// defaultUpdateErrorReason is the update-failed-reason of an updateError without reason.
	defaultUpdateErrorReason = "injected by providerSpec.updateError"
)

// updateWatcher watches a cluster's nodes that are selected for an in-place update (label
// selected-for-update: a few nodes at a time, whatever the cluster's size) and hands those that
// are ReadyForUpdate and have no result yet to onReady.
type updateWatcher struct {
	cluster *cluster
	onReady func(node string)

	mu      sync.Mutex
	started bool
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// watchUpdates starts the cluster's update watcher once.
func (c *cluster) watchUpdates(onReady func(node string)) {
	c.updatesOnce.Do(func() {
		c.updates = &updateWatcher{cluster: c, onReady: onReady}
		c.updates.start()
	})
}

// stopUpdates stops the update watcher, and keeps one from starting later.
func (c *cluster) stopUpdates() {
	c.updatesOnce.Do(func() {})
	c.updates.stop()
}

func (w *updateWatcher) start() {
	w.mu.Lock()
	defer w.mu.Unlock()
	lw := w.cluster.core.Nodes().ListWatch(func(o *metav1.ListOptions) { o.LabelSelector = v1alpha1.LabelNodeSelectedForUpdate })
	informer := cache.NewSharedIndexInformerWithOptions(lw, &corev1.Node{}, cache.SharedIndexInformerOptions{ResyncPeriod: updateResync})
	_, _ = informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    w.observe,
		UpdateFunc: func(_, obj any) { w.observe(obj) },
	})
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	w.started = true
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		informer.RunWithContext(ctx)
	}()
}

func (w *updateWatcher) stop() {
	if w == nil {
		return
	}
	w.mu.Lock()
	started := w.started
	w.mu.Unlock()
	if started {
		w.cancel()
		w.wg.Wait()
	}
}

func (w *updateWatcher) observe(obj any) {
	node, ok := obj.(*corev1.Node)
	if ok && readyForUpdate(node) {
		w.onReady(node.Name)
	}
}

// readyForUpdate: the machine controller drained the node for an update no agent reported on.
func readyForUpdate(node *corev1.Node) bool {
	if _, done := node.Labels[v1alpha1.LabelNodeUpdateResult]; done {
		return false
	}
	c := findCondition(node.Status.Conditions, v1alpha1.NodeConditionInPlaceUpdate)
	return c != nil && c.Status == corev1.ConditionTrue && c.Reason == v1alpha1.ReasonReadyForUpdate
}

// updater performs the in-place updates of the fleet's nodes, each on a goroutine of its own,
// until it stops.
type updater struct {
	*deps
	fleet  *fleet
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newUpdater(d *deps, f *fleet) *updater {
	u := &updater{deps: d, fleet: f}
	u.ctx, u.cancel = context.WithCancel(context.Background())
	return u
}

// stop cancels the updates in flight and waits for them.
func (u *updater) stop() {
	u.cancel()
	u.wg.Wait()
}

// nodeReadyForUpdate starts the update of a node of this driver, unless one runs.
func (u *updater) nodeReadyForUpdate(name string) {
	a := u.fleet.agent(name)
	if a == nil || a.cluster == nil || a.removed.Load() || !a.updating.CompareAndSwap(false, true) {
		return
	}
	u.fleet.mu.Lock()
	if u.fleet.closed {
		u.fleet.mu.Unlock()
		a.updating.Store(false)
		return
	}
	u.wg.Add(1)
	u.fleet.mu.Unlock()
	go func() {
		defer u.wg.Done()
		defer a.updating.Store(false)
		u.updateNode(u.ctx, a)
	}()
}

// updatePlan is what an in-place update does to a machine.
type updatePlan struct {
	class    string       // target MachineClass; "" = none known (the boot ID changes only)
	spec     *machineSpec // the target class's providerSpec; nil = unchanged
	shape    nodeShape    // the node the target class makes, without machine templates
	delay    time.Duration
	failWith string // non-empty: the update fails with this reason
}

// refusedUpdate is a target the agent cannot update to; the update fails with its reason.
type refusedUpdate struct{ reason string }

func (e *refusedUpdate) Error() string { return e.reason }

// updateNode performs the in-place update of a's node and reports its result on the node.
func (u *updater) updateNode(ctx context.Context, a *agent) {
	name := a.rec.Name
	nodes := a.cluster.core.Nodes()
	node, err := nodes.Get(ctx, name, metav1.GetOptions{})
	if err != nil || !readyForUpdate(node) {
		return
	}
	plan, err := u.planUpdate(ctx, a)
	if err != nil {
		var refused *refusedUpdate
		if !errors.As(err, &refused) {
			a.log.Warn("local: in-place update: cannot read what to update to; trying again", "error", err)
			return
		}
		plan = &updatePlan{failWith: refused.reason}
	}
	a.log.Info("local: updating node in place", "class", plan.class, "delay", plan.delay)
	if waitctx.Sleep(ctx, clock.RealClock{}, plan.delay) != nil {
		return
	}
	// The node may have moved on meanwhile (its machine deleted, the labels removed by hand).
	if node, err = nodes.Get(ctx, name, metav1.GetOptions{}); err != nil || !readyForUpdate(node) || a.removed.Load() {
		return
	}
	if plan.failWith == "" {
		err = u.applyUpdate(ctx, a, plan)
		var refused *refusedUpdate
		switch {
		case errors.As(err, &refused):
			plan.failWith = refused.reason
		case err != nil:
			a.log.Warn("local: in-place update: apply failed; trying again", "error", err)
			return
		}
	}
	if plan.failWith != "" {
		if err := u.reportUpdate(ctx, a, plan.failWith); err != nil {
			a.log.Warn("local: in-place update: report failure", "error", err)
			return
		}
		a.log.Info("local: in-place update failed", "reason", plan.failWith)
		return
	}
	if err := u.deleteNodePods(ctx, a); err != nil {
		a.log.Warn("local: in-place update: delete the node's pods; trying again", "error", err)
		return
	}
	if err := u.reportUpdate(ctx, a, ""); err != nil {
		a.log.Warn("local: in-place update: report success; trying again", "error", err)
		return
	}
	a.log.Info("local: node updated in place", "class", plan.class)
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		u.clearCriticalTaint(ctx, a)
	}()
}

// planUpdate reads the target class and decides what the update does.
func (u *updater) planUpdate(ctx context.Context, a *agent) (*updatePlan, error) {
	if u.env.UpdateTargets == nil {
		return &updatePlan{}, nil
	}
	class, err := u.env.UpdateTargets.UpdateTarget(ctx, a.rec.Name)
	if err != nil || class == nil {
		return &updatePlan{}, err
	}
	if err := driver.CheckProvider(class, ProviderName); err != nil {
		return nil, &refusedUpdate{fmt.Sprintf("MachineClass %s is of provider %q: a local machine cannot be updated in place to another provider's class", class.Name, class.Provider)}
	}
	_, ms, err := classSpec(class, u.env.SpecMode)
	if err != nil {
		return nil, &refusedUpdate{fmt.Sprintf("MachineClass %s: %v", class.Name, err)}
	}
	if ms.Cluster != a.rec.Spec.Cluster {
		return nil, &refusedUpdate{fmt.Sprintf("MachineClass %s is of cluster %q, the machine of cluster %q: providerSpec.cluster cannot change in place", class.Name, ms.Cluster, a.rec.Spec.Cluster)}
	}
	shape, err := shapeFor(a.rec.Name, ms, class, nil)
	if err != nil {
		return nil, &refusedUpdate{err.Error()}
	}
	plan := &updatePlan{class: class.Name, spec: ms, shape: shape, delay: ms.UpdateDelay}
	if e := ms.UpdateError; e != nil {
		plan.failWith = e.Reason
		if plan.failWith == "" {
			plan.failWith = defaultUpdateErrorReason
		}
	}
	return plan, nil
}

// applyUpdate gives the machine the target's spec and its node the target's labels, capacity
// and a new boot ID. Labels that come from the machine's nodeTemplate (the machine controller
// keeps those) are left to it.
func (u *updater) applyUpdate(ctx context.Context, a *agent, plan *updatePlan) error {
	name := a.rec.Name
	unlock := u.lockName(name)
	defer unlock()
	if _, err := u.store.get(name); err != nil {
		return fmt.Errorf("local: machine %s: %w", name, err)
	}
	node, err := a.cluster.core.Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	labels := map[string]any{}
	status := map[string]any{"nodeInfo": map[string]any{"bootID": time.Now().UTC().Format(time.RFC3339Nano)}}
	if plan.spec != nil {
		templated := templateLabels(node)
		a.mu.Lock()
		shape := nodeShape{Labels: maps.Clone(a.shape.Labels), Annotations: a.shape.Annotations, Taints: a.shape.Taints,
			Capacity: plan.shape.Capacity.DeepCopy(), Arch: plan.shape.Arch}
		for k := range a.rec.Spec.Labels {
			if _, keep := plan.spec.Labels[k]; !keep && !templated[k] {
				delete(shape.Labels, k)
				labels[k] = nil
			}
		}
		for k, v := range plan.shape.Labels {
			if !templated[k] {
				shape.Labels[k] = v
				labels[k] = v
			}
		}
		updateSpec(&a.rec.Spec, plan.spec)
		a.rec.Class = plan.class
		a.rec.Node = &shape
		a.shape = shape
		rec := *a.rec
		a.mu.Unlock()
		if err := u.store.update(&rec); err != nil {
			return fmt.Errorf("local: record the update of machine %s: %w", name, err)
		}
		status["capacity"] = shape.Capacity
		status["allocatable"] = shape.Capacity
	}
	if len(labels) > 0 {
		if err := u.patchNode(ctx, a, map[string]any{"metadata": map[string]any{"labels": labels}}); err != nil {
			return err
		}
	}
	body, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return err
	}
	_, err = a.cluster.core.Nodes().Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{}, "status")
	return err
}

// updateSpec takes over what an update changes: capacity, labels, topology and the kubelet's
// heartbeat settings. How the machine booted (bootDelay, readyDelay, neverReady), its cluster
// and the heartbeat switch's default (read without the agent's lock) stay.
func updateSpec(dst, src *machineSpec) {
	dst.CPU, dst.Memory, dst.Pods = src.CPU, src.Memory, src.Pods
	dst.Labels = maps.Clone(src.Labels)
	dst.Zone, dst.InstanceType = src.Zone, src.InstanceType
	dst.HeartbeatInterval, dst.NodeMonitorGracePeriod = src.HeartbeatInterval, src.NodeMonitorGracePeriod
}

// templateLabels are the label keys the machine controller last applied to the node from the
// machine's nodeTemplate (they win over the providerSpec's).
func templateLabels(node *corev1.Node) map[string]bool {
	var last struct {
		Labels map[string]string `json:"labels"`
	}
	_ = json.Unmarshal([]byte(node.Annotations[v1alpha1.AnnotationLastAppliedALT]), &last)
	out := make(map[string]bool, len(last.Labels))
	for k := range last.Labels {
		out[k] = true
	}
	return out
}

func (u *updater) patchNode(ctx context.Context, a *agent, patch map[string]any) error {
	body, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	_, err = a.cluster.core.Nodes().Patch(ctx, a.rec.Name, types.MergePatchType, body, metav1.PatchOptions{})
	return err
}

// deleteNodePods deletes the pods still bound to the node (the drain left DaemonSet pods), so
// they start again on the updated node, as gardener-node-agent does.
func (u *updater) deleteNodePods(ctx context.Context, a *agent) error {
	pods := a.cluster.core.Pods(metav1.NamespaceAll)
	list, err := pods.List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", a.rec.Name).String()})
	if err != nil {
		return err
	}
	for _, p := range list.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		err := a.cluster.core.Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return err
		}
	}
	return nil
}

// reportUpdate labels the node update-result: successful when failWith is empty (and drops an
// old update-failed-reason), else failed with failWith as the update-failed-reason.
func (u *updater) reportUpdate(ctx context.Context, a *agent, failWith string) error {
	result, reason := v1alpha1.LabelValueNodeUpdateSuccessful, any(nil)
	if failWith != "" {
		result, reason = v1alpha1.LabelValueNodeUpdateFailed, failWith
	}
	return u.patchNode(ctx, a, map[string]any{"metadata": map[string]any{
		"labels":      map[string]any{v1alpha1.LabelNodeUpdateResult: result},
		"annotations": map[string]any{v1alpha1.AnnotationUpdateFailedReason: reason},
	}})
}

// clearCriticalTaint waits until the MachineDeployment controller has finished the updated
// node (the update labels are gone; it puts the critical-components-not-ready taint on) and
// removes the taint once the node is Ready: the node's critical components run again.
func (u *updater) clearCriticalTaint(ctx context.Context, a *agent) {
	a.mu.Lock()
	interval := a.rec.Spec.HeartbeatInterval
	a.mu.Unlock()
	critical := func(t corev1.Taint) bool { return t.Key == v1alpha1.TaintCriticalComponentsNotReady }
	// Each look ends the wait (true) or waits another heartbeat (false); none fails it.
	_ = wait.PollUntilContextTimeout(ctx, interval, criticalTaintWait, false, func(ctx context.Context) (bool, error) {
		if a.removed.Load() {
			return true, nil
		}
		node, err := a.cluster.core.Nodes().Get(ctx, a.rec.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return true, nil
		case err != nil:
			return false, nil
		}
		if _, selected := node.Labels[v1alpha1.LabelNodeSelectedForUpdate]; selected {
			return false, nil
		}
		if !slices.ContainsFunc(node.Spec.Taints, critical) {
			return true, nil
		}
		if c := findCondition(node.Status.Conditions, corev1.NodeReady); c == nil || c.Status != corev1.ConditionTrue {
			return false, nil
		}
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			n, err := a.cluster.core.Nodes().Get(ctx, a.rec.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, critical)
			_, err = a.cluster.core.Nodes().Update(ctx, n, metav1.UpdateOptions{})
			return err
		})
		if err == nil || apierrors.IsNotFound(err) {
			a.log.Info("local: critical components ready after the in-place update: taint removed", "taint", v1alpha1.TaintCriticalComponentsNotReady)
			return true, nil
		}
		return false, nil
	})
}
