package plan

import (
	"context"
	"fmt"
	"sort"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/rollout"
)

// Object plans one manifest: a MachineDeployment (Deployment), a MachineSet or a MachineClass.
func (r Reader) Object(ctx context.Context, o client.Object) (Result, error) {
	switch o := o.(type) {
	case *v1alpha1.MachineDeployment:
		w, err := r.Deployment(ctx, o)
		if err != nil {
			return Result{}, err
		}
		return Deployment(w), nil
	case *v1alpha1.MachineSet:
		return r.set(ctx, o)
	case *v1alpha1.MachineClass:
		return r.class(ctx, o)
	}
	return Result{}, fmt.Errorf("plan: %T: plan takes MachineDeployment, MachineSet and MachineClass", o)
}

// set plans a MachineSet: its controller creates or deletes machines to its replicas; a set a
// deployment controls is sized by the deployment, which undoes the change.
func (r Reader) set(ctx context.Context, ms *v1alpha1.MachineSet) (Result, error) {
	res := Result{Kind: "MachineSet", Namespace: ms.Namespace, Name: ms.Name, Action: rollout.None}
	live := &v1alpha1.MachineSet{}
	err := r.Control.Get(ctx, client.ObjectKeyFromObject(ms), live)
	switch {
	case apierrors.IsNotFound(err):
		live = nil
	case err != nil:
		return Result{}, fmt.Errorf("plan: read MachineSet %s/%s: %w", ms.Namespace, ms.Name, err)
	}
	from := int32(0)
	if live != nil {
		from = live.Spec.Replicas
		if ref := metav1.GetControllerOf(live); ref != nil && ref.Kind == "MachineDeployment" {
			res.Notes = append(res.Notes, fmt.Sprintf("MachineDeployment %s controls this set and sizes it: change the deployment instead", ref.Name))
		}
		if !equality.Semantic.DeepEqual(live.Spec.Template, ms.Spec.Template) {
			res.Notes = append(res.Notes, "a MachineSet's template applies to the machines it creates from now on; its existing machines are not replaced")
		}
	}
	if ms.Spec.Replicas != from {
		res.Action = rollout.Scale
		res.Steps = []string{SizesString(map[string]int32{ms.Name: ms.Spec.Replicas})}
	}
	return res, nil
}

// class plans a MachineClass: MCM's machines keep the class's contents they were created with,
// so a change reaches the machines created from now on; the deployments that use it are named.
func (r Reader) class(ctx context.Context, c *v1alpha1.MachineClass) (Result, error) {
	res := Result{Kind: "MachineClass", Namespace: c.Namespace, Name: c.Name, Action: rollout.None}
	var list v1alpha1.MachineDeploymentList
	if err := r.Control.List(ctx, &list, client.InNamespace(c.Namespace)); err != nil {
		return Result{}, fmt.Errorf("plan: list MachineDeployments of %s: %w", c.Namespace, err)
	}
	var users []string
	for _, d := range list.Items {
		if d.Spec.Template.Spec.Class.Name == c.Name {
			users = append(users, d.Name)
		}
	}
	sort.Strings(users)
	if len(users) > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("the class's contents reach the machines created from now on, of MachineDeployments %v; no machine is replaced", users))
	}
	return res, nil
}
