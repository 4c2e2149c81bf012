package mcmmetrics_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/cloudmetrics"
	"github.com/machinist-io/machinist/core/controller/manager"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/drivertest/memdriver"
	"github.com/machinist-io/machinist/harness/ctrltest"
	"github.com/machinist-io/machinist/harness/machinetest"
	"github.com/machinist-io/machinist/internal/eventually"
)

func TestMain(m *testing.M) { ctrltest.Main(m) }

// MCM's renderings, from its collectors (pkg/util/provider/machinecontroller/metrics.go,
// pkg/controller/metrics.go at the commit testdata/mcm.txt names).
var (
	mcmPhaseValue = map[v1alpha1.MachinePhase]float64{
		v1alpha1.MachineTerminating: -4, v1alpha1.MachineFailed: -3, v1alpha1.MachineCrashLoopBackOff: -2,
		v1alpha1.MachineUnknown: -1, v1alpha1.MachinePending: 0, v1alpha1.MachineRunning: 1,
	}
	// The work-queue histograms' buckets (pkg/util/workqueue/prometheus/prometheus.go), and the
	// +Inf bucket of the text format.
	mcmQueueBuckets   = append(prometheus.ExponentialBuckets(10e-9, 10, 10), math.Inf(1))
	mcmConditionValue = map[corev1.ConditionStatus]float64{corev1.ConditionTrue: 1, corev1.ConditionFalse: 0, corev1.ConditionUnknown: 2}
	// The scrape failure kinds, by the constant binary label of the process that counts them.
	mcmScrapeFailureKinds = map[string]string{
		"Machine-count":           "machine-controller-manager-provider",
		"Machineset-count":        "machine-controller-manager",
		"Machinedeployment-count": "machine-controller-manager",
	}
)

