package gcp

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/machinist-io/machinist/core/drivertest"
)

// conformanceTarget is the kit's target: two classes of different clusters in one zone of one
// fake Compute Engine.
func conformanceTarget(t testing.TB) drivertest.Target {
	e := newTestEnv(t)
	other := e.classWith("others", func(s *ProviderSpec) {
		s.Tags = []string{"shoot--dev--beta", "kubernetes-io-cluster-shoot--dev--beta", roleTag}
	})
	return drivertest.Target{
		Driver:     e.drv,
		Class:      e.class,
		OtherClass: other,
		Secret:     e.secret,
		CountVMs:   e.countVMs,
		Volumes: []drivertest.Volume{
			{Spec: &corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: "pd.csi.storage.gke.io", VolumeHandle: "projects/machinist-fake/zones/europe-west1-b/disks/pvc-1",
			}}}, ID: "projects/machinist-fake/zones/europe-west1-b/disks/pvc-1"},
			{Spec: &corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{GCEPersistentDisk: &corev1.GCEPersistentDiskVolumeSource{
				PDName: "pvc-2", FSType: "ext4",
			}}}, ID: "pvc-2"},
		},
	}
}

func TestConformance(t *testing.T) {
	drivertest.Run(t, conformanceTarget, drivertest.WithTimeout(60*time.Second))
}
