package drivertest

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
)

// request holds the objects of one driver call.
type request struct {
	machine *v1alpha1.Machine
	class   *v1alpha1.MachineClass
	secret  *corev1.Secret
	pvSpecs []*corev1.PersistentVolumeSpec
}

func (r request) deepCopy() request {
	out := request{machine: r.machine.DeepCopy(), class: r.class.DeepCopy(), secret: r.secret.DeepCopy()}
	if r.pvSpecs != nil {
		out.pvSpecs = make([]*corev1.PersistentVolumeSpec, len(r.pvSpecs))
		for i, s := range r.pvSpecs {
			out.pvSpecs[i] = s.DeepCopy()
		}
	}
	return out
}

// changes names the top-level fields of r's objects that differ from before's, exactly (a nil
// map made empty is a change too: the write is what other readers race with).
func (r request) changes(before request) []string {
	var out []string
	out = append(out, changedFields("Machine", before.machine, r.machine)...)
	out = append(out, changedFields("MachineClass", before.class, r.class)...)
	out = append(out, changedFields("Secret", before.secret, r.secret)...)
	for i := range r.pvSpecs {
		out = append(out, changedFields(fmt.Sprintf("PVSpecs[%d]", i), before.pvSpecs[i], r.pvSpecs[i])...)
	}
	return out
}

// changedFields compares two pointers to structs field by field and names the fields that
// differ by their JSON names (kind.metadata, kind.spec, ...).
func changedFields(kind string, before, after any) []string {
	if reflect.DeepEqual(before, after) {
		return nil
	}
	b, a := reflect.ValueOf(before).Elem(), reflect.ValueOf(after).Elem()
	if !b.IsValid() || !a.IsValid() {
		return []string{kind}
	}
	var out []string
	for i := range b.NumField() {
		if !reflect.DeepEqual(b.Field(i).Interface(), a.Field(i).Interface()) {
			f := b.Type().Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" {
				name = f.Name
			}
			out = append(out, kind+"."+name)
		}
	}
	return out
}

// requestsAreReadOnly sends requests whose objects are shared between calls, as the
// controller's informer cache and the bridge's decoded-object cache hand them, for a machine
// with every field the controller sends, and fails when a driver changed one of them. The calls
// run at once, so under -race a driver writing to its request fails even when it writes the
// value that was there. It checks nothing else: the other rules judge the answers.
func requestsAreReadOnly(c *ruleCtx) {
	d := c.target.Driver
	m := fullMachine(c.newMachine())
	class, secret := c.target.Class.DeepCopy(), c.secret()
	var created *driver.CreateMachineResponse
	var err error
	c.unchanged("CreateMachine", request{machine: m, class: class, secret: secret}, func(ctx context.Context) error {
		created, err = d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: m, MachineClass: class, Secret: secret})
		return err
	})
	if err != nil || created == nil || created.ProviderID == "" {
		c.t.Fatalf("CreateMachine(%s) of a valid machine returned no ProviderID: %v", m.Name, err)
	}
	m = m.DeepCopy() // as the controller sends it once the VM is recorded
	m.Spec.ProviderID = created.ProviderID
	specs, _ := c.volumeSpecs()
	req := request{machine: m, class: class, secret: secret, pvSpecs: specs}
	c.unchanged("CreateMachine, InitializeMachine, GetMachineStatus, ListMachines or GetVolumeIDs", req,
		func(ctx context.Context) error {
			_, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: m, MachineClass: class, Secret: secret})
			return err
		},
		func(ctx context.Context) error {
			_, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: m, MachineClass: class, Secret: secret})
			return err
		},
		func(ctx context.Context) error {
			_, err := d.InitializeMachine(ctx, &driver.InitializeMachineRequest{Machine: m, MachineClass: class, Secret: secret})
			return err
		},
		func(ctx context.Context) error {
			_, err := d.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: m, MachineClass: class, Secret: secret})
			return err
		},
		func(ctx context.Context) error {
			_, err := d.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: m, MachineClass: class, Secret: secret})
			return err
		},
		func(ctx context.Context) error {
			_, err := d.ListMachines(ctx, &driver.ListMachinesRequest{MachineClass: class, Secret: secret})
			return err
		},
		func(ctx context.Context) error {
			_, err := d.GetVolumeIDs(ctx, &driver.GetVolumeIDsRequest{PVSpecs: specs})
			return err
		},
	)
	c.unchangedOnErrors(m, secret)
	c.unchangedByPower(req)
	c.unchanged("DeleteMachine", req, func(ctx context.Context) error {
		_, err := d.DeleteMachine(ctx, &driver.DeleteMachineRequest{Machine: m, MachineClass: class, Secret: secret})
		return err
	})
}

