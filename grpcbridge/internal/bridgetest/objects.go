// Package bridgetest holds what the bridge's tests and benchmarks share: realistic objects, a
// recording driver and helpers to serve and dial over loopback.
package bridgetest

import (
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// Stamp is a fixed time with second precision, as the API server stores it.
var Stamp = metav1.NewTime(time.Date(2026, 3, 14, 15, 9, 26, 0, time.UTC))

// Machine returns a machine as an informer would hold it: owner, labels, finalizer, status with
// conditions and a last operation.
func Machine(name string) *v1alpha1.Machine {
	return &v1alpha1.Machine{
		TypeMeta: metav1.TypeMeta{APIVersion: "machine.sapcloud.io/v1alpha1", Kind: "Machine"},
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "shoot--dev--cluster", UID: types.UID("4c5a2f1e-8d0b-4a57-9a53-" + pad12(name)),
			ResourceVersion: "1876543", Generation: 3, CreationTimestamp: Stamp,
			Labels:      map[string]string{"name": "worker-a", "node": name, "machine-template-hash": "7b9c8d6f5"},
			Annotations: map[string]string{"machinist.io/note": "benchmark"},
			Finalizers:  []string{"machine.sapcloud.io/machine-controller-manager"},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "machine.sapcloud.io/v1alpha1", Kind: "MachineSet", Name: "worker-a-7b9c8d6f5",
				UID: "a1b2c3d4-0000-4000-8000-000000000001", Controller: ptr(true), BlockOwnerDeletion: ptr(true),
			}},
		},
		Spec: v1alpha1.MachineSpec{
			Class:      v1alpha1.ClassSpec{Kind: "MachineClass", Name: "worker-a"},
			ProviderID: "openstack:///RegionOne/0f6b1d3e-4c2a-4a8e-9a51-" + pad12(name),
			NodeTemplateSpec: v1alpha1.NodeTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"worker.gardener.cloud/pool": "worker-a"}},
				Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: "dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule}}},
			},
			MachineConfiguration: &v1alpha1.MachineConfiguration{
				MachineCreationTimeout: &metav1.Duration{Duration: 20 * time.Minute},
				MaxEvictRetries:        ptr(int32(10)),
			},
		},
		Status: v1alpha1.MachineStatus{
			Conditions: []corev1.NodeCondition{
				{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status", LastHeartbeatTime: Stamp, LastTransitionTime: Stamp},
				{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory", Message: "kubelet has sufficient memory available", LastHeartbeatTime: Stamp, LastTransitionTime: Stamp},
				{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasNoDiskPressure", Message: "kubelet has no disk pressure", LastHeartbeatTime: Stamp, LastTransitionTime: Stamp},
			},
			LastOperation: v1alpha1.LastOperation{Description: "Machine " + name + " successfully joined the cluster", LastUpdateTime: Stamp, State: "Successful", Type: "Create"},
			CurrentStatus: v1alpha1.CurrentStatus{Phase: v1alpha1.MachineRunning, LastUpdateTime: Stamp},
		},
	}
}

// Class returns a class of provider with an OpenStack-sized providerSpec and a node template.
func Class(provider string) *v1alpha1.MachineClass {
	return &v1alpha1.MachineClass{
		TypeMeta: metav1.TypeMeta{APIVersion: "machine.sapcloud.io/v1alpha1", Kind: "MachineClass"},
		ObjectMeta: metav1.ObjectMeta{
			Name: "worker-a", Namespace: "shoot--dev--cluster", UID: "c1a55000-0000-4000-8000-000000000001",
			ResourceVersion: "1700001", Generation: 1, CreationTimestamp: Stamp,
		},
		NodeTemplate: &v1alpha1.NodeTemplate{
			Capacity: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16Gi"), "gpu": resource.MustParse("0"),
			},
			InstanceType: "m1.xlarge", Region: "RegionOne", Zone: "nova",
		},
		ProviderSpec:         runtime.RawExtension{Raw: []byte(`{"imageName":"gardenlinux-1592.3","flavorName":"m1.xlarge","keyName":"shoot--dev--cluster-ssh","networkID":"5d9a0d4e-2a44-4bd6-b7a3-f1e9bd5e4a11","subnetID":"1e0c0f35-6bbb-4c8b-8f6d-1a7bd02ad7a2","podNetworkCidrs":["100.96.0.0/11"],"securityGroups":["shoot--dev--cluster-nodes"],"availabilityZone":"nova","region":"RegionOne","rootDiskSize":50,"tags":{"kubernetes.io-cluster-shoot--dev--cluster":"1","kubernetes.io-role-node":"1","worker.gardener.cloud_pool":"worker-a"}}`)},
		Provider:             provider,
		SecretRef:            &corev1.SecretReference{Name: "shoot--dev--cluster-worker-a", Namespace: "shoot--dev--cluster"},
		CredentialsSecretRef: &corev1.SecretReference{Name: "cloudprovider", Namespace: "shoot--dev--cluster"},
	}
}

// Secret returns the merged secret a driver receives: credentials plus a 2 KiB userData.
func Secret() *corev1.Secret {
	return &corev1.Secret{
		Data: map[string][]byte{
			"userData":   []byte(userData),
			"authURL":    []byte("https://keystone.example.com:5000/v3"),
			"domainName": []byte("dev"),
			"tenantName": []byte("cluster-project"),
			"username":   []byte("machinist"),
			"password":   []byte("s3cr3t-Passw0rd"),
		},
	}
}

var userData = "#cloud-config\nwrite_files:\n- path: /var/lib/bootstrap/token\n  content: |\n    " +
	strings.Repeat("abcdefghijklmnopqrstuvwxyz012345", 56) + "\nruncmd:\n- systemctl enable --now kubelet\n"

func pad12(name string) string {
	const zeros = "000000000000"
	if len(name) >= 12 {
		return name[len(name)-12:]
	}
	return zeros[:12-len(name)] + name
}

func ptr[T any](v T) *T { return &v }
