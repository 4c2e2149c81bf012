// Package ownership is what the MachineSet and MachineDeployment controllers share about the
// objects they control by label selector: the selector itself, and which controllers may adopt
// an object nobody controls.
package ownership

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Selector returns a controller's label selector; an empty selector is an error, since it would
// select every object in the namespace.
func Selector(s *metav1.LabelSelector) (labels.Selector, error) {
	if s == nil || (len(s.MatchLabels) == 0 && len(s.MatchExpressions) == 0) {
		return nil, errors.New("spec.selector is empty: set spec.selector.matchLabels to labels of spec.template.metadata.labels")
	}
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		return nil, fmt.Errorf("spec.selector is invalid: %w", err)
	}
	return sel, nil
}

// OrphanMapper maps an object nobody controls (and not being deleted) to the controllers of its
// namespace, listed into newList() from c, whose selector (selectorOf) matches its labels: they
// may adopt it. Objects with a controller map to nothing.
func OrphanMapper[L client.ObjectList](c client.Reader, newList func() L, selectorOf func(client.Object) *metav1.LabelSelector) handler.MapFunc {
	return func(ctx context.Context, obj client.Object) []reconcile.Request {
		if metav1.GetControllerOf(obj) != nil || obj.GetDeletionTimestamp() != nil {
			return nil
		}
		list := newList()
		if err := c.List(ctx, list, client.InNamespace(obj.GetNamespace()), client.UnsafeDisableDeepCopy); err != nil {
			return nil
		}
		var reqs []reconcile.Request
		_ = meta.EachListItem(list, func(item runtime.Object) error {
			owner, ok := item.(client.Object)
			if !ok {
				return nil
			}
			if sel, err := Selector(selectorOf(owner)); err == nil && sel.Matches(labels.Set(obj.GetLabels())) {
				reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(owner)})
			}
			return nil
		})
		return reqs
	}
}
