package machinedeployment

import (
	"context"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/fallback"
)

// Capacity fallback in the MachineDeployment controller (package fallback): it checks the
// deployment's list of fallback classes (the condition FallbackClasses and a Warning Event name
// every unusable entry; machines go on being created on the usable classes), and counts the
// machines running on a fallback class (status.fallbackReplicas, the Fallback printer column,
// and the machinist_fallback_machines gauge). The MachineSets inherit the annotation with the
// deployment's other annotations; the Machine and MachineSet controllers act on it.

// fallbackCheck is the result of checking a deployment's fallback list.
type fallbackCheck struct {
	present  bool
	chain    fallback.Chain
	problems []fallback.Problem
}

// checkFallback parses the deployment's fallback list and looks up its classes.
func (r *Reconciler) checkFallback(ctx context.Context, d *v1alpha1.MachineDeployment) (fallbackCheck, error) {
	chain, problems, ok := fallback.ParseAnnotations(d.Namespace, d.Spec.Template.Spec.Class.Name, d.Annotations)
	if !ok {
		return fallbackCheck{}, nil
	}
	v := d.Annotations[fallback.AnnotationClasses]
	usable := chain.Classes[:1]
	found := map[string]*v1alpha1.MachineClass{} // for the prices of a price-ordered chain
	for i, name := range chain.Classes {
		if i == 0 && !chain.ByPrice {
			continue
		}
		class := &v1alpha1.MachineClass{}
		err := r.client.Get(ctx, client.ObjectKey{Namespace: d.Namespace, Name: name}, class)
		if err == nil {
			found[name] = class
		}
		switch {
		case i == 0:
			continue // the template's class: read for its price only (price order)
		case apierrors.IsNotFound(err):
			problems = append(problems, fallback.Problem{Entry: name, Position: fallback.Position(d.Namespace, v, name),
				Why: fmt.Sprintf("MachineClass %s/%s not found: create it or remove it from the list", d.Namespace, name)})
		case err != nil:
			return fallbackCheck{}, fmt.Errorf("machinedeployment: read fallback class %s: %w", name, err)
		case class.DeletionTimestamp != nil:
			problems = append(problems, fallback.Problem{Entry: name, Position: fallback.Position(d.Namespace, v, name),
				Why: fmt.Sprintf("MachineClass %s/%s is being deleted: remove it from the list", d.Namespace, name)})
		default:
			usable = append(usable, name)
		}
	}
	chain.Classes = usable
	problems = append(problems, fallback.PriceProblems(chain, func(n string) *v1alpha1.MachineClass { return found[n] })...)
	return fallbackCheck{present: true, chain: chain, problems: problems}, nil
}

// fallbackConditionText is the condition's status, reason and message for a check.
func fallbackConditionText(fc fallbackCheck) (v1alpha1.ConditionStatus, string, string) {
	if len(fc.problems) == 0 {
		return v1alpha1.ConditionTrue, fallback.ReasonFallbackClassesValid, fallback.DescribeOrder(fc.chain)
	}
	parts := make([]string, 0, len(fc.problems))
	for _, p := range fc.problems {
		parts = append(parts, p.String())
	}
	return v1alpha1.ConditionFalse, fallback.ReasonInvalidFallbackClasses,
		fmt.Sprintf("%s: %s. Machines are created on the usable classes, in order: %s",
			fallback.AnnotationClasses, strings.Join(parts, "; "), strings.Join(fc.chain.Classes, ", "))
}

// applyFallback sets the FallbackClasses condition (removes it without a list) and the count of
// machines on a fallback class. Once the API server has been seen to prune that count (Gardener
// MCM's CRD has no such field), it is left as the server has it, so no status is written again
// and again for a field that cannot be stored.
func (p *pass) applyFallback(st *v1alpha1.MachineDeploymentStatus, now time.Time) {
	if p.fallback.present {
		status, reason, msg := fallbackConditionText(p.fallback)
		setCondition(st, fallback.ConditionClasses, status, reason, msg, now)
	} else {
		removeCondition(st, fallback.ConditionClasses)
	}
	st.FallbackReplicas = p.fallbackReplicas()
	if p.r.fallbackField.Dropped() {
		st.FallbackReplicas = p.d.Status.FallbackReplicas
	}
}

// reportFallback emits the Warning Event of a newly invalid fallback list and sets the gauge.
func (p *pass) reportFallback() {
	d := p.d
	if !p.fallback.present {
		fallback.ForgetDeployment(d.Namespace, d.Name)
		return
	}
	fallback.SetFallbackMachines(d.Namespace, d.Name, int(p.fallbackReplicas()))
	status, _, msg := fallbackConditionText(p.fallback)
	if status != v1alpha1.ConditionFalse {
		return
	}
	if c := getCondition(&d.Status, fallback.ConditionClasses); c != nil && c.Message == msg {
		return
	}
	p.r.recorder.Eventf(d, nil, "Warning", fallback.ReasonInvalidFallbackClasses, "Validate", "%s", msg)
}

// fallbackReplicas counts the live machines of the deployment running on a fallback class.
func (p *pass) fallbackReplicas() int32 {
	var n int32
	for _, ms := range p.sets {
		for _, m := range p.machines[ms.UID] {
			if m.DeletionTimestamp == nil && fallback.OnFallback(m, ms) {
				n++
			}
		}
	}
	return n
}

// deploymentsOfClass maps a MachineClass that appears or goes to the deployments whose fallback
// list names it, so their FallbackClasses condition follows.
func (r *Reconciler) deploymentsOfClass(ctx context.Context, obj client.Object) []reconcile.Request {
	var list v1alpha1.MachineDeploymentList
	if err := r.client.List(ctx, &list, client.InNamespace(obj.GetNamespace()), client.UnsafeDisableDeepCopy); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		d := &list.Items[i]
		if v, ok := d.Annotations[fallback.AnnotationClasses]; ok && fallback.Position(d.Namespace, v, obj.GetName()) > 0 {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: d.Namespace, Name: d.Name}})
		}
	}
	return reqs
}
