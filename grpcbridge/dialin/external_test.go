package dialin_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/drivertest"
	"github.com/machinist-io/machinist/grpcbridge/dialin"
)

// infragrpcProvider is a provider written against the 2018 design's three-method interface: it reads its
// class and credentials through the MachineClassDataProvider, as the 2018 design described.
type infragrpcProvider struct {
	cloud *infragrpcCloud
	data  dialin.MachineClassDataProvider
}

type infragrpcCloud struct {
	mu   sync.Mutex
	next int
	vms  map[string]infragrpcVM // by provider ID
}

type infragrpcVM struct{ name, cluster string }

func (c *infragrpcCloud) count(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, vm := range c.vms {
		if vm.name == name {
			n++
		}
	}
	return n
}

type infragrpcSpec struct {
	Cluster string `json:"cluster"`
}

// scope reads the class and checks the credentials of an operation.
func (p *infragrpcProvider) scope(meta *dialin.MachineClassMeta) (string, error) {
	class, err := p.data.GetMachineClass(meta)
	if err != nil {
		return "", err
	}
	if err := driver.CheckProvider(class, "infragrpc"); err != nil {
		return "", err
	}
	var spec infragrpcSpec
	if err := driver.DecodeProviderSpec(class, &spec); err != nil {
		return "", err
	}
	if spec.Cluster == "" {
		return "", driver.Error(driver.InvalidArgument, "providerSpec.cluster is required")
	}
	secret, err := p.data.GetSecret(&dialin.SecretMeta{SecretName: class.SecretRef.Name, NameSpace: class.Namespace})
	if err != nil {
		return "", err
	}
	if driver.SecretValue(secret, "token") != "infragrpc-token" {
		return "", driver.Error(driver.Unauthenticated, "the token in the class's secret is not valid: fix the secret")
	}
	return spec.Cluster, nil
}

func (p *infragrpcProvider) Create(meta *dialin.MachineClassMeta, _, _, name string) (string, string, error) {
	cluster, err := p.scope(meta)
	if err != nil {
		return "", "", err
	}
	if name == "" {
		return "", "", driver.Error(driver.InvalidArgument, "machine name is empty")
	}
	p.cloud.mu.Lock()
	defer p.cloud.mu.Unlock()
	for id, vm := range p.cloud.vms {
		if vm.name == name && vm.cluster == cluster {
			return id, name, nil
		}
	}
	p.cloud.next++
	id := fmt.Sprintf("infragrpc:///%s/vm-%d", cluster, p.cloud.next)
	p.cloud.vms[id] = infragrpcVM{name, cluster}
	return id, name, nil
}

func (p *infragrpcProvider) Delete(meta *dialin.MachineClassMeta, _, id string) error {
	cluster, err := p.scope(meta)
	if err != nil {
		return err
	}
	p.cloud.mu.Lock()
	defer p.cloud.mu.Unlock()
	if vm, ok := p.cloud.vms[id]; ok && vm.cluster == cluster {
		delete(p.cloud.vms, id)
	}
	return nil
}

func (p *infragrpcProvider) List(meta *dialin.MachineClassMeta, _, id string) (map[string]string, error) {
	cluster, err := p.scope(meta)
	if err != nil {
		return nil, err
	}
	p.cloud.mu.Lock()
	defer p.cloud.mu.Unlock()
	out := map[string]string{}
	for vid, vm := range p.cloud.vms {
		if vm.cluster == cluster && (id == "" || id == vid) {
			out[vid] = vm.name
		}
	}
	return out, nil
}

func infragrpcClass(name, cluster string) *v1alpha1.MachineClass {
	return &v1alpha1.MachineClass{
		ObjectMeta:   metav1.ObjectMeta{Name: name, Namespace: "default", ResourceVersion: "7"},
		Provider:     "infragrpc",
		ProviderSpec: runtime.RawExtension{Raw: []byte(`{"cluster":"` + cluster + `"}`)},
		SecretRef:    &corev1.SecretReference{Name: "infragrpc-credentials"},
	}
}

// TestExternalDriverProviderConformance: a provider written against the 2018 design's interface passes
// the conformance kit through dial-in (its optional methods answer Unimplemented).
func TestExternalDriverProviderConformance(t *testing.T) {
	drivertest.Run(t, func(t testing.TB) drivertest.Target {
		cloud := &infragrpcCloud{vms: map[string]infragrpcVM{}}
		d := dialin.AdaptExternalDriver(func(data dialin.MachineClassDataProvider) dialin.ExternalDriverProvider {
			return &infragrpcProvider{cloud: cloud, data: data}
		})
		remote, _, _ := dialled(t, "infragrpc", d)
		return drivertest.Target{
			Driver:     remote,
			Class:      infragrpcClass("infragrpc-a", "a"),
			OtherClass: infragrpcClass("infragrpc-b", "b"),
			Secret:     &corev1.Secret{Data: map[string][]byte{"token": []byte("infragrpc-token")}},
			CountVMs:   func(_ context.Context, name string) (int, error) { return cloud.count(name), nil },
		}
	})
}

func TestExternalDriverAdapter(t *testing.T) {
	cloud := &infragrpcCloud{vms: map[string]infragrpcVM{}}
	d := dialin.AdaptExternalDriver(func(data dialin.MachineClassDataProvider) dialin.ExternalDriverProvider {
		return &infragrpcProvider{cloud: cloud, data: data}
	})
	ctx := t.Context()
	class := infragrpcClass("c", "x")
	secret := &corev1.Secret{Data: map[string][]byte{"token": []byte("infragrpc-token")}}
	m := &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "m1", Namespace: "default"}}
	resp, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: m, MachineClass: class, Secret: secret})
	if err != nil || !strings.HasPrefix(resp.ProviderID, "infragrpc:///x/") || resp.NodeName != "m1" {
		t.Fatalf("create: %+v %v", resp, err)
	}
	// Delete without a ProviderID finds the VM by name.
	if _, err := d.DeleteMachine(ctx, &driver.DeleteMachineRequest{Machine: m, MachineClass: class, Secret: secret}); err != nil || cloud.count("m1") != 0 {
		t.Fatalf("delete by name: %v, %d left", err, cloud.count("m1"))
	}
	if _, err := d.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: m, MachineClass: class, Secret: secret}); !driver.IsCode(err, driver.Unimplemented) {
		t.Fatalf("status: %v", err)
	}
	bad := &corev1.Secret{Data: map[string][]byte{"token": []byte("wrong")}}
	if _, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: m, MachineClass: class, Secret: bad}); !driver.IsCode(err, driver.Unauthenticated) {
		t.Fatalf("wrong token: %v", err)
	}
	// A plain error carrying MCM's status text keeps its code.
	textErr := dialin.AdaptExternalDriver(func(dialin.MachineClassDataProvider) dialin.ExternalDriverProvider {
		return textProvider{}
	})
	if _, err := textErr.ListMachines(ctx, &driver.ListMachinesRequest{MachineClass: class}); !driver.IsCode(err, driver.ResourceExhausted) || driver.MessageOf(err) != "quota" {
		t.Fatalf("status text error: %v", err)
	}
}

type textProvider struct{}

func (textProvider) Create(*dialin.MachineClassMeta, string, string, string) (string, string, error) {
	return "", "", nil
}
func (textProvider) Delete(*dialin.MachineClassMeta, string, string) error { return nil }
func (textProvider) List(*dialin.MachineClassMeta, string, string) (map[string]string, error) {
	return nil, fmt.Errorf("machine codes error: code = [ResourceExhausted] message = [quota]")
}
