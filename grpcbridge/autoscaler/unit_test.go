package autoscaler_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/durationpb"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/grpcbridge/autoscaler"
	pb "github.com/machinist-io/machinist/grpcbridge/proto/clusterautoscaler/cloudprovider/v1/externalgrpc"
)

func TestBuildTemplateNode(t *testing.T) {
	tmpl := &v1alpha1.NodeTemplate{
		Capacity: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi"),
			"gpu": resource.MustParse("2"), corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
		},
		VirtualCapacity: corev1.ResourceList{"example.com/dongle": resource.MustParse("4")},
		InstanceType:    "g4", Region: "r1", Zone: "r1b",
	}
	node, err := autoscaler.BuildTemplateNode(autoscaler.TemplateSpec{
		GroupID: "ns.gpu", ClassName: "gpu", NodeTemplate: tmpl,
		Labels: map[string]string{"pool": "gpu", corev1.LabelOSStable: "windows"},
		Taints: []corev1.Taint{{Key: "nvidia.com/gpu", Effect: corev1.TaintEffectNoSchedule}},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[corev1.ResourceName]string{
		corev1.ResourceCPU: "8", corev1.ResourceMemory: "32Gi", autoscaler.ResourceGPU: "2",
		corev1.ResourceEphemeralStorage: "100Gi", corev1.ResourcePods: "110", "example.com/dongle": "4",
	}
	if len(node.Status.Allocatable) != len(want) {
		t.Errorf("allocatable %v, want exactly %v", node.Status.Allocatable, want)
	}
	for name, q := range want {
		if got := node.Status.Allocatable[name]; got.Cmp(resource.MustParse(q)) != 0 {
			t.Errorf("allocatable %s = %v, want %s", name, got.String(), q)
		}
	}
	if _, ok := node.Status.Capacity["gpu"]; ok {
		t.Error(`capacity keeps the bare "gpu" name`)
	}
	if node.Labels[corev1.LabelArchStable] != autoscaler.DefaultArchitecture || node.Labels[corev1.LabelOSStable] != "windows" ||
		node.Labels[corev1.LabelTopologyZone] != "r1b" || node.Labels[corev1.LabelInstanceTypeStable] != "g4" {
		t.Errorf("labels %v: want default arch, the group's os label, zone and instance type", node.Labels)
	}
	if len(node.Spec.Taints) != 1 {
		t.Errorf("taints %v", node.Spec.Taints)
	}
	raw, err := node.Marshal()
	if err != nil || len(raw) == 0 {
		t.Fatalf("marshal: %d bytes, %v", len(raw), err)
	}

	for name, spec := range map[string]*v1alpha1.NodeTemplate{
		"no template": nil,
		"no memory":   {Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}},
		"zero cpu":    {Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("0"), corev1.ResourceMemory: resource.MustParse("1Gi")}},
	} {
		_, err := autoscaler.BuildTemplateNode(autoscaler.TemplateSpec{GroupID: "g", ClassName: "c", NodeTemplate: spec})
		if !errors.Is(err, autoscaler.ErrNoTemplate) || !strings.Contains(err.Error(), `machineClass "c"`) {
			t.Errorf("%s: %v, want ErrNoTemplate naming the class", name, err)
		}
	}
}

func TestOptionsFromAnnotations(t *testing.T) {
	o, problems := autoscaler.OptionsFromAnnotations(map[string]string{
		autoscaler.OptionsPrefix + autoscaler.OptionScaleDownUnneededTime:            "5m",
		autoscaler.GardenerOptionsPrefix + autoscaler.OptionScaleDownUnneededTime:    "9m",
		autoscaler.GardenerOptionsPrefix + autoscaler.OptionMaxNodeProvisionTime:     "25m",
		autoscaler.GardenerOptionsPrefix + autoscaler.OptionZeroOrMaxNodeScaling:     "true",
		autoscaler.OptionsPrefix + autoscaler.OptionScaleDownUtilizationThreshold:    "1.5",
		autoscaler.OptionsPrefix + autoscaler.OptionIgnoreDaemonSetsUtilization:      "true",
		autoscaler.OptionsPrefix + autoscaler.OptionScaleDownGpuUtilizationThreshold: "0.25",
	})
	if o.ScaleDownUnneededTime == nil || *o.ScaleDownUnneededTime != 5*time.Minute {
		t.Errorf("machinist's key must win over Gardener's: %v", o.ScaleDownUnneededTime)
	}
	if o.MaxNodeProvisionTime == nil || *o.MaxNodeProvisionTime != 25*time.Minute {
		t.Errorf("Gardener's key is honoured: %v", o.MaxNodeProvisionTime)
	}
	if o.ZeroOrMaxNodeScaling != nil {
		t.Error("Gardener's provider has no zero-or-max key; it must not be read under that prefix")
	}
	if o.ScaleDownUtilizationThreshold != nil || len(problems) != 1 || !strings.Contains(problems[0], "between 0 and 1") {
		t.Errorf("threshold 1.5: %v, problems %v", o.ScaleDownUtilizationThreshold, problems)
	}
	if o.IgnoreDaemonSetsUtilization == nil || !*o.IgnoreDaemonSetsUtilization || *o.ScaleDownGpuUtilizationThreshold != 0.25 {
		t.Errorf("options %s", o)
	}
}

