package machine

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/internal/classsecret"
	"github.com/machinist-io/machinist/core/controller/internal/drivercall"
	"github.com/machinist-io/machinist/core/controller/standby"
	"github.com/machinist-io/machinist/core/drain"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/registry"
	"github.com/machinist-io/machinist/internal/truncate"
)

// deps is what the reconcilers of this package share: the clients, the driver resolver, the
// options, the event recorder, the clock, and the state that crosses controllers. Each
// reconciler (machine.go, delete.go, class.go, node.go) embeds it; the methods here are the few
// every one of them needs.
type deps struct {
	client    client.Client // control cluster, cached reads; records our own machine writes
	apiReader client.Reader // control cluster, uncached
	target    cluster.Cluster
	targetCS  kubernetes.Interface
	drivers   *registry.Resolver
	opts      Options
	recorder  events.EventRecorder
	clock     clock.Clock

	backoff *backoff
	limiter *replacementLimiter
	// creating holds the keys of machines whose creation is in flight, so the termination
	// controller never starts deleting a machine while a CreateMachine for it may still return.
	creating sync.Map
	// writes holds the machine versions our own writes replaced (client records them).
	writes *ownWrites
	// recordedNodes maps the node names recorded on machines to when, until the node controller
	// finds the machine in its cache: a node whose machine is that new is not asked about.
	recordedNodes sync.Map
}

func newDeps(c client.Client, apiReader client.Reader, target cluster.Cluster, drivers *registry.Resolver, opts Options, recorder events.EventRecorder) *deps {
	writes := newOwnWrites()
	return &deps{
		client:    trackingClient{Client: c, writes: writes},
		writes:    writes,
		apiReader: apiReader,
		target:    target,
		drivers:   drivers,
		opts:      opts,
		recorder:  recorder,
		clock:     opts.Clock,
		backoff:   newBackoff(),
		limiter:   newReplacementLimiter(),
	}
}

func (r *deps) now() time.Time { return r.clock.Now() }

// event records an event on the machine (events.k8s.io API).
func (r *deps) event(m *v1alpha1.Machine, eventType, reason, action, note string) {
	r.recorder.Eventf(m, nil, eventType, reason, action, "%s", truncate.String(note, 1000))
}

func (r *deps) addFinalizer(ctx context.Context, o client.Object, finalizer string) (reconcile.Result, error) {
	orig := o.DeepCopyObject().(client.Object)
	controllerutil.AddFinalizer(o, finalizer)
	if err := r.client.Patch(ctx, o, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return requeueOnConflict(err)
	}
	// The update event brings the object back.
	return reconcile.Result{}, nil
}

func (r *deps) removeFinalizer(ctx context.Context, o client.Object, finalizer string) (reconcile.Result, error) {
	orig := o.DeepCopyObject().(client.Object)
	if !controllerutil.RemoveFinalizer(o, finalizer) {
		return reconcile.Result{}, nil
	}
	if err := r.client.Patch(ctx, o, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return requeueOnConflict(err)
	}
	return reconcile.Result{}, nil
}

// machineClass returns the machine's class and makes sure it carries the finalizer, so the class
// cannot go away while a VM made from it exists.
func (r *deps) machineClass(ctx context.Context, m *v1alpha1.Machine) (*v1alpha1.MachineClass, error) {
	name := m.Spec.Class.Name
	if name == "" {
		return nil, &errClass{"spec.class.name is empty: set it to the name of a MachineClass in namespace " + m.Namespace}
	}
	if k := m.Spec.Class.Kind; k != "" && k != "MachineClass" {
		return nil, &errClass{fmt.Sprintf("spec.class.kind %q is not supported: use kind MachineClass (provider-specific class kinds were removed from MCM)", k)}
	}
	class := &v1alpha1.MachineClass{}
	if err := r.client.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: name}, class); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &errClass{fmt.Sprintf("MachineClass %s/%s not found: create it or fix spec.class.name", m.Namespace, name)}
		}
		return nil, err
	}
	if class.DeletionTimestamp == nil && !controllerutil.ContainsFinalizer(class, v1alpha1.FinalizerMachineControllerManager) {
		if _, err := r.addFinalizer(ctx, class, v1alpha1.FinalizerMachineControllerManager); err != nil {
			return nil, err
		}
	}
	return class, nil
}

