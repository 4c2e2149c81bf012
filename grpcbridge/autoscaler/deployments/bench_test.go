package deployments

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"sort"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kptr "k8s.io/utils/ptr"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/fallback"
	"github.com/machinist-io/machinist/grpcbridge/autoscaler"
	pb "github.com/machinist-io/machinist/grpcbridge/proto/clusterautoscaler/cloudprovider/v1/externalgrpc"
)

const (
	benchGroups   = 5
	benchMachines = 5000
	benchNS       = "bench"
)

// benchServer builds the index the informers would build for 5000 machines in 5 groups (one
// MachineSet each; every tenth machine still a placeholder) and returns the gRPC service over
// it, with every node Cluster Autoscaler could ask about.
func benchServer(b *testing.B) (*autoscaler.Server, []*pb.ExternalGrpcNode) {
	srv, _, nodes := benchFleet(b, benchGroups, benchMachines/benchGroups)
	return srv, nodes
}

// benchFleet builds the index for groups MachineDeployments of perGroup machines each, as the
// informers would build it (through the same handlers, with objects as the API server serves
// them: owner references, labels, status, a priced MachineClass with a node template per group),
// and returns the gRPC service over it, the source, and every node Cluster Autoscaler could ask
// about (one in ten still a placeholder).
func benchFleet(b *testing.B, groups, perGroup int) (*autoscaler.Server, *Source, []*pb.ExternalGrpcNode) {
	b.Helper()
	log := slog.New(slog.DiscardHandler)
	p := &Source{log: log, now: time.Now, ix: newIndex(log, time.Now, nil)}
	p.synced.Store(true)
	var nodes []*pb.ExternalGrpcNode
	for g := range groups {
		mdName := fmt.Sprintf("pool-%d", g)
		p.ix.putClass(&v1alpha1.MachineClass{
			ObjectMeta: metav1.ObjectMeta{Name: mdName, Namespace: benchNS, ResourceVersion: "1",
				Annotations: map[string]string{fallback.AnnotationPricePerHour: "0.096"}},
			Provider:     "local",
			ProviderSpec: kruntime.RawExtension{Raw: []byte(`{"cluster":"bench","zone":"zone-` + fmt.Sprint(g%3) + `"}`)},
			NodeTemplate: &v1alpha1.NodeTemplate{
				Capacity:     corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16Gi")},
				InstanceType: "m5.xlarge", Region: "eu-1", Zone: fmt.Sprintf("eu-1%c", 'a'+g%3),
			},
		})
		md := &v1alpha1.MachineDeployment{
			ObjectMeta: metav1.ObjectMeta{Name: mdName, Namespace: benchNS, UID: types.UID(mdName), ResourceVersion: "1",
				Annotations: map[string]string{AnnotationMinSize: "0", AnnotationMaxSize: "2000"}},
			Spec: v1alpha1.MachineDeploymentSpec{
				Replicas: int32(perGroup),
				Template: v1alpha1.MachineTemplateSpec{Spec: v1alpha1.MachineSpec{
					Class:            v1alpha1.ClassSpec{Kind: "MachineClass", Name: mdName},
					NodeTemplateSpec: v1alpha1.NodeTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"pool": mdName}}},
				}},
			},
		}
		p.ix.putDeployment(md)
		set := &v1alpha1.MachineSet{ObjectMeta: metav1.ObjectMeta{Name: mdName + "-x", Namespace: benchNS, ResourceVersion: "1",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "machine.sapcloud.io/v1alpha1", Kind: "MachineDeployment", Name: mdName, Controller: kptr.To(true)}}}}
		p.ix.putSet(set)
		for i := range perGroup {
			name := fmt.Sprintf("%s-m%04d", mdName, i)
			m := &v1alpha1.Machine{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: benchNS, ResourceVersion: "1", UID: types.UID(name),
					Labels:          map[string]string{v1alpha1.LabelNode: name, "pool": mdName},
					OwnerReferences: []metav1.OwnerReference{{APIVersion: "machine.sapcloud.io/v1alpha1", Kind: "MachineSet", Name: set.Name, Controller: kptr.To(true)}}},
				Spec: v1alpha1.MachineSpec{Class: v1alpha1.ClassSpec{Kind: "MachineClass", Name: mdName}},
				Status: v1alpha1.MachineStatus{
					CurrentStatus: v1alpha1.CurrentStatus{Phase: v1alpha1.MachineRunning, LastUpdateTime: metav1.Now()},
					LastOperation: v1alpha1.LastOperation{Type: v1alpha1.MachineOperationCreate, State: v1alpha1.MachineStateSuccessful, Description: "Created", LastUpdateTime: metav1.Now()},
				},
			}
			node := &pb.ExternalGrpcNode{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}}
			if i%10 == 0 {
				m.Status.CurrentStatus.Phase = v1alpha1.MachinePending
				node.ProviderID, node.Name = autoscaler.Placeholder(benchNS, name), autoscaler.Placeholder(benchNS, name)
			} else {
				m.Spec.ProviderID = "openstack:///" + name
				node.ProviderID = m.Spec.ProviderID
			}
			p.ix.putMachine(m)
			nodes = append(nodes, node)
		}
	}
	if len(p.NodeGroups()) != groups {
		b.Fatalf("%d groups indexed", len(p.NodeGroups()))
	}
	return autoscaler.NewServer(autoscaler.Config{Source: p, Log: log}), p, nodes
}

