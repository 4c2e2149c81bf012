package memdriver_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/machinist-io/machinist/core/drivertest"
	"github.com/machinist-io/machinist/core/drivertest/memdriver"
)

// TestConformance is the kit wired the way a provider wires it.
func TestConformance(t *testing.T) {
	drivertest.Run(t, func(t testing.TB) drivertest.Target {
		cloud := memdriver.NewCloud()
		cloud.SetCredentials(map[string]string{"token": "conformance-token"})
		return drivertest.Target{
			Driver:     memdriver.New(cloud),
			Class:      class("workers", `{"cluster":"shoot-a","role":"worker","size":"small"}`),
			OtherClass: class("others", `{"cluster":"shoot-b","role":"worker","size":"small"}`),
			Secret: &corev1.Secret{Data: map[string][]byte{
				"token":    []byte("conformance-token"),
				"userData": []byte("#!/bin/sh\necho join"),
			}},
			CountVMs: func(_ context.Context, name string) (int, error) { return cloud.Count(name), nil },
			Volumes: []drivertest.Volume{{
				Spec: &corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{
					CSI: &corev1.CSIPersistentVolumeSource{Driver: memdriver.CSIDriverName, VolumeHandle: "vol-1"},
				}},
				ID: "vol-1",
			}},
		}
	})
}
