package autoscaler

import (
	"fmt"
	"maps"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// Defaults of a template node for what a NodeTemplate leaves out.
const (
	// DefaultMaxPods is the kubelet's default --max-pods.
	DefaultMaxPods = 110
	// DefaultEphemeralStorage is assumed when nodeTemplate.capacity has no ephemeral-storage.
	// Set the real disk size in the class: Cluster Autoscaler only scales up for pods whose ephemeral-storage
	// requests fit this value.
	DefaultEphemeralStorage = "20Gi"
	// DefaultArchitecture is assumed when nodeTemplate.architecture is unset.
	DefaultArchitecture = "amd64"
	// ResourceGPU is the resource name a nodeTemplate's "gpu" capacity becomes, as in MCM.
	ResourceGPU corev1.ResourceName = "nvidia.com/gpu"
)

// TemplateSpec is what a group's template node is built from.
type TemplateSpec struct {
	// GroupID names the node ("template-node-for-<id>"); Cluster Autoscaler renames it anyway.
	GroupID string
	// ClassName is reported in errors.
	ClassName string
	// NodeTemplate of the group's MachineClass; nil means the group has no template.
	NodeTemplate *v1alpha1.NodeTemplate
	// Labels, Annotations and Taints the group's machines put on their nodes (a
	// MachineDeployment's spec.template.spec.nodeTemplate). Labels win over the generic ones.
	Labels      map[string]string
	Annotations map[string]string
	Taints      []corev1.Taint
}

// BuildTemplateNode returns the node a new machine of a group becomes: capacity and allocatable
// (cpu, memory, pods, ephemeral-storage, GPUs and virtual capacity), a Ready condition, the
// arch/os/instance-type/region/zone/hostname labels plus the group's labels, the group's
// annotations plus AnnotationNodeGroup, and its taints. A
// missing template or one without cpu or memory is ErrNoTemplate: Cluster Autoscaler must not scale up from
// zero on a guess.
func BuildTemplateNode(spec TemplateSpec) (*corev1.Node, error) {
	t := spec.NodeTemplate
	if t == nil {
		return nil, fmt.Errorf("machineClass %q has no nodeTemplate: set nodeTemplate (capacity, instanceType, region, zone) to let the autoscaler scale group %q from zero: %w",
			spec.ClassName, spec.GroupID, ErrNoTemplate)
	}
	var missing []string
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if q, ok := t.Capacity[r]; !ok || q.Sign() <= 0 {
			missing = append(missing, "capacity."+string(r))
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("machineClass %q: nodeTemplate lacks %s: set it to let the autoscaler scale group %q from zero: %w",
			spec.ClassName, strings.Join(missing, " and "), spec.GroupID, ErrNoTemplate)
	}

	capacity := corev1.ResourceList{}
	for name, q := range t.Capacity {
		if name == "gpu" {
			name = ResourceGPU
		}
		if name == ResourceGPU && q.IsZero() {
			continue
		}
		capacity[name] = q.DeepCopy()
	}
	for name, q := range t.VirtualCapacity {
		capacity[name] = q.DeepCopy()
	}
	if _, ok := capacity[corev1.ResourcePods]; !ok {
		capacity[corev1.ResourcePods] = *resource.NewQuantity(DefaultMaxPods, resource.DecimalSI)
	}
	if _, ok := capacity[corev1.ResourceEphemeralStorage]; !ok {
		capacity[corev1.ResourceEphemeralStorage] = resource.MustParse(DefaultEphemeralStorage)
	}

	name := "template-node-for-" + spec.GroupID
	arch := DefaultArchitecture
	if t.Architecture != nil && *t.Architecture != "" {
		arch = *t.Architecture
	}
	labels := map[string]string{
		corev1.LabelArchStable:              arch,
		corev1.LabelOSStable:                "linux",
		"beta.kubernetes.io/arch":           arch,
		"beta.kubernetes.io/os":             "linux",
		corev1.LabelHostname:                name,
		corev1.LabelInstanceTypeStable:      t.InstanceType,
		corev1.LabelInstanceType:            t.InstanceType,
		corev1.LabelTopologyRegion:          t.Region,
		corev1.LabelFailureDomainBetaRegion: t.Region,
		corev1.LabelTopologyZone:            t.Zone,
		corev1.LabelFailureDomainBetaZone:   t.Zone,
	}
	for k, v := range labels {
		if v == "" {
			delete(labels, k)
		}
	}
	maps.Copy(labels, spec.Labels)

	// The group's annotation lets PricingNodePrice find the group of the template Cluster
	// Autoscaler derives from this node (it keeps the annotations).
	annotations := make(map[string]string, len(spec.Annotations)+1)
	maps.Copy(annotations, spec.Annotations)
	annotations[AnnotationNodeGroup] = spec.GroupID

	taints := make([]corev1.Taint, len(spec.Taints))
	copy(taints, spec.Taints)
	sort.SliceStable(taints, func(i, j int) bool { return taints[i].Key < taints[j].Key })

	now := metav1.Now()
	condition := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: s, Reason: reason, LastHeartbeatTime: now, LastTransitionTime: now}
	}
	return &corev1.Node{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: annotations},
		Spec:       corev1.NodeSpec{Taints: taints},
		Status: corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: capacity.DeepCopy(),
			Phase:       corev1.NodeRunning,
			Conditions: []corev1.NodeCondition{
				condition(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady"),
				condition(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory"),
				condition(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure"),
				condition(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID"),
				condition(corev1.NodeNetworkUnavailable, corev1.ConditionFalse, "RouteCreated"),
			},
			NodeInfo: corev1.NodeSystemInfo{Architecture: arch, OperatingSystem: "linux"},
		},
	}, nil
}
