package rollout

import (
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/internal/ownership"
)

// Budget is how far a rollout may go above and below a deployment's replicas, in machines.
// Input.Budget nil means the deployment's own (see DeploymentBudget); a pool-wide policy passes
// this deployment's share of the pool's budget instead. A given budget is taken as it is: 0 and
// 0 means the deployment waits (MCM's "both 0 → 1 unavailable" applies to a deployment's own
// fields only).
type Budget struct {
	MaxSurge       int32 `json:"maxSurge"`
	MaxUnavailable int32 `json:"maxUnavailable"`
	// From names who set the budget, for people: "deployment" or, say, "PoolPolicy ns/name".
	From string `json:"from"`
}

// FromDeployment is Budget.From of a deployment's own budget.
const FromDeployment = "deployment"

// IsRollingUpdate reports whether the deployment replaces machines gradually; an empty type is
// RollingUpdate.
func IsRollingUpdate(d *v1alpha1.MachineDeployment) bool {
	t := d.Spec.Strategy.Type
	return t == "" || t == v1alpha1.RollingUpdateMachineDeploymentStrategyType
}

// IsInPlaceUpdate reports whether the deployment updates its machines in place.
func IsInPlaceUpdate(d *v1alpha1.MachineDeployment) bool {
	return d.Spec.Strategy.Type == v1alpha1.InPlaceUpdateMachineDeploymentStrategyType
}

// isManualInPlace reports whether the user selects the nodes of an in-place update.
func isManualInPlace(d *v1alpha1.MachineDeployment) bool {
	ip := d.Spec.Strategy.InPlaceUpdate
	return IsInPlaceUpdate(d) && ip != nil && ip.OrchestrationType == v1alpha1.OrchestrationTypeManual
}

// strategyOf names the deployment's strategy, the empty type as RollingUpdate.
func strategyOf(d *v1alpha1.MachineDeployment) v1alpha1.MachineDeploymentStrategyType {
	if IsRollingUpdate(d) {
		return v1alpha1.RollingUpdateMachineDeploymentStrategyType
	}
	return d.Spec.Strategy.Type
}

// fenceposts resolves maxSurge (rounded up) and maxUnavailable (rounded down) against the
// replicas; when both are 0, maxUnavailable is 1 so a rollout can progress. Unset values are 0.
// MCM has no defaulting either, but its validation refuses a deployment without them and leaves it
// unreconciled (docs/compatibility/mcm-api.md#machineset-and-machinedeployment).
func fenceposts(d *v1alpha1.MachineDeployment) (surge, unavailable int32, err error) {
	var s, u *intstr.IntOrString
	if ru := d.Spec.Strategy.RollingUpdate; ru != nil {
		s, u = ru.MaxSurge, ru.MaxUnavailable
	}
	zero := intstr.FromInt32(0)
	desired := int(d.Spec.Replicas)
	sv, err := intstr.GetScaledValueFromIntOrPercent(intstr.ValueOrDefault(s, zero), desired, true)
	if err != nil {
		return 0, 0, fmt.Errorf("spec.strategy.rollingUpdate.maxSurge: %w", err)
	}
	uv, err := intstr.GetScaledValueFromIntOrPercent(intstr.ValueOrDefault(u, zero), desired, false)
	if err != nil {
		return 0, 0, fmt.Errorf("spec.strategy.rollingUpdate.maxUnavailable: %w", err)
	}
	if sv < 0 || uv < 0 {
		return 0, 0, fmt.Errorf("spec.strategy.rollingUpdate: maxSurge and maxUnavailable must not be negative")
	}
	if sv == 0 && uv == 0 {
		uv = 1
	}
	return int32(sv), int32(uv), nil
}

// inPlaceFenceposts resolves an in-place deployment's maxSurge (rounded up; 0 with Manual
// orchestration) and maxUnavailable (rounded down), 1 unavailable when both are 0, as MCM's
// ResolveFenceposts does for either strategy.
func inPlaceFenceposts(d *v1alpha1.MachineDeployment) (surge, unavailable int32) {
	ip := d.Spec.Strategy.InPlaceUpdate
	if ip == nil {
		return 0, 1
	}
	zero := intstr.FromInt32(0)
	desired := int(d.Spec.Replicas)
	s, err := intstr.GetScaledValueFromIntOrPercent(intstr.ValueOrDefault(ip.MaxSurge, zero), desired, true)
	if err != nil || s < 0 || isManualInPlace(d) {
		s = 0
	}
	u, err := intstr.GetScaledValueFromIntOrPercent(intstr.ValueOrDefault(ip.MaxUnavailable, zero), desired, false)
	if err != nil || u < 0 {
		u = 0
	}
	if s == 0 && u == 0 {
		u = 1
	}
	return int32(s), int32(u)
}

// DeploymentBudget is a deployment's own budget: its strategy's maxSurge and maxUnavailable
// resolved against its replicas (RollingUpdate's or InPlaceUpdate's; Recreate has neither).
func DeploymentBudget(d *v1alpha1.MachineDeployment) Budget {
	b := Budget{From: FromDeployment}
	switch {
	case IsRollingUpdate(d):
		b.MaxSurge, b.MaxUnavailable, _ = fenceposts(d)
	case IsInPlaceUpdate(d):
		b.MaxSurge, b.MaxUnavailable = inPlaceFenceposts(d)
	}
	return b
}

