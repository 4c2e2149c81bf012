package cloudmetrics

import (
	"slices"
	"strings"
	"sync"
)

// Buckets are the upper bounds of the duration histograms: Prometheus' default buckets, which
// MCM's histograms use (they set none of their own).
var Buckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// Metric is one family: a counter, or a histogram of seconds over Buckets, with one series per
// combination of label values.
type Metric struct {
	Name, Help string
	Labels     []string
	Histogram  bool

	mu     sync.Mutex
	series map[string]*Series
}

// Series is one series of a Metric. For a counter, Count is its value.
type Series struct {
	Values []string // in the order of Metric.Labels
	Count  uint64
	Sum    float64
	// Buckets[i] counts the observations ≤ Buckets[i] of the package (cumulative, as Prometheus
	// exposes them); histograms only.
	Buckets []uint64
}

func newMetric(name, help string, histogram bool, labels ...string) *Metric {
	return &Metric{Name: name, Help: help, Labels: labels, Histogram: histogram, series: map[string]*Series{}}
}

// add counts one event of the series of values; a histogram also observes v.
func (m *Metric) add(v float64, values ...string) {
	key := strings.Join(values, "\x00")
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.series[key]
	if !ok {
		s = &Series{Values: slices.Clone(values)}
		if m.Histogram {
			s.Buckets = make([]uint64, len(Buckets))
		}
		m.series[key] = s
	}
	s.Count++
	if !m.Histogram {
		return
	}
	s.Sum += v
	for i, le := range Buckets {
		if v <= le {
			s.Buckets[i]++
		}
	}
}

// Snapshot returns a copy of every series, for a scrape.
func (m *Metric) Snapshot() []Series {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Series, 0, len(m.series))
	for _, s := range m.series {
		c := *s
		c.Buckets = slices.Clone(s.Buckets)
		out = append(out, c)
	}
	return out
}
