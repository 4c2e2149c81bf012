package mcmmetrics

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// The scrape-time families, with MCM's names, help texts and label names
// (pkg/util/provider/metrics/metrics.go for machines, pkg/metrics/metrics.go for sets and
// deployments). All are gauges.
var (
	machineItems     = desc("mcm_machine_items_total", "Count of machines currently managed by the mcm.")
	machineFrozen    = desc("mcm_machine_controller_frozen", "Frozen status of the machine controller manager.")
	machinePhase     = desc("mcm_machine_current_status_phase", "Current status phase of the Machines currently managed by the mcm.", "name", "namespace")
	machineInfo      = desc("mcm_machine_info", "Information of the Machines currently managed by the mcm.", "name", "namespace", "createdAt", "spec_provider_id", "spec_class_api_group", "spec_class_kind", "spec_class_name", "node_name")
	machineCondition = desc("mcm_machine_status_condition", "Information of the mcm managed Machines' status conditions.", "name", "namespace", "condition")

	setItems          = desc("mcm_machine_set_items_total", "Count of machinesets currently managed by the mcm.")
	setInfo           = desc("mcm_machine_set_info", "Information of the Machinesets currently managed by the mcm.", "name", "namespace", "createdAt", "spec_machine_class_api_group", "spec_machine_class_kind", "spec_machine_class_name")
	setSpecReplicas   = desc("mcm_machine_set_info_spec_replicas", "Count of the Machinesets Spec Replicas.", "name", "namespace")
	setSpecMinReady   = desc("mcm_machine_set_info_spec_min_ready_seconds", "Information of the Machinesets currently managed by the mcm.", "name", "namespace")
	setCondition      = desc("mcm_machine_set_status_condition", "Information of the mcm managed Machinesets' status conditions.", "name", "namespace", "condition")
	setFailedMachines = desc("mcm_machine_set_failed_machines", "Information of the mcm managed Machinesets' failed machines.", failedMachineLabels...)
	setAvailable      = desc("mcm_machine_set_status_available_replicas", "Information of the mcm managed Machinesets' status for available replicas.", "name", "namespace")
	setFullyLabelled  = desc("mcm_machine_set_status_fully_labelled_replicas", "Information of the mcm managed Machinesets' status for fully labelled replicas.", "name", "namespace")
	setReady          = desc("mcm_machine_set_status_ready_replicas", "Information of the mcm managed Machinesets' status for ready replicas.", "name", "namespace")
	setReplicas       = desc("mcm_machine_set_status_replicas", "Information of the mcm managed Machinesets' status for replicas.", "name", "namespace")

	deployItems          = desc("mcm_machine_deployment_items_total", "Count of machinedeployments currently managed by the mcm.")
	deployInfo           = desc("mcm_machine_deployment_info", "Information of the Machinedeployments currently managed by the mcm.", "name", "namespace", "createdAt", "spec_strategy_type")
	deployPaused         = desc("mcm_machine_deployment_info_spec_paused", "Information of the Machinedeployments paused status.", "name", "namespace")
	deploySpecReplicas   = desc("mcm_machine_deployment_info_spec_replicas", "Information of the Machinedeployments spec replicas.", "name", "namespace")
	deploySpecMinReady   = desc("mcm_machine_deployment_info_spec_min_ready_seconds", "Information of the Machinedeployments spec min ready seconds.", "name", "namespace")
	deployMaxSurge       = desc("mcm_machine_deployment_info_spec_rolling_update_max_surge", "Information of the Machinedeployments spec rolling update max surge.", "name", "namespace")
	deployMaxUnavailable = desc("mcm_machine_deployment_info_spec_rolling_update_max_unavailable", "Information of the Machinedeployments spec rolling update max unavailable.", "name", "namespace")
	deployHistoryLimit   = desc("mcm_machine_deployment_info_spec_revision_history_limit", "Information of the Machinedeployments spec revision history limit.", "name", "namespace")
	deployProgressLimit  = desc("mcm_machine_deployment_info_spec_progress_deadline_seconds", "Information of the Machinedeployments spec deadline seconds.", "name", "namespace")
	deployRollbackTo     = desc("mcm_machine_deployment_info_spec_rollback_to_revision", "Information of the Machinedeployments spec rollback to revision.", "name", "namespace")
	deployCondition      = desc("mcm_machine_deployment_status_condition", "Information of the mcm managed Machinedeployments' status conditions.", "name", "namespace", "condition")
	deployAvailable      = desc("mcm_machine_deployment_status_available_replicas", "Count of the mcm managed Machinedeployments available replicas.", "name", "namespace")
	deployUnavailable    = desc("mcm_machine_deployment_status_unavailable_replicas", "Count of the mcm managed Machinedeployments unavailable replicas.", "name", "namespace")
	deployReady          = desc("mcm_machine_deployment_status_ready_replicas", "Count of the mcm managed Machinedeployments ready replicas.", "name", "namespace")
	deployUpdated        = desc("mcm_machine_deployment_status_updated_replicas", "Count of the mcm managed Machinedeployments updated replicas.", "name", "namespace")
	deployCollisions     = desc("mcm_machine_deployment_status_collision_count", "Mcm managed Machinedeployments collision count.", "name", "namespace")
	deployReplicas       = desc("mcm_machine_deployment_status_replicas", "Count of the mcm managed Machinedeployments replicas.", "name", "namespace")
	deployFailedMachines = desc("mcm_machine_deployment_failed_machines", "Information of the mcm managed Machinedeployments' failed machines.", failedMachineLabels...)
)