// TestMCMMetrics runs the controller manager of `machinist run` against the API server with
// machines in every phase, MachineSets and MachineDeployments, scrapes its /metrics and checks
// every MCM family's name, type and label names against testdata/mcm.txt (MCM's declarations),
// the label values and values MCM gives them, and that everything Gardener's monitoring keeps
// (testdata/gardener.txt) is served.
func TestMCMMetrics(t *testing.T) {
	families := readMCMFamilies(t)
	gardener := readSections(t, "testdata/gardener.txt")

	e := ctrltest.NewEnv(t)
	cloud := memdriver.NewCloud()
	cloud.SetRequireInitialization(true)
	e.Drivers.Set(memdriver.ProviderName, &cloudDriver{Driver: memdriver.New(cloud)})
	for _, name := range []string{"mem", "crash", "undeletable"} {
		e.Create(class(e, name))
	}
	url := startManager(t, e)
	stopKubelet := kubelet(t, e, "md", "stale")
	defer stopKubelet()

	// Bare machines, one per phase; timeouts far beyond the test's, so phases hold under load.
	long := &v1alpha1.MachineConfiguration{
		MachineHealthTimeout:   &metav1.Duration{Duration: time.Hour},
		MachineCreationTimeout: &metav1.Duration{Duration: time.Hour},
	}
	withLong := func(m *v1alpha1.Machine) { m.Spec.MachineConfiguration = long }
	e.Machine(e.Name("pending"), "mem", withLong)
	e.Machine(e.Name("running"), "mem", withLong)
	e.Machine(e.Name("unknown"), "mem", withLong)
	e.Machine(e.Name("crashloop"), "crash", withLong)
	e.Machine(e.Name("failed"), "crash", func(m *v1alpha1.Machine) {
		m.Spec.MachineConfiguration = &v1alpha1.MachineConfiguration{MachineCreationTimeout: &metav1.Duration{Duration: time.Second}}
	})
	e.Machine(e.Name("terminating"), "undeletable")

	// Deployments: md runs and scales down (create, initialize, join, drain and delete
	// durations); stale loses its node's health and is replaced (stale machines); crash never
	// gets a VM (failed machines of its set and deployment); nojoin never gets a node (failed
	// joins); paused carries every optional spec field and a collision count.
	e.Create(deployment(e, "md", 2, "mem", nil))
	e.Create(deployment(e, "stale", 1, "mem", &v1alpha1.MachineConfiguration{MachineHealthTimeout: &metav1.Duration{Duration: time.Second}}))
	e.Create(deployment(e, "crash", 1, "crash", long))
	e.Create(deployment(e, "nojoin", 1, "mem", &v1alpha1.MachineConfiguration{MachineCreationTimeout: &metav1.Duration{Duration: time.Second}}))
	paused := deployment(e, "paused", 0, "mem", nil)
	paused.Spec.Paused = true
	paused.Spec.RevisionHistoryLimit = ptr.To(int32(3))
	paused.Spec.ProgressDeadlineSeconds = ptr.To(int32(600))
	paused.Spec.RollbackTo = &v1alpha1.RollbackConfig{Revision: 2}
	e.Create(paused)
	// A set whose template does not match its selector: InvalidSpec, a ReplicaFailure condition.
	e.Create(&v1alpha1.MachineSet{
		ObjectMeta: metav1.ObjectMeta{Name: e.Name("broken")},
		Spec: v1alpha1.MachineSetSpec{
			Replicas:     1,
			Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "broken"}},
			MachineClass: v1alpha1.ClassSpec{Kind: "MachineClass", Name: "mem"},
			Template: v1alpha1.MachineTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"pool": "other"}},
				Spec:       v1alpha1.MachineSpec{Class: v1alpha1.ClassSpec{Kind: "MachineClass", Name: "mem"}},
			},
		},
	})

	// Drive the machines into their phases.
	for _, n := range []string{"running", "unknown"} {
		m := e.WaitMachine(e.Name(n), 2*time.Minute, "a VM", func(m *v1alpha1.Machine) bool { return m.Spec.ProviderID != "" })
		e.ReadyNode(m.Name, m.Spec.ProviderID, corev1.ConditionTrue)
	}
	e.WaitPhase(e.Name("unknown"), v1alpha1.MachineRunning, 2*time.Minute)
	e.ReadyNode(e.Name("unknown"), e.Get(e.Name("unknown")).Spec.ProviderID, corev1.ConditionFalse)
	e.WaitMachine(e.Name("terminating"), 2*time.Minute, "a VM", func(m *v1alpha1.Machine) bool { return m.Spec.ProviderID != "" })
	e.DeleteMachine(e.Name("terminating"))
	waitPhases(t, e, map[string]v1alpha1.MachinePhase{
		"pending": v1alpha1.MachinePending, "running": v1alpha1.MachineRunning, "unknown": v1alpha1.MachineUnknown,
		"crashloop": v1alpha1.MachineCrashLoopBackOff, "failed": v1alpha1.MachineFailed, "terminating": v1alpha1.MachineTerminating,
	})

	// The deployments' events: md's machines run, then one is drained and deleted; stale's
	// machine runs, loses its node and is replaced; nojoin's machine fails to join once.
	waitDeploymentRunning(t, e, "md", 2)
	waitDeploymentRunning(t, e, "stale", 1)
	staleMachine := machinesOf(t, e, "stale")[0]
	e.ReadyNode(staleMachine.Labels[v1alpha1.LabelNode], staleMachine.Spec.ProviderID, corev1.ConditionFalse)
	scale(t, e, "md", 1)
	setCollisionCount(t, e, "paused", 1)

	// Wait for every series the checks below read that comes from this test's own activity: the
	// families alone are not enough, since they exist from the start when an earlier run in the
	// same process (-count) or another deployment (stale's replacement) recorded them.
	var fams map[string]*dto.MetricFamily
	mdPlace := map[string]string{"namespace": e.NS, "machine_deployment": e.Name("md"), "instance_type": "m1.test", "zone": "zone-a"}
	eventually.True(t, 3*time.Minute, "every MCM family in the scrape, and md's scale-down in it", func() bool {
		fams = scrape(t, url)
		return len(missing(families, fams)) == 0 &&
			value(fams, "mcm_machine_stale_machines_total", nil) >= 1 &&
			value(fams, "mcm_machine_num_failed_join", map[string]string{"machine_deployment": e.Name("nojoin")}) >= 1 &&
			len(series(fams, "mcm_machine_delete_duration_seconds", mdPlace)) == 1 &&
			len(series(fams, "mcm_machine_drain_duration_seconds", map[string]string{"namespace": e.NS, "machine_deployment": e.Name("md")})) == 1 &&
			value(fams, "mcm_machine_deployment_status_collision_count", map[string]string{"name": e.Name("paused")}) == 1
	})
	if miss := missing(families, fams); len(miss) > 0 {
		t.Fatalf("families missing from /metrics: %v", miss)
	}
	scale(t, e, "nojoin", 0)

	t.Run("names, types and label names are MCM's", func(t *testing.T) {
		for _, f := range families {
			got := fams[f.name]
			if got.GetType().String() != strings.ToUpper(f.typ) {
				t.Errorf("%s is a %s, MCM's is a %s", f.name, got.GetType(), f.typ)
			}
			for _, m := range got.Metric {
				if names := labelNames(m); !slices.Equal(names, f.labels) {
					t.Errorf("%s has labels %v, MCM's has %v", f.name, names, f.labels)
					break
				}
			}
		}
		for name := range fams {
			if _, ok := families[name]; strings.HasPrefix(name, "mcm_") && !ok {
				t.Errorf("%s is served but is no MCM family", name)
			}
		}
	})

	t.Run("everything Gardener keeps is served", func(t *testing.T) {
		for _, section := range []string{"metrics", "providermetrics"} {
			for _, name := range gardener[section] {
				if name == "mcm_cloud_api_driver_request_failed_total" {
					// Gardener keeps a name MCM never exported (MCM's is
					// mcm_cloud_api_driver_requests_failed_total): make sure it stays that way.
					if _, ok := families[name]; ok {
						t.Errorf("%s is an MCM family now: serve it", name)
					}
					continue
				}
				if !served(fams, name) {
					t.Errorf("Gardener's %s endpoint keeps %s, which /metrics lacks", section, name)
				}
			}
		}
	})

	t.Run("label values and values are MCM's", func(t *testing.T) {
		ns := e.NS
		for n, phase := range map[string]v1alpha1.MachinePhase{
			"pending": v1alpha1.MachinePending, "running": v1alpha1.MachineRunning, "unknown": v1alpha1.MachineUnknown,
			"crashloop": v1alpha1.MachineCrashLoopBackOff, "failed": v1alpha1.MachineFailed, "terminating": v1alpha1.MachineTerminating,
		} {
			sel := map[string]string{"name": e.Name(n), "namespace": ns}
			if got := value(fams, "mcm_machine_current_status_phase", sel); got != mcmPhaseValue[phase] {
				t.Errorf("mcm_machine_current_status_phase of the %s machine = %v, MCM's value is %v", phase, got, mcmPhaseValue[phase])
			}
		}
		running := e.Get(e.Name("running"))
		info := series(fams, "mcm_machine_info", map[string]string{"name": running.Name})
		want := map[string]string{
			"name": running.Name, "namespace": ns, "createdAt": strconv.FormatInt(running.CreationTimestamp.Unix(), 10),
			"spec_provider_id": running.Spec.ProviderID, "spec_class_api_group": "", "spec_class_kind": "MachineClass",
			"spec_class_name": "mem", "node_name": running.Labels[v1alpha1.LabelNode],
		}
		if len(info) != 1 || !labelsEqual(info[0], want) || info[0].GetGauge().GetValue() != 1 {
			t.Errorf("mcm_machine_info of the running machine: %v, want %v = 1", info, want)
		}
		for n, status := range map[string]corev1.ConditionStatus{"running": corev1.ConditionTrue, "unknown": corev1.ConditionFalse} {
			sel := map[string]string{"name": e.Name(n), "condition": string(corev1.NodeReady)}
			if got := value(fams, "mcm_machine_status_condition", sel); got != mcmConditionValue[status] {
				t.Errorf("mcm_machine_status_condition Ready=%s = %v, MCM's value is %v", status, got, mcmConditionValue[status])
			}
		}
		for _, m := range series(fams, "mcm_machine_set_status_condition", nil) {
			checkConditionValue(t, m)
		}
		for _, m := range series(fams, "mcm_machine_deployment_status_condition", nil) {
			checkConditionValue(t, m)
		}
		if got := value(fams, "mcm_machine_set_status_condition", map[string]string{"name": e.Name("broken"), "condition": "ReplicaFailure"}); got != 1 {
			t.Errorf("ReplicaFailure of the broken set = %v, want 1 (True)", got)
		}
		if got := value(fams, "mcm_machine_items_total", nil); got < 6 {
			t.Errorf("mcm_machine_items_total = %v, want at least the 6 bare machines", got)
		}
		for _, kind := range []string{"mcm_machine_set_info", "mcm_machine_deployment_info"} {
			if len(series(fams, kind, nil)) < 5 {
				t.Errorf("%s has %d series, want one per set/deployment", kind, len(series(fams, kind, nil)))
			}
		}
		md := map[string]string{"name": e.Name("md"), "namespace": ns}
		if s := series(fams, "mcm_machine_deployment_info", md); len(s) != 1 || labelOf(s[0], "spec_strategy_type") != "RollingUpdate" {
			t.Errorf("mcm_machine_deployment_info of md: %v", s)
		}
		for name, want := range map[string]float64{
			"mcm_machine_deployment_info_spec_rolling_update_max_surge":       1,
			"mcm_machine_deployment_info_spec_rolling_update_max_unavailable": 0,
			"mcm_machine_deployment_info_spec_replicas":                       1,
			"mcm_machine_deployment_info_spec_paused":                         0,
		} {
			if got := value(fams, name, md); got != want {
				t.Errorf("%s of md = %v, want %v", name, got, want)
			}
		}
		pausedSel := map[string]string{"name": e.Name("paused")}
		for name, want := range map[string]float64{
			"mcm_machine_deployment_info_spec_paused":                    1,
			"mcm_machine_deployment_info_spec_revision_history_limit":    3,
			"mcm_machine_deployment_info_spec_progress_deadline_seconds": 600,
			"mcm_machine_deployment_info_spec_rollback_to_revision":      2,
			"mcm_machine_deployment_status_collision_count":              1,
		} {
			if got := value(fams, name, pausedSel); got != want {
				t.Errorf("%s of paused = %v, want %v", name, got, want)
			}
		}
		for _, fam := range []string{"mcm_machine_set_failed_machines", "mcm_machine_deployment_failed_machines"} {
			s := series(fams, fam, map[string]string{"failed_machine_last_operation_state": string(v1alpha1.MachineStateFailed), "failed_machine_last_operation_machine_operation_type": string(v1alpha1.MachineOperationCreate)})
			if len(s) == 0 {
				t.Errorf("%s has no series of a machine whose creation failed: %v", fam, series(fams, fam, nil))
			}
		}
		place := map[string]string{"namespace": ns, "machine_deployment": e.Name("md"), "instance_type": "m1.test", "zone": "zone-a"}
		for _, name := range []string{"mcm_machine_create_duration_seconds", "mcm_machine_initialize_duration_seconds", "mcm_machine_join_duration_seconds", "mcm_machine_delete_duration_seconds"} {
			if len(series(fams, name, place)) != 1 {
				t.Errorf("%s has no series %v: %v", name, place, series(fams, name, nil))
			}
		}
		if len(series(fams, "mcm_machine_drain_duration_seconds", map[string]string{"namespace": ns, "machine_deployment": e.Name("md")})) != 1 {
			t.Errorf("mcm_machine_drain_duration_seconds of md: %v", series(fams, "mcm_machine_drain_duration_seconds", nil))
		}
		for kind, binary := range mcmScrapeFailureKinds {
			if len(series(fams, "mcm_misc_scrape_failure_total", map[string]string{"kind": kind, "binary": binary})) != 1 {
				t.Errorf("mcm_misc_scrape_failure_total{kind=%q,binary=%q} missing", kind, binary)
			}
		}
		// The driver calls, named as MCM's providers name them.
		for _, op := range []string{"create_machine", "initialize_machine", "delete_machine", "list_machine"} {
			if len(series(fams, "mcm_cloud_api_driver_request_duration_seconds", map[string]string{"provider": memdriver.ProviderName, "operation": op})) != 1 {
				t.Errorf("mcm_cloud_api_driver_request_duration_seconds lacks operation %s: %v", op, series(fams, "mcm_cloud_api_driver_request_duration_seconds", nil))
			}
		}
		// Failures by code number: Unavailable (14) from the faulty classes, NotFound (5) from
		// GetMachineStatus before a VM exists, as MCM's Azure provider counts it.
		for op, code := range map[string]driver.Code{"create_machine": driver.Unavailable, "delete_machine": driver.Unavailable, "get_machine_status": driver.NotFound} {
			sel := map[string]string{"provider": memdriver.ProviderName, "operation": op, "error_code": strconv.Itoa(int(code))}
			if value(fams, "mcm_cloud_api_driver_requests_failed_total", sel) < 1 {
				t.Errorf("mcm_cloud_api_driver_requests_failed_total lacks %v: %v", sel, series(fams, "mcm_cloud_api_driver_requests_failed_total", nil))
			}
		}
		// The work queues carry MCM's names: every control loop of Gardener's dashboard that
		// machinist has as a queue (the API server check is a periodic probe here).
		for _, loop := range gardener["dashboard controlloop"] {
			if loop == "machinesafetyapiserver" {
				continue
			}
			for _, fam := range []string{"mcm_workqueue_depth", "mcm_workqueue_adds_total", "mcm_workqueue_queue_duration_seconds"} {
				if len(series(fams, fam, map[string]string{"name": loop})) != 1 {
					t.Errorf("%s has no queue %q", fam, loop)
				}
			}
		}
		for _, name := range []string{"mcm_workqueue_work_duration_seconds", "mcm_workqueue_queue_duration_seconds"} {
			for _, m := range series(fams, name, nil) {
				var bounds []float64
				for _, b := range m.GetHistogram().GetBucket() {
					bounds = append(bounds, b.GetUpperBound())
				}
				if !slices.Equal(bounds, mcmQueueBuckets) {
					t.Errorf("%s{name=%q} has buckets %v, MCM's are %v", name, labelOf(m, "name"), bounds, mcmQueueBuckets)
					break
				}
			}
		}
		// machinist's own metrics are still there.
		for _, name := range []string{"machinist_machines", "machinist_driver_calls_total", "workqueue_depth", "controller_runtime_reconcile_total"} {
			if fams[name] == nil {
				t.Errorf("/metrics lost %s", name)
			}
		}
	})
}

