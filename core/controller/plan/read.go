package plan

import (
	"context"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/fallback"
	"github.com/machinist-io/machinist/core/controller/rollout"
)

// Reader reads the world of a plan. It only reads.
type Reader struct {
	// Control is the cluster of the machine objects.
	Control client.Reader
	// Target is the cluster of the nodes, pods and PodDisruptionBudgets; nil when there is none
	// (no drain is checked then, and an InPlaceUpdate plans Blocked as the controller would be).
	Target client.Reader
	// Now is the time of the plan.
	Now time.Time
}

// Deployment reads the world of a deployment manifest: the live deployment with the manifest's
// spec, labels and annotations, its MachineSets and machines, its classes, and the pods and
// budgets on its machines' nodes.
func (r Reader) Deployment(ctx context.Context, manifest *v1alpha1.MachineDeployment) (World, error) {
	d, exists, err := r.merged(ctx, manifest)
	if err != nil {
		return World{}, err
	}
	w := World{Exists: exists, Classes: map[string]*v1alpha1.MachineClass{}}
	w.Input = rollout.Input{Deployment: d, Machines: map[types.UID][]*v1alpha1.Machine{}, Now: r.Now, TargetCluster: r.Target != nil}
	if exists {
		if err := r.setsAndMachines(ctx, &w); err != nil {
			return World{}, err
		}
	}
	if err := r.pool(ctx, &w); err != nil {
		return World{}, err
	}
	if err := r.classes(ctx, &w); err != nil {
		return World{}, err
	}
	if r.Target == nil {
		return w, nil
	}
	if err := r.nodes(ctx, &w); err != nil {
		return World{}, err
	}
	return w, nil
}

// merged is the live deployment as applying the manifest would leave it (a new generation when
// the spec changes), or the manifest itself when there is none.
func (r Reader) merged(ctx context.Context, manifest *v1alpha1.MachineDeployment) (*v1alpha1.MachineDeployment, bool, error) {
	live := &v1alpha1.MachineDeployment{}
	err := r.Control.Get(ctx, client.ObjectKeyFromObject(manifest), live)
	if apierrors.IsNotFound(err) {
		d := manifest.DeepCopy()
		d.Generation = 1
		return d, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("plan: read MachineDeployment %s/%s: %w", manifest.Namespace, manifest.Name, err)
	}
	d := live.DeepCopy()
	if !equality.Semantic.DeepEqual(d.Spec, manifest.Spec) {
		d.Spec = *manifest.Spec.DeepCopy()
		d.Generation++
	}
	if d.Labels == nil {
		d.Labels = map[string]string{}
	}
	if d.Annotations == nil {
		d.Annotations = map[string]string{}
	}
	maps.Copy(d.Labels, manifest.Labels)
	maps.Copy(d.Annotations, manifest.Annotations)
	return d, true, nil
}

// setsAndMachines reads the sets the deployment controls and their machines.
func (r Reader) setsAndMachines(ctx context.Context, w *World) error {
	d := w.Input.Deployment
	var sets v1alpha1.MachineSetList
	if err := r.Control.List(ctx, &sets, client.InNamespace(d.Namespace)); err != nil {
		return fmt.Errorf("plan: list MachineSets of %s/%s: %w", d.Namespace, d.Name, err)
	}
	for i := range sets.Items {
		if ref := metav1.GetControllerOf(&sets.Items[i]); ref != nil && ref.UID == d.UID {
			w.Input.Sets = append(w.Input.Sets, &sets.Items[i])
		}
	}
	var machines v1alpha1.MachineList
	if err := r.Control.List(ctx, &machines, client.InNamespace(d.Namespace)); err != nil {
		return fmt.Errorf("plan: list Machines of %s/%s: %w", d.Namespace, d.Name, err)
	}
	for i := range machines.Items {
		m := &machines.Items[i]
		for _, ms := range w.Input.Sets {
			if ref := metav1.GetControllerOf(m); ref != nil && ref.UID == ms.UID {
				w.Input.Machines[ms.UID] = append(w.Input.Machines[ms.UID], m)
			}
		}
	}
	return nil
}

// classes reads the template's class and those of the fallback list.
func (r Reader) classes(ctx context.Context, w *World) error {
	d := w.Input.Deployment
	names := []string{d.Spec.Template.Spec.Class.Name}
	if chain, _, ok := fallback.ParseAnnotations(d.Namespace, names[0], d.Annotations); ok {
		names = chain.Classes
	}
	for _, name := range names {
		c := &v1alpha1.MachineClass{}
		err := r.Control.Get(ctx, client.ObjectKey{Namespace: d.Namespace, Name: name}, c)
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return fmt.Errorf("plan: read MachineClass %s/%s: %w", d.Namespace, name, err)
		}
		w.Classes[name] = c
	}
	return nil
}

// nodes reads the machines' nodes (an in-place update needs them), the pods on them and every
// PodDisruptionBudget of the target cluster.
func (r Reader) nodes(ctx context.Context, w *World) error {
	w.Input.Nodes = map[string]*corev1.Node{}
	for _, ms := range w.Input.Machines {
		for _, m := range ms {
			name := m.Labels[v1alpha1.LabelNode]
			if name == "" || w.Input.Nodes[name] != nil {
				continue
			}
			node := &corev1.Node{}
			err := r.Target.Get(ctx, client.ObjectKey{Name: name}, node)
			switch {
			case apierrors.IsNotFound(err):
				continue
			case err != nil:
				return fmt.Errorf("plan: read node %s of machine %s: %w", name, m.Name, err)
			}
			w.Input.Nodes[name] = node
			var pods corev1.PodList
			if err := r.Target.List(ctx, &pods, client.MatchingFields{"spec.nodeName": name}); err != nil {
				return fmt.Errorf("plan: list the pods of node %s: %w", name, err)
			}
			w.Pods = append(w.Pods, pods.Items...)
		}
	}
	var pdbs policyv1.PodDisruptionBudgetList
	if err := r.Target.List(ctx, &pdbs); err != nil {
		return fmt.Errorf("plan: list PodDisruptionBudgets: %w", err)
	}
	w.PDBs = pdbs.Items
	return nil
}
