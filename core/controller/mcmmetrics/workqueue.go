package mcmmetrics

import (
	"sort"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

// queueNames maps machinist's controllers to the names of MCM's work queues that do the same
// job (pkg/controller/controller.go and pkg/util/provider/machinecontroller/controller.go).
// Queues of controllers MCM does not have keep their own name.
var queueNames = map[string]string{
	"machine":                  "machine",
	"machine-termination":      "machinetermination",
	"machineclass":             "machineclass",
	"machineclass-secret":      "secret",
	"machine-node":             "node",
	"machineset":               "machineset",
	"machinedeployment":        "machinedeployment",
	"machine-safety-orphans":   "machinesafetyorphanvms",
	"machine-safety-overshoot": "machinesafetyovershooting",
}

// mcmQueueName is the name label MCM gives the queue of machinist's controller c.
func mcmQueueName(c string) string {
	if n, ok := queueNames[c]; ok {
		return n
	}
	return c
}

// workqueueFamily is one of MCM's mcm_workqueue_* families (pkg/util/workqueue/prometheus),
// derived from controller-runtime's family of the same key.
type workqueueFamily struct {
	key, help string
}

var workqueueFamilies = []workqueueFamily{
	{"depth", "Current depth of workqueue"},
	{"adds_total", "Total number of adds handled by workqueue"},
	{"queue_duration_seconds", "How long in seconds an item stays in workqueue before being requested."},
	{"work_duration_seconds", "How long in seconds processing an item from workqueue takes."},
	{"unfinished_work_seconds", "How many seconds of work has done that is in progress and hasn't been observed by work_duration. Large values indicate stuck threads. One can deduce the number of stuck threads by observing the rate at which this increases."},
	{"longest_running_processor_seconds", "How many seconds has the longest running processor for workqueue been running."},
	{"retries_total", "Total number of retries handled by workqueue"},
}

// mcmQueueBuckets are the upper bounds of MCM's work-queue histograms: 10ns to 10s.
// controller-runtime's start at the same bound with the same factor and go on to 1000s, so
// each of MCM's buckets is one of controller-runtime's.
var mcmQueueBuckets = prometheus.ExponentialBuckets(10e-9, 10, 10)

// Gatherer gathers g and adds MCM's mcm_workqueue_* families, derived from controller-runtime's
// workqueue_* families in the same gathering: one series per MCM queue name (label name), the
// histograms on MCM's buckets. It serves the manager's /metrics, so the queues are measured
// once, by controller-runtime, and both namings read the same numbers.
func Gatherer(g prometheus.Gatherer) prometheus.Gatherer {
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		mfs, err := g.Gather()
		byName := make(map[string]*dto.MetricFamily, len(mfs))
		for _, mf := range mfs {
			byName[mf.GetName()] = mf
		}
		for _, f := range workqueueFamilies {
			name := "mcm_workqueue_" + f.key
			if src := byName["workqueue_"+f.key]; src != nil && byName[name] == nil {
				mfs = append(mfs, deriveQueueFamily(src, name, f.help))
			}
		}
		sort.Slice(mfs, func(i, j int) bool { return mfs[i].GetName() < mfs[j].GetName() })
		return mfs, err
	})
}

// deriveQueueFamily renames src's series to MCM's name label, summing the series that map to
// one queue (controller-runtime's priority queue splits depth by priority).
func deriveQueueFamily(src *dto.MetricFamily, name, help string) *dto.MetricFamily {
	out := &dto.MetricFamily{Name: proto.String(name), Help: proto.String(help), Type: src.Type}
	byQueue := map[string]*dto.Metric{}
	var order []string
	for _, m := range src.Metric {
		q := mcmQueueName(labelValue(m, "name"))
		acc := byQueue[q]
		if acc == nil {
			acc = &dto.Metric{Label: []*dto.LabelPair{{Name: proto.String("name"), Value: proto.String(q)}}}
			byQueue[q] = acc
			order = append(order, q)
		}
		switch src.GetType() {
		case dto.MetricType_COUNTER:
			if acc.Counter == nil {
				acc.Counter = &dto.Counter{Value: proto.Float64(0)}
			}
			acc.Counter.Value = proto.Float64(acc.Counter.GetValue() + m.GetCounter().GetValue())
		case dto.MetricType_GAUGE:
			if acc.Gauge == nil {
				acc.Gauge = &dto.Gauge{Value: proto.Float64(0)}
			}
			acc.Gauge.Value = proto.Float64(acc.Gauge.GetValue() + m.GetGauge().GetValue())
		case dto.MetricType_HISTOGRAM:
			acc.Histogram = addRebucketed(acc.Histogram, m.GetHistogram())
		}
	}
	sort.Strings(order)
	for _, q := range order {
		out.Metric = append(out.Metric, byQueue[q])
	}
	return out
}

// addRebucketed adds h, read on MCM's bucket bounds, to acc. A bound h lacks takes the count of
// h's largest bucket below it, which counts no observation that does not belong there.
func addRebucketed(acc *dto.Histogram, h *dto.Histogram) *dto.Histogram {
	if acc == nil {
		acc = &dto.Histogram{SampleCount: proto.Uint64(0), SampleSum: proto.Float64(0)}
		for _, b := range mcmQueueBuckets {
			acc.Bucket = append(acc.Bucket, &dto.Bucket{UpperBound: proto.Float64(b), CumulativeCount: proto.Uint64(0)})
		}
	}
	acc.SampleCount = proto.Uint64(acc.GetSampleCount() + h.GetSampleCount())
	acc.SampleSum = proto.Float64(acc.GetSampleSum() + h.GetSampleSum())
	for _, b := range acc.Bucket {
		var n uint64
		for _, hb := range h.Bucket {
			if hb.GetUpperBound() <= b.GetUpperBound()*(1+1e-9) {
				n = max(n, hb.GetCumulativeCount())
			}
		}
		b.CumulativeCount = proto.Uint64(b.GetCumulativeCount() + n)
	}
	return acc
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.Label {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