func TestMergeOptionsReadsNewThenOld(t *testing.T) {
	defaults := &pb.NodeGroupAutoscalingOptions{
		ScaleDownUnneededDuration: durationpb.New(time.Minute),
		ScaleDownUnneededTime:     &pb.LegacyDuration{Duration: int64(time.Hour)},
		ScaleDownUnreadyTime:      &pb.LegacyDuration{Duration: int64(2 * time.Hour)},
	}
	out := autoscaler.MergeOptions(defaults, autoscaler.Options{ZeroOrMaxNodeScaling: ptr.To(true)})
	if out.GetScaleDownUnneededDuration().AsDuration() != time.Minute || out.GetScaleDownUnneededTime().GetDuration() != int64(time.Minute) {
		t.Errorf("unneeded: the 1.35 field wins when both are sent: %v", out)
	}
	if out.GetScaleDownUnreadyDuration().AsDuration() != 2*time.Hour {
		t.Errorf("unready: the old field is read when the new one is absent: %v", out)
	}
	if out.GetMaxNodeProvisionTime() == nil || out.GetMaxNodeProvisionDuration() == nil || !out.GetZeroOrMaxNodeScaling() {
		t.Errorf("every duration is written in both encodings: %v", out)
	}
}

func TestPlaceholder(t *testing.T) {
	id := autoscaler.Placeholder("shoot--dev", "workers-abc")
	scope, name, ok := autoscaler.ParsePlaceholder(id)
	if !ok || scope != "shoot--dev" || name != "workers-abc" {
		t.Fatalf("%q parsed to %q %q %v", id, scope, name, ok)
	}
	for _, bad := range []string{"local:///x", "requested://", "requested://ns", "requested://ns/", "requested://a/b/c"} {
		if _, _, ok := autoscaler.ParsePlaceholder(bad); ok {
			t.Errorf("%q parsed as a placeholder", bad)
		}
	}
}

// TestEveryOptionFieldHasAnAnnotation: each field of the proto's NodeGroupAutoscalingOptions
// (the 1.35 ones and, through MergeOptions, the pre-1.35 durations) can be set per group by an
// option annotation, and every field not overridden keeps Cluster Autoscaler's default. A field
// added to the proto without an annotation fails here.
func TestEveryOptionFieldHasAnAnnotation(t *testing.T) {
	defaults := &pb.NodeGroupAutoscalingOptions{
		ScaleDownUtilizationThreshold: 0.5, ScaleDownGpuUtilizationThreshold: 0.5,
		ScaleDownUnneededDuration: durationpb.New(10 * time.Minute), ScaleDownUnreadyDuration: durationpb.New(20 * time.Minute),
		MaxNodeProvisionDuration: durationpb.New(15 * time.Minute),
	}
	values := map[string]string{
		autoscaler.OptionScaleDownUtilizationThreshold: "0.25", autoscaler.OptionScaleDownGpuUtilizationThreshold: "0.75",
		autoscaler.OptionScaleDownUnneededTime: "3m", autoscaler.OptionScaleDownUnreadyTime: "4m", autoscaler.OptionMaxNodeProvisionTime: "5m",
		autoscaler.OptionZeroOrMaxNodeScaling: "true", autoscaler.OptionIgnoreDaemonSetsUtilization: "true",
	}
	if len(values) != len(autoscaler.OptionKeys) {
		t.Fatalf("the test sets %d options, there are %d keys", len(values), len(autoscaler.OptionKeys))
	}
	fields := defaults.ProtoReflect().Descriptor().Fields()
	covered := map[string]string{} // field -> the option key that sets it
	for _, key := range autoscaler.OptionKeys {
		o, problems := autoscaler.OptionsFromAnnotations(map[string]string{autoscaler.OptionsPrefix + key: values[key]})
		if len(problems) > 0 {
			t.Fatalf("%s: %v", key, problems)
		}
		got := autoscaler.MergeOptions(defaults, o).ProtoReflect()
		var changed []string
		for i := range fields.Len() {
			f := fields.Get(i)
			if deprecated(f) {
				continue // the pre-1.35 durations, written beside their 1.35 peers (TestMergeOptionsReadsNewThenOld)
			}
			if !got.Get(f).Equal(defaults.ProtoReflect().Get(f)) {
				changed = append(changed, string(f.Name()))
				covered[string(f.Name())] = key
			}
		}
		if len(changed) != 1 {
			t.Errorf("annotation %s changes fields %v of the answer, want exactly one", key, changed)
		}
	}
	for i := range fields.Len() {
		if f := fields.Get(i); !deprecated(f) && covered[string(f.Name())] == "" {
			t.Errorf("field %s (%d) of NodeGroupAutoscalingOptions cannot be set by any option annotation", f.Name(), f.Number())
		}
	}
}

func deprecated(f protoreflect.FieldDescriptor) bool {
	return f.Options().(*descriptorpb.FieldOptions).GetDeprecated()
}
