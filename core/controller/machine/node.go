package machine

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

var metav1Zero metav1.Time

// appliedTemplate is what the controller last put on a node from the machine's nodeTemplate,
// kept in the node annotation last-applied-anno-labels-taints so entries removed from the
// template are removed from the node (and entries others set are left alone).
type appliedTemplate struct {
	Labels      map[string]string
	Annotations map[string]string
	Taints      []corev1.Taint
}

// readApplied reads the last-applied record. MCM writes the machine's whole nodeTemplate there
// (metadata.labels, metadata.annotations, spec.taints), and so does machinist; machinist before
// it wrote {labels, annotations, taints}, still read so an upgrade or a handover from MCM
// removes what the template dropped. A corrupt record only means nothing is removed.
func readApplied(raw string) appliedTemplate {
	if raw == "" {
		return appliedTemplate{}
	}
	var rec struct {
		v1alpha1.NodeTemplateSpec
		Labels      map[string]string `json:"labels"`
		Annotations map[string]string `json:"annotations"`
		Taints      []corev1.Taint    `json:"taints"`
	}
	if json.Unmarshal([]byte(raw), &rec) != nil {
		return appliedTemplate{}
	}
	return appliedTemplate{
		Labels:      mergeMaps(rec.NodeTemplateSpec.Labels, rec.Labels),
		Annotations: mergeMaps(rec.NodeTemplateSpec.Annotations, rec.Annotations),
		Taints:      append(rec.NodeTemplateSpec.Spec.Taints, rec.Taints...),
	}
}

func mergeMaps(a, b map[string]string) map[string]string {
	if len(b) == 0 {
		return a
	}
	out := maps.Clone(a)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, b)
	return out
}

// appliedRecord is the last-applied record of what syncNode puts on a node, in MCM's format (the
// JSON of the machine's nodeTemplate), so MCM reads it after a handover; "" when nothing is.
func appliedRecord(m *v1alpha1.Machine) string {
	t := &m.Spec.NodeTemplateSpec
	if len(t.Labels) == 0 && len(t.Annotations) == 0 && len(t.Spec.Taints) == 0 {
		return ""
	}
	raw, err := json.Marshal(t)
	if err != nil {
		return ""
	}
	return string(raw)
}

// syncNode brings the node in line with its machine: the machine-name label, the nodeTemplate's
// labels, annotations and taints, and the node finalizer (so deleting the node goes through the
// machine). It writes only when something changes: a strategic merge of the labels, annotations
// and finalizers it sets or removes, which merges with what others wrote meanwhile (a kubelet
// lifting its not-ready taint right after registering would otherwise make most first syncs
// conflict), and with an optimistic lock when the taints change (the list is replaced whole).
func syncNode(ctx context.Context, c client.Client, m *v1alpha1.Machine, node *corev1.Node) error {
	want := appliedTemplate{
		Labels:      m.Spec.NodeTemplateSpec.Labels,
		Annotations: m.Spec.NodeTemplateSpec.Annotations,
		Taints:      m.Spec.NodeTemplateSpec.Spec.Taints,
	}
	last := readApplied(node.Annotations[v1alpha1.AnnotationLastAppliedALT])

	n := node.DeepCopy()
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	for k := range last.Labels {
		if _, keep := want.Labels[k]; !keep {
			delete(n.Labels, k)
		}
	}
	for k, v := range want.Labels {
		n.Labels[k] = v
	}
	n.Labels[v1alpha1.LabelNodeMachineName] = m.Name
	for k := range last.Annotations {
		if _, keep := want.Annotations[k]; !keep {
			delete(n.Annotations, k)
		}
	}
	for k, v := range want.Annotations {
		n.Annotations[k] = v
	}
	delete(n.Annotations, v1alpha1.AnnotationNotManagedByMCM)
	n.Spec.Taints = syncTaints(n.Spec.Taints, last.Taints, want.Taints)
	if raw := appliedRecord(m); raw == "" {
		delete(n.Annotations, v1alpha1.AnnotationLastAppliedALT)
	} else {
		n.Annotations[v1alpha1.AnnotationLastAppliedALT] = raw
	}
	controllerutil.AddFinalizer(n, v1alpha1.FinalizerNode)

	if equality.Semantic.DeepEqual(n.ObjectMeta, node.ObjectMeta) && equality.Semantic.DeepEqual(n.Spec.Taints, node.Spec.Taints) {
		return nil
	}
	patch := client.StrategicMergeFrom(node)
	if !equality.Semantic.DeepEqual(n.Spec.Taints, node.Spec.Taints) {
		patch = client.MergeFromWithOptions(node, client.MergeFromWithOptimisticLock{})
	}
	if err := c.Patch(ctx, n, patch); err != nil {
		return fmt.Errorf("machine: sync node %s: %w", node.Name, err)
	}
	return nil
}

