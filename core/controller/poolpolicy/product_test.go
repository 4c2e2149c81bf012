package poolpolicy_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	machinistv1alpha1 "github.com/machinist-io/machinist/core/apis/machinist/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/manager"
	"github.com/machinist-io/machinist/harness/ctrltest"
	"github.com/machinist-io/machinist/harness/machinetest"
	"github.com/machinist-io/machinist/harness/testenv"
	_ "github.com/machinist-io/machinist/providers/local"
)

// product is one test's namespace with the product's controllers (manager.New, as `machinist
// run` builds them) and the local provider: machines become nodes of the test's API server. The
// pool tests that need real nodes (drains, node labels, driver errors) use it; the others use
// env's stand-in for the Machine controller.
type product struct {
	t   *testing.T
	ctx context.Context
	env *ctrltest.Env
	c   client.WithWatch
}

func newProduct(t *testing.T) *product {
	t.Helper()
	e := ctrltest.NewEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	c, err := client.NewWithWatch(e.Config, client.Options{Scheme: testenv.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return &product{t: t, ctx: ctx, env: e, c: c}
}

// create creates o in the test's namespace.
func (p *product) create(o client.Object) {
	p.t.Helper()
	o.SetNamespace(p.env.NS)
	if err := p.c.Create(p.ctx, o); err != nil {
		p.t.Fatal(err)
	}
}

// localClass creates a local MachineClass whose nodes beat every second; extra adds fields to
// its providerSpec (e.g. createError).
func (p *product) localClass(name string, extra map[string]any) {
	p.t.Helper()
	spec := map[string]any{"cluster": p.env.NS, "zone": "z", "heartbeatInterval": "1s", "nodeMonitorGracePeriod": "30s"}
	for k, v := range extra {
		spec[k] = v
	}
	raw, err := json.Marshal(spec)
	if err != nil {
		p.t.Fatal(err)
	}
	p.create(&v1alpha1.MachineClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provider: "local", ProviderSpec: runtime.RawExtension{Raw: raw}})
}

// policy creates the PoolPolicy "workers" over the deployments labelled worker-pool=workers,
// with maxSurge 1 and maxUnavailable 0 and what change sets.
func (p *product) policy(change func(*machinistv1alpha1.PoolRollout)) {
	p.t.Helper()
	r := machinistv1alpha1.PoolRollout{MaxSurge: ptr.To(intstr.FromInt32(1)), MaxUnavailable: ptr.To(intstr.FromInt32(0))}
	if change != nil {
		change(&r)
	}
	p.create(&machinistv1alpha1.PoolPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "workers"},
		Spec: machinistv1alpha1.PoolPolicySpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"worker-pool": "workers"}},
			Rollout:  r,
		},
	})
}

// member creates a deployment of the pool "workers" (its own budgets 1 and 0, which the pool's
// replace) of replicas on class; change adjusts it before.
func (p *product) member(name, class string, replicas int32, change func(*v1alpha1.MachineDeployment)) *v1alpha1.MachineDeployment {
	p.t.Helper()
	d := machinetest.Deployment("", name, class, replicas, machinetest.Pool(name), 1, 0)
	d.Labels = map[string]string{"worker-pool": "workers"}
	if change != nil {
		change(d)
	}
	p.create(d)
	return d
}

// run starts the product's controllers; change adjusts their options.
func (p *product) run(change func(*manager.Options)) {
	p.t.Helper()
	opts := ctrltest.ProductOptions(p.t, p.env.Config, p.env.NS)
	if change != nil {
		change(&opts)
	}
	ctrltest.RunProduct(p.t, opts)
}

// machines lists the test's machines.
func (p *product) machines() []v1alpha1.Machine {
	p.t.Helper()
	var list v1alpha1.MachineList
	if err := p.c.List(p.ctx, &list, client.InNamespace(p.env.NS)); err != nil {
		p.t.Fatal(err)
	}
	return list.Items
}

// setClass moves a deployment's template to class.
func (p *product) setClass(d *v1alpha1.MachineDeployment, class string) {
	p.t.Helper()
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := p.c.Get(p.ctx, client.ObjectKeyFromObject(d), d); err != nil {
			return err
		}
		d.Spec.Template.Spec.Class.Name = class
		return p.c.Update(p.ctx, d)
	}); err != nil {
		p.t.Fatal(err)
	}
}
