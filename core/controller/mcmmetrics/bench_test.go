package mcmmetrics_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/mcmmetrics"
	"github.com/machinist-io/machinist/harness/ctrltest"
	"github.com/machinist-io/machinist/harness/testenv"
)

const (
	benchMachines = 5000
	benchSets     = 50 // and as many deployments, 100 machines each
)

var benchFixture struct {
	once    sync.Once
	handler http.Handler
	err     error
}

// BenchmarkScrape5000Machines measures one scrape of the manager's /metrics handler (every
// registered family, MCM's included, encoded as Prometheus reads it) with 5000 Running machines
// of 50 MachineSets and 50 MachineDeployments in the cache, each machine with five node
// conditions. Setting up the objects takes a minute or two and is not measured. cpu-ns/op is
// the process's user+system CPU per scrape (on a shared machine wall time also counts waiting
// for a core).
func BenchmarkScrape5000Machines(b *testing.B) {
	benchFixture.once.Do(func() { benchFixture.handler, benchFixture.err = setUpScrapeBench(b) })
	if benchFixture.err != nil {
		b.Fatal(benchFixture.err)
	}
	var size int
	b.ReportAllocs()
	b.ResetTimer()
	cpu := processCPU()
	for b.Loop() {
		rec := httptest.NewRecorder()
		benchFixture.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		if rec.Code != http.StatusOK {
			b.Fatalf("scrape: %d %.300s", rec.Code, rec.Body.String())
		}
		size = rec.Body.Len()
	}
	b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(size), "bytes/scrape")
}

// processCPU is the user+system CPU time of the process so far, in nanoseconds.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func setUpScrapeBench(b *testing.B) (http.Handler, error) {
	ns := fmt.Sprintf("bench-scrape-%d", time.Now().UnixNano())
	cfg := ctrltest.ControlPlane.Config
	c, err := client.New(cfg, client.Options{Scheme: testenv.Scheme})
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return nil, err
	}
	start := time.Now()
	objs := make(chan client.Object)
	errs := make(chan error, 32)
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for o := range objs {
				if err := createWithStatus(ctx, c, o); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		})
	}
	for i := range benchSets {
		objs <- benchDeployment(ns, i)
		objs <- benchSet(ns, i)
	}
	for i := range benchMachines {
		objs <- benchMachine(ns, i)
	}
	close(objs)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	b.Logf("created %d machines, %d sets and %d deployments in %s", benchMachines, benchSets, benchSets, time.Since(start).Round(time.Second))

	mgr, err := ctrl.NewManager(cfg, ctrltest.ManagerOptions(ns))
	if err != nil {
		return nil, err
	}
	if err := mcmmetrics.Setup(mgr, mcmmetrics.Options{Namespace: ns}); err != nil {
		return nil, err
	}
	// The collectors read the cache's informers of the three kinds, as under the controllers.
	for _, o := range []client.Object{&v1alpha1.Machine{}, &v1alpha1.MachineSet{}, &v1alpha1.MachineDeployment{}} {
		if _, err := mgr.GetCache().GetInformer(ctx, o); err != nil {
			return nil, err
		}
	}
	go func() { _ = mgr.Start(context.Background()) }() // runs until the benchmark binary exits
	handler := promhttp.HandlerFor(mcmmetrics.Gatherer(metrics.Registry), promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError})
	want := fmt.Sprintf("mcm_machine_items_total %d", benchMachines)
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 5*time.Minute, true, func(context.Context) (bool, error) {
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		body, _ := io.ReadAll(rec.Body)
		return strings.Contains(string(body), want), nil
	})
	if err != nil {
		return nil, fmt.Errorf("the cache did not show %d machines within 5 minutes", benchMachines)
	}
	return handler, nil
}

// createWithStatus creates o and writes its status (a subresource the create ignores).
func createWithStatus(ctx context.Context, c client.Client, o client.Object) error {
	st := o.DeepCopyObject().(client.Object)
	if err := c.Create(ctx, o); err != nil {
		return err
	}
	st.SetResourceVersion(o.GetResourceVersion())
	return c.Status().Update(ctx, st)
}

