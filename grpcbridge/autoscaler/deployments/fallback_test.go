package deployments_test

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/fallback"
	"github.com/machinist-io/machinist/grpcbridge/autoscaler"
	"github.com/machinist-io/machinist/grpcbridge/autoscaler/clusterautoscaler"
	"github.com/machinist-io/machinist/grpcbridge/autoscaler/internal/autoscalertest"
	"github.com/machinist-io/machinist/internal/eventually"
)

// zoneClass creates a local MachineClass whose machines and node template are in zone; a class
// out of capacity fails every create with ResourceExhausted.
func (w *world) zoneClass(name, zone string, outOfCapacity bool) {
	w.t.Helper()
	w.create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: map[string][]byte{"userData": []byte("#!/bin/sh\n")}})
	spec := `{"cluster":"e2e","heartbeatInterval":"1s","nodeMonitorGracePeriod":"5s","zone":"` + zone + `"`
	if outOfCapacity {
		spec += `,"createError":{"code":"ResourceExhausted","message":"no capacity left in ` + zone + `"}`
	}
	w.create(&v1alpha1.MachineClass{
		ObjectMeta:   metav1.ObjectMeta{Name: name, Namespace: ns},
		Provider:     "local",
		ProviderSpec: runtime.RawExtension{Raw: []byte(spec + "}")},
		SecretRef:    &corev1.SecretReference{Name: name, Namespace: ns},
		NodeTemplate: &v1alpha1.NodeTemplate{
			Capacity:     corev1.ResourceList{corev1.ResourceCPU: mustQ("2"), corev1.ResourceMemory: mustQ("4Gi"), "gpu": mustQ("0")},
			InstanceType: "local", Region: "local", Zone: zone,
		},
	})
}

// fallbackPool creates a node group of 0..3 machines on primary that falls back to fallbacks.
func (w *world) fallbackPool(name, primary, fallbacks string) {
	w.t.Helper()
	labels := map[string]string{"pool": name}
	ann := sizeAnnotations(0, 3)
	ann[fallback.AnnotationClasses] = fallbacks
	w.create(&v1alpha1.MachineDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: ann},
		Spec: v1alpha1.MachineDeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Strategy: v1alpha1.MachineDeploymentStrategy{Type: v1alpha1.RollingUpdateMachineDeploymentStrategyType},
			Template: v1alpha1.MachineTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       v1alpha1.MachineSpec{Class: v1alpha1.ClassSpec{Kind: "MachineClass", Name: primary}},
			},
		},
	})
}

// TestFallbackGroupsWithControllers: Cluster Autoscaler's view of groups with fallback classes,
// against the real controllers and the local provider. The template is the class a new node would
// get now (the primary until it is marked, then the fallback); a group whose every class is out of
// capacity reports its waiting machine as OutOfResources, so Cluster Autoscaler backs off the group
// in the same loop instead of after its provisioning timeout.
func TestFallbackGroupsWithControllers(t *testing.T) {
	w := newWorld(t)
	w.zoneClass("zone-a", "local-a", true)
	w.zoneClass("zone-b", "local-b", false)
	w.zoneClass("dry-a", "dry-a", true)
	w.zoneClass("dry-b", "dry-b", true)
	w.fallbackPool("fb", "zone-a", "zone-b")
	w.fallbackPool("dry", "dry-a", "dry-b")
	w.startControllers()
	p := w.provider()
	certs := autoscalertest.NewCerts(t)
	scaler := autoscalertest.Connect(t, autoscalertest.Serve(t, p, certs), certs, clusterautoscaler.Current)
	const fb, dry = ns + ".fb", ns + ".dry"

	zoneOfTemplate := func(id string) string {
		t.Helper()
		if err := scaler.Refresh(); err != nil { // Cluster Autoscaler caches templates until its next loop
			t.Fatal(err)
		}
		node, err := scaler.TemplateNodeInfo(id)
		if err != nil {
			t.Fatalf("template of %s: %v", id, err)
		}
		return node.Labels[corev1.LabelTopologyZone]
	}
	if z := zoneOfTemplate(fb); z != "local-a" {
		t.Fatalf("template zone before any create %q, want the primary's local-a", z)
	}

	if err := scaler.IncreaseSize(fb, 1); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 2*time.Minute, "a Running instance of fb on zone-b", func() bool {
		in, err := scaler.Nodes(fb)
		ms := w.machinesOf("fb")
		return err == nil && len(in) == 1 && in[0].Status != nil && in[0].Status.State == clusterautoscaler.InstanceRunning &&
			len(ms) == 1 && ms[0].Spec.Class.Name == "zone-b"
	})
	eventually.True(t, 2*time.Minute, "the template on zone-b while zone-a is marked", func() bool { return zoneOfTemplate(fb) == "local-b" })

	if err := scaler.IncreaseSize(dry, 1); err != nil {
		t.Fatal(err)
	}
	var info *clusterautoscaler.InstanceErrorInfo
	eventually.True(t, 2*time.Minute, "dry's instance reported OutOfResources", func() bool {
		in, err := scaler.Nodes(dry)
		if err != nil || len(in) != 1 || in[0].Status == nil || in[0].Status.ErrorInfo == nil {
			return false
		}
		info = in[0].Status.ErrorInfo
		return in[0].Status.State == clusterautoscaler.InstanceCreating
	})
	if info.ErrorClass != 1 || info.ErrorCode != "ResourceExhausted" || !strings.Contains(info.ErrorMessage, "dry-a") || !strings.Contains(info.ErrorMessage, "dry-b") {
		t.Fatalf("error info of the waiting instance %+v: want class OutOfResources (1), code ResourceExhausted, both classes named", info)
	}
	// The server goes by the marks on the classes, which the controller publishes before it writes
	// the machine's status: wait for the status, then check that the machine has no VM.
	var ms []v1alpha1.Machine
	eventually.True(t, 2*time.Minute, "dry's machine in CrashLoopBackOff", func() bool {
		ms = w.machinesOf("dry")
		return len(ms) == 1 && ms[0].Status.CurrentStatus.Phase == v1alpha1.MachineCrashLoopBackOff
	})
	if ms[0].Spec.ProviderID != "" {
		t.Fatalf("dry's machine does not wait without a VM: %+v", ms[0])
	}
	if z := zoneOfTemplate(dry); z != "dry-a" {
		t.Fatalf("template zone of a group with every class marked %q, want the primary's dry-a", z)
	}
}

