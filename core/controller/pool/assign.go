// Package pool decides, as pure functions, what a PoolPolicy (machinist.io/v1alpha1) means for
// the MachineDeployments it selects: which policy governs which deployment (Assign), the pool's
// budgets in machines (Budgets), each governed deployment's share of them and the gates on its
// rollout (Pool.Inputs, which core/controller/rollout decides with), the failures that halt the
// pool's rollout, and the policy's status (Pool.Status). The MachineDeployment controller, the
// PoolPolicy controller and the Machine controller read the same objects and call these
// functions, so they agree on who governs what without writing anything to the deployments.
package pool

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	machinistv1alpha1 "github.com/machinist-io/machinist/core/apis/machinist/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/internal/ownership"
)

// Reasons of the Accepted condition when a policy governs less than it selects.
const (
	ReasonGoverning       = "Governing"
	ReasonInvalidSpec     = "InvalidSpec"
	ReasonSelectsNothing  = "SelectsNothing"
	ReasonConflict        = "Conflict"
	ReasonNeverProgresses = "NeverProgresses"
)

// Problem is why a policy governs fewer deployments than it selects, for the Accepted condition.
type Problem struct {
	Reason  string
	Message string
}

// Validate checks what the schema cannot: the selector, and budgets that resolve to numbers.
// Each error names the field and what to write.
func Validate(p *machinistv1alpha1.PoolPolicy) error {
	var errs []error
	if p.Spec.Selector == nil {
		errs = append(errs, errors.New("spec.selector is required: select the pool's MachineDeployments by a label, such as matchLabels: {worker.gardener.cloud/pool: workers}"))
	} else if _, err := ownership.Selector(p.Spec.Selector); err != nil {
		errs = append(errs, fmt.Errorf("spec.selector: %w", err))
	}
	for _, f := range []struct {
		path string
		v    *intstr.IntOrString
	}{
		{"spec.rollout.maxSurge", p.Spec.Rollout.MaxSurge},
		{"spec.rollout.maxUnavailable", p.Spec.Rollout.MaxUnavailable},
		{"spec.repair.maxInFlight", p.Spec.Repair.MaxInFlight},
	} {
		if f.v == nil {
			continue
		}
		n, err := intstr.GetScaledValueFromIntOrPercent(f.v, 100, true)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s %q: %w: write a count such as 1 or a percentage such as 25%%", f.path, f.v.String(), err))
		case n < 0:
			errs = append(errs, fmt.Errorf("%s %q must not be negative", f.path, f.v.String()))
		}
	}
	if p.Spec.Rollout.OrderBy != "" && p.Spec.Rollout.Order != machinistv1alpha1.OrderSequential {
		errs = append(errs, fmt.Errorf("spec.rollout.orderBy %q orders a Sequential rollout only: set spec.rollout.order: Sequential, or remove orderBy", p.Spec.Rollout.OrderBy))
	}
	return errors.Join(errs...)
}

// Assignment is who governs whom in a namespace: a deployment is governed by the one valid
// policy that selects it; one selected by two policies by neither.
type Assignment struct {
	governs  map[string]*machinistv1alpha1.PoolPolicy          // deployment name → policy
	members  map[string][]*v1alpha1.MachineDeployment          // policy name → governed, by name
	problems map[string]Problem                                // policy name → problem
	selected map[string]map[string]*v1alpha1.MachineDeployment // policy name → selected
}

// Assign decides who governs whom among the policies and deployments of one namespace (objects
// being deleted govern and are governed by nothing). It modifies nothing.
func Assign(policies []*machinistv1alpha1.PoolPolicy, deployments []*v1alpha1.MachineDeployment) Assignment {
	a := Assignment{governs: map[string]*machinistv1alpha1.PoolPolicy{}, members: map[string][]*v1alpha1.MachineDeployment{},
		problems: map[string]Problem{}, selected: map[string]map[string]*v1alpha1.MachineDeployment{}}
	selectedBy := map[string][]string{} // deployment → policies
	byName := map[string]*machinistv1alpha1.PoolPolicy{}
	for _, p := range policies {
		if p.DeletionTimestamp != nil {
			continue
		}
		byName[p.Name] = p
		if err := Validate(p); err != nil {
			a.problems[p.Name] = Problem{ReasonInvalidSpec, err.Error() + "; the MachineDeployments it would select keep their own budgets"}
			continue
		}
		sel, _ := ownership.Selector(p.Spec.Selector)
		a.selected[p.Name] = map[string]*v1alpha1.MachineDeployment{}
		for _, d := range deployments {
			if d.DeletionTimestamp == nil && sel.Matches(labels.Set(d.Labels)) {
				a.selected[p.Name][d.Name] = d
				selectedBy[d.Name] = append(selectedBy[d.Name], p.Name)
			}
		}
	}
	for name := range a.selected {
		a.assignPolicy(byName[name], selectedBy)
	}
	return a
}

