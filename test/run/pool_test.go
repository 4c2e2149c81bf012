package run

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	machinistv1alpha1 "github.com/machinist-io/machinist/core/apis/machinist/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/pool"
	"github.com/machinist-io/machinist/harness/machinetest"
	"github.com/machinist-io/machinist/internal/eventually"
)

// The sample kubernetes/samples/local-pool: three zonal deployments of 2 under the PoolPolicy
// "workers" (maxSurge 1, maxUnavailable 0) in namespace default.
var poolZones = []string{"workers-zone-1", "workers-zone-2", "workers-zone-3"}

const (
	poolNS                     = "default"
	poolReplicas               = 6
	poolSurge, poolUnavailable = 1, 0
)

// kustomizationResources lists the files a kustomization.yaml names, as paths.
func kustomizationResources(t *testing.T, dir string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(data, &k); err != nil {
		t.Fatalf("%s/kustomization.yaml: %v", dir, err)
	}
	if len(k.Resources) == 0 {
		t.Fatalf("%s/kustomization.yaml lists no resources", dir)
	}
	paths := make([]string, len(k.Resources))
	for i, r := range k.Resources {
		paths[i] = filepath.Join(dir, r)
	}
	return paths
}

// poolWatch checks the pool's bounds at every machine event and keeps the machines it last
// checked, so the test ends on what the watch saw, not on a list that could run ahead of it.
type poolWatch struct {
	mu     sync.Mutex
	seen   map[string]string // name -> resourceVersion at the last event
	last   map[string]v1alpha1.Machine
	events int
}

// check is machinetest.Watch's check: it names the event (the machine that changed) with every
// violation.
func (p *poolWatch) check(ms map[string]*v1alpha1.Machine) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	event := p.eventLocked(ms)
	c := machinetest.Count(ms)
	switch {
	case c.All > poolReplicas+poolSurge:
		return fmt.Sprintf("event %d (%s): %d machines > the pool's %d + maxSurge %d: %s",
			p.events, event, c.All, poolReplicas, poolSurge, describeClasses(ms))
	case c.Running < poolReplicas-poolUnavailable:
		return fmt.Sprintf("event %d (%s): %d Running < the pool's %d - maxUnavailable %d: %s",
			p.events, event, c.Running, poolReplicas, poolUnavailable, describeClasses(ms))
	}
	return ""
}

// eventLocked records ms and says which machine changed since the last call.
func (p *poolWatch) eventLocked(ms map[string]*v1alpha1.Machine) string {
	var changed []string
	for name, m := range ms {
		rv, ok := p.seen[name]
		switch {
		case !ok:
			changed = append(changed, "added "+name)
		case rv != m.ResourceVersion:
			changed = append(changed, "modified "+name)
		}
	}
	for name := range p.seen {
		if _, ok := ms[name]; !ok {
			changed = append(changed, "deleted "+name)
		}
	}
	sort.Strings(changed)
	p.events++
	p.seen = make(map[string]string, len(ms))
	p.last = make(map[string]v1alpha1.Machine, len(ms))
	for name, m := range ms {
		p.seen[name] = m.ResourceVersion
		p.last[name] = *m
	}
	if len(changed) == 0 {
		return "no change"
	}
	return strings.Join(changed, ", ")
}

// done says whether the last machines the watch saw are the pool's 6, each Running, not
// terminating and on its zone's -v2 class.
func (p *poolWatch) done() (bool, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	v2Running := 0
	for _, m := range p.last {
		if m.DeletionTimestamp == nil && m.Status.CurrentStatus.Phase == v1alpha1.MachineRunning && strings.HasSuffix(m.Spec.Class.Name, "-v2") {
			v2Running++
		}
	}
	return len(p.last) == poolReplicas && v2Running == poolReplicas,
		fmt.Sprintf("after %d events: %d machines, %d Running on -v2", p.events, len(p.last), v2Running)
}

// describeClasses lists machines as name=class:phase, terminating ones marked, sorted by name.
func describeClasses(ms map[string]*v1alpha1.Machine) string {
	out := make([]string, 0, len(ms))
	for name, m := range ms {
		s := name + "=" + m.Spec.Class.Name + ":" + string(m.Status.CurrentStatus.Phase)
		if m.DeletionTimestamp != nil {
			s += "(deleting)"
		}
		out = append(out, s)
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

func (e *e2e) poolPolicy(name string) *machinistv1alpha1.PoolPolicy {
	e.t.Helper()
	p := &machinistv1alpha1.PoolPolicy{}
	if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: poolNS, Name: name}, p); err != nil {
		e.t.Fatal(err)
	}
	return p
}