// syncTaints removes taints the template no longer has and sets the ones it has (matched by key
// and effect), keeping every other taint.
func syncTaints(cur, last, want []corev1.Taint) []corev1.Taint {
	same := func(a, b corev1.Taint) bool { return a.Key == b.Key && a.Effect == b.Effect }
	in := func(list []corev1.Taint, t corev1.Taint) bool {
		for _, x := range list {
			if same(x, t) {
				return true
			}
		}
		return false
	}
	var out []corev1.Taint
	for _, t := range cur {
		if in(last, t) && !in(want, t) {
			continue
		}
		if in(want, t) {
			continue // re-added below with the template's value
		}
		out = append(out, t)
	}
	for _, t := range want {
		var keep *corev1.Taint
		for i := range cur {
			if same(cur[i], t) && cur[i].Value == t.Value {
				keep = &cur[i]
			}
		}
		if keep != nil {
			out = append(out, *keep) // keeps its TimeAdded
		} else {
			out = append(out, t)
		}
	}
	return out
}

// nodeChanged passes node events that can matter to a machine: not the heartbeats every node
// sends, which would reconcile every machine every few seconds.
func nodeChanged() predicate.TypedPredicate[*corev1.Node] {
	return predicate.TypedFuncs[*corev1.Node]{
		UpdateFunc: func(e event.TypedUpdateEvent[*corev1.Node]) bool {
			o, n := e.ObjectOld, e.ObjectNew
			return !equality.Semantic.DeepEqual(withoutHeartbeats(o.Status.Conditions), withoutHeartbeats(n.Status.Conditions)) ||
				!equality.Semantic.DeepEqual(o.Labels, n.Labels) ||
				!equality.Semantic.DeepEqual(o.Annotations, n.Annotations) ||
				!equality.Semantic.DeepEqual(o.Finalizers, n.Finalizers) ||
				!equality.Semantic.DeepEqual(o.Spec.Taints, n.Spec.Taints) ||
				o.Spec.ProviderID != n.Spec.ProviderID ||
				(o.DeletionTimestamp == nil) != (n.DeletionTimestamp == nil)
		},
	}
}

// recordedNodeGrace is how long after the Machine controller recorded a node on a machine the
// node controller trusts that the machine is about to appear in its cache, before it asks the
// API server instead.
const recordedNodeGrace = 5 * time.Second

// nodeReconciler is the Node controller of the target cluster: a node someone deletes takes its
// machine along; a node whose machine is gone loses the finalizer; a node no machine owns (and
// older than the creation timeout) is annotated not-managed-by-mcm.
type nodeReconciler struct{ *deps }

func (r *nodeReconciler) setup(mgr manager.Manager) error {
	return builder.TypedControllerManagedBy[reconcile.Request](mgr).
		Named("machine-node").
		WatchesRawSource(source.Kind(r.target.GetCache(), &corev1.Node{}, &handler.TypedEnqueueRequestForObject[*corev1.Node]{}, nodeChanged())).
		WithOptions(r.opts.controllerOptions()).
		Complete(r)
}