// unchangedByPower stops and starts req's machine, when the driver reports the power capability,
// and checks both calls leave their requests alone.
func (c *ruleCtx) unchangedByPower(req request) {
	ctx, cancel := c.callCtx()
	caps, err := driver.CapabilitiesOf(ctx, c.target.Driver)
	cancel()
	p, has := c.target.Driver.(driver.PowerDriver)
	if err != nil || !caps.Power || !has {
		return // the power rules judge a driver that cannot say or lacks the methods
	}
	c.unchanged("StopMachine or StartMachine", req, func(ctx context.Context) error {
		_, err := p.StopMachine(ctx, &driver.StopMachineRequest{Machine: req.machine, MachineClass: req.class, Secret: req.secret})
		if err != nil {
			return err
		}
		_, err = p.StartMachine(ctx, &driver.StartMachineRequest{Machine: req.machine, MachineClass: req.class, Secret: req.secret})
		return err
	})
}

// unchangedOnErrors makes the calls that fail (an invalid providerSpec, another provider's class,
// a machine without a VM) with the rule's machine and secret, and checks they too leave their
// requests alone.
func (c *ruleCtx) unchangedOnErrors(m *v1alpha1.Machine, secret *corev1.Secret) {
	d := c.target.Driver
	absent := fullMachine(c.newMachine())
	if bad, _, err := c.invalidClass(); err == nil {
		c.unchanged("CreateMachine with an invalid providerSpec", request{machine: absent, class: bad, secret: secret}, func(ctx context.Context) error {
			_, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: absent, MachineClass: bad, Secret: secret})
			return err
		})
	}
	wrong := c.mismatchedClass()
	c.unchanged("CreateMachine, DeleteMachine or ListMachines with a mismatched provider", request{machine: m, class: wrong, secret: secret},
		func(ctx context.Context) error {
			_, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: m, MachineClass: wrong, Secret: secret})
			return err
		},
		func(ctx context.Context) error {
			_, err := d.DeleteMachine(ctx, &driver.DeleteMachineRequest{Machine: m, MachineClass: wrong, Secret: secret})
			return err
		},
		func(ctx context.Context) error {
			_, err := d.ListMachines(ctx, &driver.ListMachinesRequest{MachineClass: wrong, Secret: secret})
			return err
		},
	)
	class := c.target.Class.DeepCopy()
	c.unchanged("GetMachineStatus or InitializeMachine of a machine without a VM", request{machine: absent, class: class, secret: secret},
		func(ctx context.Context) error {
			_, err := d.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: absent, MachineClass: class, Secret: secret})
			return err
		},
		func(ctx context.Context) error {
			_, err := d.InitializeMachine(ctx, &driver.InitializeMachineRequest{Machine: absent, MachineClass: class, Secret: secret})
			return err
		},
	)
}

// unchanged runs calls at once, each under the rule's call timeout, and fails the rule when any
// object of req (which the calls share) differs afterwards from a copy taken before. Errors and
// panics of the calls are other rules' concern.
func (c *ruleCtx) unchanged(what string, req request, calls ...func(ctx context.Context) error) {
	c.t.Helper()
	before := req.deepCopy()
	var wg sync.WaitGroup
	for _, call := range calls {
		wg.Go(func() {
			ctx, cancel := c.callCtx()
			defer cancel()
			_ = safeCall(func() error { return call(ctx) })
		})
	}
	wg.Wait()
	if changed := req.changes(before); len(changed) > 0 {
		c.t.Errorf("%s changed its request's %s: request objects are read-only for drivers (the controller hands the objects of its cache, the bridge shares one decoded copy among calls); copy what you need to change",
			what, strings.Join(changed, ", "))
	}
}

// fullMachine gives m every field the controller may send: labels, annotations, a finalizer,
// an owner, a node template, timeouts and a status with conditions, addresses and a last
// operation.
func fullMachine(m *v1alpha1.Machine) *v1alpha1.Machine {
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	m.UID = types.UID("drivertest-" + m.Name)
	m.ResourceVersion = "1"
	m.Generation = 1
	m.CreationTimestamp = now
	m.Labels = map[string]string{"name": m.Name, "drivertest": "read-only"}
	m.Annotations = map[string]string{"drivertest.machinist.io/note": "read-only"}
	m.Finalizers = []string{"machine.sapcloud.io/machine-controller-manager"}
	m.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "MachineSet", Name: m.Name + "-set",
		UID: "drivertest-set", Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
	}}
	m.Spec.NodeTemplateSpec = v1alpha1.NodeTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"pool": "drivertest"}, Annotations: map[string]string{"drivertest": "read-only"}},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: "dedicated", Value: "drivertest", Effect: corev1.TaintEffectNoSchedule}}},
	}
	m.Spec.MachineConfiguration = &v1alpha1.MachineConfiguration{
		MachineCreationTimeout: &metav1.Duration{Duration: 20 * time.Minute},
		MaxEvictRetries:        ptr.To(int32(10)),
	}
	m.Status = v1alpha1.MachineStatus{
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "KubeletNotReady", LastHeartbeatTime: now, LastTransitionTime: now}},
		Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}},
		LastOperation: v1alpha1.LastOperation{
			Description: "Creating machine on cloud provider", State: v1alpha1.MachineStateProcessing,
			Type: v1alpha1.MachineOperationCreate, LastUpdateTime: now,
		},
		CurrentStatus: v1alpha1.CurrentStatus{Phase: v1alpha1.MachinePending, LastUpdateTime: now},
	}
	return m
}
