package mcmmetrics

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// listReader answers lists with fixed objects, or fails them all.
type listReader struct {
	machines v1alpha1.MachineList
	sets     v1alpha1.MachineSetList
	deploys  v1alpha1.MachineDeploymentList
	err      error
}

func (r *listReader) Get(context.Context, client.ObjectKey, client.Object, ...client.GetOption) error {
	return errors.New("listReader: no Get")
}

func (r *listReader) List(_ context.Context, list client.ObjectList, _ ...client.ListOption) error {
	if r.err != nil {
		return r.err
	}
	switch l := list.(type) {
	case *v1alpha1.MachineList:
		*l = r.machines
	case *v1alpha1.MachineSetList:
		*l = r.sets
	case *v1alpha1.MachineDeploymentList:
		*l = r.deploys
	}
	return nil
}

// addSource adds a source of both halves' families, as the all-in-one's manager is.
func addSource(t *testing.T, r client.Reader, frozen bool) {
	s := &source{reader: r, namespace: "ns", frozen: func() bool { return frozen }, machines: true, sets: true}
	machines, sets := served.machines.Load(), served.sets.Load()
	served.machines.Store(true)
	served.sets.Store(true)
	sources.Lock()
	sources.set[s] = struct{}{}
	sources.Unlock()
	t.Cleanup(func() {
		sources.Lock()
		delete(sources.set, s)
		sources.Unlock()
		served.machines.Store(machines)
		served.sets.Store(sets)
	})
}

// TestCollectorSurvivesDuplicatesAndFailures: the same objects seen from two managers, a
// condition type listed twice and a failed machine listed twice still make one consistent
// scrape (a duplicate series would fail all of it); a source that cannot list counts a scrape
// failure of each kind, as MCM's collectors do.
func TestCollectorSurvivesDuplicatesAndFailures(t *testing.T) {
	meta := metav1.ObjectMeta{Name: "a", Namespace: "ns"}
	ready := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue}
	failed := []v1alpha1.MachineSummary{{Name: "m"}, {Name: "m"}}
	r := &listReader{
		machines: v1alpha1.MachineList{Items: []v1alpha1.Machine{{ObjectMeta: meta, Status: v1alpha1.MachineStatus{Conditions: []corev1.NodeCondition{ready, ready}}}}},
		sets: v1alpha1.MachineSetList{Items: []v1alpha1.MachineSet{{ObjectMeta: meta, Status: v1alpha1.MachineSetStatus{
			FailedMachines: &failed,
			Conditions: []v1alpha1.MachineSetCondition{
				{Type: v1alpha1.MachineSetReplicaFailure, Status: v1alpha1.ConditionTrue},
				{Type: v1alpha1.MachineSetReplicaFailure, Status: v1alpha1.ConditionFalse},
			},
		}}}},
		deploys: v1alpha1.MachineDeploymentList{Items: []v1alpha1.MachineDeployment{{ObjectMeta: meta, Status: v1alpha1.MachineDeploymentStatus{
			FailedMachines: []*v1alpha1.MachineSummary{&failed[0], nil, &failed[1]},
		}}}},
	}
	addSource(t, r, false)
	addSource(t, r, true)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(&collector{})
	count := func(name string) int {
		t.Helper()
		n, err := testutil.GatherAndCount(reg, name)
		if err != nil {
			t.Fatalf("gather: %v", err)
		}
		return n
	}
	for name, want := range map[string]int{
		"mcm_machine_status_condition":           1,
		"mcm_machine_set_status_condition":       1,
		"mcm_machine_set_failed_machines":        1,
		"mcm_machine_deployment_failed_machines": 1,
		"mcm_machine_info":                       1,
	} {
		if got := count(name); got != want {
			t.Errorf("%s: %d series, want %d", name, got, want)
		}
	}
	want := "# HELP mcm_machine_items_total Count of machines currently managed by the mcm.\n# TYPE mcm_machine_items_total gauge\nmcm_machine_items_total 1\n" +
		"# HELP mcm_machine_controller_frozen Frozen status of the machine controller manager.\n# TYPE mcm_machine_controller_frozen gauge\nmcm_machine_controller_frozen 1\n"
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "mcm_machine_items_total", "mcm_machine_controller_frozen"); err != nil {
		t.Error(err)
	}

	before := map[*prometheus.CounterVec]map[string]float64{}
	kinds := map[*prometheus.CounterVec][]string{
		providerScrapeFailures: {kindMachine},
		coreScrapeFailures:     {kindMachineSet, kindMachineDeployment},
	}
	for vec, ks := range kinds {
		before[vec] = map[string]float64{}
		for _, k := range ks {
			before[vec][k] = testutil.ToFloat64(vec.WithLabelValues(k))
		}
	}
	addSource(t, &listReader{err: errors.New("cache stopped")}, false)
	if got := count("mcm_machine_info"); got != 1 {
		t.Errorf("mcm_machine_info with a failing source: %d series, want the other sources' 1", got)
	}
	for vec, ks := range kinds {
		for _, k := range ks {
			if got := testutil.ToFloat64(vec.WithLabelValues(k)) - before[vec][k]; got != 1 {
				t.Errorf("scrape failures of kind %s rose by %v, want 1", k, got)
			}
		}
	}
}

// TestEachHalfServesItsFamilies: a process running only the core half (Options.WithoutMachines)
// serves the MachineSet and MachineDeployment families and no Machine family, and one running
// only the provider half the reverse, as MCM's two processes do.
func TestEachHalfServesItsFamilies(t *testing.T) {
	meta := metav1.ObjectMeta{Name: "a", Namespace: "ns"}
	r := &listReader{
		machines: v1alpha1.MachineList{Items: []v1alpha1.Machine{{ObjectMeta: meta}}},
		sets:     v1alpha1.MachineSetList{Items: []v1alpha1.MachineSet{{ObjectMeta: meta}}},
		deploys:  v1alpha1.MachineDeploymentList{Items: []v1alpha1.MachineDeployment{{ObjectMeta: meta}}},
	}
	machineFamilies := []string{"mcm_machine_items_total", "mcm_machine_controller_frozen"}
	setFamilies := []string{"mcm_machine_set_items_total", "mcm_machine_deployment_items_total"}
	for _, half := range []struct {
		name           string
		machines, sets bool
	}{{"core", false, true}, {"provider", true, false}} {
		t.Run(half.name, func(t *testing.T) {
			s := &source{reader: r, namespace: "ns", frozen: func() bool { return false }, machines: half.machines, sets: half.sets}
			machines, sets := served.machines.Load(), served.sets.Load()
			served.machines.Store(half.machines)
			served.sets.Store(half.sets)
			sources.Lock()
			sources.set[s] = struct{}{}
			sources.Unlock()
			t.Cleanup(func() {
				sources.Lock()
				delete(sources.set, s)
				sources.Unlock()
				served.machines.Store(machines)
				served.sets.Store(sets)
			})
			reg := prometheus.NewPedanticRegistry()
			reg.MustRegister(&collector{})
			for _, fams := range []struct {
				names []string
				want  bool
			}{{machineFamilies, half.machines}, {setFamilies, half.sets}} {
				for _, name := range fams.names {
					n, err := testutil.GatherAndCount(reg, name)
					if err != nil {
						t.Fatalf("gather: %v", err)
					}
					if (n > 0) != fams.want {
						t.Errorf("%s: %d series, want served %v", name, n, fams.want)
					}
				}
			}
		})
	}
}
