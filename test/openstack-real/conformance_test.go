package openstackreal

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/drivertest"
	"github.com/machinist-io/machinist/providers/openstack"
)

const (
	clusterKey      = "kubernetes.io-cluster-shoot--machinist--real"
	otherClusterKey = "kubernetes.io-cluster-shoot--machinist--other"
	roleKey         = "kubernetes.io-role-node"
)

// fullSpec is the richest spec the driver supports on this cloud: a pre-created port on the
// subnet with the pod CIDR as allowed address pair, and a typed root volume made from the image.
func fullSpec(t testing.TB) openstack.MachineProviderConfigSpec {
	return openstack.MachineProviderConfigSpec{
		ImageName:        osr(t, "IMAGE_NAME"),
		Region:           osr(t, "REGION"),
		AvailabilityZone: osr(t, "ZONE"),
		FlavorName:       osr(t, "FLAVOR_SMALL"),
		KeyName:          osr(t, "KEYPAIR"),
		SecurityGroups:   []string{osr(t, "SECGROUP")},
		Tags:             map[string]string{clusterKey: "1", roleKey: "1"},
		NetworkID:        osr(t, "NETWORK_ID"),
		SubnetIDs:        []string{osr(t, "SUBNET_ID")},
		PodNetworkCIDRs:  []string{"100.96.0.0/11"},
		RootDiskSize:     1,
		RootDiskType:     ptr.To(osr(t, "VOLUME_TYPE")),
	}
}

// simpleSpec boots from the image on the network, Nova making the port.
func simpleSpec(t testing.TB) openstack.MachineProviderConfigSpec {
	s := fullSpec(t)
	s.SubnetIDs, s.PodNetworkCIDRs, s.RootDiskSize, s.RootDiskType = nil, nil, 0, nil
	return s
}

// classOf wraps a spec the way Gardener writes providerSpec.
func classOf(t testing.TB, name string, spec openstack.MachineProviderConfigSpec) *v1alpha1.MachineClass {
	t.Helper()
	raw, err := json.Marshal(openstack.MachineProviderConfig{APIVersion: openstack.APIVersion, Kind: openstack.Kind, Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	return &v1alpha1.MachineClass{
		TypeMeta:     metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "MachineClass"},
		ObjectMeta:   metav1.ObjectMeta{Name: name, Namespace: "default"},
		Provider:     "OpenStack",
		ProviderSpec: runtime.RawExtension{Raw: raw},
		SecretRef:    &corev1.SecretReference{Name: "openstack-real", Namespace: "default"},
	}
}

// TestConformance runs the driver conformance kit against the real cloud with the richest spec,
// and checks after each rule that Nova, Neutron and Cinder hold nothing of the rule's machines.
func TestConformance(t *testing.T) {
	need(t)
	t.Parallel()
	project := osr(t, "PROJECT")
	c := userClients(t, project)
	drivertest.Run(t, func(t testing.TB) drivertest.Target {
		d, _ := newDriver(t)
		other := fullSpec(t)
		other.Tags = map[string]string{otherClusterKey: "1", roleKey: "1"}
		return drivertest.Target{
			Driver:     d,
			Class:      classOf(t, "real-a", fullSpec(t)),
			OtherClass: classOf(t, "real-b", other),
			Secret:     appCredSecret(t),
			CountVMs:   c.serversNamed,
			Volumes: []drivertest.Volume{
				{Spec: &corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: openstack.CinderCSIDriver, VolumeHandle: "0b5e1f0c-csi"}}}, ID: "0b5e1f0c-csi"},
				{Spec: &corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{Cinder: &corev1.CinderPersistentVolumeSource{VolumeID: "7d1c2e3f-intree"}}}, ID: "7d1c2e3f-intree"},
			},
			Close: func() {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				// Only the kit's two clusters: the other tests' machines share the project.
				left, err := c.leftovers(ctx, clusterKey, otherClusterKey)
				if err != nil {
					t.Errorf("list what the rule left: %v", err)
				}
				if len(left) > 0 {
					t.Errorf("after the rule's machines were deleted the cloud still holds %v", left)
				}
			},
		}
	}, drivertest.WithTimeout(5*time.Minute), drivertest.WithConcurrency(4), drivertest.WithPromptBound(5*time.Second))
}