// limits is the budget a decision works with.
type limits struct {
	// surge: how many machines beyond replicas a rollout may create (RollingUpdate and the
	// fresh machines of an Auto InPlaceUpdate).
	surge int32
	// unavailable: how many of the replicas may be unavailable, at most replicas (MCM's
	// MaxUnavailable: 0 for Recreate).
	unavailable int32
	from        string
	// annotated is the surge the sets' max-replicas annotation records: the budget's, even
	// while a pool's gate holds the rollout at 0.
	annotated int32
}

// limitsOf resolves the budget of a decision: the input's, else the deployment's own. Manual
// in-place orchestration (the deployment's, or its pool's approval) never surges, whoever sets
// the budget.
func limitsOf(d *v1alpha1.MachineDeployment, override *Budget, gates *PoolGates) limits {
	b := DeploymentBudget(d)
	if override != nil && (IsRollingUpdate(d) || IsInPlaceUpdate(d)) {
		b = *override
		if isManualInPlace(d) || (IsInPlaceUpdate(d) && gates != nil && gates.ManualApproval) {
			b.MaxSurge = 0
		}
	}
	l := limits{surge: max(b.MaxSurge, 0), from: b.From}
	l.annotated = l.surge
	if d.Spec.Replicas > 0 && (IsRollingUpdate(d) || IsInPlaceUpdate(d)) {
		l.unavailable = min(max(b.MaxUnavailable, 0), d.Spec.Replicas)
	}
	return l
}

// annotationSurge is the surge of the max-replicas annotation: RollingUpdate's only, as MCM's
// MaxSurge.
func (l limits) annotationSurge(d *v1alpha1.MachineDeployment) int32 {
	if !IsRollingUpdate(d) {
		return 0
	}
	return l.annotated
}

// Selector returns a deployment's selector; an empty selector is an error, since it would
// select every MachineSet in the namespace.
func Selector(d *v1alpha1.MachineDeployment) (labels.Selector, error) {
	return ownership.Selector(d.Spec.Selector)
}

// Validate checks what the API server's schema cannot, and returns the deployment's selector.
// Each error names the field and what to do.
func Validate(d *v1alpha1.MachineDeployment) (labels.Selector, error) {
	sel, err := Selector(d)
	if err != nil {
		return nil, err
	}
	if !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
		return nil, fmt.Errorf("spec.template.metadata.labels %v do not match spec.selector %s: make the template carry the selected labels", d.Spec.Template.Labels, sel)
	}
	if d.Spec.Template.Spec.Class.Name == "" {
		return nil, errors.New("spec.template.spec.class.name is empty: name the MachineClass of the machines")
	}
	if d.Spec.Replicas < 0 {
		return nil, errors.New("spec.replicas is negative")
	}
	if _, _, err := fenceposts(d); err != nil && IsRollingUpdate(d) {
		return nil, err
	}
	switch d.Spec.Strategy.Type {
	case "", v1alpha1.RollingUpdateMachineDeploymentStrategyType, v1alpha1.RecreateMachineDeploymentStrategyType:
	case v1alpha1.InPlaceUpdateMachineDeploymentStrategyType:
		if err := validateInPlace(d); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("spec.strategy.type %q is not supported: use RollingUpdate, Recreate or InPlaceUpdate", d.Spec.Strategy.Type)
	}
	return sel, nil
}

// validateInPlace checks spec.strategy.inPlaceUpdate as MCM's validation does
// (pkg/apis/machine/validation/machinedeployment.go): the block is required, maxSurge and
// maxUnavailable must resolve to numbers, orchestrationType is Auto or Manual. MCM does not
// default anything here, so neither does this.
func validateInPlace(d *v1alpha1.MachineDeployment) error {
	ip := d.Spec.Strategy.InPlaceUpdate
	if ip == nil {
		return errors.New("spec.strategy.inPlaceUpdate is required for strategy type InPlaceUpdate: set maxSurge, maxUnavailable and orchestrationType (Auto or Manual)")
	}
	var errs []error
	for _, f := range []struct {
		name string
		v    *intstr.IntOrString
	}{{"maxSurge", ip.MaxSurge}, {"maxUnavailable", ip.MaxUnavailable}} {
		path := "spec.strategy.inPlaceUpdate." + f.name
		if f.v == nil {
			errs = append(errs, fmt.Errorf("%s is required: set a count such as 1 or a percentage such as 25%%", path))
			continue
		}
		n, err := intstr.GetScaledValueFromIntOrPercent(f.v, int(d.Spec.Replicas), true)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s %q: %w: use a count such as 1 or a percentage such as 25%%", path, f.v.String(), err))
			continue
		}
		if n < 0 {
			errs = append(errs, fmt.Errorf("%s %q must not be negative", path, f.v.String()))
		}
	}
	switch ip.OrchestrationType {
	case v1alpha1.OrchestrationTypeAuto, v1alpha1.OrchestrationTypeManual:
	default:
		errs = append(errs, fmt.Errorf("spec.strategy.inPlaceUpdate.orchestrationType %q is invalid: use Auto (the controller selects the nodes) or Manual (you label them %s)",
			ip.OrchestrationType, v1alpha1.LabelNodeSelectedForUpdate))
	}
	return errors.Join(errs...)
}
