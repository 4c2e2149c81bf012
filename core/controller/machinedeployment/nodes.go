package machinedeployment

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/rollout"
)

// nodeWriter writes a step's operations on the target cluster's nodes.
type nodeWriter struct{ *pass }

// get reads a node from the target cluster's cache; nil when it is gone.
func (w nodeWriter) get(ctx context.Context, name string) (*corev1.Node, error) {
	node := &corev1.Node{}
	if err := w.r.opts.Target.Get(ctx, client.ObjectKey{Name: name}, node, client.UnsafeDisableDeepCopy); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("machinedeployment: read node %s: %w", name, err)
	}
	return node, nil
}

// patch writes what change does to a node, if anything.
func (w nodeWriter) patch(ctx context.Context, name string, lock bool, change func(*corev1.Node) bool) (bool, error) {
	node, err := w.get(ctx, name)
	if err != nil || node == nil {
		return false, err
	}
	upd := node.DeepCopy()
	if !change(upd) {
		return false, nil
	}
	patch := client.MergeFrom(node)
	if lock {
		patch = client.MergeFromWithOptions(node, client.MergeFromWithOptimisticLock{})
	}
	if err := w.r.opts.Target.Patch(ctx, upd, patch); err != nil && !apierrors.IsNotFound(err) {
		return false, err
	}
	return true, nil
}

// label labels a node for an in-place update.
func (w nodeWriter) label(ctx context.Context, op rollout.LabelNode) error {
	if _, err := w.patch(ctx, op.Node, false, op.Apply); err != nil {
		return fmt.Errorf("machinedeployment: label node %s %s: %w", op.Node, op.Label, err)
	}
	if op.Label == v1alpha1.LabelNodeSelectedForUpdate {
		w.r.recorder.Eventf(w.d, w.machine(op.Machine), "Normal", "SelectedForUpdate", "InPlaceUpdate", "Selected node %s of machine %s for an in-place update", op.Node, op.Machine)
	}
	return nil
}

// finish clears the update state of the node of a machine that moved after its update.
func (w nodeWriter) finish(ctx context.Context, op rollout.FinishInPlaceUpdate) error {
	change := func(n *corev1.Node) bool { op.Apply(n); return true }
	done, err := w.patch(ctx, op.Node, true, change)
	if err != nil {
		return fmt.Errorf("machinedeployment: clear the in-place update of node %s: %w", op.Node, err)
	}
	if done {
		w.r.recorder.Eventf(w.d, w.machine(op.Machine), "Normal", "InPlaceUpdated", "InPlaceUpdate", "Machine %s (node %s) was updated in place and moved to machine set %s", op.Machine, op.Node, op.Set)
	}
	return nil
}

// uncordon makes the node of a moved machine schedulable.
func (w nodeWriter) uncordon(ctx context.Context, op rollout.Uncordon) error {
	if _, err := w.patch(ctx, op.Node, false, op.Apply); err != nil {
		return fmt.Errorf("machinedeployment: uncordon node %s: %w", op.Node, err)
	}
	return nil
}

// markNodes applies the step's rollout marks on nodes, each it can, and remembers whether the
// deployment's nodes are clean until its next rollout.
func (p *pass) markNodes(ctx context.Context) error {
	if p.r.opts.Target == nil {
		return nil
	}
	w := nodeWriter{p}
	var errs []error
	for _, op := range p.dec.Step.Ops {
		if op, ok := op.(rollout.MarkNode); ok {
			if _, err := w.patch(ctx, op.Node, true, op.Apply); err != nil {
				errs = append(errs, fmt.Errorf("machinedeployment: mark node %s for the rollout of %s: %w", op.Node, p.d.Name, err))
			}
		}
	}
	switch {
	case !p.dec.Step.NodesClean:
		p.r.nodesClean.Delete(p.key())
	case len(errs) == 0:
		p.r.nodesClean.Store(p.key(), true)
	}
	return errors.Join(errs...)
}