// recorder keeps per-call wall-clock latency and the CPU time the calling thread spent. On a
// shared machine the wall-clock tail is mostly time the thread waited for a CPU; the CPU-time
// percentiles show what the server itself costs.
type recorder struct {
	wall, cpu []time.Duration
	c0        time.Duration
	start     time.Time
}

func newRecorder(n int) *recorder {
	runtime.LockOSThread() // thread CPU time must stay with this goroutine
	return &recorder{wall: make([]time.Duration, 0, n), cpu: make([]time.Duration, 0, n)}
}

func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

func (r *recorder) begin() { r.c0, r.start = threadCPU(), time.Now() }

func (r *recorder) end() {
	r.wall = append(r.wall, time.Since(r.start))
	r.cpu = append(r.cpu, threadCPU()-r.c0)
}

// report adds p50 and p99 of both measures, in microseconds.
func (r *recorder) report(b *testing.B) {
	defer runtime.UnlockOSThread()
	for _, m := range []struct {
		name string
		lat  []time.Duration
	}{{"", r.wall}, {"cpu-", r.cpu}} {
		if len(m.lat) == 0 {
			continue
		}
		sort.Slice(m.lat, func(i, j int) bool { return m.lat[i] < m.lat[j] })
		b.ReportMetric(float64(m.lat[len(m.lat)*99/100].Nanoseconds())/1e3, m.name+"p99-µs")
		b.ReportMetric(float64(m.lat[len(m.lat)/2].Nanoseconds())/1e3, m.name+"p50-µs")
	}
}

// BenchmarkNodeGroupForNode measures the server side of Cluster Autoscaler's hottest call: a random node of
// 5000 (real providerIDs and placeholders) resolved to its group with min, max and debug.
func BenchmarkNodeGroupForNode(b *testing.B) {
	srv, nodes := benchServer(b)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	rec := newRecorder(b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		n := nodes[rng.IntN(len(nodes))]
		rec.begin()
		resp, err := srv.NodeGroupForNode(ctx, &pb.NodeGroupForNodeRequest{Node: n})
		rec.end()
		if err != nil || resp.GetNodeGroup().GetId() == "" {
			b.Fatalf("node %s: %v, %v", n.GetName(), resp, err)
		}
	}
	b.StopTimer()
	rec.report(b)
}

// BenchmarkNodeGroupNodes measures NodeGroupNodes of a 1000-instance group, response built.
func BenchmarkNodeGroupNodes(b *testing.B) {
	srv, _ := benchServer(b)
	ctx := context.Background()
	rec := newRecorder(b.N)
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		id := fmt.Sprintf("%s.pool-%d", benchNS, i%benchGroups)
		i++
		rec.begin()
		resp, err := srv.NodeGroupNodes(ctx, &pb.NodeGroupNodesRequest{Id: id})
		rec.end()
		if err != nil || len(resp.GetInstances()) != benchMachines/benchGroups {
			b.Fatalf("group %s: %d instances, %v", id, len(resp.GetInstances()), err)
		}
	}
	b.StopTimer()
	rec.report(b)
}
