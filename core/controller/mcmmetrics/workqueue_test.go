package mcmmetrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

// crFamily builds a family shaped like controller-runtime's workqueue_* ones.
func crFamily(name string, typ dto.MetricType, metrics ...*dto.Metric) *dto.MetricFamily {
	return &dto.MetricFamily{Name: proto.String(name), Help: proto.String("h"), Type: typ.Enum(), Metric: metrics}
}

func crSeries(queue, priority string) []*dto.LabelPair {
	lp := []*dto.LabelPair{
		{Name: proto.String("controller"), Value: proto.String(queue)},
		{Name: proto.String("name"), Value: proto.String(queue)},
	}
	if priority != "" {
		lp = append(lp, &dto.LabelPair{Name: proto.String("priority"), Value: proto.String(priority)})
	}
	return lp
}

func histogram(bounds []float64, cumulative []uint64, count uint64, sum float64) *dto.Histogram {
	h := &dto.Histogram{SampleCount: proto.Uint64(count), SampleSum: proto.Float64(sum)}
	for i, b := range bounds {
		h.Bucket = append(h.Bucket, &dto.Bucket{UpperBound: proto.Float64(b), CumulativeCount: proto.Uint64(cumulative[i])})
	}
	return h
}

func TestWorkqueueFamiliesDerived(t *testing.T) {
	crBounds := prometheus.ExponentialBuckets(10e-9, 10, 12) // controller-runtime's
	crCounts := []uint64{0, 0, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89}
	src := []*dto.MetricFamily{
		crFamily("workqueue_depth", dto.MetricType_GAUGE,
			&dto.Metric{Label: crSeries("machine", "0"), Gauge: &dto.Gauge{Value: proto.Float64(2)}},
			&dto.Metric{Label: crSeries("machine", "10"), Gauge: &dto.Gauge{Value: proto.Float64(3)}},
			&dto.Metric{Label: crSeries("machineclass-secret", ""), Gauge: &dto.Gauge{Value: proto.Float64(1)}},
			&dto.Metric{Label: crSeries("some-new-controller", ""), Gauge: &dto.Gauge{Value: proto.Float64(7)}}),
		crFamily("workqueue_retries_total", dto.MetricType_COUNTER,
			&dto.Metric{Label: crSeries("machine-node", ""), Counter: &dto.Counter{Value: proto.Float64(4)}}),
		crFamily("workqueue_work_duration_seconds", dto.MetricType_HISTOGRAM,
			&dto.Metric{Label: crSeries("machineset", ""), Histogram: histogram(crBounds, crCounts, 89, 1234.5)},
			// A histogram on other bounds: MCM's bound 1e-4 lies between 1e-6 and 1e-3.
			&dto.Metric{Label: crSeries("machine-termination", ""), Histogram: histogram([]float64{1e-6, 1e-3, 1}, []uint64{1, 2, 3}, 4, 50)}),
		crFamily("controller_runtime_reconcile_total", dto.MetricType_COUNTER),
	}
	got, err := Gatherer(prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) { return src, nil })).Gather()
	if err != nil {
		t.Fatal(err)
	}
	fams := map[string]*dto.MetricFamily{}
	for i, f := range got {
		fams[f.GetName()] = f
		if i > 0 && got[i-1].GetName() >= f.GetName() {
			t.Errorf("families not sorted: %s before %s", got[i-1].GetName(), f.GetName())
		}
	}
	for _, name := range []string{"workqueue_depth", "workqueue_retries_total", "workqueue_work_duration_seconds", "controller_runtime_reconcile_total"} {
		if fams[name] == nil {
			t.Errorf("%s, gathered from the source, is gone", name)
		}
	}
	if fams["mcm_workqueue_adds_total"] != nil {
		t.Error("mcm_workqueue_adds_total derived without a source family")
	}

	values := func(name string) map[string]*dto.Metric {
		out := map[string]*dto.Metric{}
		for _, m := range fams[name].GetMetric() {
			if len(m.Label) != 1 || m.Label[0].GetName() != "name" {
				t.Errorf("%s has labels %v, MCM's has only name", name, m.Label)
			}
			out[m.Label[0].GetValue()] = m
		}
		return out
	}
	depth := values("mcm_workqueue_depth")
	if fams["mcm_workqueue_depth"].GetType() != dto.MetricType_GAUGE || fams["mcm_workqueue_depth"].GetHelp() != "Current depth of workqueue" {
		t.Errorf("mcm_workqueue_depth: %v %q", fams["mcm_workqueue_depth"].GetType(), fams["mcm_workqueue_depth"].GetHelp())
	}
	for q, want := range map[string]float64{"machine": 5, "secret": 1, "some-new-controller": 7} {
		if got := depth[q].GetGauge().GetValue(); got != want {
			t.Errorf("mcm_workqueue_depth{name=%q} = %v, want %v", q, got, want)
		}
	}
	if len(depth) != 3 {
		t.Errorf("mcm_workqueue_depth queues %v, want machine, secret, some-new-controller", depth)
	}
	if got := values("mcm_workqueue_retries_total")["node"].GetCounter().GetValue(); got != 4 {
		t.Errorf("mcm_workqueue_retries_total{name=node} = %v, want 4", got)
	}

	work := values("mcm_workqueue_work_duration_seconds")
	set := work["machineset"].GetHistogram()
	if set.GetSampleCount() != 89 || set.GetSampleSum() != 1234.5 || len(set.Bucket) != 10 {
		t.Fatalf("machineset histogram: count %d sum %v, %d buckets", set.GetSampleCount(), set.GetSampleSum(), len(set.Bucket))
	}
	for i, b := range set.Bucket {
		if b.GetUpperBound() != crBounds[i] || b.GetCumulativeCount() != crCounts[i] {
			t.Errorf("bucket %d: le=%v count %d, want le=%v count %d", i, b.GetUpperBound(), b.GetCumulativeCount(), crBounds[i], crCounts[i])
		}
	}
	term := work["machinetermination"].GetHistogram()
	want := []uint64{0, 0, 1, 1, 1, 2, 2, 2, 3, 3} // le 1e-8 … 10 read off le 1e-6, 1e-3, 1
	for i, b := range term.Bucket {
		if b.GetCumulativeCount() != want[i] {
			t.Errorf("machinetermination bucket le=%v: %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), want[i])
		}
	}
}
