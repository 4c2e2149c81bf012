package aws

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/machinist-io/machinist/core/drivertest"
)

// conformanceTarget is the kit's target: two classes of different clusters in one region of one
// fake EC2, reached through the real SDK over loopback HTTP.
func conformanceTarget(t testing.TB) drivertest.Target {
	e := newTestEnv(t)
	other := e.classWith("others", func(s *ProviderSpec) {
		delete(s.Tags, clusterTag)
		s.Tags["kubernetes.io/cluster/shoot--dev--beta"] = "1"
	})
	return drivertest.Target{
		Driver:     e.drv,
		Class:      e.class,
		OtherClass: other,
		Secret:     e.secret,
		CountVMs:   e.countVMs,
		Volumes: []drivertest.Volume{
			{Spec: &corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: "ebs.csi.aws.com", VolumeHandle: "vol-0a1b2c3d4e5f60718",
			}}}, ID: "vol-0a1b2c3d4e5f60718"},
			{Spec: &corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{AWSElasticBlockStore: &corev1.AWSElasticBlockStoreVolumeSource{
				VolumeID: "aws://eu-west-1a/vol-0123456789abcdef0",
			}}}, ID: "vol-0123456789abcdef0"},
			{Spec: &corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{AWSElasticBlockStore: &corev1.AWSElasticBlockStoreVolumeSource{
				VolumeID: "vol-0fedcba9876543210",
			}}}, ID: "vol-0fedcba9876543210"},
		},
	}
}

func TestConformance(t *testing.T) {
	drivertest.Run(t, conformanceTarget, drivertest.WithTimeout(60*time.Second))
}