var failedMachineLabels = []string{"name", "namespace", "failed_machine_name", "failed_machine_provider_id", "failed_machine_owner_ref",
	"failed_machine_last_operation_state", "failed_machine_last_operation_machine_operation_type"}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

// listTimeout bounds a list from the cache: synced caches answer at once, and a scrape must
// never hang on one that is not.
const listTimeout = 10 * time.Second

// collector reads Machines, MachineSets and MachineDeployments from the sources' caches at
// scrape time: no bookkeeping in the reconcilers, no API requests, and a deleted object's
// series go with it (MCM keeps them until it restarts; see docs/controllers.md).
type collector struct{}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{machineItems, machineFrozen, machinePhase, machineInfo, machineCondition,
		setItems, setInfo, setSpecReplicas, setSpecMinReady, setCondition, setFailedMachines, setAvailable, setFullyLabelled, setReady, setReplicas,
		deployItems, deployInfo, deployPaused, deploySpecReplicas, deploySpecMinReady, deployMaxSurge, deployMaxUnavailable,
		deployHistoryLimit, deployProgressLimit, deployRollbackTo, deployCondition, deployAvailable, deployUnavailable,
		deployReady, deployUpdated, deployCollisions, deployReplicas, deployFailedMachines} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	if served.machines.Load() {
		collectMachines(ch, activeSources(true))
	}
	if served.sets.Load() {
		srcs := activeSources(false)
		collectSets(ch, srcs)
		collectDeployments(ch, srcs)
	}
}

// emitter sends const gauges, counting a series it cannot build as a scrape failure of kind.
type emitter struct {
	ch     chan<- prometheus.Metric
	failed prometheus.Counter
}

func (e emitter) gauge(d *prometheus.Desc, v float64, labels ...string) {
	m, err := prometheus.NewConstMetric(d, prometheus.GaugeValue, v, labels...)
	if err != nil {
		e.failed.Inc()
		return
	}
	e.ch <- m
}

// dedup drops objects seen from another source: two managers of the same namespace run only
// in tests, and a duplicate series would fail the whole scrape.
type dedup map[types.NamespacedName]struct{}

func (d dedup) first(o metav1.Object) bool {
	if d == nil {
		return true
	}
	k := types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}
	if _, seen := d[k]; seen {
		return false
	}
	d[k] = struct{}{}
	return true
}

func newDedup(srcs []*source) dedup {
	if len(srcs) < 2 {
		return nil
	}
	return dedup{}
}

// list reads src's objects without copying them (the collectors only read).
func list(src *source, l client.ObjectList) error {
	ctx, cancel := context.WithTimeout(context.Background(), listTimeout)
	defer cancel()
	return src.reader.List(ctx, l, client.InNamespace(src.namespace), client.UnsafeDisableDeepCopy)
}

// MCM's renderings of phases and condition statuses as values
// (pkg/util/provider/machinecontroller/metrics.go): phases without a value of their own
// (none yet, Available, the in-place update phases) are 0, as Pending.
var phaseValues = map[v1alpha1.MachinePhase]float64{
	v1alpha1.MachineTerminating:      -4,
	v1alpha1.MachineFailed:           -3,
	v1alpha1.MachineCrashLoopBackOff: -2,
	v1alpha1.MachineUnknown:          -1,
	v1alpha1.MachinePending:          0,
	v1alpha1.MachineRunning:          1,
}

