// Package cloudapiprom serves cloudapi's mcm_cloud_api_* metrics through Prometheus' client
// library: a collector that reads them at scrape time. It is a package of its own so that only
// binaries that serve metrics (the controller) link Prometheus.
package cloudapiprom

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/machinist-io/machinist/core/cloudapi"
)

// Collector returns a collector of every cloudapi family.
func Collector() prometheus.Collector {
	c := &collector{descs: map[*cloudapi.Metric]*prometheus.Desc{}}
	for _, m := range cloudapi.Metrics() {
		c.metrics = append(c.metrics, m)
		c.descs[m] = prometheus.NewDesc(m.Name, m.Help, m.Labels, nil)
	}
	return c
}

type collector struct {
	metrics []*cloudapi.Metric
	descs   map[*cloudapi.Metric]*prometheus.Desc
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
			buckets := make(map[float64]uint64, len(cloudapi.Buckets))
			for i, le := range cloudapi.Buckets {
				buckets[le] = s.Buckets[i]
			}
			ch <- prometheus.MustNewConstHistogram(desc, s.Count, s.Sum, buckets, s.Values...)
		}
	}
}

var _ prometheus.Collector = (*collector)(nil)
