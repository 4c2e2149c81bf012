package machineset

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/fallback"
	"github.com/machinist-io/machinist/core/eventnote"
)

// Capacity fallback in the MachineSet controller (package fallback): new machines of a set with
// fallback classes start on the first class that is not marked exhausted, so no create is spent
// on a class known to be out of capacity; and with rebalancing on, machines on a fallback class
// are moved back to the primary class once its mark has expired, one at a time and surge first:
// a machine on the primary is added (the first one probes whether the primary has capacity
// again), and only once it is ready is one fallback machine deleted, through the Machine
// controller's deletion (drain, PodDisruptionBudgets). The set never has fewer ready machines
// than its replicas because of it. A refused probe (its class marked again) is deleted and
// nothing else moves. Everything is decided from the machines as stored, so a restart anywhere
// resumes where it stopped.

// ownerForEvents is the object deployment-level events go to: the set's MachineDeployment, else
// the set.
func ownerForEvents(ms *v1alpha1.MachineSet) runtime.Object {
	if ref := metav1.GetControllerOf(ms); ref != nil && ref.Kind == "MachineDeployment" {
		return &v1alpha1.MachineDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: ms.Namespace, Name: ref.Name, UID: ref.UID}}
	}
	return ms
}

// usable reports whether a class of the set's namespace exists and is not being deleted,
// adopting a mark published on it.
func (r *Reconciler) usable(ctx context.Context, namespace string) func(string) bool {
	return func(name string) bool {
		class := &v1alpha1.MachineClass{}
		if err := r.client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, class); err != nil {
			return false
		}
		r.opts.Fallback.Adopt(class)
		return class.DeletionTimestamp == nil
	}
}

// newMachineClass is the class new machines of the set start on: the first class of its chain
// that is not marked exhausted. note explains a fallback class ("" for the template's class).
func (r *Reconciler) newMachineClass(ctx context.Context, ms *v1alpha1.MachineSet) (class, note string) {
	chain, _, ok := fallback.ChainOf(ms)
	if !ok || len(chain.Classes) < 2 {
		return "", ""
	}
	picked, skipped, ok := fallback.Pick(chain, r.opts.Fallback, r.usable(ctx, ms.Namespace))
	if !ok || picked == chain.Primary() {
		// Every class is marked: the machine starts on the template's class and waits there.
		return "", ""
	}
	if chain.ByPrice && len(skipped) == 0 {
		return picked, "it is the cheapest class (" + fallback.AnnotationOrder + ": " + fallback.OrderPrice + ")"
	}
	return picked, fallback.Describe(chain.Classes, skipped)
}

// fallbackEvents reports machines created on a fallback class, on each machine and once on the
// deployment.
func (r *Reconciler) fallbackEvents(ms *v1alpha1.MachineSet, created []*v1alpha1.Machine, class, note string) {
	if class == "" || len(created) == 0 {
		return
	}
	primary := fallback.TemplateClass(ms)
	names := make([]string, 0, len(created))
	for _, m := range created {
		names = append(names, m.Name)
		r.recorder.Eventf(m, nil, corev1.EventTypeWarning, fallback.ReasonCapacityFallback, "Create",
			"Created on fallback class %s instead of %s: %s", class, primary, note)
	}
	r.recorder.Eventf(ownerForEvents(ms), nil, corev1.EventTypeWarning, fallback.ReasonCapacityFallback, "Create",
		"Created %s (%s) on fallback class %s instead of %s: %s", eventnote.Plural(len(created), "machine"), eventnote.List(names, eventnote.ListBudget), class, primary, note)
}

