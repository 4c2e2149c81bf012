package pool

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	machinistv1alpha1 "github.com/machinist-io/machinist/core/apis/machinist/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/internal/ownership"
	"github.com/machinist-io/machinist/core/controller/rollout"
)

// Served reports whether the API server serves PoolPolicies (machinist's CRDs are installed):
// without them deployments keep their own budgets and nothing about pools is read or watched.
// An error other than "no such kind" counts as served, so a slow discovery does not turn pools
// off.
func Served(mapper meta.RESTMapper) bool {
	_, err := mapper.RESTMapping(schema.GroupKind{Group: machinistv1alpha1.GroupName, Kind: "PoolPolicy"},
		machinistv1alpha1.SchemeGroupVersion.Version)
	return err == nil || !meta.IsNoMatchError(err)
}

// Reader reads what the pool's decisions need from a controller's cache. It is the one part of
// the package that is not pure: the MachineDeployment and PoolPolicy controllers share it so
// they read the same world the same way.
type Reader struct {
	// Client reads policies, deployments, sets and machines; sets and machines need the
	// ownership index (ownership.AddIndex).
	Client client.Reader
	// Target reads the target cluster's nodes (Manual approval needs them); nil means none.
	Target client.Reader
}

// Assign lists the namespace's policies and deployments and assigns them (Assign). The
// objects are the cache's own: read them, never modify them.
func (r Reader) Assign(ctx context.Context, namespace string) (Assignment, []*machinistv1alpha1.PoolPolicy, error) {
	var policies machinistv1alpha1.PoolPolicyList
	if err := r.Client.List(ctx, &policies, client.InNamespace(namespace), client.UnsafeDisableDeepCopy); err != nil {
		return Assignment{}, nil, fmt.Errorf("pool: list pool policies: %w", err)
	}
	ps := make([]*machinistv1alpha1.PoolPolicy, len(policies.Items))
	for i := range policies.Items {
		ps[i] = &policies.Items[i]
	}
	if len(ps) == 0 {
		return Assign(nil, nil), nil, nil
	}
	var deployments v1alpha1.MachineDeploymentList
	if err := r.Client.List(ctx, &deployments, client.InNamespace(namespace), client.UnsafeDisableDeepCopy); err != nil {
		return Assignment{}, nil, fmt.Errorf("pool: list machine deployments: %w", err)
	}
	ds := make([]*v1alpha1.MachineDeployment, len(deployments.Items))
	for i := range deployments.Items {
		ds[i] = &deployments.Items[i]
	}
	return Assign(ps, ds), ps, nil
}

// World reads one governed deployment's world as rollout reads it: the sets it controls, their
// machines, and their nodes when the policy's Manual approval needs them.
func (r Reader) World(ctx context.Context, p *machinistv1alpha1.PoolPolicy, d *v1alpha1.MachineDeployment) (rollout.Input, error) {
	in := rollout.Input{Deployment: d, Machines: map[types.UID][]*v1alpha1.Machine{}, TargetCluster: r.Target != nil}
	var sets v1alpha1.MachineSetList
	if err := ownership.Controlled(ctx, r.Client, &sets, d.Namespace, d.UID, client.UnsafeDisableDeepCopy); err != nil {
		return in, fmt.Errorf("pool: list machine sets of %s: %w", d.Name, err)
	}
	for i := range sets.Items {
		ms := &sets.Items[i]
		in.Sets = append(in.Sets, ms)
		var machines v1alpha1.MachineList
		if err := ownership.Controlled(ctx, r.Client, &machines, d.Namespace, ms.UID, client.UnsafeDisableDeepCopy); err != nil {
			return in, fmt.Errorf("pool: list machines of %s: %w", ms.Name, err)
		}
		for j := range machines.Items {
			in.Machines[ms.UID] = append(in.Machines[ms.UID], &machines.Items[j])
		}
	}
	if p.Spec.Rollout.Approval == machinistv1alpha1.ApprovalManual {
		nodes, err := r.Nodes(ctx, in.Machines)
		if err != nil {
			return in, err
		}
		in.Nodes = nodes
	}
	return in, nil
}

// Nodes reads the nodes of the machines from the target cluster (none without one).
func (r Reader) Nodes(ctx context.Context, machines map[types.UID][]*v1alpha1.Machine) (map[string]*corev1.Node, error) {
	out := map[string]*corev1.Node{}
	if r.Target == nil {
		return out, nil
	}
	for _, ms := range machines {
		for _, m := range ms {
			name := m.Labels[v1alpha1.LabelNode]
			if name == "" || out[name] != nil {
				continue
			}
			node := &corev1.Node{}
			if err := r.Target.Get(ctx, client.ObjectKey{Name: name}, node, client.UnsafeDisableDeepCopy); err != nil {
				if apierrors.IsNotFound(err) {
					continue
				}
				return nil, fmt.Errorf("pool: read node %s of machine %s: %w", name, m.Name, err)
			}
			out[name] = node
		}
	}
	return out, nil
}
