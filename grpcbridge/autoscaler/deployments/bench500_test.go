package deployments

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	pb "github.com/machinist-io/machinist/grpcbridge/proto/clusterautoscaler/cloudprovider/v1/externalgrpc"
)

// Breadth: 500 node groups (MachineDeployments, pools × zones of a Gardener landscape) of 10
// machines each, 5000 nodes. Cluster Autoscaler calls NodeGroups and Refresh once per loop,
// NodeGroupForNode once per node (cached until the next Refresh), NodeGroupTargetSize for every
// group and NodeGroupTemplateNodeInfo for every group it considers for a scale-up. Target: p99
// ≤ 1 ms server-side for each. `make bench-autoscaler` runs these.
const (
	breadthGroups   = 500
	breadthPerGroup = 10
)

// groupIDs are the ids of the breadth fleet's groups.
func groupIDs() []string {
	ids := make([]string, breadthGroups)
	for g := range ids {
		ids[g] = fmt.Sprintf("%s.pool-%d", benchNS, g)
	}
	return ids
}

// BenchmarkBreadthNodeGroups: every group, sorted, with min, max and debug.
func BenchmarkBreadthNodeGroups(b *testing.B) {
	srv, _, _ := benchFleet(b, breadthGroups, breadthPerGroup)
	ctx := context.Background()
	rec := newRecorder(b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		rec.begin()
		resp, err := srv.NodeGroups(ctx, &pb.NodeGroupsRequest{})
		rec.end()
		if err != nil || len(resp.GetNodeGroups()) != breadthGroups {
			b.Fatalf("%d groups, %v", len(resp.GetNodeGroups()), err)
		}
	}
	b.StopTimer()
	rec.report(b)
}

// BenchmarkBreadthNodeGroupForNode: a random node of 5000 in 500 groups.
func BenchmarkBreadthNodeGroupForNode(b *testing.B) {
	srv, _, nodes := benchFleet(b, breadthGroups, breadthPerGroup)
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

// BenchmarkBreadthNodeGroupTargetSize: a random group's target size.
func BenchmarkBreadthNodeGroupTargetSize(b *testing.B) {
	srv, _, _ := benchFleet(b, breadthGroups, breadthPerGroup)
	ids := groupIDs()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	rec := newRecorder(b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		id := ids[rng.IntN(len(ids))]
		rec.begin()
		resp, err := srv.NodeGroupTargetSize(ctx, &pb.NodeGroupTargetSizeRequest{Id: id})
		rec.end()
		if err != nil || resp.GetTargetSize() != breadthPerGroup {
			b.Fatalf("group %s: %v, %v", id, resp, err)
		}
	}
	b.StopTimer()
	rec.report(b)
}

// BenchmarkBreadthNodeGroupTemplateNodeInfo: a random group's template node, encoded.
func BenchmarkBreadthNodeGroupTemplateNodeInfo(b *testing.B) {
	srv, _, _ := benchFleet(b, breadthGroups, breadthPerGroup)
	ids := groupIDs()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(5, 6))
	rec := newRecorder(b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		id := ids[rng.IntN(len(ids))]
		rec.begin()
		resp, err := srv.NodeGroupTemplateNodeInfo(ctx, &pb.NodeGroupTemplateNodeInfoRequest{Id: id})
		rec.end()
		if err != nil || len(resp.GetNodeBytes()) == 0 {
			b.Fatalf("group %s: %v", id, err)
		}
	}
	b.StopTimer()
	rec.report(b)
}

// BenchmarkBreadthRefresh: the start of every Cluster Autoscaler loop.
func BenchmarkBreadthRefresh(b *testing.B) {
	srv, _, _ := benchFleet(b, breadthGroups, breadthPerGroup)
	ctx := context.Background()
	rec := newRecorder(b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		rec.begin()
		_, err := srv.Refresh(ctx, &pb.RefreshRequest{})
		rec.end()
		if err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	rec.report(b)
}

// BenchmarkBreadthMemory: the heap the index of 500 groups and 5000 machines holds, objects
// included (the informers' objects are the index's: it keeps pointers, never copies).
func BenchmarkBreadthMemory(b *testing.B) {
	var before, after runtime.MemStats
	for b.Loop() {
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, s, nodes := benchFleet(b, breadthGroups, breadthPerGroup)
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(s)
		runtime.KeepAlive(nodes)
	}
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "heap-MiB")
}
