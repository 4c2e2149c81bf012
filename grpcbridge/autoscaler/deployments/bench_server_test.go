package deployments_test

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/fallback"
	"github.com/machinist-io/machinist/grpcbridge/autoscaler/deployments"
	"github.com/machinist-io/machinist/harness/testenv"
)

// BenchmarkBreadthServerHeap: what the server holds for 500 node groups and 5000 machines,
// written through a real API server (so the objects carry what the API server adds: managed
// fields, UIDs, timestamps) and read by the server's own informers: the Go heap in use once
// Start has returned (informer caches and index) minus before, and how long Start took to load
// them. Run once (-benchtime 1x): it creates 6500 objects.
func BenchmarkBreadthServerHeap(b *testing.B) {
	ctrllog.SetLogger(logr.Discard()) // the cache's informers log through it
	env := testenv.Start(b)
	c := env.Client()
	ctx := context.Background()
	const groups, perGroup = 500, 10
	namespace := fmt.Sprintf("breadth-%d", time.Now().UnixNano()%1e6) // -count reuses the control plane
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		b.Fatal(err)
	}
	parallel(b, groups, func(g int) error { return createGroup(ctx, c, namespace, g, perGroup) })

	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		p, err := deployments.New(deployments.Config{Control: env.Config, Namespace: namespace, Log: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		runCtx, cancel := context.WithCancel(ctx)
		start := time.Now()
		if err := p.Start(runCtx); err != nil {
			b.Fatal(err)
		}
		loaded := time.Since(start)
		runtime.GC()
		runtime.ReadMemStats(&after)
		if n := len(p.NodeGroups()); n != groups {
			b.Fatalf("%d groups loaded, want %d", n, groups)
		}
		nodes, err := p.Nodes(ctx, namespace+".pool-7")
		if err != nil || len(nodes) != perGroup {
			b.Fatalf("pool-7: %d instances, %v", len(nodes), err)
		}
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "heap-MiB")
		b.ReportMetric(loaded.Seconds(), "load-s")
		runtime.KeepAlive(p)
		cancel()
	}
}

// createGroup creates a priced class, a MachineDeployment of perGroup replicas, its MachineSet
// and its machines (without status: no controller runs here).
func createGroup(ctx context.Context, c client.Client, namespace string, g, perGroup int) error {
	name := fmt.Sprintf("pool-%d", g)
	labels := map[string]string{"pool": name}
	class := &v1alpha1.MachineClass{
		ObjectMeta:   metav1.ObjectMeta{Name: name, Namespace: namespace, Annotations: map[string]string{fallback.AnnotationPricePerHour: "0.096"}},
		Provider:     "local",
		ProviderSpec: kruntime.RawExtension{Raw: []byte(`{"cluster":"breadth"}`)},
		NodeTemplate: &v1alpha1.NodeTemplate{Capacity: corev1.ResourceList{corev1.ResourceCPU: mustQ("4"), corev1.ResourceMemory: mustQ("16Gi")}, InstanceType: "m5.xlarge", Region: "eu-1", Zone: "eu-1a"},
	}
	if err := c.Create(ctx, class); err != nil {
		return err
	}
	md := &v1alpha1.MachineDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Annotations: sizeAnnotations(0, 50)},
		Spec: v1alpha1.MachineDeploymentSpec{
			Replicas: int32(perGroup), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: v1alpha1.MachineTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: v1alpha1.MachineSpec{Class: v1alpha1.ClassSpec{Kind: "MachineClass", Name: name},
					NodeTemplateSpec: v1alpha1.NodeTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}}}},
		},
	}
	if err := c.Create(ctx, md); err != nil {
		return err
	}
	set := &v1alpha1.MachineSet{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-5d8f7", Namespace: namespace, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{ownerRef("MachineDeployment", md.Name, md.UID)}},
		Spec: v1alpha1.MachineSetSpec{Replicas: int32(perGroup), Selector: md.Spec.Selector, Template: md.Spec.Template, MachineClass: md.Spec.Template.Spec.Class},
	}
	if err := c.Create(ctx, set); err != nil {
		return err
	}
	for i := range perGroup {
		m := &v1alpha1.Machine{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%05d", set.Name, i), Namespace: namespace,
				Labels:          map[string]string{"pool": name, v1alpha1.LabelNode: fmt.Sprintf("%s-%05d", set.Name, i)},
				OwnerReferences: []metav1.OwnerReference{ownerRef("MachineSet", set.Name, set.UID)}},
			Spec: v1alpha1.MachineSpec{Class: md.Spec.Template.Spec.Class, ProviderID: fmt.Sprintf("openstack:///%s-%05d", set.Name, i)},
		}
		if err := c.Create(ctx, m); err != nil {
			return err
		}
	}
	return nil
}

// parallel runs f(0..n-1) on 8 workers and fails on the first error.
func parallel(b *testing.B, n int, f func(int) error) {
	b.Helper()
	work := make(chan int)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if err := f(i); err != nil {
					errs <- err
				}
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}