// driverFor resolves the driver of class and instruments it.
func (r *deps) driverFor(class *v1alpha1.MachineClass) (driver.Driver, error) {
	d, err := r.drivers.ForClass(class)
	if err != nil {
		return nil, err
	}
	return drivercall.Instrument(registry.Normalize(class.Provider), d), nil
}

// secretFor builds the secret the driver receives for class.
func (r *deps) secretFor(ctx context.Context, class *v1alpha1.MachineClass) (*corev1.Secret, error) {
	return classsecret.Get(ctx, r.client, class)
}

// drainer drains the nodes of m's machine: evictions in the target cluster, volumes mapped by
// the driver's GetVolumeIDs for the machine's class (a driver without it means volumes are not
// waited for).
func (r *deps) drainer(ctx context.Context, m *v1alpha1.Machine) *drain.Drainer {
	d := &drain.Drainer{Client: r.targetCS, Log: r.log(m)}
	class, err := r.machineClass(ctx, m)
	if err != nil {
		return d
	}
	drv, err := r.driverFor(class)
	if err != nil {
		return d
	}
	d.VolumeIDs = func(ctx context.Context, specs []*corev1.PersistentVolumeSpec) ([]string, error) {
		resp, err := drv.GetVolumeIDs(ctx, &driver.GetVolumeIDsRequest{PVSpecs: specs})
		if driver.IsCode(err, driver.Unimplemented) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		return resp.VolumeIDs, nil
	}
	return d
}

// deleteMachineOfNode deletes the machine of a node someone deleted (MCM #1055): the user asked
// for the node to go, so its VM goes too and the MachineSet replaces it.
func (r *deps) deleteMachineOfNode(ctx context.Context, m *v1alpha1.Machine, node *corev1.Node) error {
	if m.DeletionTimestamp != nil || standby.DeletesItsNode(m) {
		return nil
	}
	uid := m.UID
	if err := r.client.Delete(ctx, m, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("machine: delete machine of deleted node %s: %w", node.Name, err)
	}
	r.event(m, corev1.EventTypeNormal, "NodeDeleted", "Delete", fmt.Sprintf("Node %s is being deleted: deleting its machine", node.Name))
	r.log(m).Info("node deleted: deleting its machine", "node", node.Name)
	return nil
}

// nodeOf reads the machine's node (by its node label) from the target cluster's cache; nil when
// the machine names none or it does not exist.
func (r *deps) nodeOf(ctx context.Context, m *v1alpha1.Machine) (*corev1.Node, error) {
	name := m.Labels[v1alpha1.LabelNode]
	if name == "" || r.target == nil {
		return nil, nil
	}
	n := &corev1.Node{}
	if err := r.target.GetClient().Get(ctx, client.ObjectKey{Name: name}, n); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	return n, nil
}

// earlyEnd is how a pass that stops early ends: with err, or with res alone.
type earlyEnd struct {
	res reconcile.Result
	err error
}

// syncedNode reads the machine's node and syncs it (labels, annotations and taints of the
// node template); a node being deleted deletes its machine, and the pass stops.
func (r *deps) syncedNode(ctx context.Context, m *v1alpha1.Machine) (*corev1.Node, *earlyEnd) {
	node, err := r.nodeOf(ctx, m)
	if err != nil {
		return nil, &earlyEnd{err: err}
	}
	if node == nil {
		return nil, nil
	}
	if node.DeletionTimestamp != nil {
		// Deleting a Node deletes its machine (the node controller does it too).
		return nil, &earlyEnd{err: r.deleteMachineOfNode(ctx, m, node)}
	}
	if err := syncNode(ctx, r.target.GetClient(), m, node); err != nil {
		res, err := requeueOnConflict(err)
		return nil, &earlyEnd{res: res, err: err}
	}
	return node, nil
}
