// Package cloudmetricstest reads MCM's mcm_cloud_api_* metrics in the providers' tests, as the
// controller's /metrics exposes them (through cloudmetricsprom's collector).
package cloudmetricstest

import (
	"slices"
	"sort"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/machinist-io/machinist/core/cloudmetrics/cloudmetricsprom"
)

// Counts reads mcm_cloud_api_requests_total, …_requests_failed_total and the sample counts of
// …_api_request_duration_seconds of provider by service. Every series must carry exactly MCM's
// label names, provider and service; a test error says which does not.
func Counts(t testing.TB, provider string) (requests, failed, timed map[string]float64) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(cloudmetricsprom.Collector())
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	requests, failed, timed = map[string]float64{}, map[string]float64{}, map[string]float64{}
	dsts := map[string]map[string]float64{
		"mcm_cloud_api_requests_total":               requests,
		"mcm_cloud_api_requests_failed_total":        failed,
		"mcm_cloud_api_api_request_duration_seconds": timed,
	}
	for _, f := range fams {
		dst := dsts[f.GetName()]
		if dst == nil {
			continue
		}
		for _, m := range f.Metric {
			labels := map[string]string{}
			var names []string
			for _, l := range m.Label {
				labels[l.GetName()] = l.GetValue()
				names = append(names, l.GetName())
			}
			sort.Strings(names)
			if !slices.Equal(names, []string{"provider", "service"}) {
				t.Errorf("%s has labels %v, MCM's are provider and service", f.GetName(), names)
			}
			if labels["provider"] == provider {
				dst[labels["service"]] += m.GetCounter().GetValue() + float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return requests, failed, timed
}
