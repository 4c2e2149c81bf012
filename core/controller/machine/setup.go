// Package machine is the Machine controller of machinist: it creates a VM for every Machine
// through the driver of its MachineClass, follows the node it becomes (phases Pending → Running,
// Unknown, Failed), and deletes it again in an ordered, resumable sequence (drain → volume
// attachments → VM → Node → finalizer). Its behaviour and texts follow Gardener MCM's machine
// controller (docs/compatibility/mcm-controllers.md, creation flow to drain), without MCM's known
// problems: retries back off exponentially by error code, drains are bounded and report
// misconfigured budgets at once, nodes that never joined are not drained, replacements are
// rate-limited per MachineDeployment, and the deletion step is kept in a stable marker, not parsed
// from text.
//
// Setup also runs the small controllers MCM runs next to it: finalizers on MachineClasses and
// their Secrets while in use, and a Node controller in the target cluster (deleting a Node
// deletes its Machine; nodes without machine are annotated; stale node finalizers are removed).
package machine

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/fallback"
	"github.com/machinist-io/machinist/core/controller/internal/classsecret"
	"github.com/machinist-io/machinist/core/eventnote"
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

// Setup adds the Machine controller (creation, health), the termination controller (deletion),
// the MachineClass and Secret finalizer controllers and the Node controller to mgr. target is
// the cluster the nodes join; nil runs without a target cluster (machines become Available once
// their VM exists). The caller adds target to mgr (mgr.Add(target)) so its cache starts with the
// manager. The manager's scheme must hold the core Kubernetes types and
// machine.sapcloud.io/v1alpha1.
func Setup(mgr manager.Manager, target cluster.Cluster, drivers *registry.Resolver, opts Options) error {
	if drivers == nil {
		return fmt.Errorf("machine: setup: no driver resolver given")
	}
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return err
	}
	d := newDeps(mgr.GetClient(), mgr.GetAPIReader(), target, drivers, opts, eventnote.For(mgr, "machine-controller"))
	if target != nil {
		cs, err := kubernetes.NewForConfig(target.GetConfig())
		if err != nil {
			return fmt.Errorf("machine: setup: target clientset: %w", err)
		}
		d.targetCS = cs
	}
	if err := addIndexes(mgr); err != nil {
		return err
	}
	tokens := &bootstrapTokens{deps: d}
	creator := &creator{deps: d, tokens: tokens}
	capacity := &capacityFallback{deps: d, creator: creator}
	creator.fallback = capacity
	preserver := &preserver{deps: d}
	health := &healthChecker{deps: d, tokens: tokens, inPlace: &inPlaceUpdater{deps: d}, preserver: preserver}
	creator.health = health

	if err := (&machineReconciler{deps: d, fallback: capacity, creator: creator, health: health}).setup(mgr); err != nil {
		return err
	}
	if err := (&terminationReconciler{deps: d, tokens: tokens, fallback: capacity}).setup(mgr); err != nil {
		return err
	}
	if err := (&classReconciler{deps: d, status: newClassStatusStore()}).setup(mgr); err != nil {
		return err
	}
	if err := (&secretReconciler{deps: d}).setup(mgr); err != nil {
		return err
	}
	if target != nil {
		if err := (&nodeReconciler{deps: d}).setup(mgr); err != nil {
			return err
		}
	}
	if err := fallback.RegisterMetrics(metrics.Registry); err != nil {
		return fmt.Errorf("machine: register fallback metrics: %w", err)
	}
	return registerPhaseMetrics(mgr)
}

func addIndexes(mgr manager.Manager) error {
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

func secretRefs(class *v1alpha1.MachineClass) []string { return classsecret.Refs(class) }