// conditionValue renders a condition status as MCM does: True 1, False 0, Unknown 2.
func conditionValue[S ~string](s S) float64 {
	switch string(s) {
	case string(corev1.ConditionTrue):
		return 1
	case string(corev1.ConditionUnknown):
		return 2
	}
	return 0
}

func createdAt(o metav1.Object) string {
	return strconv.FormatInt(o.GetCreationTimestamp().Unix(), 10)
}

func collectMachines(ch chan<- prometheus.Metric, srcs []*source) {
	e := emitter{ch, providerScrapeFailures.WithLabelValues(kindMachine)}
	seen := newDedup(srcs)
	var frozen float64
	var ms []*v1alpha1.Machine
	for _, src := range srcs {
		if src.frozen != nil && src.frozen() {
			frozen = 1
		}
		var l v1alpha1.MachineList
		if err := list(src, &l); err != nil {
			e.failed.Inc()
			continue
		}
		for i := range l.Items {
			if seen.first(&l.Items[i]) {
				ms = append(ms, &l.Items[i])
			}
		}
	}
	e.gauge(machineItems, float64(len(ms)))
	e.gauge(machineFrozen, frozen)

	// The registry sorts each family by its label values, taken in the order of the label
	// names. Sent in that order, the sort finds nothing to do: at 5000 machines it was a third
	// of a scrape's CPU.
	slices.SortFunc(ms, func(a, b *v1alpha1.Machine) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), strings.Compare(a.Namespace, b.Namespace))
	})
	for _, m := range ms { // name, namespace
		e.gauge(machinePhase, phaseValues[m.Status.CurrentStatus.Phase], m.Name, m.Namespace)
	}
	created := make([]string, len(ms))
	byCreation := make([]int, len(ms))
	for i, m := range ms {
		created[i], byCreation[i] = createdAt(m), i
	}
	slices.SortStableFunc(byCreation, func(i, j int) int { return strings.Compare(created[i], created[j]) })
	for _, i := range byCreation { // createdAt, name, namespace, …
		m := ms[i]
		e.gauge(machineInfo, 1, m.Name, m.Namespace, created[i], m.Spec.ProviderID,
			m.Spec.Class.APIGroup, m.Spec.Class.Kind, m.Spec.Class.Name, m.Labels[v1alpha1.LabelNode])
	}
	var types []corev1.NodeConditionType
	for _, m := range ms {
		for _, c := range m.Status.Conditions {
			if !slices.Contains(types, c.Type) {
				types = append(types, c.Type)
			}
		}
	}
	slices.Sort(types)
	for _, t := range types { // condition, name, namespace
		for _, m := range ms {
			// The first condition of a type: a list repeating one would make a duplicate series,
			// which fails the whole scrape.
			if i := slices.IndexFunc(m.Status.Conditions, func(c corev1.NodeCondition) bool { return c.Type == t }); i >= 0 {
				e.gauge(machineCondition, conditionValue(m.Status.Conditions[i].Status), m.Name, m.Namespace, string(t))
			}
		}
	}
}

// repeated reports whether an entry before j has the type of entry j: a list repeating a
// condition type would otherwise make a duplicate series, which fails the whole scrape.
func repeated(j int, typeAt func(int) string) bool {
	for i := range j {
		if typeAt(i) == typeAt(j) {
			return true
		}
	}
	return false
}

func collectSets(ch chan<- prometheus.Metric, srcs []*source) {
	e := emitter{ch, coreScrapeFailures.WithLabelValues(kindMachineSet)}
	seen := newDedup(srcs)
	var items float64
	for _, src := range srcs {
		var l v1alpha1.MachineSetList
		if err := list(src, &l); err != nil {
			e.failed.Inc()
			continue
		}
		for i := range l.Items {
			ms := &l.Items[i]
			if !seen.first(ms) {
				continue
			}
			items++
			name, ns := ms.Name, ms.Namespace
			class := ms.Spec.MachineClass
			e.gauge(setInfo, 1, name, ns, createdAt(ms), class.APIGroup, class.Kind, class.Name)
			e.gauge(setSpecReplicas, float64(ms.Spec.Replicas), name, ns)
			e.gauge(setSpecMinReady, float64(ms.Spec.MinReadySeconds), name, ns)
			conds := ms.Status.Conditions
			for j, c := range conds {
				if !repeated(j, func(i int) string { return string(conds[i].Type) }) {
					e.gauge(setCondition, conditionValue(c.Status), name, ns, string(c.Type))
				}
			}
			if ms.Status.FailedMachines != nil {
				failedMachines(e, setFailedMachines, name, ns, *ms.Status.FailedMachines)
			}
			e.gauge(setAvailable, float64(ms.Status.AvailableReplicas), name, ns)
			e.gauge(setFullyLabelled, float64(ms.Status.FullyLabeledReplicas), name, ns)
			e.gauge(setReady, float64(ms.Status.ReadyReplicas), name, ns)
			e.gauge(setReplicas, float64(ms.Status.Replicas), name, ns)
		}
	}
	e.gauge(setItems, items)
}

