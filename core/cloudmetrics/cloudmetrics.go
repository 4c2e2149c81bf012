// Package cloudmetrics holds Gardener MCM's mcm_cloud_api_* metrics, with MCM's names, types and
// labels (machine-controller-manager pkg/util/provider/metrics): the requests a provider makes
// to its cloud's services, and the driver calls the controllers make. Providers record their
// cloud requests here the way their MCM counterparts do; the controllers' driver calls are
// recorded by core/controller/internal/drivercall. The package keeps its counters and
// histograms in plain Go and does not import Prometheus, so slim provider binaries link no
// metrics library; cloudmetricsprom exposes them as a Prometheus collector where metrics are served.
package cloudmetrics

import (
	"errors"
	"strconv"
	"time"

	"github.com/machinist-io/machinist/core/driver"
)

var (
	requests = newMetric("mcm_cloud_api_requests_total",
		"Number of Cloud Service API requests, partitioned by provider, and service.",
		false, "provider", "service")
	failedRequests = newMetric("mcm_cloud_api_requests_failed_total",
		"Number of Failed Cloud Service API requests, partitioned by provider, and service.",
		false, "provider", "service")
	requestDuration = newMetric("mcm_cloud_api_api_request_duration_seconds",
		"Time(in seconds) it takes for a provider API request to complete",
		true, "provider", "service")
	driverDuration = newMetric("mcm_cloud_api_driver_request_duration_seconds",
		"Total time (in seconds) taken for a driver API request to complete",
		true, "provider", "operation")
	driverFailed = newMetric("mcm_cloud_api_driver_requests_failed_total",
		"Number of failed Driver API requests, partitioned by provider, operation and error code",
		false, "provider", "operation", "error_code")
)

// Metrics are the mcm_cloud_api_* families, for whoever serves metrics (cloudmetricsprom).
func Metrics() []*Metric {
	return []*Metric{requests, failedRequests, requestDuration, driverDuration, driverFailed}
}

// Requested counts a request to a cloud service (mcm_cloud_api_requests_total). Which requests
// count, and whether failed ones do, is the provider's choice, as in MCM: each provider follows
// its MCM counterpart (docs/controllers.md lists them).
func Requested(provider, service string) { requests.add(0, provider, service) }

// Failed counts a failed request to a cloud service (mcm_cloud_api_requests_failed_total).
func Failed(provider, service string) { failedRequests.add(0, provider, service) }

// Observe records how long a request to a cloud service took
// (mcm_cloud_api_api_request_duration_seconds).
func Observe(provider, service string, d time.Duration) {
	requestDuration.add(d.Seconds(), provider, service)
}

// Driver operations as MCM's providers name them in the operation label (those of
// machine-controller-manager-provider-azure pkg/azure/provider/provider.go; InitializeMachine,
// which that provider does not implement, follows the same pattern).
const (
	CreateMachine     = "create_machine"
	InitializeMachine = "initialize_machine"
	DeleteMachine     = "delete_machine"
	GetMachineStatus  = "get_machine_status"
	ListMachines      = "list_machine"
	GetVolumeIDs      = "get_volume_ids"
)

// DriverCall records a driver call that took d and returned err, as MCM's providers do: a
// success observes mcm_cloud_api_driver_request_duration_seconds, a failure counts
// mcm_cloud_api_driver_requests_failed_total with the error's machine code as a number ("4"
// for DeadlineExceeded), Internal ("13") for an error that carries no code.
func DriverCall(provider, operation string, d time.Duration, err error) {
	if err == nil {
		driverDuration.add(d.Seconds(), provider, operation)
		return
	}
	driverFailed.add(0, provider, operation, ErrorCode(err))
}

// ErrorCode renders err's code as the error_code label: the number of the machine code it
// carries, Internal's when it carries none.
func ErrorCode(err error) string {
	code := driver.Internal
	var st *driver.Status
	if errors.As(err, &st) {
		code = st.Code()
	}
	return strconv.FormatUint(uint64(code), 10)
}
