package machine

import (
	"context"

	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/pool"
)

// repairGroup widens a deployment's replacement group to its pool when a PoolPolicy with
// spec.repair.maxInFlight governs the deployment: the group is then every machine of the pool's
// deployments and the limit the policy's, resolved against the pool's replicas (never below 1).
// Otherwise it returns the deployment's group, machines and the controller's limit unchanged.
func repairGroup(ctx context.Context, c client.Reader, ns, deployment string, members []*v1alpha1.Machine, maxReplacing intstr.IntOrString) (string, []*v1alpha1.Machine, int, error) {
	own := func() (string, []*v1alpha1.Machine, int, error) {
		return deployment, members, maxReplacements(maxReplacing, len(members)), nil
	}
	a, _, err := pool.Reader{Client: c}.Assign(ctx, ns)
	if err != nil {
		return "", nil, 0, err
	}
	policy := a.Governing(deployment)
	if policy == nil || policy.Spec.Repair.MaxInFlight == nil {
		return own()
	}
	var all []*v1alpha1.Machine
	var replicas int32
	for _, d := range a.Members(policy.Name) {
		ms, err := machinesOfDeployment(ctx, c, ns, d.UID)
		if err != nil {
			return "", nil, 0, err
		}
		all = append(all, ms...)
		replicas += d.Spec.Replicas
	}
	limit, _ := pool.RepairLimit(policy, replicas)
	return "pool " + policy.Name, all, int(limit), nil
}
