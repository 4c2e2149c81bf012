package explain

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/plan"
	"github.com/machinist-io/machinist/core/controller/rollout"
)

// Reader reads the world of a story. It only reads.
type Reader struct {
	plan.Reader
	// ProblemConditions: --node-conditions of the Machine controller.
	ProblemConditions []string
}

// Machine reads a machine's world; a machine that is gone still has its events.
func (r Reader) Machine(ctx context.Context, namespace, name string) (MachineWorld, error) {
	w := MachineWorld{Namespace: namespace, Name: name, ProblemConditions: r.ProblemConditions}
	m := &v1alpha1.Machine{}
	err := r.Control.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, m)
	switch {
	case apierrors.IsNotFound(err):
		m = nil
	case err != nil:
		return w, fmt.Errorf("explain: read Machine %s/%s: %w", namespace, name, err)
	}
	w.Machine = m
	if w.Events, err = r.events(ctx, namespace, name); err != nil {
		return w, err
	}
	if m == nil {
		return w, nil
	}
	if ref := metav1.GetControllerOf(m); ref != nil && ref.Kind == "MachineSet" {
		ms := &v1alpha1.MachineSet{}
		if err := r.Control.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ref.Name}, ms); err == nil {
			w.Set = ms
		} else if !apierrors.IsNotFound(err) {
			return w, fmt.Errorf("explain: read MachineSet %s/%s: %w", namespace, ref.Name, err)
		}
	}
	node := m.Labels[v1alpha1.LabelNode]
	if r.Target == nil || node == "" || m.DeletionTimestamp == nil {
		return w, nil
	}
	var pods corev1.PodList
	if err := r.Target.List(ctx, &pods, client.MatchingFields{"spec.nodeName": node}); err != nil {
		return w, fmt.Errorf("explain: list the pods of node %s: %w", node, err)
	}
	w.Pods = pods.Items
	var pdbs policyv1.PodDisruptionBudgetList
	if err := r.Target.List(ctx, &pdbs); err != nil {
		return w, fmt.Errorf("explain: list PodDisruptionBudgets: %w", err)
	}
	w.PDBs = pdbs.Items
	return w, nil
}

// Deployment reads a deployment's world and decides for it as the controller does now.
func (r Reader) Deployment(ctx context.Context, namespace, name string) (DeploymentWorld, error) {
	d := &v1alpha1.MachineDeployment{}
	if err := r.Control.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, d); err != nil {
		return DeploymentWorld{}, fmt.Errorf("explain: read MachineDeployment %s/%s: %w", namespace, name, err)
	}
	pw, err := r.Reader.Deployment(ctx, d)
	if err != nil {
		return DeploymentWorld{}, err
	}
	events, err := r.events(ctx, namespace, name)
	if err != nil {
		return DeploymentWorld{}, err
	}
	return DeploymentWorld{Deployment: d, Events: events, Decision: rollout.Decide(pw.Input)}, nil
}

// events lists the events of the namespace about name, or naming it as related.
func (r Reader) events(ctx context.Context, namespace, name string) ([]eventsv1.Event, error) {
	var list eventsv1.EventList
	if err := r.Control.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("explain: list events of %s: %w", namespace, err)
	}
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Name == name || (e.Related != nil && e.Related.Name == name) {
			out = append(out, e)
		}
	}
	return out, nil
}

// MachineOfNode names the machine of namespace whose node is node (the machine's `node` label,
// as MCM sets it), so `explain node NAME` tells that machine's story.
func (r Reader) MachineOfNode(ctx context.Context, namespace, node string) (string, error) {
	var list v1alpha1.MachineList
	if err := r.Control.List(ctx, &list, client.InNamespace(namespace), client.MatchingLabels{v1alpha1.LabelNode: node}); err != nil {
		return "", fmt.Errorf("explain: list the machines of node %s in %s: %w", node, namespace, err)
	}
	switch len(list.Items) {
	case 0:
		return "", fmt.Errorf("explain: no machine of namespace %s backs node %s (no machine labelled node=%s): give the machines' namespace with -n", namespace, node, node)
	case 1:
		return list.Items[0].Name, nil
	default:
		return "", fmt.Errorf("explain: %d machines of namespace %s are labelled node=%s: explain one of them by name", len(list.Items), namespace, node)
	}
}
