// Package machine is the Machine controller of machinist: it creates a VM for every Machine
// through the driver of its MachineClass, follows the node it becomes (phases Pending → Running,
// Unknown, Failed), and deletes it again in an ordered, resumable sequence (drain → volume
// attachments → VM → Node → finalizer). Its behaviour and texts follow Gardener MCM's machine
// controller (reference §4.2–4.6), without MCM's known problems: retries back off
// exponentially by error code, drains are bounded and report misconfigured budgets at once,
// nodes that never joined are not drained, replacements are rate-limited per
// MachineDeployment, and the deletion step is kept in a stable marker, not parsed from text.
//
// Setup also runs the small controllers MCM runs next to it: finalizers on MachineClasses and
// their Secrets while in use, and a Node controller in the target cluster (deleting a Node
// deletes its Machine; nodes without machine are annotated; stale node finalizers are removed).
package machine

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/fallback"
	"github.com/machinist-io/machinist/core/controller/internal/eventnote"
	"github.com/machinist-io/machinist/core/registry"
)

// Field indexes the controllers register on the manager's cache. Other controllers may use
// them (client.MatchingFields{IndexMachineClassName: name}).
const (
	// IndexMachineClassName indexes Machines by spec.class.name, and by the class a capacity
	// fallback has yet to make sure holds no VM of the machine (fallback.AnnotationVacate): the
	// class keeps its finalizer, and its credentials, until then.
	IndexMachineClassName = "spec.class.name"
	// IndexMachineNode indexes Machines by their node label.
	IndexMachineNode = "metadata.labels.node"
	// IndexClassSecret indexes MachineClasses by the namespace/name of each secret they
	// reference.
	IndexClassSecret = "machinist.secretRefs"
)

// reconciler holds what the Machine, termination, class, secret and node controllers share.
type reconciler struct {
	client    client.Client // control cluster, cached reads
	apiReader client.Reader // control cluster, uncached
	target    cluster.Cluster
	targetCS  kubernetes.Interface
	drivers   *registry.Resolver
	opts      Options
	recorder  events.EventRecorder
	backoff   *backoff
	limiter   *replacementLimiter
	now       func() time.Time

	// creating holds the keys of machines whose creation is in flight, so the termination
	// controller never starts deleting a machine while a CreateMachine for it may still return.
	creating sync.Map
	// writes holds the machine versions our own writes replaced (client records them).
	writes *ownWrites
	// recordedNodes maps the node names recorded on machines to when, until the node controller
	// finds the machine in its cache: a node whose machine is that new is not asked about.
	recordedNodes sync.Map
	// classStatus is where ProviderSpecValid conditions go (the class's status, when the CRD has it).
	classStatus *classStatusStore
}

// Setup adds the Machine controller (creation, health, deletion), the MachineClass and Secret
// finalizer controllers and the Node controller to mgr. target is the cluster the nodes join;
// nil runs without a target cluster (machines become Available once their VM exists). The
// caller adds target to mgr (mgr.Add(target)) so its cache starts with the manager. The
// manager's scheme must hold the core Kubernetes types and machine.sapcloud.io/v1alpha1.
func Setup(mgr manager.Manager, target cluster.Cluster, drivers *registry.Resolver, opts Options) error {
	if drivers == nil {
		return fmt.Errorf("machine: setup: no driver resolver given")
	}
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return err
	}
	writes := newOwnWrites()
	r := &reconciler{
		client:    trackingClient{Client: mgr.GetClient(), writes: writes},
		writes:    writes,
		apiReader: mgr.GetAPIReader(),
		target:    target,
		drivers:   drivers,
		opts:      opts,
		recorder:  eventnote.For(mgr, "machine-controller"),
		backoff:   newBackoff(),
		limiter:   newReplacementLimiter(),
		now:       time.Now,

		classStatus: newClassStatusStore(),
	}
	if target != nil {
		cs, err := kubernetes.NewForConfig(target.GetConfig())
		if err != nil {
			return fmt.Errorf("machine: setup: target clientset: %w", err)
		}
		r.targetCS = cs
	}
	if err := r.addIndexes(mgr); err != nil {
		return err
	}
	if err := r.setupMachineController(mgr); err != nil {
		return err
	}
	if err := r.setupTerminationController(mgr); err != nil {
		return err
	}
	if err := r.setupClassController(mgr); err != nil {
		return err
	}
	if err := r.setupSecretController(mgr); err != nil {
		return err
	}
	if target != nil {
		if err := r.setupNodeController(mgr); err != nil {
			return err
		}
	}
	if err := fallback.RegisterMetrics(metrics.Registry); err != nil {
		return fmt.Errorf("machine: register fallback metrics: %w", err)
	}
	return registerPhaseMetrics(mgr)
}

