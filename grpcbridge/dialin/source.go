package dialin

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
)

// ObjectSource gives the controller side the current MachineClass and Secret of a name, for
// providers that ask by name rather than for a version an operation referenced. The controller
// wiring passes one backed by its informers' listers. Errors carry driver codes (NotFound for an
// object that does not exist).
type ObjectSource interface {
	MachineClass(ctx context.Context, namespace, name string) (*v1alpha1.MachineClass, error)
	Secret(ctx context.Context, namespace, name string) (*corev1.Secret, error)
}

// MapSource is an ObjectSource over objects held in memory, keyed by namespace and name.
type MapSource struct {
	mu      sync.RWMutex
	classes map[string]*v1alpha1.MachineClass
	secrets map[string]*corev1.Secret
}

// NewMapSource returns a MapSource holding copies of the given objects.
func NewMapSource(classes []*v1alpha1.MachineClass, secrets []*corev1.Secret) *MapSource {
	s := &MapSource{classes: map[string]*v1alpha1.MachineClass{}, secrets: map[string]*corev1.Secret{}}
	for _, c := range classes {
		s.SetMachineClass(c)
	}
	for _, sec := range secrets {
		s.SetSecret(sec)
	}
	return s
}

// SetMachineClass adds or replaces a class.
func (s *MapSource) SetMachineClass(c *v1alpha1.MachineClass) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.classes[c.Namespace+"/"+c.Name] = c.DeepCopy()
}

// SetSecret adds or replaces a secret.
func (s *MapSource) SetSecret(sec *corev1.Secret) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.secrets[sec.Namespace+"/"+sec.Name] = sec.DeepCopy()
}

// MachineClass returns a copy of the class, or NotFound.
func (s *MapSource) MachineClass(_ context.Context, namespace, name string) (*v1alpha1.MachineClass, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if c, ok := s.classes[namespace+"/"+name]; ok {
		return c.DeepCopy(), nil
	}
	return nil, driver.Errorf(driver.NotFound, "machineClass %s/%s not found", namespace, name)
}

// Secret returns a copy of the secret, or NotFound.
func (s *MapSource) Secret(_ context.Context, namespace, name string) (*corev1.Secret, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if sec, ok := s.secrets[namespace+"/"+name]; ok {
		return sec.DeepCopy(), nil
	}
	return nil, driver.Errorf(driver.NotFound, "secret %s/%s not found", namespace, name)
}

var _ ObjectSource = (*MapSource)(nil)
