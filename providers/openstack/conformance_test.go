package openstack

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/machinist-io/machinist/core/drivertest"
	"github.com/machinist-io/machinist/providers/openstack/fakeopenstack"
)

// conformanceTarget wires the driver to a fresh fake cloud with the richest spec (pre-created
// port, typed root volume, pod CIDRs) and checks, once the kit has deleted the rule's machines,
// that no server, port or volume is left.
func conformanceTarget(t testing.TB) (drivertest.Target, *fakeopenstack.Cloud) {
	cloud := startCloud(t, fakeopenstack.Options{})
	d, _ := testDriver(t)
	class := classOf(t, "worker-a", withSpec(fullSpec))
	other := classOf(t, "worker-b", withSpec(fullSpec, func(s *MachineProviderConfigSpec) {
		s.Tags = map[string]string{"kubernetes.io-cluster-shoot--garden--other": "1", roleKey: "1"}
	}))
	return drivertest.Target{
		Driver:     d,
		Class:      class,
		OtherClass: other,
		Secret:     passwordSecret(cloud),
		CountVMs: func(_ context.Context, name string) (int, error) {
			n := 0
			for _, s := range cloud.Servers() {
				if s.Name == name {
					n++
				}
			}
			return n, nil
		},
		Volumes: []drivertest.Volume{
			{Spec: &corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: CinderCSIDriver, VolumeHandle: "0b5e1f0c-csi"}}}, ID: "0b5e1f0c-csi"},
			{Spec: &corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{Cinder: &corev1.CinderPersistentVolumeSource{VolumeID: "7d1c2e3f-intree"}}}, ID: "7d1c2e3f-intree"},
		},
		Close: func() {
			if s, p, v := allResources(cloud); s+p+v != 0 {
				t.Errorf("after the rule's machines were deleted the cloud holds %d servers, %d ports, %d volumes", s, p, v)
			}
		},
	}, cloud
}

func withSpec(mutate ...func(*MachineProviderConfigSpec)) MachineProviderConfigSpec {
	s := baseSpec()
	for _, m := range mutate {
		m(&s)
	}
	return s
}

func TestConformance(t *testing.T) {
	drivertest.Run(t, func(t testing.TB) drivertest.Target {
		target, _ := conformanceTarget(t)
		return target
	}, drivertest.WithTimeout(20*time.Second), drivertest.WithPromptBound(2*time.Second))
}
