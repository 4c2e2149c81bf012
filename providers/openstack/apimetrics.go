package openstack

import (
	"net/http"
	"sort"
	"strings"
	"sync/atomic"

	"github.com/machinist-io/machinist/providers/kit"
)

// Services as MCM's OpenStack provider names them in mcm_cloud_api_requests_total
// (machine-controller-manager-provider-openstack pkg/client: nova, neutron, cinder). MCM looks
// images up through Nova; machinist asks Glance and says so.
const (
	serviceNova    = "nova"
	serviceNeutron = "neutron"
	serviceCinder  = "cinder"
	serviceGlance  = "glance"
)

// apiCounter counts the requests to the cloud's services the way MCM's OpenStack provider
// does: every request in mcm_cloud_api_requests_total, the failed ones (no answer, or an error
// status other than 404, which MCM does not count as failed) also in
// mcm_cloud_api_requests_failed_total. Keystone requests are not counted, as in MCM.
type apiCounter struct {
	base      http.RoundTripper
	endpoints atomic.Pointer[[]serviceEndpoint] // longest prefix first
}

type serviceEndpoint struct{ prefix, service string }

// setEndpoints names the service of each endpoint of the session's catalog.
func (c *apiCounter) setEndpoints(byService map[string]string) {
	eps := make([]serviceEndpoint, 0, len(byService))
	for prefix, svc := range byService {
		if prefix != "" {
			eps = append(eps, serviceEndpoint{prefix, svc})
		}
	}
	sort.Slice(eps, func(i, j int) bool { return len(eps[i].prefix) > len(eps[j].prefix) })
	c.endpoints.Store(&eps)
}

func (c *apiCounter) serviceOf(url string) string {
	if eps := c.endpoints.Load(); eps != nil {
		for _, ep := range *eps {
			if strings.HasPrefix(url, ep.prefix) {
				return ep.service
			}
		}
	}
	return ""
}

func (c *apiCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	svc := c.serviceOf(req.URL.String())
	resp, err := c.base.RoundTrip(req)
	if svc != "" {
		kit.APIMetrics(ProviderName).Count(svc, kit.FailedResponse(resp, err))
	}
	return resp, err
}

var _ http.RoundTripper = (*apiCounter)(nil)
