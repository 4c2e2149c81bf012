package dialin

import (
	"context"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
)

// The 2018 design's provider interface, for providers written against the 2018 "grpc-driver" design.
// Wrap one with AdaptExternalDriver and serve the result like any driver (ConnectorOptions.Drivers).

// MachineClassMeta names one version of a class (the 2018 design's name and revision).
type MachineClassMeta struct {
	Name            string
	Namespace       string
	ResourceVersion string
}

// SecretMeta names a secret (the 2018 design's secretName and nameSpace).
type SecretMeta struct {
	SecretName string
	NameSpace  string
}

// ExternalDriverProvider is the 2018 design's three-method provider. credentials is always empty, as
// in the 2018 design: read credentials with MachineClassDataProvider.GetSecret. machineID is the
// ProviderID ("" for a machine not created yet, or to list every VM of the class).
type ExternalDriverProvider interface {
	Create(machineclass *MachineClassMeta, credentials, machineID, machineName string) (providerID, nodeName string, err error)
	Delete(machineclass *MachineClassMeta, credentials, machineID string) error
	List(machineclass *MachineClassMeta, credentials, machineID string) (map[string]string, error)
}

// MachineClassDataProvider gives an ExternalDriverProvider the class and secret of the operation
// it is running (the provider side has already pulled and cached them).
type MachineClassDataProvider interface {
	GetMachineClass(*MachineClassMeta) (*v1alpha1.MachineClass, error)
	// GetSecret returns the secret of the class's secretRef or credentialsSecretRef, as the
	// controller assembled it (credentials overlaid, userData rendered).
	GetSecret(*SecretMeta) (*corev1.Secret, error)
}

// AdaptExternalDriver turns a 2018-style provider into a driver.Driver: CreateMachine,
// DeleteMachine and ListMachines call Create, Delete and List; the other methods answer
// Unimplemented. Errors keep a machine code when the provider returns a *driver.Status or MCM's
// "machine codes error" text, and are Unknown otherwise. The 2018 design's methods take no context: a
// call whose context ends returns at once and the provider's call finishes in the background.
func AdaptExternalDriver(newProvider func(MachineClassDataProvider) ExternalDriverProvider) driver.Driver {
	a := &externalAdapter{data: &operationData{classes: map[string]*dataEntry{}}}
	a.p = newProvider(a.data)
	return a
}

type externalAdapter struct {
	driver.UnimplementedDriver
	p    ExternalDriverProvider
	data *operationData
}

// operationData holds the class and secret of the operations in flight, by class.
type operationData struct {
	mu      sync.Mutex
	classes map[string]*dataEntry
}

type dataEntry struct {
	refs   int
	class  *v1alpha1.MachineClass
	secret *corev1.Secret
}

func classKey(ns, name string) string { return ns + "/" + name }

func (o *operationData) hold(class *v1alpha1.MachineClass, secret *corev1.Secret) (*MachineClassMeta, func()) {
	key := classKey(class.Namespace, class.Name)
	o.mu.Lock()
	e, ok := o.classes[key]
	if !ok {
		e = &dataEntry{}
		o.classes[key] = e
	}
	e.refs++
	e.class, e.secret = class, secret
	o.mu.Unlock()
	return &MachineClassMeta{Name: class.Name, Namespace: class.Namespace, ResourceVersion: class.ResourceVersion}, func() {
		o.mu.Lock()
		defer o.mu.Unlock()
		if e.refs--; e.refs == 0 {
			delete(o.classes, key)
		}
	}
}

