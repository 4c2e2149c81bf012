package mcmmetrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// The families the controllers record when something happens, with MCM's names, types and
// labels (pkg/metrics/metrics.go, pkg/util/provider/metrics/metrics.go).
var (
	staleMachines = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "mcm_machine_stale_machines_total",
		Help: "Total count of stale machines flagged for termination that turned stale due to long unhealthiness",
	})

	placementLabels = []string{"namespace", "machine_deployment", "instance_type", "zone"}
	createDuration  = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mcm_machine_create_duration_seconds",
		Help: "Duration in seconds to create a Machine of a MachineDeployment.",
	}, placementLabels)
	initializeDuration = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mcm_machine_initialize_duration_seconds",
		Help: "Duration in seconds to initialize a Machine of a MachineDeployment.",
	}, placementLabels)
	joinDuration = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mcm_machine_join_duration_seconds",
		Help: "Duration in seconds for a Machine of a MachineDeployment to join the cluster",
	}, placementLabels)
	drainDuration = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mcm_machine_drain_duration_seconds",
		Help: "Duration in seconds to drain a Machine of a MachineDeployment.",
	}, []string{"namespace", "machine_deployment"})
	deleteDuration = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mcm_machine_delete_duration_seconds",
		Help: "Duration in seconds to delete a Machine of a MachineDeployment.",
	}, placementLabels)
	failedJoins = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mcm_machine_num_failed_join",
		Help: "Number of Machines of a MachineDeployment that failed to join the cluster.",
	}, placementLabels)

	// MCM's two processes each count their collectors' failures, told apart by a constant
	// binary label; machinist is one process and keeps both.
	coreScrapeFailures     = scrapeFailures("machine-controller-manager")
	providerScrapeFailures = scrapeFailures("machine-controller-manager-provider")
)

// The kind label values of mcm_misc_scrape_failure_total, as MCM's collectors write them.
const (
	kindMachine           = "Machine-count"
	kindMachineSet        = "Machineset-count"
	kindMachineDeployment = "Machinedeployment-count"
)

func scrapeFailures(binary string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name:        "mcm_misc_scrape_failure_total",
		Help:        "Total count of scrape failures.",
		ConstLabels: prometheus.Labels{"binary": binary},
	}, []string{"kind"})
}

// MachineRemovedBySet counts m in mcm_machine_stale_machines_total when it is stale: Failed
// after its health check. The MachineSet controller calls it for every machine it deleted, as
// MCM counts in prepareMachineForDeletion.
func MachineRemovedBySet(m *v1alpha1.Machine) {
	if m.Status.CurrentStatus.Phase == v1alpha1.MachineFailed && m.Status.LastOperation.Type == v1alpha1.MachineOperationHealthCheck {
		staleMachines.Inc()
	}
}

// MachineCreated records, for a machine of a MachineDeployment, how long after the Machine was
// made its CreateMachine call returned (mcm_machine_create_duration_seconds).
func MachineCreated(m *v1alpha1.Machine, d time.Duration) { setDuration(createDuration, m, d) }

// MachineInitialized records how long a successful InitializeMachine call took
// (mcm_machine_initialize_duration_seconds).
func MachineInitialized(m *v1alpha1.Machine, d time.Duration) {
	setDuration(initializeDuration, m, d)
}

// MachineJoined records how long after the Machine was made its node joined
// (mcm_machine_join_duration_seconds).
func MachineJoined(m *v1alpha1.Machine, d time.Duration) { setDuration(joinDuration, m, d) }

// MachineDeleted records how long after its deletion the machine's VM was deleted
// (mcm_machine_delete_duration_seconds).
func MachineDeleted(m *v1alpha1.Machine, d time.Duration) { setDuration(deleteDuration, m, d) }

// MachineDrained records how long the drain of the machine's node took
// (mcm_machine_drain_duration_seconds, which has no placement labels in MCM).
func MachineDrained(m *v1alpha1.Machine, d time.Duration) {
	md := deploymentOf(m)
	if md == "" || d == 0 {
		return
	}
	drainDuration.WithLabelValues(m.Namespace, md).Set(d.Round(time.Second).Seconds())
}

// MachineFailedToJoin counts a machine of a MachineDeployment whose node did not join within
// the creation timeout (mcm_machine_num_failed_join).
func MachineFailedToJoin(m *v1alpha1.Machine) {
	if lv, ok := placement(m); ok {
		failedJoins.WithLabelValues(lv[:]...).Inc()
	}
}

// setDuration sets g to d in whole seconds, as MCM does; like MCM it records only machines of a
// MachineDeployment (see deploymentOf) and ignores a zero duration.
func setDuration(g *prometheus.GaugeVec, m *v1alpha1.Machine, d time.Duration) {
	if d == 0 {
		return
	}
	if lv, ok := placement(m); ok {
		g.WithLabelValues(lv[:]...).Set(d.Round(time.Second).Seconds())
	}
}

// placement returns the label values namespace, machine_deployment, instance_type (the
// class's nodeTemplate, read from the cache) and zone (the machine's node template label
// topology.kubernetes.io/zone); false for a machine of no MachineDeployment.
func placement(m *v1alpha1.Machine) ([4]string, bool) {
	md := deploymentOf(m)
	if md == "" {
		return [4]string{}, false
	}
	return [4]string{m.Namespace, md, instanceType(m), m.Spec.NodeTemplateSpec.Labels[corev1.LabelTopologyZone]}, true
}

// deploymentOf names the MachineDeployment of m: the controller of its controlling MachineSet,
// read from the cache. MCM reads the machine's label "name", which Gardener's templates carry but
// machinist does not add; it is still read for a machine without that chain of owners.
func deploymentOf(m *v1alpha1.Machine) string {
	if ref := metav1.GetControllerOf(m); ref != nil && ref.Kind == "MachineSet" {
		for _, src := range activeSources(true) {
			if src.namespace != m.Namespace {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), listTimeout)
			var ms v1alpha1.MachineSet
			err := src.reader.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: ref.Name}, &ms, client.UnsafeDisableDeepCopy)
			cancel()
			if err != nil || ms.UID != ref.UID {
				continue
			}
			if d := metav1.GetControllerOf(&ms); d != nil && d.Kind == "MachineDeployment" {
				return d.Name
			}
		}
	}
	return m.Labels[v1alpha1.LabelMachineDeploymentName]
}

// instanceType is the nodeTemplate.instanceType of m's MachineClass, "" when the class or its
// node template is unknown (MCM then leaves the label out, which its GaugeVec refuses).
func instanceType(m *v1alpha1.Machine) string {
	for _, src := range activeSources(true) {
		if src.namespace != m.Namespace {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), listTimeout)
		var class v1alpha1.MachineClass
		err := src.reader.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: m.Spec.Class.Name}, &class, client.UnsafeDisableDeepCopy)
		cancel()
		if err == nil && class.NodeTemplate != nil {
			return class.NodeTemplate.InstanceType
		}
	}
	return ""
}
