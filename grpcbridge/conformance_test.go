package grpcbridge_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/drivertest"
	"github.com/machinist-io/machinist/core/drivertest/memdriver"
	"github.com/machinist-io/machinist/core/registry"
	"github.com/machinist-io/machinist/grpcbridge/internal/fixture"
	"github.com/machinist-io/machinist/providers/local"
)

// TestConformance runs the conformance kit against the reference driver and the local provider,
// each directly and through the dial-out bridge over a unix socket and over TCP with mutual TLS.
// (Through dial-in: package dialin.)
func TestConformance(t *testing.T) {
	targets := []struct {
		name string
		new  func(t testing.TB) drivertest.Target
	}{{"mem", memTarget}, {"local", localTarget}}
	ways := []struct {
		name string
		wrap func(t testing.TB, d driver.Driver) driver.Driver
	}{
		{"direct", func(_ testing.TB, d driver.Driver) driver.Driver { return d }},
		{"uds", func(t testing.TB, d driver.Driver) driver.Driver { return fixture.ServeUnix(t, d).Client }},
		{"tcp-mtls", func(t testing.TB, d driver.Driver) driver.Driver { return fixture.ServeTCPMTLS(t, d).Client }},
	}
	for _, tg := range targets {
		for _, w := range ways {
			t.Run(tg.name+"/"+w.name, func(t *testing.T) {
				drivertest.Run(t, func(t testing.TB) drivertest.Target {
					target := tg.new(t)
					target.Driver = w.wrap(t, target.Driver)
					return target
				})
			})
		}
	}
}

func memTarget(t testing.TB) drivertest.Target {
	cloud := memdriver.NewCloud()
	cloud.SetCredentials(map[string]string{"token": "conformance-token"})
	return drivertest.Target{
		Driver:     memdriver.New(cloud),
		Class:      memClass("workers", `{"cluster":"shoot-a","role":"worker","size":"small"}`),
		OtherClass: memClass("others", `{"cluster":"shoot-b","role":"worker","size":"small"}`),
		Secret:     memSecret(),
		CountVMs:   func(_ context.Context, name string) (int, error) { return cloud.Count(name), nil },
		Volumes: []drivertest.Volume{{
			Spec: &corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{
				CSI: &corev1.CSIPersistentVolumeSource{Driver: memdriver.CSIDriverName, VolumeHandle: "vol-1"},
			}},
			ID: "vol-1",
		}},
	}
}

func memClass(name, spec string) *v1alpha1.MachineClass {
	return &v1alpha1.MachineClass{
		ObjectMeta:   metav1.ObjectMeta{Name: name, Namespace: "default", ResourceVersion: "1"},
		Provider:     memdriver.ProviderName,
		ProviderSpec: runtime.RawExtension{Raw: []byte(spec)},
	}
}

func memSecret() *corev1.Secret {
	return &corev1.Secret{Data: map[string][]byte{"token": []byte("conformance-token"), "userData": []byte("#!/bin/sh\necho join")}}
}

func localTarget(t testing.TB) drivertest.Target {
	env := registry.Env{StateDir: t.TempDir()}
	d, err := local.New(env)
	if err != nil {
		t.Fatal(err)
	}
	machines := filepath.Join(env.StateDir, local.StateSubdir, "machines")
	localClass := func(name string, spec map[string]any) *v1alpha1.MachineClass {
		raw, _ := json.Marshal(spec)
		return &v1alpha1.MachineClass{
			ObjectMeta:   metav1.ObjectMeta{Name: name, Namespace: "default"},
			Provider:     local.ProviderName,
			ProviderSpec: runtime.RawExtension{Raw: raw},
		}
	}
	return drivertest.Target{
		Driver:     d,
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
		Volumes: []drivertest.Volume{{
			Spec: &corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{
				CSI: &corev1.CSIPersistentVolumeSource{Driver: local.CSIDriverName, VolumeHandle: "local-vol-1"},
			}},
			ID: "local-vol-1",
		}},
		Close: func() { d.Close() },
	}
}
