package machinedeployment

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/registry"
)

// UpdateTargets tells node agents that update nodes in place (registry.Env.UpdateTargets) the
// MachineClass a machine is being updated to: the class its MachineDeployment names now. While
// a node is ReadyForUpdate its machine still belongs to an old MachineSet, whose deployment's
// template already names the new class.
type UpdateTargets struct {
	// Reader reads Machines, MachineSets, MachineDeployments and MachineClasses (the manager's
	// cached client).
	Reader client.Reader
	// Namespace of the Machine* objects; "" looks the machine up in every namespace.
	Namespace string
}

// UpdateTarget implements registry.UpdateTargets.
func (u *UpdateTargets) UpdateTarget(ctx context.Context, machine string) (*v1alpha1.MachineClass, error) {
	m, err := u.machine(ctx, machine)
	if err != nil || m == nil {
		return nil, err
	}
	ref := metav1.GetControllerOf(m)
	if ref == nil || ref.Kind != "MachineSet" {
		return nil, nil
	}
	ms := &v1alpha1.MachineSet{}
	if err := u.Reader.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: ref.Name}, ms); err != nil {
		return nil, client.IgnoreNotFound(fmt.Errorf("machinedeployment: machine set %s of machine %s: %w", ref.Name, machine, err))
	}
	ref = metav1.GetControllerOf(ms)
	if ref == nil || ref.Kind != "MachineDeployment" {
		return nil, nil
	}
	d := &v1alpha1.MachineDeployment{}
	if err := u.Reader.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: ref.Name}, d); err != nil {
		return nil, client.IgnoreNotFound(fmt.Errorf("machinedeployment: deployment %s of machine %s: %w", ref.Name, machine, err))
	}
	class := &v1alpha1.MachineClass{}
	name := d.Spec.Template.Spec.Class.Name
	if err := u.Reader.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: name}, class); err != nil {
		return nil, fmt.Errorf("machinedeployment: MachineClass %s/%s of deployment %s: %w", m.Namespace, name, d.Name, err)
	}
	return class, nil
}

func (u *UpdateTargets) machine(ctx context.Context, name string) (*v1alpha1.Machine, error) {
	if u.Namespace != "" {
		m := &v1alpha1.Machine{}
		if err := u.Reader.Get(ctx, client.ObjectKey{Namespace: u.Namespace, Name: name}, m); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, nil
			}
			return nil, fmt.Errorf("machinedeployment: machine %s/%s: %w", u.Namespace, name, err)
		}
		return m, nil
	}
	var list v1alpha1.MachineList
	if err := u.Reader.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("machinedeployment: list machines: %w", err)
	}
	for i := range list.Items {
		if list.Items[i].Name == name {
			return &list.Items[i], nil
		}
	}
	return nil, nil
}

var _ registry.UpdateTargets = (*UpdateTargets)(nil)