// checkConditionValue checks a condition series carries one of MCM's values.
func checkConditionValue(t *testing.T, m *dto.Metric) {
	t.Helper()
	v := m.GetGauge().GetValue()
	for _, want := range mcmConditionValue {
		if v == want {
			return
		}
	}
	t.Errorf("condition %v has value %v, not one of MCM's %v", m.Label, v, mcmConditionValue)
}

// cloudDriver plays a provider: it counts its cloud requests as MCM's OpenStack provider does
// (every request, and the failed ones), and the classes crash and undeletable make CreateMachine
// and DeleteMachine fail with Unavailable.
type cloudDriver struct{ driver.Driver }

func (d *cloudDriver) request(class *v1alpha1.MachineClass, fail string) error {
	cloudmetrics.Requested(memdriver.ProviderName, "compute")
	if class != nil && class.Name == fail {
		cloudmetrics.Failed(memdriver.ProviderName, "compute")
		return driver.Error(driver.Unavailable, "the cloud is out of capacity")
	}
	return nil
}

func (d *cloudDriver) CreateMachine(ctx context.Context, req *driver.CreateMachineRequest) (*driver.CreateMachineResponse, error) {
	start := time.Now()
	if err := d.request(req.MachineClass, "crash"); err != nil {
		return nil, err
	}
	defer func() { cloudmetrics.Observe(memdriver.ProviderName, "compute", time.Since(start)) }()
	return d.Driver.CreateMachine(ctx, req)
}

