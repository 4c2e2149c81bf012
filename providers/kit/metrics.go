package kit

import (
	"net/http"
	"time"

	"github.com/machinist-io/machinist/core/cloudmetrics"
)

// APIMetrics records a provider's requests to its cloud in MCM's mcm_cloud_api_* metrics
// (core/cloudmetrics), the way MCM's provider of the same cloud records them. Its value is the
// provider's name, the provider label.
type APIMetrics string

// Call records one call to service that started at start, as MCM's AWS, Azure and GCP providers
// do: a success counts in mcm_cloud_api_requests_total and observes
// mcm_cloud_api_api_request_duration_seconds, a failure counts in
// mcm_cloud_api_requests_failed_total only.
func (m APIMetrics) Call(service string, start time.Time, failed bool) {
	if failed {
		cloudmetrics.Failed(string(m), service)
		return
	}
	cloudmetrics.Requested(string(m), service)
	cloudmetrics.Observe(string(m), service, time.Since(start))
}

// Count counts a request to service as MCM's OpenStack provider does: every request in
// mcm_cloud_api_requests_total, a failed one also in mcm_cloud_api_requests_failed_total, no
// duration.
func (m APIMetrics) Count(service string, failed bool) {
	cloudmetrics.Requested(string(m), service)
	if failed {
		cloudmetrics.Failed(string(m), service)
	}
}

// FailedResponse reports whether an HTTP request failed as MCM's providers count failures: no
// response, or an error status other than 404 (a lookup of something that is not there is an
// answer the driver reads as such).
func FailedResponse(resp *http.Response, err error) bool {
	return err != nil || (resp.StatusCode >= 400 && resp.StatusCode != http.StatusNotFound)
}

// Transport records each request sent through next with Call, naming its service with
// serviceOf. Put it outside the retries, so that a retried request counts once and its time
// includes the retries.
func (m APIMetrics) Transport(next http.RoundTripper, serviceOf func(*http.Request) string) http.RoundTripper {
	return metered{m: m, next: next, serviceOf: serviceOf}
}

type metered struct {
	m         APIMetrics
	next      http.RoundTripper
	serviceOf func(*http.Request) string
}

func (t metered) RoundTrip(req *http.Request) (*http.Response, error) {
	svc := t.serviceOf(req)
	start := time.Now()
	resp, err := t.next.RoundTrip(req)
	t.m.Call(svc, start, FailedResponse(resp, err))
	return resp, err
}

var _ http.RoundTripper = metered{}
