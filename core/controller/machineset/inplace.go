package machineset

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// syncInPlace passes on to the set's machines what changes without replacing them, as MCM's
// MachineSet controller does (syncMachinesNodeTemplates, syncMachinesConfig,
// syncMachinesClassKind): the template's nodeTemplate and machine configuration to every
// machine that is not Failed, terminating or being deleted, and its class kind to every machine
// not being deleted. The Machine controller then syncs the nodeTemplate onto the node. The class
// name is never touched: it does not change in place (a new name is a new set), and a machine
// created on a fallback class keeps it.
func (r *Reconciler) syncInPlace(ctx context.Context, ms *v1alpha1.MachineSet, machines []*v1alpha1.Machine) error {
	var errs []error
	for _, m := range machines {
		upd, changed := inPlaceUpdate(ms, m)
		if !changed {
			continue
		}
		// The machine is the cache's own object: the patch is computed against it, never written to it.
		patch := client.MergeFromWithOptions(m, client.MergeFromWithOptimisticLock{})
		if err := r.client.Patch(ctx, upd, patch); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("machineset: update machine %s to the set's node template and configuration: %w", m.Name, err))
		}
	}
	return errors.Join(errs...)
}

// inPlaceUpdate returns a copy of m carrying the set's in-place fields, and whether any differed.
func inPlaceUpdate(ms *v1alpha1.MachineSet, m *v1alpha1.Machine) (*v1alpha1.Machine, bool) {
	if m.DeletionTimestamp != nil {
		return nil, false
	}
	want := &ms.Spec.Template.Spec
	active := m.Status.CurrentStatus.Phase != v1alpha1.MachineFailed && m.Status.CurrentStatus.Phase != v1alpha1.MachineTerminating
	nodeTemplate := active && !equality.Semantic.DeepEqual(want.NodeTemplateSpec, m.Spec.NodeTemplateSpec)
	config := active && !equality.Semantic.DeepEqual(want.MachineConfiguration, m.Spec.MachineConfiguration)
	// A template without a class name (a set written by an old tool, whose machines took
	// spec.machineClass) has no kind to pass on.
	kind := want.Class.Name != "" && want.Class.Kind != m.Spec.Class.Kind
	if !nodeTemplate && !config && !kind {
		return nil, false
	}
	upd := m.DeepCopy()
	if nodeTemplate {
		upd.Spec.NodeTemplateSpec = *want.NodeTemplateSpec.DeepCopy()
	}
	if config {
		upd.Spec.MachineConfiguration = want.MachineConfiguration.DeepCopy()
	}
	if kind {
		upd.Spec.Class.Kind = want.Class.Kind
	}
	return upd, true
}