func (d *cloudDriver) DeleteMachine(ctx context.Context, req *driver.DeleteMachineRequest) (*driver.DeleteMachineResponse, error) {
	if err := d.request(req.MachineClass, "undeletable"); err != nil {
		return nil, err
	}
	return d.Driver.DeleteMachine(ctx, req)
}

func class(e *ctrltest.Env, name string) *v1alpha1.MachineClass {
	raw, _ := json.Marshal(map[string]string{"cluster": e.NS, "role": "worker"})
	return &v1alpha1.MachineClass{
		ObjectMeta:   metav1.ObjectMeta{Name: name},
		Provider:     memdriver.ProviderName,
		ProviderSpec: runtime.RawExtension{Raw: raw},
		NodeTemplate: &v1alpha1.NodeTemplate{
			InstanceType: "m1.test", Region: "region-1", Zone: "zone-a",
			Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi")},
		},
	}
}

func deployment(e *ctrltest.Env, name string, replicas int32, className string, mc *v1alpha1.MachineConfiguration) *v1alpha1.MachineDeployment {
	d := machinetest.Deployment("", e.Name(name), className, replicas, machinetest.Pool(e.Name(name)), 1, 0)
	d.Spec.Template.Spec.NodeTemplateSpec.Labels = map[string]string{corev1.LabelTopologyZone: "zone-a"}
	d.Spec.Template.Spec.MachineConfiguration = mc
	return d
}

