// Package jsoncloudtest wires the jsoncloud driver to the conformance kit, for the driver's own
// test and for the tests that run the kit through the bridge.
package jsoncloudtest

import (
	"context"
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/drivertest"

	"example.com/machinist-provider-jsoncloud/jsoncloud"
)

// Token is the API token of the test clouds.
const Token = "conformance-token"

// Target is the kit's target for cloud, counting VMs in the cloud's file directly. Driver is
// left for the caller: the driver itself, or a client of it through the bridge.
func Target(t testing.TB, cloud *jsoncloud.Cloud) drivertest.Target {
	return drivertest.Target{
		Class:      Class(t, "workers", "shoot--a"),
		OtherClass: Class(t, "others", "shoot--b"),
		Secret: &corev1.Secret{Data: map[string][]byte{
			"token": []byte(Token), "userData": []byte("#!/bin/sh\necho join"),
		}},
		CountVMs: func(_ context.Context, name string) (int, error) {
			vms, err := cloud.VMs()
			n := 0
			for _, vm := range vms {
				if vm.Name == name {
					n++
				}
			}
			return n, err
		},
		Volumes: []drivertest.Volume{{
			Spec: &corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{
				CSI: &corev1.CSIPersistentVolumeSource{Driver: jsoncloud.CSIDriverName, VolumeHandle: "vol-1"},
			}},
			ID: "vol-1",
		}},
	}
}

// Class is a jsoncloud class of cluster.
func Class(t testing.TB, name, cluster string) *v1alpha1.MachineClass {
	raw, err := json.Marshal(jsoncloud.ProviderSpec{Region: "eu-1", Size: "small", Tags: map[string]string{
		jsoncloud.ClusterTagPrefix + cluster: "1", jsoncloud.RoleTagPrefix + "worker": "1",
	}})
	if err != nil {
		t.Fatal(err)
	}
	return &v1alpha1.MachineClass{
		ObjectMeta:   metav1.ObjectMeta{Name: name, Namespace: "default"},
		Provider:     jsoncloud.ProviderName,
		ProviderSpec: runtime.RawExtension{Raw: raw},
	}
}
