package deployments_test

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/grpcbridge/autoscaler/deployments"
	"github.com/machinist-io/machinist/harness/testenv"
)

const ns = "shoot--dev"

// world is a control plane with Machine* objects written by the test, which plays the
// controllers' part where a test needs it.
type world struct {
	t   *testing.T
	ctx context.Context
	env *testenv.Env
	c   client.Client
}

func newWorld(t *testing.T) *world {
	t.Helper()
	env := testenv.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	w := &world{t: t, ctx: ctx, env: env, c: env.Client()}
	w.create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	return w
}

func (w *world) create(o client.Object) {
	w.t.Helper()
	if err := w.c.Create(w.ctx, o); err != nil {
		w.t.Fatalf("create %T %s: %v", o, o.GetName(), err)
	}
}

func (w *world) class(name string, withTemplate bool) *v1alpha1.MachineClass {
	c := &v1alpha1.MachineClass{
		ObjectMeta:   metav1.ObjectMeta{Name: name, Namespace: ns},
		Provider:     "local",
		ProviderSpec: runtime.RawExtension{Raw: []byte(`{"image":"node"}`)},
	}
	if withTemplate {
		c.NodeTemplate = &v1alpha1.NodeTemplate{
			Capacity: corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse("4"),
				corev1.ResourceMemory: resource.MustParse("16Gi"),
				"gpu":                 resource.MustParse("1"),
			},
			InstanceType: "m5.xlarge", Region: "eu-1", Zone: "eu-1a", Architecture: ptr.To("arm64"),
		}
	}
	w.create(c)
	return c
}

// deployment creates a MachineDeployment with the given annotations and replicas and one
// MachineSet it owns.
func (w *world) deployment(name, class string, replicas int32, annotations map[string]string) (*v1alpha1.MachineDeployment, *v1alpha1.MachineSet) {
	w.t.Helper()
	labels := map[string]string{"pool": name}
	md := &v1alpha1.MachineDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: annotations},
		Spec: v1alpha1.MachineDeploymentSpec{
			Replicas: replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: v1alpha1.MachineTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: v1alpha1.MachineSpec{
					Class: v1alpha1.ClassSpec{Kind: "MachineClass", Name: class},
					NodeTemplateSpec: v1alpha1.NodeTemplateSpec{
						ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"pool": name, "machinist.io/gpu": "tesla"}},
						Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: "dedicated", Value: name, Effect: corev1.TaintEffectNoSchedule}}},
					},
				},
			},
		},
	}
	w.create(md)
	set := &v1alpha1.MachineSet{
		ObjectMeta: metav1.ObjectMeta{
			Name: name + "-abc12", Namespace: ns, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{ownerRef("MachineDeployment", md.Name, md.UID)},
		},
		Spec: v1alpha1.MachineSetSpec{
			Replicas: replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: md.Spec.Template, MachineClass: md.Spec.Template.Spec.Class,
		},
	}
	w.create(set)
	return md, set
}

func ownerRef(kind, name string, uid types.UID) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: kind, Name: name, UID: uid,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
	}
}

// machine creates a machine of set and sets its status.
func (w *world) machine(set *v1alpha1.MachineSet, name, providerID string, status v1alpha1.MachineStatus) *v1alpha1.Machine {
	w.t.Helper()
	m := &v1alpha1.Machine{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: ns, Labels: set.Spec.Template.Labels,
			OwnerReferences: []metav1.OwnerReference{ownerRef("MachineSet", set.Name, set.UID)},
		},
		Spec: v1alpha1.MachineSpec{Class: set.Spec.MachineClass, ProviderID: providerID},
	}
	if providerID != "" {
		m.Labels = map[string]string{"pool": set.Labels["pool"], v1alpha1.LabelNode: name}
	}
	w.create(m)
	w.setStatus(m, status)
	return m
}

func (w *world) setStatus(m *v1alpha1.Machine, status v1alpha1.MachineStatus) {
	w.t.Helper()
	m.Status = status
	if err := w.c.Status().Update(w.ctx, m); err != nil {
		w.t.Fatalf("update status of machine %s: %v", m.Name, err)
	}
}

func running() v1alpha1.MachineStatus {
	return v1alpha1.MachineStatus{
		CurrentStatus: v1alpha1.CurrentStatus{Phase: v1alpha1.MachineRunning, LastUpdateTime: metav1.Now()},
		LastOperation: v1alpha1.LastOperation{Type: v1alpha1.MachineOperationCreate, State: v1alpha1.MachineStateSuccessful, LastUpdateTime: metav1.Now()},
	}
}

func creating() v1alpha1.MachineStatus {
	return v1alpha1.MachineStatus{
		LastOperation: v1alpha1.LastOperation{Type: v1alpha1.MachineOperationCreate, State: v1alpha1.MachineStateProcessing, Description: "Creating machine on cloud provider", LastUpdateTime: metav1.Now()},
	}
}

func createFailed(code, message string) v1alpha1.MachineStatus {
	return v1alpha1.MachineStatus{
		CurrentStatus: v1alpha1.CurrentStatus{Phase: v1alpha1.MachineCrashLoopBackOff, LastUpdateTime: metav1.Now()},
		LastOperation: v1alpha1.LastOperation{Type: v1alpha1.MachineOperationCreate, State: v1alpha1.MachineStateFailed, ErrorCode: code, Description: message, LastUpdateTime: metav1.Now()},
	}
}

func (w *world) getMD(name string) *v1alpha1.MachineDeployment {
	w.t.Helper()
	md := &v1alpha1.MachineDeployment{}
	if err := w.c.Get(w.ctx, types.NamespacedName{Namespace: ns, Name: name}, md); err != nil {
		w.t.Fatalf("get MachineDeployment %s: %v", name, err)
	}
	return md
}

// provider starts a deployments provider on the world's control plane.
func (w *world) provider(groups ...deployments.FlagGroup) *deployments.Source {
	w.t.Helper()
	level := slog.LevelWarn
	if testing.Verbose() {
		level = slog.LevelInfo
	}
	p, err := deployments.New(deployments.Config{
		Control: w.env.Config, Namespace: ns, Groups: groups, GPULabel: "machinist.io/gpu",
		Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})),
	})
	if err != nil {
		w.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w.t.Cleanup(cancel)
	if err := p.Start(ctx); err != nil {
		w.t.Fatal(err)
	}
	return p
}
