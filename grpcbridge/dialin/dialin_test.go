package dialin_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/drivertest"
	"github.com/machinist-io/machinist/core/drivertest/memdriver"
	"github.com/machinist-io/machinist/core/registry"
	"github.com/machinist-io/machinist/grpcbridge/dialin"
	"github.com/machinist-io/machinist/grpcbridge/internal/fixture"
	"github.com/machinist-io/machinist/providers/local"
)

// dialled serves d as provider name through a controller with mutual TLS and returns the
// controller-side driver.
func dialled(t testing.TB, name string, d driver.Driver) (driver.Driver, *fixture.Controller, *fixture.Connected) {
	t.Helper()
	certs := fixture.NewCerts(t)
	ctrl := fixture.ServeController(t, dialin.Options{}, fixture.ServerTransport(t, certs))
	p := fixture.ConnectProvider(t, ctrl.Addr, fixture.ProviderCerts(t, certs, name), map[string]driver.Driver{name: d})
	waitFor(t, ctrl.Server, name, 1)
	remote, ok := ctrl.Server.Driver(name)
	if !ok {
		t.Fatalf("provider %s connected but has no driver", name)
	}
	return remote, ctrl, p
}

func waitFor(t testing.TB, s *dialin.Server, name string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.WaitFor(ctx, name, n); err != nil {
		t.Fatal(err)
	}
}

// TestConformance runs the conformance kit through dial-in (TCP, mutual TLS) for the reference
// driver and the local provider.
func TestConformance(t *testing.T) {
	t.Run("mem", func(t *testing.T) {
		drivertest.Run(t, func(t testing.TB) drivertest.Target {
			cloud := memdriver.NewCloud()
			cloud.SetCredentials(map[string]string{"token": "conformance-token"})
			remote, _, _ := dialled(t, memdriver.ProviderName, memdriver.New(cloud))
			return drivertest.Target{
				Driver:     remote,
				Class:      memClass("workers", `{"cluster":"shoot-a","role":"worker","size":"small"}`),
				OtherClass: memClass("others", `{"cluster":"shoot-b","role":"worker","size":"small"}`),
				Secret:     memSecret(),
				CountVMs:   func(_ context.Context, name string) (int, error) { return cloud.Count(name), nil },
				Volumes: []drivertest.Volume{{
					Spec: csi(memdriver.CSIDriverName, "vol-1"),
					ID:   "vol-1",
				}},
			}
		})
	})
	t.Run("local", func(t *testing.T) {
		drivertest.Run(t, func(t testing.TB) drivertest.Target {
			env := registry.Env{StateDir: t.TempDir()}
			d, err := local.New(env)
			if err != nil {
				t.Fatal(err)
			}
			remote, _, _ := dialled(t, local.ProviderName, d)
			machines := filepath.Join(env.StateDir, local.StateSubdir, "machines")
			localClass := func(name string, spec map[string]any) *v1alpha1.MachineClass {
				raw, _ := json.Marshal(spec)
				return &v1alpha1.MachineClass{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Provider: local.ProviderName, ProviderSpec: runtime.RawExtension{Raw: raw}}
			}
			return drivertest.Target{
				Driver:     remote,
				Class:      localClass("conformance", map[string]any{"cluster": "conformance"}),
				OtherClass: localClass("other", map[string]any{"cluster": "other"}),
				Secret:     &corev1.Secret{Data: map[string][]byte{}},
				CountVMs: func(ctx context.Context, name string) (int, error) {
					_, err := os.Stat(filepath.Join(machines, name+".json"))
					if errors.Is(err, os.ErrNotExist) {
						return 0, nil
					}
					return 1, err
				},
				Volumes: []drivertest.Volume{{Spec: csi(local.CSIDriverName, "local-vol-1"), ID: "local-vol-1"}},
				Close:   func() { d.Close() },
			}
		})
	})
}

func memClass(name, spec string) *v1alpha1.MachineClass {
	return &v1alpha1.MachineClass{
		ObjectMeta:   metav1.ObjectMeta{Name: name, Namespace: "default", ResourceVersion: "1"},
		Provider:     memdriver.ProviderName,
		ProviderSpec: runtime.RawExtension{Raw: []byte(spec)},
		SecretRef:    &corev1.SecretReference{Name: "mem-secret", Namespace: "default"},
	}
}

func memSecret() *corev1.Secret {
	return &corev1.Secret{Data: map[string][]byte{"token": []byte("conformance-token"), "userData": []byte("#!/bin/sh\necho join")}}
}

func csi(driverName, handle string) *corev1.PersistentVolumeSpec {
	return &corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: driverName, VolumeHandle: handle}}}
}