func (o *operationData) GetMachineClass(meta *MachineClassMeta) (*v1alpha1.MachineClass, error) {
	if meta == nil {
		return nil, driver.Error(driver.InvalidArgument, "GetMachineClass: no class named")
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if e, ok := o.classes[classKey(meta.Namespace, meta.Name)]; ok {
		return e.class.DeepCopy(), nil
	}
	return nil, driver.Errorf(driver.NotFound, "machineClass %s/%s is not part of an operation in flight", meta.Namespace, meta.Name)
}

func (o *operationData) GetSecret(meta *SecretMeta) (*corev1.Secret, error) {
	if meta == nil {
		return nil, driver.Error(driver.InvalidArgument, "GetSecret: no secret named")
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, e := range o.classes {
		for _, ref := range []*corev1.SecretReference{e.class.SecretRef, e.class.CredentialsSecretRef} {
			if ref == nil || e.secret == nil {
				continue
			}
			ns := ref.Namespace
			if ns == "" {
				ns = e.class.Namespace
			}
			if ref.Name == meta.SecretName && ns == meta.NameSpace {
				return e.secret.DeepCopy(), nil
			}
		}
	}
	return nil, driver.Errorf(driver.NotFound, "secret %s/%s is not referenced by the class of an operation in flight", meta.NameSpace, meta.SecretName)
}

// run calls f unless ctx has ended, and returns when f does or ctx ends.
func run[T any](ctx context.Context, f func() (T, error)) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, driver.StatusOf(err)
	}
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := f()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, infragrpcError(r.err)
	case <-ctx.Done():
		return zero, driver.StatusOf(ctx.Err())
	}
}

// infragrpcError keeps the code of a status, or of MCM's status text.
func infragrpcError(err error) error {
	if err == nil {
		return nil
	}
	if st := driver.StatusOf(err); st.Code() != driver.Unknown {
		return err
	}
	if st, ok := driver.ParseStatusText(err.Error()); ok {
		return st
	}
	return err
}

func (a *externalAdapter) prepare(m *v1alpha1.Machine, class *v1alpha1.MachineClass, secret *corev1.Secret, needName bool) (*MachineClassMeta, func(), error) {
	if class == nil {
		return nil, nil, driver.Error(driver.InvalidArgument, "machineClass is missing from the request")
	}
	if needName && (m == nil || strings.TrimSpace(m.Name) == "") {
		return nil, nil, driver.Error(driver.InvalidArgument, "the machine has no name")
	}
	meta, release := a.data.hold(class, secret)
	return meta, release, nil
}

func (a *externalAdapter) CreateMachine(ctx context.Context, req *driver.CreateMachineRequest) (*driver.CreateMachineResponse, error) {
	meta, release, err := a.prepare(req.Machine, req.MachineClass, req.Secret, true)
	if err != nil {
		return nil, err
	}
	defer release()
	type created struct{ id, node string }
	c, err := run(ctx, func() (created, error) {
		id, node, err := a.p.Create(meta, "", req.Machine.Spec.ProviderID, req.Machine.Name)
		return created{id, node}, err
	})
	if err != nil {
		return nil, err
	}
	if c.node == "" {
		c.node = req.Machine.Name
	}
	return &driver.CreateMachineResponse{ProviderID: c.id, NodeName: c.node}, nil
}

func (a *externalAdapter) DeleteMachine(ctx context.Context, req *driver.DeleteMachineRequest) (*driver.DeleteMachineResponse, error) {
	meta, release, err := a.prepare(req.Machine, req.MachineClass, req.Secret, true)
	if err != nil {
		return nil, err
	}
	defer release()
	_, err = run(ctx, func() (struct{}, error) {
		id := req.Machine.Spec.ProviderID
		if id == "" {
			// Not created as far as the controller knows: find it by name, as the 2018 design's
			// controller did before deleting.
			list, err := a.p.List(meta, "", "")
			if err != nil {
				return struct{}{}, err
			}
			for pid, name := range list {
				if name == req.Machine.Name {
					id = pid
				}
			}
			if id == "" {
				return struct{}{}, nil
			}
		}
		err := a.p.Delete(meta, "", id)
		if driver.IsCode(infragrpcError(err), driver.NotFound) {
			err = nil // already gone
		}
		return struct{}{}, err
	})
	if err != nil {
		return nil, err
	}
	return &driver.DeleteMachineResponse{}, nil
}

func (a *externalAdapter) ListMachines(ctx context.Context, req *driver.ListMachinesRequest) (*driver.ListMachinesResponse, error) {
	meta, release, err := a.prepare(nil, req.MachineClass, req.Secret, false)
	if err != nil {
		return nil, err
	}
	defer release()
	list, err := run(ctx, func() (map[string]string, error) { return a.p.List(meta, "", "") })
	if err != nil {
		return nil, err
	}
	if list == nil {
		list = map[string]string{}
	}
	return &driver.ListMachinesResponse{MachineList: list}, nil
}

var _ driver.Driver = (*externalAdapter)(nil)
var _ MachineClassDataProvider = (*operationData)(nil)