func collectDeployments(ch chan<- prometheus.Metric, srcs []*source) {
	e := emitter{ch, coreScrapeFailures.WithLabelValues(kindMachineDeployment)}
	seen := newDedup(srcs)
	var items float64
	for _, src := range srcs {
		var l v1alpha1.MachineDeploymentList
		if err := list(src, &l); err != nil {
			e.failed.Inc()
			continue
		}
		for i := range l.Items {
			d := &l.Items[i]
			if !seen.first(d) {
				continue
			}
			items++
			name, ns := d.Name, d.Namespace
			spec, st := &d.Spec, &d.Status
			e.gauge(deployInfo, 1, name, ns, createdAt(d), string(spec.Strategy.Type))
			e.gauge(deployPaused, boolValue(spec.Paused), name, ns)
			e.gauge(deploySpecReplicas, float64(spec.Replicas), name, ns)
			e.gauge(deploySpecMinReady, float64(spec.MinReadySeconds), name, ns)
			if t := spec.Strategy.Type; t == "" || t == v1alpha1.RollingUpdateMachineDeploymentStrategyType {
				var surge, unavailable *intstr.IntOrString
				if ru := spec.Strategy.RollingUpdate; ru != nil {
					surge, unavailable = ru.MaxSurge, ru.MaxUnavailable
				}
				e.gauge(deployMaxSurge, intValue(surge), name, ns)
				e.gauge(deployMaxUnavailable, intValue(unavailable), name, ns)
			}
			if spec.RevisionHistoryLimit != nil {
				e.gauge(deployHistoryLimit, float64(*spec.RevisionHistoryLimit), name, ns)
			}
			if spec.ProgressDeadlineSeconds != nil {
				e.gauge(deployProgressLimit, float64(*spec.ProgressDeadlineSeconds), name, ns)
			}
			if spec.RollbackTo != nil {
				e.gauge(deployRollbackTo, float64(spec.RollbackTo.Revision), name, ns)
			}
			for j, c := range st.Conditions {
				if !repeated(j, func(i int) string { return string(st.Conditions[i].Type) }) {
					e.gauge(deployCondition, conditionValue(c.Status), name, ns, string(c.Type))
				}
			}
			failed := make([]v1alpha1.MachineSummary, 0, len(st.FailedMachines))
			for _, f := range st.FailedMachines {
				if f != nil {
					failed = append(failed, *f)
				}
			}
			failedMachines(e, deployFailedMachines, name, ns, failed)
			e.gauge(deployAvailable, float64(st.AvailableReplicas), name, ns)
			e.gauge(deployUnavailable, float64(st.UnavailableReplicas), name, ns)
			e.gauge(deployReady, float64(st.ReadyReplicas), name, ns)
			e.gauge(deployUpdated, float64(st.UpdatedReplicas), name, ns)
			e.gauge(deployReplicas, float64(st.Replicas), name, ns)
			if st.CollisionCount != nil {
				e.gauge(deployCollisions, float64(*st.CollisionCount), name, ns)
			}
		}
	}
	e.gauge(deployItems, items)
}

// failedMachines sends one series of value 1 per failed machine, as MCM does; a summary
// repeating another's labels is sent once.
func failedMachines(e emitter, d *prometheus.Desc, name, ns string, failed []v1alpha1.MachineSummary) {
	var seen map[[5]string]struct{}
	if len(failed) > 1 {
		seen = make(map[[5]string]struct{}, len(failed))
	}
	for _, f := range failed {
		k := [5]string{f.Name, f.ProviderID, f.OwnerRef, string(f.LastOperation.State), string(f.LastOperation.Type)}
		if seen != nil {
			if _, dup := seen[k]; dup {
				continue
			}
			seen[k] = struct{}{}
		}
		e.gauge(d, 1, name, ns, k[0], k[1], k[2], k[3], k[4])
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// intValue renders maxSurge/maxUnavailable as MCM does (IntOrString.IntValue): a number as
// is, a percentage as 0, unset as 0.
func intValue(v *intstr.IntOrString) float64 {
	if v == nil {
		return 0
	}
	return float64(v.IntValue())
}
