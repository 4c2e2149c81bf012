// Package cloudmetricsprom serves cloudmetrics' mcm_cloud_api_* metrics through Prometheus' client
// library: a collector that reads them at scrape time. It is a package of its own so that only
// binaries that serve metrics (the controller) link Prometheus.
package cloudmetricsprom

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/machinist-io/machinist/core/cloudmetrics"
)

// Collector returns a collector of every cloudmetrics family.
func Collector() prometheus.Collector {
	c := &collector{descs: map[*cloudmetrics.Metric]*prometheus.Desc{}}
	for _, m := range cloudmetrics.Metrics() {
		c.metrics = append(c.metrics, m)
		c.descs[m] = prometheus.NewDesc(m.Name, m.Help, m.Labels, nil)
	}
	return c
}

type collector struct {
	metrics []*cloudmetrics.Metric
	descs   map[*cloudmetrics.Metric]*prometheus.Desc
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range c.metrics {
		desc := c.descs[m]
		for _, s := range m.Snapshot() {
			if !m.Histogram {
				ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(s.Count), s.Values...)
				continue
			}
			buckets := make(map[float64]uint64, len(cloudmetrics.Buckets))
			for i, le := range cloudmetrics.Buckets {
				buckets[le] = s.Buckets[i]
			}
			ch <- prometheus.MustNewConstHistogram(desc, s.Count, s.Sum, buckets, s.Values...)
		}
	}
}

var _ prometheus.Collector = (*collector)(nil)
