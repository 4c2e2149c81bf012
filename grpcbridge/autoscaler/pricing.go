package autoscaler

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/machinist-io/machinist/core/controller/fallback"
)

// Pricing for Cluster Autoscaler's price expander (--expander=price). What Cluster Autoscaler
// does with each answer is in docs/compatibility/cluster-autoscaler-externalgrpc.md ("Pricing"):
// it asks the price of each scale-up option's template node and of every pending pod for the
// next hour, scores each option by (node price + p) / (pods' price + p) (p: the price of a
// stabilisation pod of 0.5 CPU and 500Mi) and takes the lowest score; an option whose node or
// pod price is an error is left out of the choice.

// Price is what a node costs per hour, in the currency of the annotations.
type Price struct {
	PerHour float64
	// From names where the figure comes from, for debug text: the MachineClass or the
	// MachineDeployment whose annotation gives it.
	From string
}

func (p Price) String() string {
	return strconv.FormatFloat(p.PerHour, 'f', -1, 64) + "/h from " + p.From
}

// GroupShape is the price and size of a new node of a priced group, what PodPrice shares out.
type GroupShape struct {
	Price
	// CPU in cores and Memory in bytes of the group's template node.
	CPU, Memory float64
}

// ErrNoPrice is wrapped by the price errors of a group (or node) that has no price. The server
// answers Unimplemented, which Cluster Autoscaler's externalgrpc client turns into
// cloudprovider.ErrNotImplemented: the price expander then leaves that option out (as for any
// error) without our logging it as a failure.
var ErrNoPrice = errors.New("no price")

// AnnotationPricePerHour on a MachineClass (or, overriding it, on a MachineDeployment or in a
// static group's class) is the price per hour of its machines; fallback.ParsePrice reads it.
const AnnotationPricePerHour = fallback.AnnotationPricePerHour

// AnnotationNodeGroup on a template node names its group. Cluster Autoscaler copies the template's
// annotations into the node it prices (PricingNodePrice), so the server finds the group even
// where the node name does not tell it.
const AnnotationNodeGroup = "autoscaler.machinist.io/node-group"

// templateNamePrefix starts the name of every template node Cluster Autoscaler builds:
// template-node-for-<group id>-<random decimal>.
const templateNamePrefix = "template-node-for-"

// TemplateGroupID returns the group a template node stands for: our annotation, else the group
// id in the name Cluster Autoscaler gives every template it builds (also those it builds from a
// real node of the group, which carry that node's annotations, not ours):
// template-node-for-<id>-<rand.Int63()>. ok is false for other nodes.
func TemplateGroupID(n Node) (string, bool) {
	if id := n.Annotations[AnnotationNodeGroup]; id != "" {
		return id, true
	}
	rest, ok := strings.CutPrefix(n.Name, templateNamePrefix)
	if !ok {
		return "", false
	}
	i := strings.LastIndexByte(rest, '-')
	if i <= 0 || !isDigits(rest[i+1:]) {
		return "", false
	}
	return rest[:i], true
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// Hours is the length of a pricing interval in hours. An end before the start is an error.
func Hours(start, end time.Time) (float64, error) {
	if end.Before(start) {
		return 0, fmt.Errorf("the interval ends (%s) before it starts (%s)", end.Format(time.RFC3339), start.Format(time.RFC3339))
	}
	return end.Sub(start).Hours(), nil
}

// The split of a node's price between its CPU and its memory, as Cluster Autoscaler's GCE price
// model prices them: USD 0.033174 per core-hour and 0.004446 per GiB-hour
// (cloudprovider/gce/gce_price_info.go, cpuPricePerHour and memoryPricePerHourPerGb). Only the
// ratio matters here: a node's price is shared by its cores and GiB in that proportion.
const (
	cpuWeight    = 0.033174
	memoryWeight = 0.004446
	gib          = 1 << 30
)

// weight is the node-independent size of cpu cores and memory bytes in units of the split.
func weight(cpu, memory float64) float64 { return cpu*cpuWeight + memory/gib*memoryWeight }

// PodPricePerHour is the theoretical minimum price per hour of a pod's CPU and memory requests
// (Cluster Autoscaler's PricingModel.PodPrice): each group's node price shared by its CPU and
// memory in the GCE model's proportion, the cheapest group's share. ok is false when no group has
// a price and a size.
func PodPricePerHour(cpu, memory float64, groups []GroupShape) (price float64, ok bool) {
	best := math.Inf(1)
	for _, g := range groups {
		w := weight(g.CPU, g.Memory)
		if w <= 0 || g.PerHour < 0 {
			continue
		}
		best = min(best, g.PerHour/w)
	}
	if math.IsInf(best, 1) {
		return 0, false
	}
	return best * weight(cpu, memory), true
}

// PodRequests returns the CPU (cores) and memory (bytes) a pod asks for as the scheduler counts
// them: the regular containers and the sidecars (restartable init containers) together, or the
// largest init container with the sidecars started before it if that is more, plus the pod's
// overhead.
func PodRequests(pod *corev1.Pod) (cpu, memory float64) {
	running, sidecars := corev1.ResourceList{}, corev1.ResourceList{}
	peak := corev1.ResourceList{}
	for _, c := range pod.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			add(sidecars, c.Resources.Requests)
			maxOf(peak, sidecars)
			continue
		}
		step := corev1.ResourceList{}
		add(step, sidecars)
		add(step, c.Resources.Requests)
		maxOf(peak, step)
	}
	add(running, sidecars)
	for _, c := range pod.Spec.Containers {
		add(running, c.Resources.Requests)
	}
	maxOf(running, peak)
	add(running, pod.Spec.Overhead)
	q := running[corev1.ResourceCPU]
	m := running[corev1.ResourceMemory]
	return float64(q.MilliValue()) / 1000, float64(m.Value())
}

func add(into, l corev1.ResourceList) {
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if q, ok := l[name]; ok {
			sum := into[name]
			sum.Add(q)
			into[name] = sum
		}
	}
}

func maxOf(into, l corev1.ResourceList) {
	for name, q := range l {
		if cur, ok := into[name]; !ok || q.Cmp(cur) > 0 {
			into[name] = q.DeepCopy()
		}
	}
}
