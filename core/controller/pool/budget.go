package pool

import (
	"k8s.io/apimachinery/pkg/util/intstr"

	machinistv1alpha1 "github.com/machinist-io/machinist/core/apis/machinist/v1alpha1"
)

// Defaults of a policy's budgets: one surge machine, none unavailable.
var (
	DefaultMaxSurge       = intstr.FromInt32(1)
	DefaultMaxUnavailable = intstr.FromInt32(0)
)

// PoolBudgets are a pool's rollout budgets in machines.
type PoolBudgets struct {
	MaxSurge, MaxUnavailable int32
}

// Budgets resolves a policy's maxSurge (rounded up) and maxUnavailable (rounded down, at most
// the replicas) against the pool's replicas. Unlike a deployment's own budget, 0 and 0 stays 0
// and 0 (Assign refuses such a policy). Values Validate refuses resolve to 0.
func Budgets(p *machinistv1alpha1.PoolPolicy, replicas int32) PoolBudgets {
	surge := scaled(p.Spec.Rollout.MaxSurge, DefaultMaxSurge, replicas, true)
	unavailable := min(scaled(p.Spec.Rollout.MaxUnavailable, DefaultMaxUnavailable, replicas, false), max(replicas, 0))
	return PoolBudgets{MaxSurge: surge, MaxUnavailable: unavailable}
}

// RepairLimit resolves spec.repair.maxInFlight against the pool's replicas (percentages round
// down), never below 1; ok is false when the policy sets none.
func RepairLimit(p *machinistv1alpha1.PoolPolicy, replicas int32) (limit int32, ok bool) {
	if p.Spec.Repair.MaxInFlight == nil {
		return 0, false
	}
	return max(scaled(p.Spec.Repair.MaxInFlight, intstr.FromInt32(1), replicas, false), 1), true
}

func scaled(v *intstr.IntOrString, def intstr.IntOrString, total int32, roundUp bool) int32 {
	n, err := intstr.GetScaledValueFromIntOrPercent(intstr.ValueOrDefault(v, def), int(max(total, 0)), roundUp)
	if err != nil || n < 0 {
		return 0
	}
	return int32(n)
}
