package bridgetest_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/drivertest"
	"github.com/machinist-io/machinist/core/drivertest/memdriver"
	"github.com/machinist-io/machinist/grpcbridge/bridgetest"
)

func class(name, spec string) *v1alpha1.MachineClass {
	c := &v1alpha1.MachineClass{Provider: memdriver.ProviderName, ProviderSpec: runtime.RawExtension{Raw: []byte(spec)}}
	c.Name, c.Namespace = name, "default"
	return c
}

// The reference driver passes the conformance kit through both directions, so a provider whose
// direct run passes and whose bridged run fails has found a bridge bug, not a driver bug.
func TestMemdriverThroughBothDirections(t *testing.T) {
	bridgetest.Run(t, memdriver.ProviderName, func(t testing.TB) drivertest.Target {
		cloud := memdriver.NewCloud()
		return drivertest.Target{
			Driver:     memdriver.New(cloud),
			Class:      class("workers", `{"cluster":"shoot-a","role":"worker","size":"small"}`),
			OtherClass: class("others", `{"cluster":"shoot-b","role":"worker","size":"small"}`),
			Secret:     &corev1.Secret{Data: map[string][]byte{"userData": []byte("#!/bin/sh")}},
			CountVMs:   func(_ context.Context, name string) (int, error) { return cloud.Count(name), nil },
		}
	})
}