// startManager runs the controller manager of `machinist run` on the test's namespace, with the
// API server as its target cluster, and returns its /metrics URL.
func startManager(t *testing.T, e *ctrltest.Env) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := lis.Addr().(*net.TCPAddr).Port
	lis.Close()

	e.StartProduct(func(opts *manager.Options) {
		opts.Address, opts.Port = "127.0.0.1", port
		opts.Machine = ctrltest.FastOptions()
	})
	return fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
}

// kubelet registers a Ready node for every machine of the named deployments that has a VM and no
// node yet, until stopped.
func kubelet(t *testing.T, e *ctrltest.Env, deployments ...string) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			for _, d := range deployments {
				var l v1alpha1.MachineList
				if err := e.C.List(ctx, &l, client.InNamespace(e.NS), client.MatchingLabels{"pool": e.Name(d)}); err != nil {
					continue
				}
				for _, m := range l.Items {
					node := m.Labels[v1alpha1.LabelNode]
					if node == "" || m.Spec.ProviderID == "" || m.DeletionTimestamp != nil {
						continue
					}
					if err := registerReadyNode(ctx, e, node, m.Spec.ProviderID); err != nil && ctx.Err() == nil {
						t.Logf("kubelet: node %s: %v", node, err)
					}
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return func() { cancel(); <-done }
}

// registerReadyNode creates a node and reports it Ready, once: a node that reports a Ready
// condition already is left alone.
func registerReadyNode(ctx context.Context, e *ctrltest.Env, name, providerID string) error {
	n, err := e.CS.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		n, err = e.CS.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{ProviderID: providerID}}, metav1.CreateOptions{})
	}
	if err != nil {
		return err
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return nil
		}
	}
	now := metav1.Now()
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now}}
	_, err = e.CS.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		return nil // the next round reads the node again
	}
	return err
}

