package local

import (
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/registry"
)

// class returns a local MachineClass with the given providerSpec fields.
func class(t testing.TB, name string, spec map[string]any) *v1alpha1.MachineClass {
	t.Helper()
	raw, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	return &v1alpha1.MachineClass{
		ObjectMeta:   metav1.ObjectMeta{Name: name, Namespace: "default"},
		Provider:     ProviderName,
		ProviderSpec: runtime.RawExtension{Raw: raw},
	}
}

func machine(name string) *v1alpha1.Machine {
	return &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}
}

func secret(data map[string]string) *corev1.Secret {
	s := &corev1.Secret{Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

// open opens a driver that syncs fast and is closed when the test ends.
func open(t testing.TB, env registry.Env) *Driver {
	t.Helper()
	d, err := newDriver(env, 4, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}
