package local

import (
	"maps"
	"runtime"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
)

// Defaults of a node's shape where neither the providerSpec nor the class's nodeTemplate says.
const (
	// DefaultRegion is the topology.kubernetes.io/region of local nodes.
	DefaultRegion = "local"
	// DefaultEphemeralStorage is the ephemeral-storage capacity of a local node; the same
	// default the autoscaler server assumes for a nodeTemplate without one.
	DefaultEphemeralStorage = "20Gi"
	// templateArchitecture is what the autoscaler server assumes for a nodeTemplate without an
	// architecture; a node of such a class reports it too, so both agree.
	templateArchitecture = "amd64"
	// resourceGPU is the resource a nodeTemplate's "gpu" capacity becomes, as in MCM.
	resourceGPU corev1.ResourceName = "nvidia.com/gpu"
)

// nodeShape is what a machine's node registers with, fixed when the machine is created, like
// the flags (--node-labels, --register-with-taints) and hardware a kubelet starts with.
type nodeShape struct {
	Capacity    corev1.ResourceList `json:"capacity"`
	Labels      map[string]string   `json:"labels"`
	Annotations map[string]string   `json:"annotations,omitempty"`
	Taints      []corev1.Taint      `json:"taints,omitempty"`
	Arch        string              `json:"arch"`
}

// shapeFor returns the node a machine of the class becomes, so that the first registration
// already carries everything Cluster Autoscaler and the machine controller look at:
//
//   - capacity (= allocatable): the class's nodeTemplate capacity when it has one, since that
//     is what the autoscaler builds its template node from; else the providerSpec;
//   - the well-known labels (hostname, os, arch, instance-type, zone, region and their beta
//     forms) from the nodeTemplate when set, else from the providerSpec;
//   - the providerSpec's labels, then the machine's spec.nodeTemplate labels (which win), and
//     the machine's nodeTemplate annotations and taints.
//
// Invalid template values are InvalidArgument naming the field: the API server would refuse
// the node.
func shapeFor(name string, ms *machineSpec, class *v1alpha1.MachineClass, m *v1alpha1.Machine) (nodeShape, error) {
	top, capacity, errs := classTopology(ms, class)
	labels := map[string]string{
		corev1.LabelHostname:                name,
		corev1.LabelOSStable:                "linux",
		corev1.LabelArchStable:              top.arch,
		"beta.kubernetes.io/os":             "linux",
		"beta.kubernetes.io/arch":           top.arch,
		corev1.LabelInstanceTypeStable:      top.instanceType,
		corev1.LabelInstanceType:            top.instanceType,
		corev1.LabelTopologyZone:            top.zone,
		corev1.LabelFailureDomainBetaZone:   top.zone,
		corev1.LabelTopologyRegion:          top.region,
		corev1.LabelFailureDomainBetaRegion: top.region,
	}
	maps.Copy(labels, ms.Labels)
	shape := nodeShape{Capacity: capacity, Labels: labels, Arch: top.arch}
	if m != nil {
		errs = append(errs, shape.applyTemplate(m.Spec.NodeTemplateSpec)...)
	}
	if len(errs) > 0 {
		return nodeShape{}, driver.Errorf(driver.InvalidArgument, "local: machine %q of machineClass %q: the node cannot register: %s: fix the template", name, class.Name, errs.ToAggregate().Error())
	}
	return shape, nil
}

// topology is where a node is and what it is.
type topology struct{ zone, instanceType, region, arch string }

// classTopology is the topology and capacity of the class's nodes: the providerSpec's, with
// the class's nodeTemplate (Cluster Autoscaler's scale-from-zero hints) over it.
func classTopology(ms *machineSpec, class *v1alpha1.MachineClass) (topology, corev1.ResourceList, field.ErrorList) {
	top := topology{zone: ms.Zone, instanceType: ms.InstanceType, region: DefaultRegion, arch: runtime.GOARCH}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:              ms.CPU.DeepCopy(),
		corev1.ResourceMemory:           ms.Memory.DeepCopy(),
		corev1.ResourcePods:             *resource.NewQuantity(int64(ms.Pods), resource.DecimalSI),
		corev1.ResourceEphemeralStorage: resource.MustParse(DefaultEphemeralStorage),
	}
	nt := class.NodeTemplate
	if nt == nil {
		return top, capacity, nil
	}
	var errs field.ErrorList
	path := field.NewPath("nodeTemplate")
	top.zone, top.instanceType, top.region = orDefault(nt.Zone, top.zone), orDefault(nt.InstanceType, top.instanceType), orDefault(nt.Region, top.region)
	top.arch = templateArchitecture
	if nt.Architecture != nil && *nt.Architecture != "" {
		top.arch = *nt.Architecture
	}
	for key, v := range map[string]string{"zone": top.zone, "instanceType": top.instanceType, "region": top.region, "architecture": top.arch} {
		for _, msg := range validation.IsValidLabelValue(v) {
			errs = append(errs, field.Invalid(path.Child(key), v, msg))
		}
	}
	for res, q := range nt.Capacity {
		if res == "gpu" {
			res = resourceGPU
		}
		if res == resourceGPU && q.IsZero() {
			continue
		}
		capacity[res] = q.DeepCopy()
	}
	for res, q := range nt.VirtualCapacity {
		capacity[res] = q.DeepCopy()
	}
	return top, capacity, errs
}

// applyTemplate adds the machine's nodeTemplate (labels, annotations, taints) to the shape,
// and returns what is invalid in it.
func (shape *nodeShape) applyTemplate(tmpl v1alpha1.NodeTemplateSpec) field.ErrorList {
	var errs field.ErrorList
	path := field.NewPath("machine", "spec", "nodeTemplate")
	for k, v := range tmpl.Labels {
		for _, msg := range validation.IsQualifiedName(k) {
			errs = append(errs, field.Invalid(path.Child("metadata", "labels").Key(k), k, "label key: "+msg))
		}
		for _, msg := range validation.IsValidLabelValue(v) {
			errs = append(errs, field.Invalid(path.Child("metadata", "labels").Key(k), v, "label value: "+msg))
		}
	}
	maps.Copy(shape.Labels, tmpl.Labels)
	if len(tmpl.Annotations) > 0 {
		shape.Annotations = maps.Clone(tmpl.Annotations)
	}
	for i, t := range tmpl.Spec.Taints {
		for _, msg := range validation.IsQualifiedName(t.Key) {
			errs = append(errs, field.Invalid(path.Child("spec", "taints").Index(i).Child("key"), t.Key, msg))
		}
		switch t.Effect {
		case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		default:
			errs = append(errs, field.NotSupported(path.Child("spec", "taints").Index(i).Child("effect"), t.Effect,
				[]string{string(corev1.TaintEffectNoSchedule), string(corev1.TaintEffectPreferNoSchedule), string(corev1.TaintEffectNoExecute)}))
		}
		t.TimeAdded = nil
		shape.Taints = append(shape.Taints, t)
	}
	return errs
}

// legacyShape is the shape of a machine recorded before shapes were kept: the providerSpec's.
func legacyShape(name string, ms *machineSpec) nodeShape {
	s, _ := shapeFor(name, ms, &v1alpha1.MachineClass{}, nil)
	return s
}