func benchMachine(ns string, i int) *v1alpha1.Machine {
	set := i % benchSets
	name := fmt.Sprintf("pool-%02d-machine-%05d", set, i)
	now := metav1.Now()
	var conds []corev1.NodeCondition
	for _, t := range []corev1.NodeConditionType{corev1.NodeReady, corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure, corev1.NodeNetworkUnavailable} {
		s := corev1.ConditionFalse
		if t == corev1.NodeReady {
			s = corev1.ConditionTrue
		}
		conds = append(conds, corev1.NodeCondition{Type: t, Status: s, Reason: "Bench", LastHeartbeatTime: now, LastTransitionTime: now})
	}
	return &v1alpha1.Machine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{
			v1alpha1.LabelMachineDeploymentName: fmt.Sprintf("pool-%02d", set), v1alpha1.LabelNode: name,
		}},
		Spec: v1alpha1.MachineSpec{
			Class:      v1alpha1.ClassSpec{APIGroup: v1alpha1.GroupName, Kind: "MachineClass", Name: "bench"},
			ProviderID: "openstack:///region-1/" + fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i),
		},
		Status: v1alpha1.MachineStatus{
			Conditions:    conds,
			CurrentStatus: v1alpha1.CurrentStatus{Phase: v1alpha1.MachineRunning, LastUpdateTime: now},
			LastOperation: v1alpha1.LastOperation{Type: v1alpha1.MachineOperationCreate, State: v1alpha1.MachineStateSuccessful, LastUpdateTime: now},
		},
	}
}

func benchSet(ns string, i int) *v1alpha1.MachineSet {
	name := fmt.Sprintf("pool-%02d", i)
	n := int32(benchMachines / benchSets)
	return &v1alpha1.MachineSet{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-5d8f7", Namespace: ns},
		Spec: v1alpha1.MachineSetSpec{
			Replicas:     n,
			Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{"pool": name}},
			MachineClass: v1alpha1.ClassSpec{APIGroup: v1alpha1.GroupName, Kind: "MachineClass", Name: "bench"},
			Template: v1alpha1.MachineTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"pool": name}},
				Spec:       v1alpha1.MachineSpec{Class: v1alpha1.ClassSpec{Kind: "MachineClass", Name: "bench"}},
			},
		},
		Status: v1alpha1.MachineSetStatus{Replicas: n, FullyLabeledReplicas: n, ReadyReplicas: n, AvailableReplicas: n},
	}
}

func benchDeployment(ns string, i int) *v1alpha1.MachineDeployment {
	name := fmt.Sprintf("pool-%02d", i)
	n := int32(benchMachines / benchSets)
	now := metav1.Now()
	return &v1alpha1.MachineDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1alpha1.MachineDeploymentSpec{
			Replicas: n,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": name}},
			Strategy: v1alpha1.MachineDeploymentStrategy{Type: v1alpha1.RollingUpdateMachineDeploymentStrategyType},
			Template: v1alpha1.MachineTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"pool": name}},
				Spec:       v1alpha1.MachineSpec{Class: v1alpha1.ClassSpec{Kind: "MachineClass", Name: "bench"}},
			},
		},
		Status: v1alpha1.MachineDeploymentStatus{
			Replicas: n, ReadyReplicas: n, AvailableReplicas: n, UpdatedReplicas: n,
			Conditions: []v1alpha1.MachineDeploymentCondition{
				{Type: v1alpha1.MachineDeploymentAvailable, Status: v1alpha1.ConditionTrue, LastUpdateTime: now, LastTransitionTime: now},
				{Type: v1alpha1.MachineDeploymentProgressing, Status: v1alpha1.ConditionTrue, LastUpdateTime: now, LastTransitionTime: now},
			},
		},
	}
}
