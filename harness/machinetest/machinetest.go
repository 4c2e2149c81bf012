// Package machinetest builds the machine.sapcloud.io objects that tests create, so each test
// harness states only what its test is about. Tests import it; the product never does.
package machinetest

import (
	"maps"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// Deployment is a MachineDeployment of replicas machines of class in namespace, selected by
// labels (also its template's labels), rolled out with maxSurge and maxUnavailable machines.
func Deployment(namespace, name, class string, replicas int32, labels map[string]string, maxSurge, maxUnavailable int32) *v1alpha1.MachineDeployment {
	surge, unavailable := intstr.FromInt32(maxSurge), intstr.FromInt32(maxUnavailable)
	return &v1alpha1.MachineDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: v1alpha1.MachineDeploymentSpec{
			Replicas: replicas,
			Selector: &metav1.LabelSelector{MatchLabels: maps.Clone(labels)},
			Strategy: v1alpha1.MachineDeploymentStrategy{
				Type: v1alpha1.RollingUpdateMachineDeploymentStrategyType,
				RollingUpdate: &v1alpha1.RollingUpdateMachineDeployment{UpdateConfiguration: v1alpha1.UpdateConfiguration{
					MaxSurge: &surge, MaxUnavailable: &unavailable,
				}},
			},
			Template: v1alpha1.MachineTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: maps.Clone(labels)},
				Spec:       v1alpha1.MachineSpec{Class: v1alpha1.ClassSpec{Kind: "MachineClass", Name: class}},
			},
		},
	}
}

// Pool is the label set the test harnesses select a deployment's machines by: pool=<name>.
func Pool(name string) map[string]string { return map[string]string{"pool": name} }
