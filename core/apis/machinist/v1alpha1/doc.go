// Package v1alpha1 holds machinist's own API, machinist.io/v1alpha1: PoolPolicy, one rollout and
// repair budget across the zonal MachineDeployments of a worker pool. It lives beside, not inside,
// the MCM-compatible machine.sapcloud.io group, so Gardener may keep owning the MachineDeployments
// a policy selects: a policy is a separate object that selects them by label and changes none of
// their fields.
//
// +kubebuilder:object:generate=true
// +groupName=machinist.io
package v1alpha1