// rebalance runs the rebalancing of a set before its replicas are managed. It returns the
// machines the replica count is managed with (surge machines are extra while they do their job)
// and when to look again. Without rebalancing surge machines are ordinary machines again.
func (r *Reconciler) rebalance(ctx context.Context, ms *v1alpha1.MachineSet, machines, active []*v1alpha1.Machine) ([]*v1alpha1.Machine, time.Duration, error) {
	var regular, surge []*v1alpha1.Machine
	for _, m := range active {
		if fallback.IsSurge(m) {
			surge = append(surge, m)
		} else {
			regular = append(regular, m)
		}
	}
	chain, _, ok := fallback.ChainOf(ms)
	on := ok && len(chain.Classes) > 1 && fallback.RebalanceEnabled(ms) && !Frozen(ms)
	now := r.now()
	minReady := time.Duration(ms.Spec.MinReadySeconds) * time.Second
	replicas := int(ms.Spec.Replicas)

	if !on || len(regular) != replicas || len(surge) > 1 {
		// Not rebalancing (any more), or the set is being scaled: a ready surge machine stays as
		// an ordinary one, the others go.
		for _, s := range surge {
			if Ready(s) {
				if err := r.clearSurge(ctx, s); err != nil {
					return nil, 0, err
				}
				regular = append(regular, s)
			} else if err := r.deleteMachines(ctx, ms, []*v1alpha1.Machine{s}, "rebalance surge machine no longer needed"); err != nil {
				return nil, 0, err
			}
		}
		return regular, 0, nil
	}

	primary := chain.Primary()
	var onFallback []*v1alpha1.Machine
	readyRegular := 0
	for _, m := range regular {
		if fallback.OnFallback(m, ms) {
			onFallback = append(onFallback, m)
		}
		if Available(m, minReady, now) {
			readyRegular++
		}
	}
	mark, marked := r.opts.Fallback.Exhausted(ms.Namespace, primary)

	if len(surge) == 1 {
		s := surge[0]
		switch {
		case Available(s, minReady, now):
			if len(onFallback) > 0 {
				SortForDeletion(onFallback, now)
				victim := onFallback[0]
				after := readyRegular + 1
				if Available(victim, minReady, now) {
					after--
				}
				if after < replicas {
					// Another machine is not ready: replacing a ready one now would leave the set
					// short. Its events bring the set back.
					return regular, 0, nil
				}
				if err := r.deleteMachines(ctx, ms, []*v1alpha1.Machine{victim}, fmt.Sprintf("rebalance: replaced by %s on primary class %s", s.Name, primary)); err != nil {
					return nil, 0, err
				}
				r.recorder.Eventf(ownerForEvents(ms), victim, corev1.EventTypeNormal, fallback.ReasonRebalance, "Rebalance",
					"Machine %s on class %s is replaced by %s on primary class %s, which is ready", victim.Name, victim.Spec.Class.Name, s.Name, primary)
			}
			// The surge machine is an ordinary member now; with the victim deleting, the set is at
			// its replicas again.
			if err := r.clearSurge(ctx, s); err != nil {
				return nil, 0, err
			}
			return regular, 0, nil
		case marked:
			// The probe was refused (ResourceExhausted marked the class again): nothing else moves.
			if err := r.deleteMachines(ctx, ms, []*v1alpha1.Machine{s}, "rebalance probe refused: primary class "+primary+" is out of capacity"); err != nil {
				return nil, 0, err
			}
			r.recorder.Eventf(ownerForEvents(ms), s, corev1.EventTypeNormal, fallback.ReasonRebalance, "Rebalance",
				"Probe machine %s on primary class %s refused (%s); trying again after %s", s.Name, primary, mark.Message, mark.Until.UTC().Format(time.TimeOnly))
			return regular, mark.Until.Sub(now) + time.Second, nil
		}
		// Still coming up: its events bring the set back.
		return regular, 0, nil
	}

	if len(onFallback) == 0 {
		return regular, 0, nil
	}
	if marked {
		return regular, mark.Until.Sub(now) + time.Second, nil
	}
	if !r.rebalanceMayStart(ms, machines, regular, readyRegular) || !r.usable(ctx, ms.Namespace)(primary) {
		return regular, 0, nil
	}
	m := newMachine(ms)
	m.Annotations[fallback.AnnotationSurge] = "true"
	if err := r.client.Create(ctx, m); err != nil {
		return nil, 0, fmt.Errorf("machineset: %w: rebalance surge machine: %w", errCreate, err)
	}
	r.exp.created(client.ObjectKeyFromObject(ms), m.Name)
	r.recorder.Eventf(ownerForEvents(ms), m, corev1.EventTypeNormal, fallback.ReasonRebalance, "Rebalance",
		"Primary class %s is no longer marked exhausted: created surge machine %s on it to replace one of %d machine(s) on fallback classes", primary, m.Name, len(onFallback))
	return regular, 0, nil
}

// rebalanceMayStart: a replacement starts only on a calm set: every machine ready, none being
// deleted (the previous replacement is complete), and no rollout or scaling in progress (a
// MachineSet of a deployment is full: its spec.replicas is the deployment's).
func (r *Reconciler) rebalanceMayStart(ms *v1alpha1.MachineSet, all, regular []*v1alpha1.Machine, ready int) bool {
	if ready < len(regular) {
		return false
	}
	for _, m := range all {
		if m.DeletionTimestamp != nil {
			return false
		}
	}
	if _, disabled := ms.Labels[v1alpha1.LabelScaleUpDisabled]; disabled {
		return false
	}
	if desired, ok := ms.Annotations[v1alpha1.AnnotationDesiredReplicas]; ok && desired != fmt.Sprint(ms.Spec.Replicas) {
		return false
	}
	return true
}

// clearSurge makes a surge machine an ordinary member of its set.
func (r *Reconciler) clearSurge(ctx context.Context, cached *v1alpha1.Machine) error {
	m := cached.DeepCopy()
	patch := client.MergeFromWithOptions(cached, client.MergeFromWithOptimisticLock{})
	delete(m.Annotations, fallback.AnnotationSurge)
	if err := r.client.Patch(ctx, m, patch); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("machineset: update surge annotation of machine %s: %w", m.Name, err)
	}
	return nil
}
