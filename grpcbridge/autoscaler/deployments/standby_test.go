package deployments_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/standby"
	"github.com/machinist-io/machinist/grpcbridge/autoscaler/clusterautoscaler"
	"github.com/machinist-io/machinist/grpcbridge/autoscaler/internal/autoscalertest"
	"github.com/machinist-io/machinist/internal/eventually"
)

// Standby machines are no nodes of their group for Cluster Autoscaler: neither one on its first
// boot (its node registered and Ready, before it is stopped) nor a stopped one is listed by
// NodeGroupNodes, their nodes resolve to no group, and the target size stays the replicas. Once
// a set claims one, it is a machine of the group like any other, while its VM starts too.
func TestStandbyMachinesAreNotNodesOfTheGroup(t *testing.T) {
	w := newWorld(t)
	w.class("small", true)
	md, set := w.deployment("workers", "small", 1, sizeAnnotations(0, 5))
	// The objects as the standby pool controller writes them, created before the provider
	// starts so its first list holds them all.
	standbyMachine := func(name string, st standby.State) *v1alpha1.Machine {
		m := standby.NewMachine(md, set)
		m.GenerateName, m.Name = "", name
		m.Annotations[standby.AnnotationState] = string(st)
		m.Labels[v1alpha1.LabelNode] = name
		m.Spec.ProviderID = "local:///" + name
		w.create(m)
		w.setStatus(m, running())
		return m
	}
	standbyMachine("workers-standby-boot", standby.Booting)
	stopped := standbyMachine("workers-standby-stop", standby.Stopped)
	w.machine(set, "workers-m1", "local:///workers-m1", running())

	p := w.provider()
	certs := autoscalertest.NewCerts(t)
	scaler := autoscalertest.Connect(t, autoscalertest.Serve(t, p, certs), certs, clusterautoscaler.Current)
	const workers = ns + ".workers"

	ids := func() []string {
		in, err := scaler.Nodes(workers)
		if err != nil {
			return []string{err.Error()}
		}
		var out []string
		for _, i := range in {
			out = append(out, i.ID)
		}
		return out
	}
	eventually.Explained(t, 30*time.Second, "the group's one machine", func() (bool, string) {
		got := ids()
		return fmt.Sprint(got) == "[local:///workers-m1]", fmt.Sprint(got)
	})
	for _, name := range []string{"workers-standby-boot", "workers-standby-stop"} {
		if g, err := scaler.NodeGroupForNode(realNode(name, "local:///"+name)); err != nil || g != nil {
			t.Errorf("the node of standby machine %s resolved to group %v, %v; want none", name, g, err)
		}
	}
	if g, err := scaler.NodeGroupForNode(realNode("workers-m1", "local:///workers-m1")); err != nil || g == nil || g.GetId() != workers {
		t.Fatalf("the node of the set's machine resolved to %v, %v; want %s", g, err, workers)
	}
	if n, err := scaler.TargetSize(workers); err != nil || n != 1 {
		t.Errorf("target size %d, %v; want 1 (the replicas, standby machines not counted)", n, err)
	}

	// The set claims the stopped one for a scale-up to 2: from then on it is the group's.
	md = w.getMD("workers")
	md.Spec.Replicas = 2
	if err := w.c.Update(w.ctx, md); err != nil {
		t.Fatal(err)
	}
	if err := w.c.Update(w.ctx, standby.Claim(stopped, set)); err != nil {
		t.Fatal(err)
	}
	eventually.Explained(t, 30*time.Second, "the claimed machine in the group", func() (bool, string) {
		got := ids()
		return len(got) == 2 && (got[0] == "local:///workers-standby-stop" || got[1] == "local:///workers-standby-stop"), fmt.Sprint(got)
	})
	if g, err := scaler.NodeGroupForNode(realNode("workers-standby-stop", "local:///workers-standby-stop")); err != nil || g == nil || g.GetId() != workers {
		t.Errorf("the node of the claimed machine resolved to %v, %v; want %s", g, err, workers)
	}
	if g, err := scaler.NodeGroupForNode(realNode("workers-standby-boot", "local:///workers-standby-boot")); err != nil || g != nil {
		t.Errorf("the node of the booting standby machine resolved to %v, %v after the claim; want none", g, err)
	}
	if n, err := scaler.TargetSize(workers); err != nil || n != 2 {
		t.Errorf("target size %d, %v; want 2", n, err)
	}
}