// assignPolicy gives a valid policy the deployments it alone selects, unless its budgets could
// never move a rollout.
func (a Assignment) assignPolicy(p *machinistv1alpha1.PoolPolicy, selectedBy map[string][]string) {
	var mine []*v1alpha1.MachineDeployment
	var conflicts []string
	for name, d := range a.selected[p.Name] {
		if others := selectedBy[name]; len(others) > 1 {
			sort.Strings(others)
			conflicts = append(conflicts, fmt.Sprintf("MachineDeployment %s is selected by PoolPolicies %s", name, strings.Join(others, " and ")))
			continue
		}
		mine = append(mine, d)
	}
	sort.Slice(mine, func(i, j int) bool { return mine[i].Name < mine[j].Name })
	sort.Strings(conflicts)
	var replicas int32
	for _, d := range mine {
		replicas += d.Spec.Replicas
	}
	switch {
	case len(conflicts) > 0:
		a.problems[p.Name] = Problem{ReasonConflict, strings.Join(conflicts, "; ") +
			": a deployment selected by two policies is governed by neither and keeps its own budget; change the selectors so each selects it alone"}
	case len(mine) == 0:
		a.problems[p.Name] = Problem{ReasonSelectsNothing, fmt.Sprintf("spec.selector %s matches no MachineDeployment of namespace %s: label the pool's deployments or fix the selector",
			selectorText(p), p.Namespace)}
	}
	if replicas > 0 {
		if b := Budgets(p, replicas); b.MaxSurge == 0 && b.MaxUnavailable == 0 {
			a.problems[p.Name] = Problem{ReasonNeverProgresses, fmt.Sprintf(
				"spec.rollout.maxSurge %s and maxUnavailable %s resolve to 0 and 0 machines of the pool's %d replicas, so a rollout could never progress: allow at least one surge or unavailable machine; the MachineDeployments keep their own budgets meanwhile",
				valueText(p.Spec.Rollout.MaxSurge, "1"), valueText(p.Spec.Rollout.MaxUnavailable, "0"), replicas)}
			return
		}
	}
	a.members[p.Name] = mine
	for _, d := range mine {
		a.governs[d.Name] = p
	}
}

// Governing returns the policy governing a deployment, nil when none does.
func (a Assignment) Governing(deployment string) *machinistv1alpha1.PoolPolicy {
	return a.governs[deployment]
}

// Members returns the deployments a policy governs, by name.
func (a Assignment) Members(policy string) []*v1alpha1.MachineDeployment {
	return a.members[policy]
}

// Selected returns the deployments a valid policy's selector matches, governed or not, by name.
func (a Assignment) Selected(policy string) []*v1alpha1.MachineDeployment {
	out := make([]*v1alpha1.MachineDeployment, 0, len(a.selected[policy]))
	for _, d := range a.selected[policy] {
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Problem returns why a policy governs fewer deployments than it selects, nil when it governs
// all of them.
func (a Assignment) Problem(policy string) *Problem {
	if p, ok := a.problems[policy]; ok {
		return &p
	}
	return nil
}

func selectorText(p *machinistv1alpha1.PoolPolicy) string {
	sel, err := ownership.Selector(p.Spec.Selector)
	if err != nil {
		return "(invalid)"
	}
	return fmt.Sprintf("%q", sel.String())
}

func valueText(v *intstr.IntOrString, unset string) string {
	if v == nil {
		return unset + " (unset)"
	}
	return v.String()
}
