package plan

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	machinistv1alpha1 "github.com/machinist-io/machinist/core/apis/machinist/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/pool"
	"github.com/machinist-io/machinist/core/controller/rollout"
)

// pool gives the world of a deployment that a PoolPolicy governs (after the manifest is applied)
// its share of the pool's budgets and the pool's gates, exactly as the MachineDeployment
// controller does (pool.Pool.Input): the plan shows the pool's budget, not the deployment's own.
// Without machinist's CRDs (no PoolPolicy kind served) the deployment's own budget stands.
func (r Reader) pool(ctx context.Context, w *World) error {
	d := w.Input.Deployment
	var policies machinistv1alpha1.PoolPolicyList
	if err := r.Control.List(ctx, &policies, client.InNamespace(d.Namespace)); err != nil {
		if meta.IsNoMatchError(err) {
			return nil
		}
		return fmt.Errorf("plan: list PoolPolicies of %s: %w", d.Namespace, err)
	}
	if len(policies.Items) == 0 {
		return nil
	}
	var deployments v1alpha1.MachineDeploymentList
	if err := r.Control.List(ctx, &deployments, client.InNamespace(d.Namespace)); err != nil {
		return fmt.Errorf("plan: list MachineDeployments of %s: %w", d.Namespace, err)
	}
	ps := make([]*machinistv1alpha1.PoolPolicy, len(policies.Items))
	for i := range policies.Items {
		ps[i] = &policies.Items[i]
	}
	// The manifest's deployment stands in for the live one: its labels decide its pool.
	ds := []*v1alpha1.MachineDeployment{d}
	for i := range deployments.Items {
		if deployments.Items[i].Name != d.Name {
			ds = append(ds, &deployments.Items[i])
		}
	}
	a := pool.Assign(ps, ds)
	policy := a.Governing(d.Name)
	if policy == nil {
		return nil
	}
	members := a.Members(policy.Name)
	inputs := make([]rollout.Input, 0, len(members))
	for _, m := range members {
		if m.Name == d.Name {
			inputs = append(inputs, w.Input)
			continue
		}
		mw := World{Input: rollout.Input{Deployment: m, Machines: map[types.UID][]*v1alpha1.Machine{}, Now: r.Now, TargetCluster: r.Target != nil}}
		if err := r.setsAndMachines(ctx, &mw); err != nil {
			return err
		}
		inputs = append(inputs, mw.Input)
	}
	if in, ok := (pool.Pool{Policy: policy, Members: inputs, Now: r.Now}).Input(d.Name); ok {
		w.Input = in
	}
	return nil
}