// Reconcile keeps a node's finalizer and not-managed annotation, and deletes the machine of a
// node being deleted.
func (r *nodeReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	node := &corev1.Node{}
	if err := r.target.GetClient().Get(ctx, req.NamespacedName, node); err != nil {
		if apierrors.IsNotFound(err) {
			r.recordedNodes.Delete(req.Name)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	machines, err := r.machinesOfNode(ctx, true, node.Name)
	if err != nil {
		return reconcile.Result{}, err
	}
	if len(machines) > 0 {
		r.recordedNodes.Delete(node.Name)
		m := &machines[0]
		if node.DeletionTimestamp != nil {
			return reconcile.Result{}, r.deleteMachineOfNode(ctx, m, node)
		}
		if _, ok := node.Annotations[v1alpha1.AnnotationNotManagedByMCM]; ok {
			orig := node.DeepCopy()
			delete(node.Annotations, v1alpha1.AnnotationNotManagedByMCM)
			if err := r.target.GetClient().Patch(ctx, node, client.MergeFrom(orig)); err != nil {
				return requeueOnConflict(err)
			}
		}
		return reconcile.Result{}, nil
	}

	// No machine in the cache. Something to change only for a node holding our finalizer (its
	// machine was removed without us, e.g. force-deleted) or one old enough to be unmanaged;
	// confirm with the API server before changing it (a new machine may not be cached yet).
	age := r.now().Sub(node.CreationTimestamp.Time)
	removeFinalizer := controllerutil.ContainsFinalizer(node, v1alpha1.FinalizerNode)
	annotate := node.DeletionTimestamp == nil && age > r.opts.CreationTimeout && node.Annotations[v1alpha1.AnnotationNotManagedByMCM] != "1"
	if removeFinalizer || annotate {
		if at, ok := r.recordedNodes.Load(node.Name); ok && r.now().Sub(at.(time.Time)) < recordedNodeGrace {
			// The Machine controller recorded this node on a machine moments ago (and synced the
			// node at once): the cache is about to show that machine.
			return reconcile.Result{RequeueAfter: conflictRetry}, nil
		}
		r.recordedNodes.Delete(node.Name)
		machines, err = r.machinesOfNode(ctx, false, node.Name)
		if err != nil || len(machines) > 0 {
			return reconcile.Result{}, err
		}
		orig := node.DeepCopy()
		controllerutil.RemoveFinalizer(node, v1alpha1.FinalizerNode)
		if annotate {
			if node.Annotations == nil {
				node.Annotations = map[string]string{}
			}
			node.Annotations[v1alpha1.AnnotationNotManagedByMCM] = "1"
		}
		if err := r.target.GetClient().Patch(ctx, node, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			return requeueOnConflict(err)
		}
	}
	if node.DeletionTimestamp == nil && age <= r.opts.CreationTimeout {
		// A machine may still claim it; look again once it is old enough to be unmanaged.
		return reconcile.Result{RequeueAfter: clampRequeue(r.opts.CreationTimeout-age+time.Second, r.opts.LongRetry)}, nil
	}
	return reconcile.Result{}, nil
}

// machinesOfNode returns the machines whose node label names the node.
// cached reads the manager's cache (through the index), otherwise the API server.
func (r *nodeReconciler) machinesOfNode(ctx context.Context, cached bool, nodeName string) ([]v1alpha1.Machine, error) {
	var list v1alpha1.MachineList
	c := r.apiReader
	opts := []client.ListOption{client.MatchingLabels{v1alpha1.LabelNode: nodeName}}
	if cached {
		c = r.client
		opts = []client.ListOption{client.MatchingFields{IndexMachineNode: nodeName}}
	}
	if r.opts.Namespace != "" {
		opts = append(opts, client.InNamespace(r.opts.Namespace))
	}
	if err := c.List(ctx, &list, opts...); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("machine: machines of node %s: %w", nodeName, err)
	}
	return list.Items, nil
}

var _ reconcile.Reconciler = (*nodeReconciler)(nil)
