package azure

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/machinist-io/machinist/core/drivertest"
)

// conformanceTarget is the kit's target: two classes of different clusters in one resource
// group of one fake Azure.
func conformanceTarget(t testing.TB) drivertest.Target {
	e := newTestEnv(t)
	other := e.classWith("others", func(s *ProviderSpec) {
		delete(s.Tags, clusterTag)
		s.Tags["kubernetes.io-cluster-shoot--dev--beta"] = "1"
	})
	return drivertest.Target{
		Driver:     e.drv,
		Class:      e.class,
		OtherClass: other,
		Secret:     e.secret,
		CountVMs:   e.countVMs,
		Volumes: []drivertest.Volume{
			{Spec: &corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: "disk.csi.azure.com", VolumeHandle: "/subscriptions/s/resourceGroups/" + testRG + "/providers/Microsoft.Compute/disks/pvc-1",
			}}}, ID: "/subscriptions/s/resourceGroups/" + testRG + "/providers/Microsoft.Compute/disks/pvc-1"},
			{Spec: &corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{AzureDisk: &corev1.AzureDiskVolumeSource{
				DiskName: "pvc-2", DataDiskURI: "/subscriptions/s/resourceGroups/" + testRG + "/providers/Microsoft.Compute/disks/pvc-2",
			}}}, ID: "pvc-2"},
		},
	}
}

func TestConformance(t *testing.T) {
	drivertest.Run(t, conformanceTarget, drivertest.WithTimeout(60*time.Second))
}