func waitPhases(t *testing.T, e *ctrltest.Env, want map[string]v1alpha1.MachinePhase) {
	t.Helper()
	eventually.True(t, 3*time.Minute, fmt.Sprintf("machines in phases %v", want), func() bool {
		for n, phase := range want {
			m := e.Get(e.Name(n))
			if m == nil || m.Status.CurrentStatus.Phase != phase {
				return false
			}
		}
		return true
	})
}

func machinesOf(t *testing.T, e *ctrltest.Env, deployment string) []v1alpha1.Machine {
	t.Helper()
	var l v1alpha1.MachineList
	if err := e.C.List(context.Background(), &l, client.InNamespace(e.NS), client.MatchingLabels{"pool": e.Name(deployment)}); err != nil {
		t.Fatal(err)
	}
	return l.Items
}

func waitDeploymentRunning(t *testing.T, e *ctrltest.Env, deployment string, n int) {
	t.Helper()
	eventually.True(t, 3*time.Minute, fmt.Sprintf("%d running machines of %s", n, deployment), func() bool {
		running := 0
		for _, m := range machinesOf(t, e, deployment) {
			if m.Status.CurrentStatus.Phase == v1alpha1.MachineRunning {
				running++
			}
		}
		return running == n
	})
}

func updateDeployment(t *testing.T, e *ctrltest.Env, name string, change func(*v1alpha1.MachineDeployment) error) {
	t.Helper()
	for range 50 {
		d := &v1alpha1.MachineDeployment{}
		if err := e.C.Get(context.Background(), e.Key(e.Name(name)), d); err != nil {
			t.Fatal(err)
		}
		err := change(d)
		if err == nil || !apierrors.IsConflict(err) {
			if err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("could not update deployment %s: conflicts", name)
}

func scale(t *testing.T, e *ctrltest.Env, name string, replicas int32) {
	updateDeployment(t, e, name, func(d *v1alpha1.MachineDeployment) error {
		d.Spec.Replicas = replicas
		return e.C.Update(context.Background(), d)
	})
}

// setCollisionCount writes the collision count a template hash collision leaves in the status.
func setCollisionCount(t *testing.T, e *ctrltest.Env, name string, n int32) {
	updateDeployment(t, e, name, func(d *v1alpha1.MachineDeployment) error {
		d.Status.CollisionCount = &n
		return e.C.Status().Update(context.Background(), d)
	})
}

func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Logf("scrape: %v", err)
		return nil
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Logf("scrape: %d %v: %.300s", resp.StatusCode, err, body)
		return nil
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("/metrics is not the text format: %v", err)
	}
	return fams
}

