//go:build !slim || machinecontroller

package main

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/machinist-io/machinist/grpcbridge/dialin"
)

// dialinMetrics exports the dial-in listener's providers on the controller's /metrics:
//
//	machinist_dialin_provider_replicas{provider}            connected replicas
//	machinist_dialin_provider_shadowed{provider,shadowed_by} 1 while connected replicas get no
//	                                                         work (the resolution order serves
//	                                                         the name elsewhere; --prefer-dialin)
//
// Registered once per process; each running listener adds its server while it serves.
var dialinMetrics = &dialinCollector{
	servers:  map[*dialin.Server]struct{}{},
	replicas: prometheus.NewDesc("machinist_dialin_provider_replicas", "Replicas of a provider connected to the dial-in listener.", []string{"provider"}, nil),
	shadowed: prometheus.NewDesc("machinist_dialin_provider_shadowed", "1 for a dialled-in provider whose operations go to another source of the same name (see --prefer-dialin).", []string{"provider", "shadowed_by"}, nil),
}

type dialinCollector struct {
	once               sync.Once
	mu                 sync.Mutex
	servers            map[*dialin.Server]struct{}
	replicas, shadowed *prometheus.Desc
}

// add exports srv until the returned function is called.
func (c *dialinCollector) add(srv *dialin.Server) (remove func()) {
	c.once.Do(func() { ctrlmetrics.Registry.MustRegister(c) })
	c.mu.Lock()
	c.servers[srv] = struct{}{}
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		delete(c.servers, srv)
		c.mu.Unlock()
	}
}

func (c *dialinCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.replicas
	ch <- c.shadowed
}

func (c *dialinCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	servers := make([]*dialin.Server, 0, len(c.servers))
	for s := range c.servers {
		servers = append(servers, s)
	}
	c.mu.Unlock()
	for _, s := range servers {
		for name, n := range s.Providers() {
			ch <- prometheus.MustNewConstMetric(c.replicas, prometheus.GaugeValue, float64(n), name)
		}
		for name, by := range s.Shadowed() {
			ch <- prometheus.MustNewConstMetric(c.shadowed, prometheus.GaugeValue, 1, name, by)
		}
	}
}