func (r *reconciler) addIndexes(mgr manager.Manager) error {
	ctx := context.Background()
	idx := mgr.GetFieldIndexer()
	if err := idx.IndexField(ctx, &v1alpha1.Machine{}, IndexMachineClassName, func(o client.Object) []string {
		return classesOf(o.(*v1alpha1.Machine))
	}); err != nil {
		return fmt.Errorf("machine: index machines by class: %w", err)
	}
	if err := idx.IndexField(ctx, &v1alpha1.Machine{}, IndexMachineNode, func(o client.Object) []string {
		if n := o.GetLabels()[v1alpha1.LabelNode]; n != "" {
			return []string{n}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("machine: index machines by node: %w", err)
	}
	if err := idx.IndexField(ctx, &v1alpha1.MachineClass{}, IndexClassSecret, func(o client.Object) []string {
		return secretRefs(o.(*v1alpha1.MachineClass))
	}); err != nil {
		return fmt.Errorf("machine: index classes by secret: %w", err)
	}
	return addControllerIndex(ctx, mgr)
}

// classesOf are the classes a machine may hold a VM with: spec.class and the class a capacity
// fallback is vacating.
func classesOf(m *v1alpha1.Machine) []string {
	var out []string
	if n := m.Spec.Class.Name; n != "" {
		out = append(out, n)
	}
	if n := m.Annotations[fallback.AnnotationVacate]; n != "" && n != m.Spec.Class.Name {
		out = append(out, n)
	}
	return out
}

func notDeleting(o client.Object) bool { return o.GetDeletionTimestamp() == nil }

// notOnlyMarkChanged drops class updates that only publish or lift an exhausted mark
// (fallback.AnnotationExhausted) or change the class's finalizers (the machine controller adds
// its own when a machine first uses the class): they must not wake every machine of the class,
// which would retry failed creations before their backoff.
func notOnlyMarkChanged() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld, e.ObjectNew
		if o.GetGeneration() != n.GetGeneration() || !equality.Semantic.DeepEqual(o.GetLabels(), n.GetLabels()) ||
			(o.GetDeletionTimestamp() == nil) != (n.GetDeletionTimestamp() == nil) {
			return true
		}
		strip := func(a map[string]string) map[string]string {
			out := make(map[string]string, len(a))
			for k, v := range a {
				if k != fallback.AnnotationExhausted {
					out[k] = v
				}
			}
			return out
		}
		return !equality.Semantic.DeepEqual(strip(o.GetAnnotations()), strip(n.GetAnnotations()))
	}}
}

// specOrMetaChanged passes every event but updates that touch only the status: the controller's
// own status writes must not retrigger it (that would defeat its backoff); what it waits for
// arrives as spec, metadata, node or class events, or through its requeues.
func specOrMetaChanged() predicate.Predicate {
	return predicate.Or(
		predicate.GenerationChangedPredicate{},
		predicate.LabelChangedPredicate{},
		predicate.AnnotationChangedPredicate{},
		predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
			return !equality.Semantic.DeepEqual(e.ObjectOld.GetFinalizers(), e.ObjectNew.GetFinalizers()) ||
				(e.ObjectOld.GetDeletionTimestamp() == nil) != (e.ObjectNew.GetDeletionTimestamp() == nil)
		}},
	)
}

func (r *reconciler) controllerOptions() controller.Options {
	return controller.Options{MaxConcurrentReconciles: r.opts.ConcurrentSyncs}
}

// setupMachineController watches machines that are not being deleted, their classes and (with
// a target cluster) their nodes.
func (r *reconciler) setupMachineController(mgr manager.Manager) error {
	b := builder.ControllerManagedBy(mgr).
		Named("machine").
		For(&v1alpha1.Machine{}, builder.WithPredicates(predicate.NewPredicateFuncs(notDeleting), specOrMetaChanged())).
		Watches(&v1alpha1.MachineClass{}, handler.EnqueueRequestsFromMapFunc(r.classToMachines), builder.WithPredicates(notOnlyMarkChanged())).
		WithOptions(r.controllerOptions())
	if r.target != nil {
		b = b.WatchesRawSource(source.Kind(r.target.GetCache(), &corev1.Node{},
			handler.TypedEnqueueRequestsFromMapFunc(r.nodeToMachines), nodeChanged()))
	}
	return b.Complete(reconcile.Func(r.reconcileMachine))
}

// setupTerminationController watches machines being deleted, on a queue of their own so
// deletions are not starved by creations (MCM's machinetermination queue).
func (r *reconciler) setupTerminationController(mgr manager.Manager) error {
	deleting := predicate.NewPredicateFuncs(func(o client.Object) bool { return !notDeleting(o) })
	return builder.ControllerManagedBy(mgr).
		Named("machine-termination").
		For(&v1alpha1.Machine{}, builder.WithPredicates(deleting, specOrMetaChanged())).
		WithOptions(r.controllerOptions()).
		Complete(reconcile.Func(r.reconcileTermination))
}

// classToMachines enqueues the machines of a class, so a class that appears or changes lets
// waiting machines proceed.
func (r *reconciler) classToMachines(ctx context.Context, o client.Object) []reconcile.Request {
	var list v1alpha1.MachineList
	if err := r.client.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingFields{IndexMachineClassName: o.GetName()}); err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for _, m := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&m)})
	}
	return out
}

// nodeToMachines maps a node to the machine(s) whose node label names it.
func (r *reconciler) nodeToMachines(ctx context.Context, n *corev1.Node) []reconcile.Request {
	var list v1alpha1.MachineList
	opts := []client.ListOption{client.MatchingFields{IndexMachineNode: n.Name}}
	if r.opts.Namespace != "" {
		opts = append(opts, client.InNamespace(r.opts.Namespace))
	}
	if err := r.client.List(ctx, &list, opts...); err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for _, m := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&m)})
	}
	if len(out) == 0 && r.opts.Namespace != "" {
		// The node may register before its machine records the node label (most drivers name
		// the node after the machine): try the machine-name label, else the node's name.
		name := n.Labels[v1alpha1.LabelNodeMachineName]
		if name == "" {
			name = n.Name
		}
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: r.opts.Namespace, Name: name}})
	}
	return out
}
