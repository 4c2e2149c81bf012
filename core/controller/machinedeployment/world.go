package machinedeployment

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/rollout"
)

// pass is one reconcile of a deployment: the world as read, the decision, and what executing
// it changed.
type pass struct {
	r  *Reconciler
	d  *v1alpha1.MachineDeployment
	in rollout.Input
	// sets are the claimed sets, the controller's own copies; the executor keeps them as its
	// writes leave them, and adds the set it creates.
	sets []*v1alpha1.MachineSet
	// machines of each set, terminating ones included, by set UID: the cache's own objects,
	// read them, never modify them.
	machines map[types.UID][]*v1alpha1.Machine
	byName   map[string]*v1alpha1.Machine
	fallback fallbackCheck // the capacity fallback list, checked
	dec      rollout.Decision
	created  *v1alpha1.MachineSet // the new set, when this pass created it
	// requeueAfter is when the progress deadline is to be checked again.
	requeueAfter time.Duration
}

func (p *pass) key() types.NamespacedName { return client.ObjectKeyFromObject(p.d) }

// set returns a set of the pass by name.
func (p *pass) set(name string) *v1alpha1.MachineSet {
	for _, ms := range p.sets {
		if ms.Name == name {
			return ms
		}
	}
	return nil
}

// machine returns a machine of the deployment by name (the cache's: read only).
func (p *pass) machine(name string) *v1alpha1.Machine {
	if p.byName == nil {
		p.byName = map[string]*v1alpha1.Machine{}
		for _, ms := range p.machines {
			for _, m := range ms {
				p.byName[m.Name] = m
			}
		}
	}
	return p.byName[name]
}

// current is the set of the deployment's template, as decided.
func (p *pass) current() *v1alpha1.MachineSet {
	if p.dec.CurrentSet == "" {
		return nil
	}
	return p.set(p.dec.CurrentSet)
}

// read reads the world a decision needs: the sets the deployment claims, their machines, its
// fallback classes, the nodes an in-place update needs and where the machines a scaler named
// are. It returns no pass for an invalid spec (nothing is read then), and a wait while this
// controller's last writes are not in the cache yet.
func (r *Reconciler) read(ctx context.Context, d *v1alpha1.MachineDeployment) (*pass, time.Duration, error) {
	sel, err := rollout.Validate(d)
	if err != nil {
		return nil, 0, nil
	}
	sets, err := r.claimSets(ctx, d, sel)
	if err != nil {
		return nil, 0, err
	}
	key := client.ObjectKeyFromObject(d)
	if !r.writes.seen(key, sets, r.now()) {
		// Our last writes to these sets are not in the cache yet; deciding on older data could
		// scale twice. The watch event of the write brings us back; this bounds the wait.
		return nil, 500 * time.Millisecond, nil
	}
	machines, err := r.machinesBySet(ctx, d, sets)
	if err != nil {
		return nil, 0, err
	}
	fc, err := r.checkFallback(ctx, d)
	if err != nil {
		return nil, 0, err
	}
	p := &pass{r: r, d: d, sets: sets, machines: machines, fallback: fc}
	p.reportFallback()

	_, clean := r.nodesClean.Load(key)
	p.in = rollout.Input{Deployment: d, Sets: sets, Machines: machines, Now: r.now(),
		TargetCluster: r.opts.Target != nil, NodesClean: clean,
		DefaultRevisionHistoryLimit: r.opts.DefaultRevisionHistoryLimit,
		NoScaleDownAnnotation:       r.opts.NoScaleDownAnnotationDuringRollout}
	if r.opts.Target != nil && rollout.IsInPlaceUpdate(d) {
		if p.in.Nodes, err = r.nodesOf(ctx, machines); err != nil {
			return nil, 0, err
		}
	}
	for _, name := range rollout.TriggerLookups(p.in) {
		where, err := r.lookupTrigger(ctx, d, name)
		if err != nil {
			return nil, 0, err
		}
		if p.in.Triggers == nil {
			p.in.Triggers = map[string]rollout.TriggerLookup{}
		}
		p.in.Triggers[name] = where
	}
	return p, 0, nil
}

// nodesOf reads the nodes of the machines from the target cluster's cache (its own objects:
// the decision only reads them).
func (r *Reconciler) nodesOf(ctx context.Context, machines map[types.UID][]*v1alpha1.Machine) (map[string]*corev1.Node, error) {
	out := map[string]*corev1.Node{}
	for _, ms := range machines {
		for _, m := range ms {
			name := m.Labels[v1alpha1.LabelNode]
			if name == "" || out[name] != nil {
				continue
			}
			node := &corev1.Node{}
			if err := r.opts.Target.Get(ctx, client.ObjectKey{Name: name}, node, client.UnsafeDisableDeepCopy); err != nil {
				if apierrors.IsNotFound(err) {
					continue
				}
				return nil, fmt.Errorf("machinedeployment: read node %s of machine %s: %w", name, m.Name, err)
			}
			out[name] = node
		}
	}
	return out, nil
}

// lookupTrigger finds a machine named in the trigger-deletion annotation that is not among the
// deployment's machines in the cache: gone, not in a set, in another deployment's set, or (the
// cache may lag a new machine) pending.
func (r *Reconciler) lookupTrigger(ctx context.Context, d *v1alpha1.MachineDeployment, name string) (rollout.TriggerLookup, error) {
	m := &v1alpha1.Machine{}
	err := r.reader.Get(ctx, client.ObjectKey{Namespace: d.Namespace, Name: name}, m)
	if apierrors.IsNotFound(err) {
		return rollout.TriggerGone, nil
	}
	if err != nil {
		return "", fmt.Errorf("machinedeployment: read machine %s: %w", name, err)
	}
	ref := metav1.GetControllerOf(m)
	if ref == nil || ref.Kind != "MachineSet" {
		return rollout.TriggerNoMachineSet, nil
	}
	ms := &v1alpha1.MachineSet{}
	if err := r.reader.Get(ctx, client.ObjectKey{Namespace: d.Namespace, Name: ref.Name}, ms); err != nil {
		if apierrors.IsNotFound(err) {
			return rollout.TriggerPending, nil
		}
		return "", fmt.Errorf("machinedeployment: read machine set %s: %w", ref.Name, err)
	}
	if dref := metav1.GetControllerOf(ms); dref == nil || dref.UID != d.UID {
		return rollout.TriggerOtherDeployment, nil
	}
	return rollout.TriggerPending, nil
}