// waitPoolNodes waits for the pool's 6 machines Running on classes of their zones, each with its
// Node.
func (e *e2e) waitPoolNodes(onClass func(zone, class string) bool, timeout time.Duration) {
	e.t.Helper()
	eventually.Explained(e.t, timeout, fmt.Sprintf("%d Running machines with nodes", poolReplicas), func() (bool, string) {
		ms := e.machines(poolNS)
		ready := 0
		for _, m := range ms {
			zone := m.Labels["pool"]
			if m.DeletionTimestamp != nil || m.Status.CurrentStatus.Phase != v1alpha1.MachineRunning || !onClass(zone, m.Spec.Class.Name) {
				continue
			}
			node := &corev1.Node{}
			if name := m.Labels[v1alpha1.LabelNode]; name == "" || e.c.Get(context.Background(), client.ObjectKey{Name: name}, node) != nil {
				continue
			}
			ready++
		}
		return len(ms) == poolReplicas && ready == poolReplicas, fmt.Sprintf("%d machines, %d Running with nodes", len(ms), ready)
	})
}

// TestRunPoolRollout is issue 35's headline case through `machinist run`: the sample
// local-pool (three zonal deployments of 2 under a PoolPolicy of maxSurge 1, maxUnavailable 0,
// whose CRD is served before the controller starts) changes class in all three zones; at every
// machine watch event there are at most 7 machines (terminating ones included) and at least 6
// Running, all 6 end Running on the -v2 classes, and the policy reports the rollout complete
// with a surge budget of 1. Without the policy each zone would surge by its own 1: 9 machines.
func TestRunPoolRollout(t *testing.T) {
	e := newE2E(t)
	e.startRun()
	e.apply(kustomizationResources(t, repoPath(t, "kubernetes/samples/local-pool"))...)
	e.waitPoolNodes(func(zone, class string) bool { return class == zone }, 120*time.Second)

	pw := &poolWatch{}
	w := machinetest.WatchMachines(t, e.c, poolNS, pw.check)
	w.Arm()
	for _, z := range poolZones {
		e.updateDeployment(poolNS, z, func(d *v1alpha1.MachineDeployment) { d.Spec.Template.Spec.Class.Name = z + "-v2" })
	}
	eventually.Explained(t, 150*time.Second, "the watch sees the pool's 6 machines Running on -v2", func() (bool, string) {
		ok, why := pw.done()
		p := &machinistv1alpha1.PoolPolicy{}
		if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: poolNS, Name: "workers"}, p); err != nil {
			return ok, fmt.Sprintf("%s; policy: %v", why, err)
		}
		st := p.Status
		return ok, fmt.Sprintf("%s; policy: %d updated, %d outdated, budget %+v", why, st.UpdatedReplicas, st.OutdatedReplicas, st.Budget)
	})
	r := w.Stop()
	if len(r.Violations) > 0 {
		t.Fatalf("the pool's budget was exceeded %d times, first: %s", len(r.Violations), r.Violations[0])
	}
	if r.MaxAll != poolReplicas+poolSurge {
		t.Errorf("at most %d machines during the rollout: want the one surge machine the pool allows (%d)", r.MaxAll, poolReplicas+poolSurge)
	}
	t.Logf("during the rollout: %d events, at most %d machines, at least %d Running", pw.events, r.MaxAll, r.MinRunning)
	e.waitPoolNodes(func(zone, class string) bool { return class == zone+"-v2" }, 30*time.Second)

	var progressing *metav1.Condition
	eventually.Explained(t, 60*time.Second, "the policy's rollout Complete", func() (bool, string) {
		st := e.poolPolicy("workers").Status
		progressing = apimeta.FindStatusCondition(st.Conditions, machinistv1alpha1.PoolProgressing)
		if progressing == nil {
			return false, "no Progressing condition"
		}
		return progressing.Reason == pool.ReasonComplete, fmt.Sprintf("Progressing %s %s: %s", progressing.Status, progressing.Reason, progressing.Message)
	})
	if progressing.Status != metav1.ConditionFalse {
		t.Errorf("Progressing %s once complete: want False", progressing.Status)
	}
	st := e.poolPolicy("workers").Status
	if st.Budget.MaxSurge != poolSurge || st.Budget.MaxUnavailable != poolUnavailable || st.UpdatedReplicas != poolReplicas || st.OutdatedReplicas != 0 || len(st.Deployments) != len(poolZones) {
		t.Errorf("status %+v: want budgets %d and %d, %d updated, none outdated, %d deployments", st, poolSurge, poolUnavailable, poolReplicas, len(poolZones))
	}
	if c := apimeta.FindStatusCondition(st.Conditions, machinistv1alpha1.PoolAccepted); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Accepted %+v: want True", c)
	}
}
