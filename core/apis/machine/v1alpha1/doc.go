// Package v1alpha1 holds the machine.sapcloud.io/v1alpha1 API: MachineClass, Machine, MachineSet
// and MachineDeployment. The schema is wire- and manifest-compatible with Gardener's
// machine-controller-manager, so manifests written for MCM apply unchanged.
//
// +kubebuilder:object:generate=true
// +groupName=machine.sapcloud.io
package v1alpha1
