package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// MachineClass names a provider and carries the provider-specific template of the machines that
// use it. It has no spec wrapper, exactly like Gardener's MachineClass. Its optional status is
// machinist's addition (Gardener's MachineClass has none): clients that do not know it ignore it.
//
// +genclient
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=mcc
// +kubebuilder:printcolumn:name="Provider",type=string,JSONPath=`.provider`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type MachineClass struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// NodeTemplate describes the node a machine of this class becomes; Cluster Autoscaler uses
	// it to scale a group up from zero. Unknown fields are kept, as MCM's CRD keeps them (newer
	// Gardener versions write fields this type does not know yet).
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	NodeTemplate *NodeTemplate `json:"nodeTemplate,omitempty"`

	// CredentialsSecretRef points at a secret holding only cloud credentials, so many classes can
	// share them. Its data overlays the data of SecretRef.
	// +optional
	CredentialsSecretRef *corev1.SecretReference `json:"credentialsSecretRef,omitempty"`

	// ProviderSpec is the provider-specific machine template, decoded by the provider as
	// Gardener's provider of that name decodes it (or strictly, in strict mode).
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	ProviderSpec runtime.RawExtension `json:"providerSpec"`

	// Provider selects the driver, matched case-insensitively against registered provider names
	// ("OpenStack" selects openstack).
	// +optional
	Provider string `json:"provider,omitempty"`

	// SecretRef points at the secret with userData and (legacy) credentials.
	// +optional
	SecretRef *corev1.SecretReference `json:"secretRef,omitempty"`

	// Status is what the controller found out about the class (machinist only).
	// +optional
	Status MachineClassStatus `json:"status,omitempty"`
}

// MachineClassStatus is what the controller found out about a MachineClass.
type MachineClassStatus struct {
	// Conditions of the class. ProviderSpecValid says whether the providerSpec decodes and
	// validates for its driver, and lists the fields decoding ignored or matched loosely.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// MachineClassList is a list of MachineClasses.
//
// +kubebuilder:object:root=true
type MachineClassList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MachineClass `json:"items"`
}

// NodeTemplate is the shape of the node a class produces, for scale-from-zero.
type NodeTemplate struct {
	// Capacity of the node: cpu, gpu and memory are expected.
	Capacity corev1.ResourceList `json:"capacity"`
	// VirtualCapacity holds extended resources that are not backed by hardware.
	// +optional
	VirtualCapacity corev1.ResourceList `json:"virtualCapacity,omitempty"`
	// InstanceType is the provider's machine type (flavor, VM size).
	InstanceType string `json:"instanceType"`
	// Region of the machines.
	Region string `json:"region"`
	// Zone of the machines.
	Zone string `json:"zone"`
	// Architecture of the machines, e.g. amd64 or arm64.
	// +optional
	Architecture *string `json:"architecture,omitempty"`
}