// TestFallbackMarksPublishedOnClasses: the server, a process of its own, goes by the marks the
// controller publishes on the MachineClasses: a marked primary moves the template to the first
// unmarked fallback; with every class marked the group's creating machines are OutOfResources at
// once and the template is the primary's; expired marks count for nothing.
func TestFallbackMarksPublishedOnClasses(t *testing.T) {
	w := newWorld(t)
	w.zoneClass("p", "z-p", false)
	w.zoneClass("f", "z-f", false)
	ann := sizeAnnotations(0, 3)
	ann[fallback.AnnotationClasses] = "f"
	_, set := w.deployment("grp", "p", 1, ann)
	w.machine(set, "grp-1", "", creating())
	p := w.provider()
	const id = ns + ".grp"

	state := func() (zone string, in []autoscaler.Instance) {
		t.Helper()
		node, err := p.TemplateNode(w.ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if in, err = p.Nodes(w.ctx, id); err != nil || len(in) != 1 {
			t.Fatalf("instances %v, %v", in, err)
		}
		return node.Labels[corev1.LabelTopologyZone], in
	}
	mark := func(class string, until time.Time) {
		t.Helper()
		c := &v1alpha1.MachineClass{}
		if err := w.c.Get(w.ctx, client.ObjectKey{Namespace: ns, Name: class}, c); err != nil {
			t.Fatal(err)
		}
		c.Annotations = map[string]string{fallback.AnnotationExhausted: fallback.Mark{Until: until, Message: "stock-out in " + class}.Encode()}
		if err := w.c.Update(w.ctx, c); err != nil {
			t.Fatal(err)
		}
	}

	if zone, in := state(); zone != "z-p" || in[0].Error != nil {
		t.Fatalf("unmarked: template zone %q, instance %+v", zone, in[0])
	}
	mark("p", time.Now().Add(time.Hour))
	eventually.Explained(t, 30*time.Second, "template on the fallback while the primary is marked", func() (bool, string) {
		zone, in := state()
		return zone == "z-f" && in[0].Error == nil, zone
	})
	mark("f", time.Now().Add(time.Hour))
	eventually.Explained(t, 30*time.Second, "OutOfResources with every class marked", func() (bool, string) {
		zone, in := state()
		e := in[0].Error
		return zone == "z-p" && e != nil && e.Class == autoscaler.ErrorClassOutOfResources && e.Code == "ResourceExhausted" &&
			strings.Contains(e.Message, "every class of MachineDeployment "+ns+"/grp") && strings.Contains(e.Message, "stock-out in f"), zone
	})
	mark("p", time.Now().Add(-time.Second))
	mark("f", time.Now().Add(-time.Second))
	eventually.Explained(t, 30*time.Second, "expired marks ignored", func() (bool, string) {
		zone, in := state()
		return zone == "z-p" && in[0].Error == nil, zone
	})
}