type family struct {
	name, typ string
	labels    []string // sorted
}

// readMCMFamilies reads testdata/mcm.txt; a family both MCM processes declare appears once.
func readMCMFamilies(t *testing.T) map[string]family {
	t.Helper()
	out := map[string]family{}
	for _, lines := range readSections(t, "testdata/mcm.txt") {
		for _, line := range lines {
			f := strings.Fields(line)
			fam := family{name: f[0], typ: f[1], labels: slices.Sorted(slices.Values(f[2:]))}
			if prev, ok := out[fam.name]; ok && (prev.typ != fam.typ || !slices.Equal(prev.labels, fam.labels)) {
				t.Fatalf("testdata/mcm.txt declares %s twice, differently", fam.name)
			}
			out[fam.name] = fam
		}
	}
	if len(out) < 50 {
		t.Fatalf("testdata/mcm.txt: only %d families", len(out))
	}
	return out
}

// readSections reads a file of "[section]" headers and lines, skipping comments and blanks.
func readSections(t *testing.T, path string) map[string][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]string{}
	section := ""
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := strings.TrimSpace(s.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "["):
			section = strings.TrimSuffix(strings.TrimPrefix(line, "["), "]")
			if i := strings.Index(section, ":"); i >= 0 {
				section = section[:i]
			}
		default:
			out[section] = append(out[section], line)
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// missing lists the families with no series in fams.
func missing(families map[string]family, fams map[string]*dto.MetricFamily) []string {
	var out []string
	for name := range families {
		if len(fams[name].GetMetric()) == 0 {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// served reports whether the scrape has the series name, a histogram's _bucket, _sum and _count
// included.
func served(fams map[string]*dto.MetricFamily, name string) bool {
	if len(fams[name].GetMetric()) > 0 {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && fams[base].GetType() == dto.MetricType_HISTOGRAM && len(fams[base].GetMetric()) > 0 {
			return true
		}
	}
	return false
}

func labelNames(m *dto.Metric) []string {
	out := make([]string, 0, len(m.Label))
	for _, l := range m.Label {
		out = append(out, l.GetName())
	}
	sort.Strings(out)
	return out
}

func labelOf(m *dto.Metric, name string) string {
	for _, l := range m.Label {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func labelsEqual(m *dto.Metric, want map[string]string) bool {
	if len(m.Label) != len(want) {
		return false
	}
	for _, l := range m.Label {
		if v, ok := want[l.GetName()]; !ok || v != l.GetValue() {
			return false
		}
	}
	return true
}

// series returns name's series whose labels include sel.
func series(fams map[string]*dto.MetricFamily, name string, sel map[string]string) []*dto.Metric {
	var out []*dto.Metric
	for _, m := range fams[name].GetMetric() {
		ok := true
		for k, v := range sel {
			if labelOf(m, k) != v {
				ok = false
				break
			}
		}
		if ok {
			out = append(out, m)
		}
	}
	return out
}

// value sums the values of name's series matching sel (-1000 when there is none).
func value(fams map[string]*dto.MetricFamily, name string, sel map[string]string) float64 {
	s := series(fams, name, sel)
	if len(s) == 0 {
		return -1000
	}
	var v float64
	for _, m := range s {
		v += m.GetGauge().GetValue() + m.GetCounter().GetValue() + m.GetUntyped().GetValue()
	}
	return v
}
